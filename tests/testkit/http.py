"""HTTP clients for tests on loopback.

request() sends one request on a fresh http.client connection; Client keeps one
keep-alive connection; RawConnection sends exact bytes over a socket and reads
HTTP/1.x responses itself, for malformed input and pipelining. Every call is
blocking with a socket timeout (IO_TIMEOUT unless given).
"""

from __future__ import annotations

import http.client
import json
import re
import socket

IO_TIMEOUT = 10.0  # default socket timeout of the clients


def request(port: int, method: str, target: str, body=None, headers=None,
            timeout: float = IO_TIMEOUT, chunked: bool = False):
    """One request on a fresh connection. Returns (status, HTTPMessage headers, body bytes).
    body may be bytes or an iterable of bytes (sent chunked when chunked=True)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, target, body=body, headers=headers or {}, encode_chunked=chunked)
        res = conn.getresponse()
        data = res.read()
        return res.status, res.headers, data
    finally:
        conn.close()


class Client:
    """One keep-alive http.client connection; request() returns (status, headers, body)."""

    def __init__(self, port: int, timeout: float = IO_TIMEOUT):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def request(self, method: str, target: str, body=None, headers=None, chunked=False):
        self.conn.request(method, target, body=body, headers=headers or {},
                          encode_chunked=chunked)
        res = self.conn.getresponse()
        return res.status, res.headers, res.read()

    def stream(self, method: str, target: str, headers=None):
        """Sends a request and returns the unread HTTPResponse (read it in pieces)."""
        self.conn.request(method, target, headers=headers or {})
        return self.conn.getresponse()

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Response:
    def __init__(self, version: str, status: int, reason: str, headers: list, body: bytes):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers  # [(name, value)] in received order
        self.body = body

    def header(self, name: str) -> str | None:
        values = self.all(name)
        return ", ".join(values) if values else None

    def all(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.version} {self.status} {self.headers} {self.body[:200]!r}>"


class RawConnection:
    """Exact bytes over one TCP connection, and a reader for HTTP/1.x responses."""

    def __init__(self, port: int, timeout: float = IO_TIMEOUT):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def send(self, data: bytes):
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self.buffer += chunk
        return True

    def _read_line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed before a full line: {self.buffer[:200]!r}")
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not self._fill():
                raise ConnectionError(f"closed after {len(self.buffer)} of {n} body bytes")
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_response(self, head_request: bool = False) -> Response:
        """Reads one final response (1xx interim responses are skipped)."""
        while True:
            while b"\r\n\r\n" not in self.buffer:
                if not self._fill():
                    raise ConnectionError(f"closed before a response head: {self.buffer[:200]!r}")
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            m = re.match(r"^HTTP/(\d\.\d) (\d{3})(?: (.*))?$", lines[0])
            if not m:
                raise ValueError(f"not an HTTP status line: {head[:120]!r} (stray bytes after "
                                 f"the previous message?)")
            status = int(m.group(2))
            headers = []
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers.append((name.strip(), value.strip()))
            if 100 <= status < 200:
                continue
            break
        response = Response(m.group(1), status, m.group(3) or "", headers, b"")
        te = (response.header("Transfer-Encoding") or "").lower()
        cl = response.header("Content-Length")
        if head_request or status in (204, 304):
            return response
        if "chunked" in te:
            body = bytearray()
            while True:
                size = int(self._read_line().split(b";")[0].strip(), 16)
                if size == 0:
                    while self._read_line():  # trailers until the empty line
                        pass
                    break
                body += self._read_exact(size)
                if self._read_line() != b"":
                    raise ValueError("chunk not followed by CRLF")
            response.body = bytes(body)
        elif cl is not None:
            response.body = self._read_exact(int(cl))
        else:
            while self._fill():  # delimited by close
                pass
            response.body, self.buffer = self.buffer, b""
        return response

    def peek(self, timeout: float) -> bytes:
        """The unread bytes after waiting up to `timeout` for some to arrive (not consumed)."""
        if not self.buffer:
            previous = self.sock.gettimeout()
            self.sock.settimeout(timeout)
            try:
                self._fill()
            except socket.timeout:
                pass
            finally:
                self.sock.settimeout(previous)
        return self.buffer

    def read_until_close(self, timeout: float = IO_TIMEOUT) -> bytes:
        """Everything until the peer closes (raises socket.timeout otherwise)."""
        self.sock.settimeout(timeout)
        try:
            while self._fill():
                pass
        except ConnectionResetError:
            pass
        data, self.buffer = self.buffer, b""
        return data

    def is_closed(self, timeout: float = 3.0) -> bool:
        """True if the peer closes (EOF or reset) within `timeout` with no further bytes.
        Unread buffered bytes count as "not closed"."""
        if self.buffer:
            return False
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def raw_exchange(port: int, data: bytes, timeout: float = IO_TIMEOUT) -> Response:
    """Sends `data` on a fresh connection and reads one response."""
    with RawConnection(port, timeout) as conn:
        conn.send(data)
        return conn.read_response()
