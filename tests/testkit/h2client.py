"""An HTTP/2 client for the tests, on python3-h2 (Debian's): requests on
streams of one connection, and raw frames for the attacks a gateway must
survive (built with hyperframe and hpack, which come with h2).

    c = H2Client(port)                 # h2c with prior knowledge
    sid = c.send("GET", "/x")
    responses = c.run_until_done([sid])  # {sid: H2Response}
"""

from __future__ import annotations

import socket
import ssl
import time

import h2.config
import h2.connection
import h2.events
import h2.exceptions
import hpack
import hyperframe.frame as frames

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


class H2Response:
    def __init__(self):
        self.headers: list[tuple[str, str]] = []
        self.trailers: list[tuple[str, str]] = []
        self.body = bytearray()
        self.ended = False
        self.reset_code: int | None = None
        self.informational: list[int] = []  # 1xx statuses, in order
        self.ended_at: float | None = None  # time.monotonic() when it ended

    @property
    def status(self) -> int | None:
        for name, value in self.headers:
            if name == ":status":
                return int(value)
        return None

    def header(self, name: str) -> str | None:
        for n, v in self.headers + self.trailers:
            if n == name:
                return v
        return None


class H2Client:
    """One HTTP/2 connection: h2c, or h2 over TLS when `tls` (a client
    context offering h2 by ALPN) is given."""

    def __init__(self, port: int, tls: ssl.SSLContext | None = None, timeout: float = 10.0,
                 settings: dict | None = None, server_name: str = "localhost"):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if tls is not None:
            sock = tls.wrap_socket(sock, server_hostname=server_name)
        self.sock = sock
        self.timeout = timeout
        self.conn = h2.connection.H2Connection(
            h2.config.H2Configuration(client_side=True, header_encoding="utf-8"))
        self.conn.initiate_connection()
        if settings:
            self.conn.update_settings(settings)
        self.responses: dict[int, H2Response] = {}
        self.goaway: h2.events.ConnectionTerminated | None = None
        self.closed = False
        self.flush()

    def flush(self):
        data = self.conn.data_to_send()
        if data:
            self.sock.sendall(data)

    def send(self, method: str, path: str, headers=(), body: bytes | None = None,
             end: bool = True, authority: str = "127.0.0.1") -> int:
        sid = self.conn.get_next_available_stream_id()
        hdrs = [(":method", method), (":path", path), (":scheme", "http"),
                (":authority", authority), *headers]
        self.conn.send_headers(sid, hdrs, end_stream=end and body is None)
        self.responses[sid] = H2Response()
        self.flush()
        if body is not None:
            self.send_body(sid, body, end=end)
        return sid

    def send_body(self, sid: int, body: bytes, end: bool = True):
        """Sends `body` as the windows allow (reading the connection meanwhile)."""
        view = memoryview(body)
        deadline = time.monotonic() + self.timeout
        while view:
            window = min(self.conn.local_flow_control_window(sid),
                         self.conn.max_outbound_frame_size)
            if window <= 0:
                if time.monotonic() > deadline or not self.pump():
                    raise TimeoutError("no window to send the body")
                continue
            n = min(window, len(view))
            self.conn.send_data(sid, bytes(view[:n]))
            view = view[n:]
            self.flush()
        if end:
            self.conn.end_stream(sid)
            self.flush()

    def pump(self) -> bool:
        """Reads once and handles the events; False when the connection ended."""
        if self.closed:
            return False
        try:
            data = self.sock.recv(65536)
        except (ConnectionResetError, ssl.SSLError):
            data = b""
        if not data:
            self.closed = True
            return False
        try:
            events = self.conn.receive_data(data)
        except h2.exceptions.ProtocolError:
            self.closed = True
            return False
        for event in events:
            self.handle(event)
        try:
            self.flush()
        except OSError:
            self.closed = True
        return True

    def handle(self, event):
        r = self.responses.get(getattr(event, "stream_id", 0) or 0)
        if isinstance(event, h2.events.InformationalResponseReceived) and r:
            r.informational.append(int(dict(event.headers)[":status"]))
        elif isinstance(event, h2.events.ResponseReceived) and r:
            r.headers = list(event.headers)
        elif isinstance(event, h2.events.TrailersReceived) and r:
            r.trailers = list(event.headers)
        elif isinstance(event, h2.events.DataReceived) and r:
            r.body += event.data
            self.conn.acknowledge_received_data(event.flow_controlled_length, event.stream_id)
        elif isinstance(event, h2.events.StreamEnded) and r:
            r.ended = True
            r.ended_at = time.monotonic()
        elif isinstance(event, h2.events.StreamReset) and r:
            r.reset_code = event.error_code
            r.ended = True
            r.ended_at = time.monotonic()
        elif isinstance(event, h2.events.ConnectionTerminated):
            self.goaway = event

    def pump_for(self, seconds: float):
        """Reads and handles whatever comes for `seconds`, then returns."""
        end = time.monotonic() + seconds
        try:
            while not self.closed and (left := end - time.monotonic()) > 0:
                self.sock.settimeout(min(left, 0.05))
                try:
                    self.pump()
                except TimeoutError:
                    pass
        finally:
            self.sock.settimeout(self.timeout)

    def run_until_done(self, sids, timeout: float | None = None) -> dict[int, H2Response]:
        deadline = time.monotonic() + (timeout or self.timeout)
        while not all(self.responses[s].ended for s in sids):
            if time.monotonic() > deadline:
                raise TimeoutError(f"streams {sids} not done")
            if not self.pump():
                break
        return {s: self.responses[s] for s in sids}

    def request(self, method: str, path: str, headers=(), body: bytes | None = None,
                timeout: float | None = None) -> H2Response:
        sid = self.send(method, path, headers, body)
        return self.run_until_done([sid], timeout)[sid]

    def wait_goaway(self, timeout: float = 10.0) -> h2.events.ConnectionTerminated | None:
        deadline = time.monotonic() + timeout
        while self.goaway is None and time.monotonic() < deadline:
            if not self.pump():
                break
        return self.goaway

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class RawH2:
    """A connection that writes frames as given (valid or not) and reads
    frames back: for flood and protocol-violation tests."""

    def __init__(self, port: int, timeout: float = 10.0, receive_buffer: int | None = None):
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        if receive_buffer:
            # Set before connecting: the window the server may fill.
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
        self.sock.settimeout(timeout)
        self.sock.connect(("127.0.0.1", port))
        self.encoder = hpack.Encoder()
        self.buffer = b""
        self.sock.sendall(PREFACE + frames.SettingsFrame(0).serialize())

    def send(self, *frame_list):
        self.sock.sendall(b"".join(f.serialize() for f in frame_list))

    def send_bytes(self, data: bytes):
        self.sock.sendall(data)

    def headers_block(self, path: str = "/", extra=()) -> bytes:
        return self.encoder.encode([(":method", "GET"), (":path", path), (":scheme", "http"),
                                    (":authority", "127.0.0.1"), *extra])

    def request_frame(self, sid: int, path: str = "/", end: bool = True) -> frames.HeadersFrame:
        f = frames.HeadersFrame(sid)
        f.data = self.headers_block(path)
        f.flags.add("END_HEADERS")
        if end:
            f.flags.add("END_STREAM")
        return f

    def read_frames(self, until=None, timeout: float = 10.0) -> list:
        """Frames read until `until(frame)` is true, the connection ends or `timeout`."""
        got = []
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.5)
        while time.monotonic() < deadline:
            while len(self.buffer) >= 9:
                length = int.from_bytes(self.buffer[:3], "big")
                if len(self.buffer) < 9 + length:
                    break
                frame, _ = frames.Frame.parse_frame_header(memoryview(self.buffer[:9]))
                frame.parse_body(memoryview(self.buffer[9:9 + length]))
                self.buffer = self.buffer[9 + length:]
                got.append(frame)
                if until and until(frame):
                    return got
            try:
                data = self.sock.recv(65536)
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                break
            if not data:
                break
            self.buffer += data
        return got

    def goaway(self, timeout: float = 10.0) -> frames.GoAwayFrame | None:
        """Reads until a GOAWAY (answering PINGs is not needed); None if none came."""
        for f in self.read_frames(lambda f: isinstance(f, frames.GoAwayFrame), timeout):
            if isinstance(f, frames.GoAwayFrame):
                return f
        return None

    def flood(self, frame: bytes, count: int, seconds: float = 10.0) -> int:
        """Sends `frame` `count` times without reading, for at most `seconds`
        (the server may stop reading); returns how many bytes went."""
        data = frame * count
        sent = 0
        deadline = time.monotonic() + seconds
        self.sock.settimeout(0.5)
        while sent < len(data) and time.monotonic() < deadline:
            try:
                sent += self.sock.send(data[sent:sent + 1 << 20])
            except socket.timeout:
                continue
            except (BrokenPipeError, ConnectionResetError):
                break
        return sent

    def goaway_after_anything(self, timeout: float = 30.0) -> tuple[int, int] | None:
        """(last stream id, error code) of the first GOAWAY, skipping every other
        frame without parsing it; None if the connection ends without one."""
        deadline = time.monotonic() + timeout
        self.sock.settimeout(0.5)
        buf = bytearray(self.buffer)
        pos = 0
        while time.monotonic() < deadline:
            while len(buf) - pos >= 9:
                length = int.from_bytes(buf[pos:pos + 3], "big")
                if len(buf) - pos < 9 + length:
                    break
                if buf[pos + 3] == 0x7:  # GOAWAY
                    body = buf[pos + 9:pos + 17]
                    return (int.from_bytes(body[:4], "big") & 0x7FFFFFFF,
                            int.from_bytes(body[4:8], "big"))
                pos += 9 + length
            del buf[:pos]
            pos = 0
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            except (ConnectionResetError, BrokenPipeError):
                return None
            if not data:
                return None
            buf += data
        return None

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
