"""WebSocket (RFC 6455) on loopback for tests: an echo upstream and a client.

EchoUpstream is a threaded WebSocket server on 127.0.0.1 (a free port): it answers
a handshake with 101 (Sec-WebSocket-Accept computed, the first value of the
requested Sec-WebSocket-Protocol echoed), then echoes every text and binary frame
as it comes (fragments stay fragments; payloads are unmasked and streamed in
pieces of at most 1 MiB, so no message is ever held whole), answers a ping with a
pong and a close frame with the same close frame, after which it closes TCP.
Ordinary requests get a 200 whose JSON body lists the method, target and headers
it received. Every request head is recorded (`heads`), every connection too
(`connections`: bytes, messages, whether the peer closed first). Options make it
misbehave on purpose: a frame sent in the same write as the 101, a status other
than 101 to handshakes, a 101 to every request (or with another Upgrade), a TCP
close without a close frame after N echoed messages, and reads paused until
resume() (a slow reader, to show back-pressure).

WebSocketClient connects (plain, or TLS with an ssl.SSLContext), sends the
handshake (optionally followed by frames in the same write), checks the 101 and
its Sec-WebSocket-Accept, then sends masked frames and receives whole messages:
recv() returns (opcode, payload), (EOF, b"") once the peer closed TCP, and raises
TimeoutError when nothing complete arrived in time (nothing is lost: a later
recv() goes on where it stopped).

Masking XORs whole pieces as integers (int.from_bytes), not byte by byte.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import ssl
import struct
import threading
import time

from .ports import LOOPBACK

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
CONT, TEXT, BINARY, CLOSE, PING, PONG = 0x0, 0x1, 0x2, 0x8, 0x9, 0xA
EOF = None  # the opcode recv() returns when the peer closed the TCP connection
PIECE = 1 << 20  # the largest piece of a payload the upstream reads or sends at once
IO_TIMEOUT = 10.0

REASONS = {101: "Switching Protocols", 200: "OK", 400: "Bad Request", 401: "Unauthorized",
           403: "Forbidden", 404: "Not Found", 426: "Upgrade Required",
           500: "Internal Server Error", 503: "Service Unavailable"}


class ProtocolError(Exception):
    """The peer broke RFC 6455 (or sent something that is not a WebSocket frame)."""


class HandshakeError(Exception):
    """The answer to a handshake was not a valid 101; `response` is its Head."""

    def __init__(self, message: str, response: "Head | None" = None):
        super().__init__(message)
        self.response = response


# -- the pieces of the protocol

def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key."""
    return base64.b64encode(hashlib.sha1((key + GUID).encode()).digest()).decode()


def new_key() -> str:
    return base64.b64encode(os.urandom(16)).decode()


def mask_bytes(data, mask: bytes, offset: int = 0) -> bytes:
    """`data` XOR the 4-byte `mask`, for a piece starting `offset` bytes into a payload
    (masking and unmasking are the same operation)."""
    n = len(data)
    if n == 0:
        return b""
    shift = offset % 4
    key = mask[shift:] + mask[:shift]
    stream = key * (n // 4 + 1)
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream[:n], "big")).to_bytes(n, "big")


def frame_head(opcode: int, length: int, fin: bool = True, mask: bytes | None = None,
               rsv: int = 0) -> bytes:
    """The header of a frame (with the masking key when `mask` is given)."""
    first = (0x80 if fin else 0) | (rsv << 4) | opcode
    bit = 0x80 if mask is not None else 0
    if length < 126:
        head = struct.pack("!BB", first, bit | length)
    elif length < 1 << 16:
        head = struct.pack("!BBH", first, bit | 126, length)
    else:
        head = struct.pack("!BBQ", first, bit | 127, length)
    return head + (mask or b"")


def encode_frame(opcode: int, payload: bytes = b"", fin: bool = True, masked: bool = True,
                 mask: bytes | None = None) -> bytes:
    """A whole frame; a client's frames are masked (a random key unless `mask` is given)."""
    if masked:
        mask = mask or os.urandom(4)
        return frame_head(opcode, len(payload), fin, mask) + mask_bytes(payload, mask)
    return frame_head(opcode, len(payload), fin) + bytes(payload)


def close_payload(code: int | None = 1000, reason: str = "") -> bytes:
    return b"" if code is None else struct.pack("!H", code) + reason.encode()


def close_code(payload: bytes) -> int | None:
    """The status code of a close frame's payload (None when it has none)."""
    return struct.unpack("!H", payload[:2])[0] if len(payload) >= 2 else None


def tokens(value: str | None) -> list[str]:
    """The comma-separated tokens of a header value, lowercased."""
    return [t.strip().lower() for t in (value or "").split(",") if t.strip()]


class Head:
    """A request or response head: start line and headers in received order."""

    def __init__(self, start_line: str, headers: list[tuple[str, str]]):
        self.start_line = start_line
        self.headers = headers
        parts = start_line.split(" ", 2)
        self.method = self.target = self.version = None
        self.status = None
        self.reason = ""
        if start_line.startswith("HTTP/"):
            self.version = parts[0]
            self.status = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else None
            self.reason = parts[2] if len(parts) > 2 else ""
        elif len(parts) == 3:
            self.method, self.target, self.version = parts

    def all(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def header(self, name: str) -> str | None:
        """The values of header `name` joined with ", " (None when absent)."""
        values = self.all(name)
        return ", ".join(values) if values else None

    def names(self) -> set[str]:
        return {n.lower() for n, _ in self.headers}

    def has_token(self, name: str, token: str) -> bool:
        return token.lower() in tokens(self.header(name))

    def is_websocket_handshake(self) -> bool:
        return (self.method == "GET" and self.has_token("Connection", "upgrade")
                and self.has_token("Upgrade", "websocket"))

    def __repr__(self):
        return f"<Head {self.start_line!r} {self.headers}>"


def parse_head(data: bytes) -> Head:
    """A head without its final CRLF CRLF."""
    lines = data.decode("latin-1").split("\r\n")
    headers = []
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    return Head(lines[0], headers)


def handshake_request(path: str = "/", host: str = "127.0.0.1", key: str | None = None,
                      headers=(), protocols=()) -> bytes:
    """The bytes of a client handshake (headers: (name, value) pairs or a dict)."""
    lines = [f"GET {path} HTTP/1.1", f"Host: {host}", "Upgrade: websocket",
             "Connection: Upgrade", f"Sec-WebSocket-Key: {key or new_key()}",
             "Sec-WebSocket-Version: 13"]
    if protocols:
        lines.append(f"Sec-WebSocket-Protocol: {', '.join(protocols)}")
    items = headers.items() if isinstance(headers, dict) else headers
    lines += [f"{n}: {v}" for n, v in items]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


class _Reader:
    """Buffered reads from a socket (one message at most is ever buffered)."""

    def __init__(self, sock: socket.socket, buffer: bytes = b""):
        self.sock = sock
        self.buffer = bytearray(buffer)

    def fill(self, size: int = PIECE) -> bool:
        chunk = self.sock.recv(size)
        if not chunk:
            return False
        self.buffer += chunk
        return True

    def exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not self.fill(max(65536, min(PIECE, n - len(self.buffer)))):
                raise EOFError(f"closed after {len(self.buffer)} of {n} bytes")
        data = bytes(self.buffer[:n])
        del self.buffer[:n]
        return data

    def head(self, limit: int = 65536) -> bytes | None:
        """Bytes up to CRLF CRLF (excluded); None on EOF before any byte."""
        while True:
            at = self.buffer.find(b"\r\n\r\n")
            if at >= 0:
                data = bytes(self.buffer[:at])
                del self.buffer[:at + 4]
                return data
            if len(self.buffer) > limit:
                raise ProtocolError(f"head longer than {limit} bytes")
            if not self.fill(65536):
                if self.buffer:
                    raise EOFError(f"closed inside a head: {bytes(self.buffer[:200])!r}")
                return None


# -- the echo upstream

class UpstreamConnection:
    """One connection the upstream accepted, as the tests see it."""

    def __init__(self, sock: socket.socket, peer):
        self.sock = sock
        self.peer = peer
        self.heads: list[Head] = []
        self.tunnel = False  # a 101 was sent
        self.bytes_received = 0  # after the 101 (frame headers included)
        self.bytes_sent = 0  # after the 101 head (the greeting frame included)
        self.messages = 0  # data messages echoed (counted at their final frame)
        self.pings = 0
        self.close_frames: list[bytes] = []  # payloads of the close frames received
        self.peer_closed = False  # EOF or reset from the peer before we closed
        self.error: str | None = None
        self.closed = threading.Event()  # set once the socket is closed

    def __repr__(self):
        return (f"<UpstreamConnection tunnel={self.tunnel} received={self.bytes_received} "
                f"messages={self.messages} peer_closed={self.peer_closed} "
                f"closed={self.closed.is_set()} error={self.error}>")


class EchoUpstream:
    """A WebSocket echo server on 127.0.0.1 (see the module docstring).

    status: what a WebSocket handshake gets (101, or e.g. 403 with a small body and
      keep-alive). greeting: a payload (str: a text frame, bytes: binary) sent in the
      same write as the 101 head. lie: answer 101 to every request, WebSocket or not.
      upgrade: the Upgrade value of the 101. close_after: close TCP, without a close
      frame, after that many echoed messages. hold_reads: read nothing after a 101
      until resume() (pause() makes later tunnels wait again). tls: a server
      ssl.SSLContext: every connection speaks TLS (a failed handshake is dropped)."""

    def __init__(self, status: int = 101, greeting: str | bytes | None = None,
                 lie: bool = False, upgrade: str = "websocket", close_after: int | None = None,
                 hold_reads: bool = False, name: str = "ws-upstream", tls=None):
        self.status = status
        self.greeting = greeting
        self.lie = lie
        self.upgrade = upgrade
        self.close_after = close_after
        self.name = name
        self.tls = tls
        self._reading = threading.Event()
        if not hold_reads:
            self._reading.set()
        self._stopping = False
        self._lock = threading.Lock()
        self.connections: list[UpstreamConnection] = []
        self.heads: list[Head] = []
        self._threads: list[threading.Thread] = []
        self.sock: socket.socket | None = None
        self.port = 0
        self.address = ""

    # -- control

    def start(self) -> "EchoUpstream":
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((LOOPBACK, 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.address = f"{LOOPBACK}:{self.port}"
        accept = threading.Thread(target=self._accept, name=f"{self.name}-accept", daemon=True)
        accept.start()
        self._threads.append(accept)
        return self

    def stop(self, timeout: float = 5.0):
        """Closes the listener and every connection; joins the threads."""
        self._stopping = True
        self._reading.set()
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()
        with self._lock:
            connections = list(self.connections)
        for conn in connections:
            try:
                conn.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))

    def pause(self):
        """Tunnels stop reading before their next frame (one already being waited for
        is still read) until resume()."""
        self._reading.clear()

    def resume(self):
        self._reading.set()

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- what the tests look at

    def websocket_heads(self) -> list[Head]:
        return [h for h in self.heads if h.is_websocket_handshake()]

    def tunnels(self) -> list[UpstreamConnection]:
        with self._lock:
            return [c for c in self.connections if c.tunnel]

    def open_connections(self) -> list[UpstreamConnection]:
        with self._lock:
            return [c for c in self.connections if not c.closed.is_set()]

    # -- serving

    def _accept(self):
        while not self._stopping:
            try:
                sock, peer = self.sock.accept()
            except OSError:
                return
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.tls is not None:
                try:
                    sock.settimeout(10)
                    sock = self.tls.wrap_socket(sock, server_side=True)
                    sock.settimeout(None)
                except (OSError, ssl.SSLError):
                    sock.close()
                    continue
            conn = UpstreamConnection(sock, peer)
            with self._lock:
                self.connections.append(conn)
            thread = threading.Thread(target=self._serve, args=(conn,),
                                      name=f"{self.name}-conn", daemon=True)
            self._threads.append(thread)
            thread.start()

    def _serve(self, conn: UpstreamConnection):
        reader = _Reader(conn.sock)
        try:
            while not self._stopping:
                raw = reader.head()
                if raw is None:
                    conn.peer_closed = True
                    return
                head = parse_head(raw)
                conn.heads.append(head)
                with self._lock:
                    self.heads.append(head)
                if head.header("Transfer-Encoding"):
                    raise ProtocolError("chunked request bodies are not supported here")
                length = int(head.header("Content-Length") or 0)
                if length:
                    reader.exact(length)
                websocket = head.is_websocket_handshake()
                if self.lie or (websocket and self.status == 101):
                    self._switch(conn, head)
                    self._tunnel(conn, reader)
                    return
                if websocket:
                    body = json.dumps({"status": self.status, "upstream": self.name}).encode()
                    self._respond(conn, self.status, body)
                else:
                    body = json.dumps({"method": head.method, "target": head.target,
                                       "headers": head.headers}).encode()
                    self._respond(conn, 200, body)
                if head.has_token("Connection", "close"):
                    conn.sock.shutdown(socket.SHUT_WR)
                    return
        except (EOFError, ConnectionResetError, BrokenPipeError):
            conn.peer_closed = True
        except (OSError, ProtocolError, ValueError) as e:
            if not self._stopping:
                conn.error = repr(e)
        finally:
            conn.sock.close()
            conn.closed.set()

    def _respond(self, conn: UpstreamConnection, status: int, body: bytes):
        head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Status')}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n")
        conn.sock.sendall(head.encode() + body)

    def _switch(self, conn: UpstreamConnection, head: Head):
        lines = ["HTTP/1.1 101 Switching Protocols", f"Upgrade: {self.upgrade}",
                 "Connection: Upgrade"]
        key = head.header("Sec-WebSocket-Key")
        if key:
            lines.append(f"Sec-WebSocket-Accept: {accept_key(key)}")
        protocols = [p.strip() for p in (head.header("Sec-WebSocket-Protocol") or "").split(",")
                     if p.strip()]
        if protocols:
            lines.append(f"Sec-WebSocket-Protocol: {protocols[0]}")
        lines.append(f"X-Upstream: {self.name}")
        data = ("\r\n".join(lines) + "\r\n\r\n").encode()
        if self.greeting is not None:
            greeting = self.greeting
            frame = (encode_frame(TEXT, greeting.encode(), masked=False)
                     if isinstance(greeting, str) else encode_frame(BINARY, greeting, masked=False))
            conn.bytes_sent += len(frame)
            data += frame
        conn.tunnel = True
        conn.sock.sendall(data)

    def _send(self, conn: UpstreamConnection, data: bytes):
        conn.sock.sendall(data)
        conn.bytes_sent += len(data)

    def _tunnel(self, conn: UpstreamConnection, reader: _Reader):
        conn.bytes_received += len(reader.buffer)  # bytes that came with the handshake
        while True:
            while not self._reading.wait(0.1):
                if self._stopping:
                    return
            if self._stopping:
                return
            if not reader.buffer and not reader.fill(PIECE):
                conn.peer_closed = True
                return
            first, second = reader.exact(2)
            fin, rsv, opcode = bool(first & 0x80), (first >> 4) & 7, first & 0x0F
            masked, length = bool(second & 0x80), second & 0x7F
            extra = 0
            if length == 126:
                (length,), extra = struct.unpack("!H", reader.exact(2)), 2
            elif length == 127:
                (length,), extra = struct.unpack("!Q", reader.exact(8)), 8
            if not masked:
                raise ProtocolError("an unmasked frame from the client")
            mask = reader.exact(4)
            conn.bytes_received += 2 + extra + 4 + length
            if rsv:
                raise ProtocolError(f"RSV bits {rsv} without an extension")
            if opcode >= 8:
                if length > 125 or not fin:
                    raise ProtocolError("a control frame longer than 125 bytes or fragmented")
                payload = mask_bytes(reader.exact(length), mask)
                if opcode == PING:
                    conn.pings += 1
                    self._send(conn, encode_frame(PONG, payload, masked=False))
                elif opcode == CLOSE:
                    conn.close_frames.append(payload)
                    self._send(conn, encode_frame(CLOSE, payload, masked=False))
                    conn.sock.shutdown(socket.SHUT_WR)
                    return
                continue
            if opcode not in (CONT, TEXT, BINARY):
                raise ProtocolError(f"unknown opcode {opcode}")
            # Echo the frame as it comes: its head, then its payload piece by piece.
            self._send(conn, frame_head(opcode, length, fin))
            done = 0
            while done < length:
                n = min(PIECE, length - done)
                if len(reader.buffer) < n:
                    while len(reader.buffer) < n:
                        if not reader.fill(max(65536, n - len(reader.buffer))):
                            raise EOFError("closed inside a frame")
                piece = bytes(reader.buffer[:n])
                del reader.buffer[:n]
                self._send(conn, mask_bytes(piece, mask, done))
                done += n
            if fin:
                conn.messages += 1
                if self.close_after is not None and conn.messages >= self.close_after:
                    conn.sock.shutdown(socket.SHUT_WR)  # a FIN, no close frame
                    return


# -- the client

class WebSocketClient:
    """A client connection: handshake at construction, then frames.

    headers: extra handshake headers ((name, value) pairs or a dict); protocols:
    Sec-WebSocket-Protocol values; early: bytes sent in the same write as the
    handshake (e.g. encode_frame(TEXT, b"hi")). With check (the default) anything
    but a 101 with the right Sec-WebSocket-Accept raises HandshakeError (the socket
    closed); without it, look at `response` (and read_body() for a non-101).

    bytes_sent / bytes_received count what went over the connection after the
    handshake head and the 101 head (early bytes included). After EOF,
    `close_kind` says how the peer closed: "fin", "reset" or (TLS) "no_close_notify".
    """

    def __init__(self, port: int, path: str = "/", host: str | None = None, headers=(),
                 protocols=(), ssl_context: ssl.SSLContext | None = None,
                 server_hostname: str | None = None, timeout: float = IO_TIMEOUT,
                 early: bytes = b"", check: bool = True, key: str | None = None):
        self.timeout = timeout
        raw = socket.create_connection((LOOPBACK, port), timeout=timeout)
        raw.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            if ssl_context is not None:
                raw = ssl_context.wrap_socket(raw, server_hostname=server_hostname,
                                              suppress_ragged_eofs=False)
        except BaseException:
            raw.close()
            raise
        self.sock = raw
        self.key = key or new_key()
        self.request = handshake_request(path, host or f"{LOOPBACK}:{port}", self.key,
                                         headers, protocols)
        self.bytes_sent = 0
        self.bytes_received = 0
        self.close_kind: str | None = None
        self._fragments: list[bytes] = []
        self._fragment_opcode: int | None = None
        self._eof = False
        try:
            self.sock.sendall(self.request + early)
            self.bytes_sent += len(early)
            self._reader = _Reader(self.sock)
            raw_head = self._reader.head()
            if raw_head is None:
                raise HandshakeError("the connection closed before a response")
            self.response = parse_head(raw_head)
            self.status = self.response.status
            if self.status == 101:
                self.bytes_received += len(self._reader.buffer)
            if check:
                self._check()
        except BaseException:
            self.sock.close()
            raise

    def _check(self):
        r = self.response
        if r.status != 101:
            raise HandshakeError(f"expected 101, got {r.start_line!r}: {r.headers}", r)
        if r.header("Sec-WebSocket-Accept") != accept_key(self.key):
            raise HandshakeError(f"Sec-WebSocket-Accept {r.header('Sec-WebSocket-Accept')!r} "
                                 f"does not match the key {self.key!r}", r)
        if not r.has_token("Upgrade", "websocket") or not r.has_token("Connection", "upgrade"):
            raise HandshakeError(f"a 101 without Upgrade: websocket / Connection: Upgrade: "
                                 f"{r.headers}", r)

    def read_body(self) -> bytes:
        """The body of a non-101 answer (Content-Length framed)."""
        return self._reader.exact(int(self.response.header("Content-Length") or 0))

    # -- sending

    def send_frame(self, opcode: int, payload: bytes = b"", fin: bool = True):
        data = encode_frame(opcode, payload, fin)
        self.sock.sendall(data)
        self.bytes_sent += len(data)

    def send_message(self, opcode: int, payload: bytes, fragment_size: int | None = None):
        """One message; with fragment_size, in frames of that many payload bytes."""
        if not fragment_size or len(payload) <= fragment_size:
            self.send_frame(opcode, payload)
            return
        view = memoryview(payload)
        for at in range(0, len(payload), fragment_size):
            last = at + fragment_size >= len(payload)
            self.send_frame(opcode if at == 0 else CONT, view[at:at + fragment_size], last)

    def send_text(self, text: str, fragment_size: int | None = None):
        self.send_message(TEXT, text.encode(), fragment_size)

    def send_binary(self, data: bytes, fragment_size: int | None = None):
        self.send_message(BINARY, data, fragment_size)

    def ping(self, payload: bytes = b""):
        self.send_frame(PING, payload)

    def pong(self, payload: bytes = b""):
        self.send_frame(PONG, payload)

    def close(self, code: int | None = 1000, reason: str = ""):
        """Sends a close frame (the socket stays open: recv() the answer, then EOF)."""
        self.send_frame(CLOSE, close_payload(code, reason))

    def write(self, data: bytes, stall: float) -> int:
        """Sends as much of `data` as the connection takes before `stall` seconds pass
        with no progress; returns the bytes sent (< len(data) when it stalled)."""
        previous = self.sock.gettimeout()
        self.sock.settimeout(stall)
        view = memoryview(data)
        done = 0
        try:
            while done < len(data):
                try:
                    done += self.sock.send(view[done:done + PIECE])
                except (socket.timeout, ssl.SSLWantWriteError):
                    break
        finally:
            self.sock.settimeout(previous)
            self.bytes_sent += done
        return done

    def send_raw(self, data: bytes):
        self.sock.sendall(data)
        self.bytes_sent += len(data)

    # -- receiving

    def _fill(self) -> bool:
        try:
            chunk = self.sock.recv(PIECE)
        except ConnectionResetError:
            self.close_kind = "reset"
            return False
        except ssl.SSLEOFError:
            self.close_kind = "no_close_notify"
            return False
        if not chunk:
            self.close_kind = self.close_kind or "fin"
            return False
        self._reader.buffer += chunk
        self.bytes_received += len(chunk)
        return True

    def _frame(self):
        """A whole frame from the buffer, or None when more bytes are needed."""
        buf = self._reader.buffer
        if len(buf) < 2:
            return None
        first, second = buf[0], buf[1]
        if second & 0x80:
            raise ProtocolError("a masked frame from the server")
        length, at = second & 0x7F, 2
        if length == 126:
            if len(buf) < 4:
                return None
            length, at = struct.unpack_from("!H", buf, 2)[0], 4
        elif length == 127:
            if len(buf) < 10:
                return None
            length, at = struct.unpack_from("!Q", buf, 2)[0], 10
        if len(buf) < at + length:
            return None
        payload = bytes(buf[at:at + length])
        del buf[:at + length]
        if first & 0x70:
            raise ProtocolError(f"RSV bits set: {first:#x}")
        return bool(first & 0x80), first & 0x0F, payload

    def recv(self, timeout: float | None = None) -> tuple[int | None, bytes]:
        """The next whole message (fragments joined) or control frame, as (opcode,
        payload); (EOF, b"") once the peer closed TCP. Raises TimeoutError when none
        is complete within `timeout` (default: the connection's timeout)."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            frame = self._frame()
            if frame is not None:
                fin, opcode, payload = frame
                if opcode >= 8:
                    return opcode, payload
                if opcode == CONT:
                    if self._fragment_opcode is None:
                        raise ProtocolError("a continuation frame outside a message")
                else:
                    if self._fragment_opcode is not None:
                        raise ProtocolError("a new message inside a fragmented one")
                    self._fragment_opcode = opcode
                self._fragments.append(payload)
                if fin:
                    opcode, data = self._fragment_opcode, b"".join(self._fragments)
                    self._fragment_opcode, self._fragments = None, []
                    return opcode, data
                continue
            if self._eof:
                return EOF, b""
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no whole WebSocket message in time")
            self.sock.settimeout(left)
            try:
                if not self._fill():
                    self._eof = True
                    if self._reader.buffer or self._fragments:
                        raise ProtocolError(f"EOF inside a frame or message "
                                            f"({len(self._reader.buffer)} bytes buffered)")
            except (socket.timeout, ssl.SSLWantReadError):
                raise TimeoutError("no whole WebSocket message in time") from None
            finally:
                if not self._eof:
                    self.sock.settimeout(self.timeout)

    def exchange(self, opcode: int, payload: bytes, timeout: float | None = None) -> bytes:
        """Sends a message and returns the payload of the next message received, which
        must have the same opcode (AssertionError otherwise)."""
        self.send_message(opcode, payload)
        got, data = self.recv(timeout)
        if got != opcode:
            raise AssertionError(f"sent opcode {opcode}, got {got} {data[:100]!r}")
        return data

    def close_socket(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close_socket()
