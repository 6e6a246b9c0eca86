"""Hostile clients and lying upstreams, through the real sluice binary.

Each test reproduces an attack or fault that once took the gateway down, grew
its memory without bound, handed one client's bytes to another, or pinned its
connections; the gateway must answer as documented and keep serving.
"""

import fcntl
import resource
import socket
import sys
import termios
import threading
import time
import unittest

from harness import (SANITIZED, ProcessTestCase, RawConnection, echo_header, gateway_config,
                     request, rss_kib, wait_until)
from testkit.h2client import H2Client
from testkit.procfs import cpu_seconds

MIB = 1024 * 1024


class ScriptedUpstream:
    """A raw TCP upstream on 127.0.0.1: for every request head (and its
    Content-Length body) it read, it calls respond(conn, index, head) which
    writes whatever bytes it likes. Stops itself in cleanup."""

    def __init__(self, respond):
        self.respond = respond
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(128)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.connections = 0
        self.closed = 0  # connections that ended (the gateway closed them, or respond did)
        self.requests = 0
        self.stopped = False
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopped:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def _serve(self, conn):
        buf = b""
        index = 0
        try:
            conn.settimeout(10)
            while not self.stopped:
                while b"\r\n\r\n" not in buf:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                head, buf = buf.split(b"\r\n\r\n", 1)
                length = 0
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    if name.strip().lower() == b"content-length":
                        length = int(value)
                while len(buf) < length:
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                buf = buf[length:]
                self.requests += 1
                if self.respond(conn, index, head) is False:
                    return
                index += 1
        except OSError:
            pass
        finally:
            conn.close()
            self.closed += 1

    def stop(self):
        self.stopped = True
        self.sock.close()


def ok_response(body: bytes = b"ok", extra: bytes = b"") -> bytes:
    return (b"HTTP/1.1 200 OK\r\nContent-Length: " + str(len(body)).encode() + b"\r\n" + extra +
            b"\r\n" + body)


class HardeningTestCase(ProcessTestCase):
    def start_upstream(self, respond) -> ScriptedUpstream:
        upstream = ScriptedUpstream(respond)
        self.addCleanup(upstream.stop)
        return upstream

    def start_gateway(self, upstream_address, server=None, upstream_options=None, **sections):
        config = gateway_config(
            {"up": {"servers": [upstream_address], **(upstream_options or {})}},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "up"}],
            server=server, **sections)
        self.gateway = self.start_sluice(config)
        return self.gateway

    def assert_serving(self):
        status, _, _ = request(self.gateway.port, "GET", "/still-serving", timeout=5)
        self.assertEqual(status, 200)
        self.assertEqual(request(self.gateway.admin_port, "GET", "/healthz")[0], 200)


class TrailerAndChunkLineTest(HardeningTestCase):
    """A trailer field of 64 KiB once aborted the process; an endless chunk
    extension or trailer line grew memory without bound."""

    def setUp(self):
        super().setUp()
        self.upstream = self.start_upstream(lambda conn, i, head: conn.sendall(ok_response()))
        self.start_gateway(self.upstream.address)

    def test_huge_request_trailer_is_refused_and_the_gateway_lives(self):
        with RawConnection(self.gateway.port) as c:
            c.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"0\r\nX: " + b"A" * 65534 + b"\r\n\r\n")
            res = c.read_response()
            self.assertEqual(res.status, 400, res)
            self.assertTrue(c.is_closed())
        self.assert_serving()
        self.assertEqual(self.gateway.metric("sluice_internal_errors_total"), 0)

    def test_trailer_section_is_bounded_by_max_header_bytes(self):
        # 20 KiB of trailers (within what the parser could hold) is over max_header_bytes 16 KiB.
        trailers = b"".join(b"X-T%d: %s\r\n" % (i, b"v" * 1000) for i in range(20))
        res = RawConnection(self.gateway.port)
        with res as c:
            c.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"3\r\nabc\r\n0\r\n" + trailers + b"\r\n")
            self.assertEqual(c.read_response().status, 400)
        self.assert_serving()

    def endless(self, prefix: bytes):
        """Sends `prefix` then up to 64 MiB of 'a' without a line end; returns the
        bytes sent before the gateway answered or closed, and the gateway's RSS growth."""
        before = rss_kib(self.gateway.pid)
        sent = 0
        with RawConnection(self.gateway.port) as c:
            c.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n" + prefix)
            chunk = b"a" * 65536
            try:
                while sent < 64 * MIB:
                    c.sock.sendall(chunk)
                    sent += len(chunk)
            except OSError:
                pass  # the gateway closed the connection: what we want
            growth = rss_kib(self.gateway.pid) - before
            res = c.read_response()
        return res, sent, growth

    def test_endless_chunk_extension(self):
        res, sent, growth = self.endless(b"5;")
        self.assertEqual(res.status, 400, res)
        self.assertLess(sent, 16 * MIB, "the gateway kept reading an endless chunk-size line")
        if not SANITIZED:
            self.assertLess(growth, 32 * 1024, f"RSS grew by {growth} KiB")
        self.assert_serving()

    def test_endless_trailer_line(self):
        res, sent, growth = self.endless(b"0\r\nX-Trailer: ")
        self.assertEqual(res.status, 400, res)
        self.assertLess(sent, 16 * MIB)
        if not SANITIZED:
            self.assertLess(growth, 32 * 1024, f"RSS grew by {growth} KiB")
        self.assert_serving()

    def test_long_chunk_extension_is_refused(self):
        res = RawConnection(self.gateway.port)
        with res as c:
            c.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"3;" + b"e" * 5000 + b"\r\nabc\r\n0\r\n\r\n")
            self.assertEqual(c.read_response().status, 400)
        # A short extension is accepted and ignored.
        with RawConnection(self.gateway.port) as c:
            c.send(b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
                   b"3;name=value\r\nabc\r\n0\r\n\r\n")
            self.assertEqual(c.read_response().status, 200)


class MalformedRequestTest(ProcessTestCase):
    """Framing the parser must refuse: each gets its status and the connection
    is closed. A fault in the head keeps the request from the upstream
    altogether; one in a streamed body (BODY_FAULTS) is found after the head
    went upstream, and that upstream connection is then closed mid-request."""

    BODY_FAULTS = {"runaway chunk", "bare LF after a chunk", "malformed trailer"}

    H = b"Host: x\r\n"
    CASES = {
        "two different Content-Lengths": (b"POST / HTTP/1.1\r\n" + H +
                                          b"Content-Length: 1\r\nContent-Length: 2\r\n\r\nab", 400),
        "Content-Length list": (b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5, 6\r\n\r\nhello", 400),
        "signed Content-Length": (b"POST / HTTP/1.1\r\n" + H + b"Content-Length: +5\r\n\r\nhello", 400),
        "hex Content-Length": (b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 0x5\r\n\r\nhello", 400),
        "negative Content-Length": (b"POST / HTTP/1.1\r\n" + H + b"Content-Length: -1\r\n\r\n", 400),
        "empty Content-Length": (b"POST / HTTP/1.1\r\n" + H + b"Content-Length: \r\n\r\n", 400),
        "overflowing Content-Length": (b"POST / HTTP/1.1\r\n" + H +
                                       b"Content-Length: 99999999999999999999999\r\n\r\n", 400),
        "TE then CL": (b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n"
                       b"Content-Length: 5\r\n\r\n0\r\n\r\n", 400),
        "identity, chunked with CL": (b"POST / HTTP/1.1\r\n" + H + b"Content-Length: 5\r\n"
                                      b"Transfer-Encoding: identity, chunked\r\n\r\n0\r\n\r\n", 400),
        "two TE lines": (b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n"
                         b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        "chunked, chunked": (b"POST / HTTP/1.1\r\n" + H +
                             b"Transfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n", 400),
        "chunked not last": (b"POST / HTTP/1.1\r\n" + H +
                             b"Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n", 400),
        "space before colon": (b"POST / HTTP/1.1\r\n" + H +
                               b"Transfer-Encoding : chunked\r\n\r\n0\r\n\r\n", 400),
        "leading space before the first field": (b"GET / HTTP/1.1\r\n " + H + b"\r\n", 400),
        "vertical tab before chunked": (b"POST / HTTP/1.1\r\n" + H +
                                        b"Transfer-Encoding: \x0bchunked\r\n\r\n0\r\n\r\n", 400),
        "NUL in a value": (b"GET / HTTP/1.1\r\n" + H + b"X-A: a\x00b\r\n\r\n", 400),
        "CR in a value": (b"GET / HTTP/1.1\r\n" + H + b"X-A: a\rb\r\n\r\n", 400),
        "HTTP/2.0 on HTTP/1": (b"GET / HTTP/2.0\r\n" + H + b"\r\n", 400),
        "HTTP/1.01": (b"GET / HTTP/1.01\r\n" + H + b"\r\n", 400),
        "space in the target": (b"GET /a b HTTP/1.1\r\n" + H + b"\r\n", 400),
        "asterisk with GET": (b"GET * HTTP/1.1\r\n" + H + b"\r\n", 400),
        "Transfer-Encoding in HTTP/1.0": (b"POST / HTTP/1.0\r\nConnection: keep-alive\r\n"
                                          b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 400),
        "chunk size 0x5": (b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                           b"0x5\r\nhello\r\n0\r\n\r\n", 400),
        "chunk size -5": (b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                          b"-5\r\nhello\r\n0\r\n\r\n", 400),
        "empty chunk size": (b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                             b"\r\nhello\r\n0\r\n\r\n", 400),
        "chunk size of 17 hex digits": (b"POST / HTTP/1.1\r\n" + H +
                                        b"Transfer-Encoding: chunked\r\n\r\n"
                                        b"10000000000000005\r\nhello\r\n0\r\n\r\n", 400),
        "runaway chunk": (b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                          b"5\r\nhelloEXTRA\r\n0\r\n\r\n", 400),
        "bare LF after a chunk": (b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                                  b"5\r\nhello\n0\r\n\r\n", 400),
        "CR inside a chunk extension": (b"POST / HTTP/1.1\r\n" + H +
                                        b"Transfer-Encoding: chunked\r\n\r\n"
                                        b"5;a\rb\r\nhello\r\n0\r\n\r\n", 400),
        "malformed trailer": (b"POST / HTTP/1.1\r\n" + H + b"Transfer-Encoding: chunked\r\n\r\n"
                              b"5\r\nhello\r\n0\r\nno colon here\r\n\r\n", 400),
    }

    def test_each_is_refused_and_never_reaches_the_upstream(self):
        echo = self.start_echo()
        gateway = self.start_sluice(gateway_config(
            {"echo": [echo.address]},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}]))
        for name, (data, status) in self.CASES.items():
            before = echo.counts()["requests"]
            with self.subTest(name):
                with RawConnection(gateway.port) as c:
                    c.send(data + b"GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
                    res = c.read_response()
                    self.assertEqual(res.status, status, res)
                    self.assertTrue(c.is_closed(), "the connection stays open")
                if name not in self.BODY_FAULTS:
                    self.assertEqual(echo.counts()["requests"], before, "it reached the upstream")
        self.assertEqual(echo.counts()["bad_requests"], 0)


class LyingUpstreamTest(HardeningTestCase):
    def test_huge_response_trailer_does_not_kill_the_gateway(self):
        def respond(conn, i, head):
            if b"/big-trailer" in head:
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                             b"2\r\nok\r\n0\r\nX: " + b"A" * 65534 + b"\r\n\r\n")
                return False
            conn.sendall(ok_response())
        self.start_gateway(self.start_upstream(respond).address)
        with RawConnection(self.gateway.port) as c:
            c.send(b"GET /big-trailer HTTP/1.1\r\nHost: x\r\n\r\n")
            data = c.read_until_close()
        # The body never ends properly: no last chunk reaches the client.
        self.assertNotIn(b"0\r\n\r\n", data)
        self.assert_serving()

    def test_endless_response_chunk_line_is_a_502(self):
        def respond(conn, i, head):
            if b"/endless" in head:
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5;")
                try:
                    for _ in range(1024):  # 64 MiB at most
                        conn.sendall(b"a" * 65536)
                except OSError:
                    pass
                return False
            conn.sendall(ok_response())
        self.start_gateway(self.start_upstream(respond).address)
        before = rss_kib(self.gateway.pid)
        status, _, _ = request(self.gateway.port, "GET", "/endless", timeout=20)
        self.assertEqual(status, 502)
        if not SANITIZED:
            self.assertLess(rss_kib(self.gateway.pid) - before, 32 * 1024)
        self.assert_serving()

    def test_a_status_below_100_is_a_502_to_either_protocol(self):
        def respond(conn, i, head):
            if b"/odd" in head:
                conn.sendall(b"HTTP/1.1 042 Odd\r\nContent-Length: 2\r\n\r\nok")
                return False
            conn.sendall(ok_response())
        self.start_gateway(self.start_upstream(respond).address,
                           server={"http2": {"enabled": True}})
        self.assertEqual(request(self.gateway.port, "GET", "/odd")[0], 502)
        c = H2Client(self.gateway.port)
        self.addCleanup(c.close)
        self.assertEqual(c.request("GET", "/odd").status, 502)
        self.assert_serving()

    def test_unknown_response_transfer_coding_is_a_502(self):
        def respond(conn, i, head):
            if b"/gzip" in head:
                conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nxxxx")
                return False
            conn.sendall(ok_response())
        self.start_gateway(self.start_upstream(respond).address)
        self.assertEqual(request(self.gateway.port, "GET", "/gzip")[0], 502)
        self.assert_serving()


TCP_CLOSE = 7  # tcpi_state, the first byte of struct tcp_info


def stray_bytes_settled(conn: socket.socket) -> bool:
    """Whether every byte written to conn was acknowledged by the peer's
    kernel, or the peer reset the connection (so none will be)."""
    if conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)[0] == TCP_CLOSE:
        return True
    queued = fcntl.ioctl(conn.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    return int.from_bytes(queued, sys.byteorder) == 0


class StrayUpstreamBytesTest(HardeningTestCase):
    """Bytes an upstream sends after a complete response must never become
    another client's response."""

    def run_trials(self, first_request: bytes, stray: bytes, trials: int = 20):
        stray_sent = threading.Event()

        def respond(conn, i, head):
            if b"/victim-bait" in head:
                conn.sendall(first_response)
                time.sleep(0.005)
                conn.sendall(stray)
                # Sent is not arrived: this socket (Nagle on, as most servers
                # run) holds the stray bytes until the gateway acknowledges the
                # response, which the gateway does shortly after pooling the
                # connection. Bytes still held when the next request goes out
                # arrive after it, as its response would: no proxy can tell
                # them apart. So the trial starts once the gateway's kernel has
                # acknowledged them (or refused them, having closed the
                # connection), whatever the load on the machine.
                wait_until(lambda: stray_bytes_settled(conn), timeout=10, interval=0.001)
                stray_sent.set()
            else:
                conn.sendall(ok_response(b"clean"))
        first_response = (b"HTTP/1.1 204 No Content\r\n\r\n" if b"204" in first_request
                          else ok_response(b"first"))
        self.start_gateway(self.start_upstream(respond).address,
                           server={"threads": 1})
        wrong = 0
        for _ in range(trials):
            stray_sent.clear()
            with RawConnection(self.gateway.port) as c:
                c.send(first_request)
                c.read_response(head_request=first_request.startswith(b"HEAD"))
            # The stray bytes arrive while the connection is pooled.
            self.assertTrue(stray_sent.wait(10), "the upstream never sent its stray bytes")
            with RawConnection(self.gateway.port) as c:
                c.send(b"GET /other HTTP/1.1\r\nHost: x\r\n\r\n")
                res = c.read_response()
                if res.status != 200 or res.body != b"clean":
                    wrong += 1
        self.assertEqual(wrong, 0, f"{wrong} of {trials} clients got another exchange's bytes")
        self.assert_serving()

    def test_extra_response_after_a_response(self):
        self.run_trials(b"GET /victim-bait HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!")

    def test_late_body_after_204(self):
        self.run_trials(b"GET /victim-bait/204 HTTP/1.1\r\nHost: x\r\n\r\n",
                        b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nEVIL!")

    def test_late_body_after_head(self):
        self.run_trials(b"HEAD /victim-bait HTTP/1.1\r\nHost: x\r\n\r\n", b"first")


class StalePooledConnectionTest(HardeningTestCase):
    def test_a_get_on_a_connection_the_upstream_closed_is_not_a_502(self):
        # Every connection serves one response, then closes shortly after
        # (without saying so), as a server with a short keep-alive timeout does.
        def respond(conn, i, head):
            conn.sendall(ok_response())
            time.sleep(0.05)
            return False
        self.start_gateway(self.start_upstream(respond).address, server={"threads": 1})
        failures = 0
        for _ in range(20):
            status, _, _ = request(self.gateway.port, "GET", "/x")
            failures += status != 200
            time.sleep(0.1)
        self.assertEqual(failures, 0, f"{failures} of 20 GETs failed on a stale connection")

    def test_a_post_never_meets_a_connection_the_upstream_closed_while_pooled(self):
        # A POST with a body is never sent twice, so no retry could save it: the
        # pool must have noticed the close while the connection was idle.
        def respond(conn, i, head):
            conn.sendall(ok_response())
            time.sleep(0.02)
            return False  # closed without saying so
        upstream = self.start_upstream(respond)
        self.start_gateway(upstream.address, server={"threads": 1})
        failures = 0
        for i in range(20):
            wait_until(lambda: upstream.closed >= i, 5, interval=0.005,
                       message="the upstream's close")
            status, _, _ = request(self.gateway.port, "POST", "/x", body=b"payload")
            failures += status != 200
        self.assertEqual(failures, 0, f"{failures} of 20 POSTs met a stale connection")
        self.assert_serving()


class UnderscoreHeaderTest(ProcessTestCase):
    def gateway(self, mode=None):
        echo = self.start_echo()
        server = {"headers_with_underscores": mode} if mode else {}
        return self.start_sluice(gateway_config(
            {"echo": [echo.address]},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}], server=server))

    def send(self, gateway):
        with RawConnection(gateway.port) as c:
            c.send(b"GET / HTTP/1.1\r\nHost: x\r\nX_API_Key: victim\r\nTransfer_Encoding: x\r\n"
                   b"Content_Length: 5\r\nX-Fine: 1\r\n\r\n")
            return c.read_response()

    def test_dropped_by_default(self):
        res = self.send(self.gateway())
        self.assertEqual(res.status, 200)
        doc = res.json()
        for name in ("X_API_Key", "Transfer_Encoding", "Content_Length"):
            self.assertEqual(echo_header(doc, name), [], name)
        self.assertEqual(echo_header(doc, "X-Fine"), ["1"])

    def test_allowed_when_configured(self):
        res = self.send(self.gateway("allow"))
        self.assertEqual(echo_header(res.json(), "X_API_Key"), ["victim"])

    def test_rejected_when_configured(self):
        self.assertEqual(self.send(self.gateway("reject")).status, 400)


class SlowClientTest(HardeningTestCase):
    def setUp(self):
        super().setUp()
        self.upstream = self.start_upstream(lambda conn, i, head: conn.sendall(ok_response()))
        self.echo = self.start_echo()
        self.gateway = self.start_sluice(gateway_config(
            {"echo": [self.echo.address], "scripted": [self.upstream.address]},
            [{"name": "slow", "match": {"path_prefix": "/upload"}, "upstream": "scripted"},
             {"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}],
            server={"body_timeout_ms": 300, "send_timeout_ms": 300, "threads": 1}))

    def test_stalled_request_body_gets_408_and_frees_the_upstream(self):
        with RawConnection(self.gateway.port) as c:
            c.send(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\npart")
            res = c.read_response()
            self.assertEqual(res.status, 408, res)
            self.assertTrue(c.is_closed())
        # The half-sent upstream connection is closed, not left to the client.
        wait_until(lambda: self.upstream.closed == 1, 5, message="upstream connection closed")

    def test_client_that_never_reads_is_closed(self):
        c = socket.create_connection(("127.0.0.1", self.gateway.port))
        self.addCleanup(c.close)
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.sendall(b"GET /__download/268435456 HTTP/1.1\r\nHost: x\r\n\r\n")

        def closed_by_gateway():
            # Poll the gateway's side: its connection count goes back to zero.
            return self.gateway.metric("sluice_connections_active") == 0
        wait_until(closed_by_gateway, 10, interval=0.1, message="slow reader closed")


class UpstreamConnectionLimitTest(ProcessTestCase):
    """upstreams.NAME.max_connections: a request that finds every connection
    busy waits up to connect_timeout_ms for one, then gets 503."""

    def gateway(self, connect_timeout_ms):
        echo = self.start_echo()
        return self.start_sluice(gateway_config(
            {"echo": {"servers": [echo.address], "max_connections": 1,
                      "connect_timeout_ms": connect_timeout_ms}},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}],
            server={"threads": 1}))

    def slow_request_in_background(self, gateway, ms):
        result = {}
        def run():
            result["status"] = request(gateway.port, "GET", f"/__slow/{ms}")[0]
        t = threading.Thread(target=run)
        t.start()
        self.addCleanup(t.join)
        # The slow request holds the only connection once the upstream has it.
        wait_until(lambda: gateway.metric("sluice_upstream_connections_total",
                                          upstream="echo") == 1, 5)
        return t, result

    def test_a_request_waits_for_the_busy_connection(self):
        gateway = self.gateway(connect_timeout_ms=5000)
        t, result = self.slow_request_in_background(gateway, 300)
        self.assertEqual(request(gateway.port, "GET", "/second")[0], 200)
        t.join()
        self.assertEqual(result["status"], 200)
        # Both went over the one connection.
        self.assertEqual(gateway.metric("sluice_upstream_connections_total", upstream="echo"), 1)

    def test_every_waiter_gets_a_connection_freed_at_the_same_moment(self):
        echo = self.start_echo()
        gateway = self.start_sluice(gateway_config(
            {"echo": {"servers": [echo.address], "max_connections": 2,
                      "connect_timeout_ms": 3000}},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}],
            server={"threads": 1}))
        results = []
        def run(target):
            results.append(request(gateway.port, "GET", target, timeout=10)[0])
        slow = [threading.Thread(target=run, args=("/__slow/400",)) for _ in range(2)]
        for t in slow:
            t.start()
        wait_until(lambda: gateway.metric("sluice_upstream_connections_total",
                                          upstream="echo") == 2, 5)
        waiting = [threading.Thread(target=run, args=("/after",)) for _ in range(2)]
        for t in waiting:
            t.start()
        for t in slow + waiting:
            t.join()
        # A waiter left without its wake-up would get 503 at its deadline.
        self.assertEqual(sorted(results), [200, 200, 200, 200])

    def test_a_request_that_waits_too_long_gets_503(self):
        gateway = self.gateway(connect_timeout_ms=200)
        t, result = self.slow_request_in_background(gateway, 1500)
        self.assertEqual(request(gateway.port, "GET", "/second")[0], 503)
        t.join()
        self.assertEqual(result["status"], 200)


class ConnectionCapTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 4096 and hard > soft:
            resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
            self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        self.echo = self.start_echo()

    def config(self, **server):
        return gateway_config({"echo": [self.echo.address]},
                              [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}],
                              server=server)

    def idle_connections(self, port, n):
        conns = []
        for _ in range(n):
            c = RawConnection(port)
            self.addCleanup(c.close)
            c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(c.read_response().status, 200)
            conns.append(c)
        return conns

    def test_idle_connections_make_room_for_new_clients(self):
        gateway = self.start_sluice(self.config(max_connections=20))
        self.idle_connections(gateway.port, 20)
        for _ in range(10):
            self.assertEqual(request(gateway.port, "GET", "/new")[0], 200)
        self.assertEqual(request(gateway.admin_port, "GET", "/healthz")[0], 200)
        self.assertGreaterEqual(gateway.metric("sluice_connections_shed_total"), 1)
        self.assertLessEqual(gateway.metric("sluice_connections_active"), 20)

    def test_busy_connections_at_the_cap_refuse_new_ones(self):
        gateway = self.start_sluice(self.config(max_connections=10))
        busy = []
        for _ in range(10):  # heads never finished: busy, not idle
            c = RawConnection(gateway.port)
            self.addCleanup(c.close)
            c.send(b"GET / HTTP/1.1\r\n")
            busy.append(c)
        wait_until(lambda: gateway.metric("sluice_connections_active") == 10, 5)
        with RawConnection(gateway.port) as c:
            c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            res = c.read_response()
        self.assertEqual(res.status, 503)
        self.assertEqual(gateway.metric("sluice_connections_rejected_total"), 1)
        self.assertEqual(request(gateway.admin_port, "GET", "/healthz")[0], 200)
        wait_until(lambda: "connection cap 10 reached: 1 new connection(s) refused"
                   in gateway.stderr() + gateway.stdout(), 5, message="the refusal logged")

    def test_descriptor_limit_lowers_the_cap_and_admin_keeps_answering(self):
        # Under a hard limit of 400 descriptors the cap becomes (400 - 128) / 2.
        config = self.config()
        gateway = self.start_sluice(config, wrapper=("prlimit", "--nofile=400:400"))
        self.assertEqual(gateway.metric("sluice_connections_max"), 136)
        self.idle_connections(gateway.port, 300)  # more than the cap: the oldest are shed
        self.assertEqual(request(gateway.port, "GET", "/new")[0], 200)
        self.assertEqual(request(gateway.admin_port, "GET", "/healthz")[0], 200)
        # No accept loop spins: the gateway is quiet while nothing happens.
        cpu = cpu_seconds([gateway.pid])
        time.sleep(1.0)
        self.assertLess(cpu_seconds([gateway.pid]) - cpu, 0.5)


class AdminConnectionCapTest(ProcessTestCase):
    """The admin listener holds at most 64 connections; idle ones must not keep
    a liveness probe out."""

    CAP = 64

    def setUp(self):
        super().setUp()
        echo = self.start_echo()
        self.gateway = self.start_sluice(gateway_config(
            {"echo": [echo.address]},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}]))

    def silent(self, n):
        socks = []
        for _ in range(n):
            s = socket.create_connection(("127.0.0.1", self.gateway.admin_port), timeout=10)
            self.addCleanup(s.close)
            socks.append(s)
        return socks

    def test_silent_connections_at_the_cap_still_let_healthz_through(self):
        holders = self.silent(self.CAP + 16)
        for probe in ("/healthz", "/readyz", "/metrics", "/healthz"):
            self.assertEqual(request(self.gateway.admin_port, "GET", probe)[0], 200, probe)
        # The holders that waited longest were closed to make room.
        self.assertGreaterEqual(self.gateway.metric("sluice_admin_connections_shed_total"), 16)
        holders[0].settimeout(5)
        self.assertEqual(holders[0].recv(1), b"", "the oldest silent connection was closed")

    def test_keep_alive_scrapers_at_the_cap_make_room_too(self):
        # Connections that sent one request and then went quiet.
        idle = []
        for _ in range(self.CAP):
            c = RawConnection(self.gateway.admin_port)
            self.addCleanup(c.close)
            c.send(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            self.assertEqual(c.read_response().status, 200)
            idle.append(c)
        self.assertEqual(request(self.gateway.admin_port, "GET", "/healthz")[0], 200)

    def test_a_connection_that_sends_nothing_is_closed_after_a_few_seconds(self):
        [sock] = self.silent(1)
        sock.settimeout(15)
        started = time.monotonic()
        self.assertEqual(sock.recv(1), b"")
        self.assertLess(time.monotonic() - started, 12, "closed well before the 30 s idle timeout")


@unittest.skipIf(SANITIZED, "memory figures mean nothing under sanitizers")
class IdleMemoryTest(ProcessTestCase):
    CONNECTIONS = 2000

    def test_idle_connections_cost_little_and_memory_comes_back(self):
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < 4096:
            if hard < 4096:
                self.skipTest("descriptor limit too low")
            resource.setrlimit(resource.RLIMIT_NOFILE, (4096, hard))
            self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        echo = self.start_echo()
        gateway = self.start_sluice(gateway_config(
            {"echo": [echo.address]},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}]))
        for _ in range(20):
            request(gateway.port, "GET", "/warm")
        base = rss_kib(gateway.pid)
        conns = []
        for _ in range(self.CONNECTIONS):
            c = RawConnection(gateway.port)
            c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            conns.append(c)
        for c in conns:
            self.assertEqual(c.read_response().status, 200)
        wait_until(lambda: gateway.metric("sluice_connections_active") == self.CONNECTIONS, 10)
        # The relay buffers the exchanges used are freed once they are idle and
        # handed back to the system within a few seconds.
        def per_connection():
            return (rss_kib(gateway.pid) - base) * 1024 / self.CONNECTIONS
        wait_until(lambda: per_connection() < 16 * 1024, 10, interval=0.2,
                   message="RSS per idle connection under 16 KiB")
        print(f"RSS per idle keep-alive connection: {per_connection():.0f} bytes")
        for c in conns:
            c.close()
        wait_until(lambda: gateway.metric("sluice_connections_active") == 0, 10)
        # Freed memory goes back to the system once the wave has closed (what
        # stays: the workers' spare relay buffers and the grown session tables).
        wait_until(lambda: rss_kib(gateway.pid) - base < 16 * 1024, 10, interval=0.2,
                   message="RSS back near the baseline after the connections closed")


class ClosedOutputTest(ProcessTestCase):
    """A log reader that goes away (a closed pipe on stdout) must not end the gateway."""

    def test_access_log_to_a_closed_pipe(self):
        echo = self.start_echo()
        # Runs sluice with SIGPIPE at its default and stdout a pipe whose
        # reading end is already closed, as after `sluice | reader` lost its reader.
        launcher = ("import os, signal, sys\n"
                    "r, w = os.pipe(); os.dup2(w, 1); os.close(r); os.close(w)\n"
                    "signal.signal(signal.SIGPIPE, signal.SIG_DFL)\n"
                    "os.execv(sys.argv[1], sys.argv[1:])\n")
        gateway = self.start_sluice(
            gateway_config({"echo": [echo.address]},
                           [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}]),
            wrapper=[sys.executable, "-c", launcher])
        for i in range(5):
            status, _, _ = request(gateway.port, "GET", f"/logged/{i}")
            self.assertEqual(status, 200)
        self.assertTrue(gateway.alive())


if __name__ == "__main__":
    unittest.main()
