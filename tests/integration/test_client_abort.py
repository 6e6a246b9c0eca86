"""A client that leaves while its request is upstream, through the real sluice
binary and a real redis-server: an HTTP/1.1 client that closes its connection
after the request went upstream and before the response head (a close, a
half-close, a TLS close_notify, also with a WebSocket handshake pending), and
an HTTP/2 client that resets its stream, abort the exchange at once. The
upstream request is cancelled (its HTTP/1.1 connection closed, an h2c
upstream's stream reset with CANCEL), the exchange is logged 499, the
concurrency slot is back within a second and the cost from the response
settles at the estimate. A pipelined request is kept and answered; a route
with ignore_client_abort: true lets the upstream finish (both protocols).
"""

import json
import select
import socket
import ssl
import threading
import time
import unittest
from urllib.parse import parse_qs, urlsplit

from harness import (ProcessTestCase, RawConnection, client_context, gateway_config, make_ca,
                     make_server_cert, metric_sum, request, wait_redis_ready, wait_until)
from testkit.h2client import H2Client
from testkit.h2server import H2Upstream

USAGE = 7  # what the upstream's X-Usage-Tokens says a request cost
ESTIMATE = 100  # the route's cost, charged at admission


class HeldUpstream:
    """An HTTP/1.1 upstream that holds each request `hold_ms` (query, default 0)
    before answering 200 with X-Usage-Tokens, and notices a connection closed
    while it holds a request on it (`closed_while_held`)."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self.listener.getsockname()[1]}"
        self.lock = threading.Lock()
        self.held = 0
        self.closed_while_held = 0
        self.answered = 0
        self.stopped = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self):
        self.stopped.set()
        self.listener.close()

    def _accept(self):
        while not self.stopped.is_set():
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock):
        buffer = b""
        with sock:
            while True:
                try:
                    while b"\r\n\r\n" not in buffer:
                        data = sock.recv(65536)
                        if not data:
                            return
                        buffer += data
                except OSError:
                    return
                head, _, buffer = buffer.partition(b"\r\n\r\n")
                target = head.split(b" ", 2)[1].decode()
                hold = int(parse_qs(urlsplit(target).query).get("hold_ms", ["0"])[0]) / 1000
                with self.lock:
                    self.held += 1
                try:
                    # The gateway sends nothing more on this connection before the
                    # answer: readable means closed.
                    readable, _, _ = select.select([sock], [], [], hold)
                    if readable:
                        try:
                            closed = sock.recv(1, socket.MSG_PEEK) == b""
                        except OSError:
                            closed = True
                        if closed:
                            with self.lock:
                                self.closed_while_held += 1
                            return
                finally:
                    with self.lock:
                        self.held -= 1
                try:
                    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                                 b"X-Usage-Tokens: " + str(USAGE).encode() + b"\r\n\r\nheld\n")
                except OSError:
                    return
                with self.lock:
                    self.answered += 1


class ClientAbortTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.upstream = HeldUpstream()
        self.addCleanup(self.upstream.stop)

    def gateway(self, upstream=None, server=None, **route_keys):
        """One route: a concurrency limit of 1 and a token bucket whose cost
        (ESTIMATE) settles from the response's X-Usage-Tokens."""
        limits = {
            "one": {"key": "ip", "algorithm": "concurrency", "capacity": 1, "lease_ms": 60000},
            "tokens": {"key": "ip", "capacity": 100000, "refill_per_second": 0.001},
        }
        routes = [{"name": "held", "match": {"path_prefix": "/"}, "upstream": "held",
                   "limits": ["one", "tokens"], "cost": ESTIMATE,
                   "cost_from_response": {"header": "X-Usage-Tokens"}, **route_keys}]
        config = gateway_config(
            {"held": upstream or [self.upstream.address]}, routes,
            server={"threads": 1, **(server or {})},
            log={"level": "info", "access_log": True},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000},
            limits=limits)
        gw = self.start_sluice(config)
        wait_redis_ready(gw)
        return gw

    def access_line(self, gw, path):
        """The access-log line of the request to `path`, once it is written."""
        needle = f'"path":"{path}"'

        def line():
            return next((text for text in gw.stdout().splitlines()
                         if text.startswith("{") and needle in text), None)

        wait_until(lambda: line() is not None, 5, message=f"{path} in the access log")
        return json.loads(line())

    def served(self, gw):
        return request(gw.port, "GET", "/?hold_ms=0")[0] == 200

    def assert_aborted(self, gw, served=None, cancelled=None):
        """The request to /leaver, whose client just left, was aborted: its
        upstream request cancelled (by default: its connection closed), its
        slot back within a second, logged 499, settled at its estimate
        (nothing of the response came)."""
        left = time.monotonic()
        wait_until(cancelled or (lambda: self.upstream.closed_while_held == 1), 1,
                   message="the upstream request cancelled")
        wait_until(lambda: (served or self.served)(gw), 1,
                   message="a second request served within 1 s of the client leaving")
        self.assertLess(time.monotonic() - left, 1.0)
        self.assertEqual(self.access_line(gw, "/leaver")["status"], 499)
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_settlements_total", route="held",
                                      result="even") >= 1, 2,
                   message="the aborted request settled at its estimate")

    def assert_upstream_finished(self, gw, served=None):
        """The request to /leaver went on upstream after its client left (an
        abort would close its connection there at once), kept its slot until
        answered and settled at the usage the answer gave."""
        wait_until(lambda: self.upstream.answered == 1 or self.upstream.closed_while_held, 5,
                   message="the upstream finished")
        self.assertEqual((self.upstream.answered, self.upstream.closed_while_held), (1, 0))
        self.assertNotEqual(self.access_line(gw, "/leaver")["status"], 499)
        wait_until(lambda: (served or self.served)(gw), 5,
                   message="the slot back once the upstream answered")
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_settlements_total", route="held",
                                      result="refund") >= 1, 5, message="settled at its usage")

    def send_held(self, gw, target="/leaver?hold_ms=5000", extra=b"", held=None):
        s = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
        self.addCleanup(s.close)
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n".encode() + extra + b"\r\n")
        wait_until(held or (lambda: self.upstream.held == 1), 5, message="held upstream")
        return s

    # ---- HTTP/1.1 clients --------------------------------------------------------

    def test_a_client_that_closes_is_noticed_at_once(self):
        gw = self.gateway()
        s = self.send_held(gw)
        self.assertEqual(request(gw.port, "GET", "/?hold_ms=0")[0], 429)  # the one slot
        s.close()  # FIN: nothing unread, no reset
        self.assert_aborted(gw)
        self.assertEqual(metric_sum(gw, "sluice_http_requests_total", route="held", code="499"), 1)

    def test_a_client_that_leaves_during_a_later_request_of_its_connection_is_noticed(self):
        # Two requests answered on the connection first: the wait for the
        # next request is the one the last watch left on the socket. (No
        # concurrency limit: a slot's release may still be on its way to Redis
        # when the next request comes.)
        gw = self.gateway(limits=["tokens"])
        conn = RawConnection(gw.port)
        self.addCleanup(conn.sock.close)
        for n in (1, 2):
            conn.send(f"GET /?hold_ms=0&n={n} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            self.assertEqual(conn.read_response().status, 200)
        conn.send(b"GET /leaver?hold_ms=5000 HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: self.upstream.held == 1, 5, message="held upstream")
        conn.sock.close()
        self.assert_aborted(gw)

    def test_a_client_that_leaves_after_a_delay_route_decided_is_noticed(self):
        # on_limit: delay watches the client while the decision is out; that
        # watch ends with the decision, and the response's own watch follows.
        gw = self.gateway(on_limit="delay", max_delay_ms=1000, limits=["tokens"])
        s = self.send_held(gw)
        s.close()
        self.assert_aborted(gw)

    def test_a_half_close_counts_as_gone(self):
        gw = self.gateway()
        s = self.send_held(gw)
        s.shutdown(socket.SHUT_WR)
        self.assert_aborted(gw)
        # The half-closed client reads the end of the connection, no response.
        s.settimeout(2)
        self.assertEqual(s.recv(100), b"")

    def test_a_tls_client_saying_close_notify_is_gone(self):
        make_ca(self.workdir, "ca")
        cert, key = make_server_cert(self.workdir, "ca", "gw", dns=("gw.test",))
        gw = self.gateway(server={"tls": {"cert_file": cert, "key_file": key}})
        raw = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
        self.addCleanup(raw.close)
        tls = client_context(f"{self.workdir}/ca.crt").wrap_socket(raw, server_hostname="gw.test")
        self.addCleanup(tls.close)
        tls.sendall(b"GET /leaver?hold_ms=5000 HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: self.upstream.held == 1, 5, message="held upstream")
        # close_notify, with the TCP connection left open: unwrap() sends it,
        # then gives up waiting for the gateway's own.
        tls.settimeout(0.2)
        try:
            tls.unwrap()
        except (TimeoutError, ssl.SSLError, OSError):
            pass
        self.assert_aborted(gw, served=lambda gw: metric_sum(gw, "sluice_ratelimit_in_flight") == 0)

    def test_a_pipelined_request_is_kept_and_both_are_answered(self):
        gw = self.gateway()
        conn = RawConnection(gw.port)
        self.addCleanup(conn.sock.close)
        conn.send(b"GET /?hold_ms=300&n=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        wait_until(lambda: self.upstream.held == 1, 5, message="held upstream")
        conn.send(b"GET /?hold_ms=0&n=2 HTTP/1.1\r\nHost: x\r\n\r\n")  # while the first is held
        first = conn.read_response()
        second = conn.read_response()
        self.assertEqual((first.status, second.status), (200, 200))
        wait_until(lambda: self.upstream.answered == 2, 5, message="both answered upstream")
        self.assertEqual(self.upstream.closed_while_held, 0)

    def test_a_request_with_the_next_pipelined_is_answered_after_a_half_close(self):
        # Two requests in one write, then the sending side shut (nc -N): while
        # the first is upstream the second is already in Sluice's buffer, so
        # the client is still there and the first is answered. (The second's
        # own wait then finds a half-closed client with nothing more to say:
        # gone, as nginx takes it.)
        gw = self.gateway()
        conn = RawConnection(gw.port)
        self.addCleanup(conn.sock.close)
        conn.send(b"GET /?hold_ms=300&n=1 HTTP/1.1\r\nHost: x\r\n\r\n"
                  b"GET /?hold_ms=300&n=2 HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.sock.shutdown(socket.SHUT_WR)
        self.assertEqual(conn.read_response().status, 200)
        wait_until(lambda: self.upstream.answered >= 1, 5, message="the first answered upstream")

    def test_a_websocket_handshake_the_upstream_holds_is_closed_on_both_sides(self):
        gw = self.gateway()
        s = self.send_held(gw, extra=b"Upgrade: websocket\r\nConnection: Upgrade\r\n"
                           b"Sec-WebSocket-Version: 13\r\n"
                           b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n")
        s.close()
        self.assert_aborted(gw)

    def test_ignore_client_abort_lets_the_upstream_finish(self):
        gw = self.gateway(ignore_client_abort=True)
        self.send_held(gw, "/leaver?hold_ms=1500").close()
        self.assert_upstream_finished(gw)

    # ---- HTTP/2 clients ----------------------------------------------------------

    def reset_held_stream(self, gw, hold_ms):
        c = H2Client(gw.port)
        self.addCleanup(c.close)
        held = c.send("GET", f"/leaver?hold_ms={hold_ms}")
        wait_until(lambda: self.upstream.held == 1, 5, message="held upstream")
        c.conn.reset_stream(held, error_code=0x8)  # CANCEL
        c.flush()
        return lambda gw: c.request("GET", "/?hold_ms=0").status == 200

    def test_an_http2_client_that_resets_its_stream_takes_the_same_path(self):
        gw = self.gateway(server={"http2": {"enabled": True}})
        self.assert_aborted(gw, served=self.reset_held_stream(gw, 5000))

    def test_ignore_client_abort_lets_the_upstream_finish_an_http2_stream_reset(self):
        gw = self.gateway(server={"http2": {"enabled": True}}, ignore_client_abort=True)
        self.assert_upstream_finished(gw, served=self.reset_held_stream(gw, 1500))

    # ---- HTTP/2 upstream --------------------------------------------------------

    def test_over_an_h2c_upstream_the_stream_is_reset_with_cancel(self):
        h2 = H2Upstream(hold=5.0)
        self.addCleanup(h2.stop)
        gw = self.gateway(upstream={"servers": [h2.address], "protocol": "h2c"})
        self.send_held(gw, "/leaver", held=lambda: h2.held == 1).close()

        def cancelled():
            h2.hold = 0.0  # what follows is answered at once
            return 0x8 in h2.resets  # RST_STREAM CANCEL

        self.assert_aborted(gw, cancelled=cancelled)


    def test_ignore_client_abort_lets_an_h2c_upstream_finish_an_http2_stream_reset(self):
        """Both sides HTTP/2: only the wait for the upstream's answer holds the
        exchange once its client reset the stream. The answer still comes
        (its stream upstream is not reset), is logged, and frees the slot."""
        h2 = H2Upstream(hold=1.5)
        self.addCleanup(h2.stop)
        gw = self.gateway(upstream={"servers": [h2.address], "protocol": "h2c"},
                          server={"http2": {"enabled": True}}, ignore_client_abort=True)
        c = H2Client(gw.port)
        self.addCleanup(c.close)
        held = c.send("GET", "/leaver")
        wait_until(lambda: h2.held == 1, 5, message="held upstream")
        c.conn.reset_stream(held, error_code=0x8)  # CANCEL
        c.flush()
        self.assertEqual(self.access_line(gw, "/leaver")["status"], 200)
        self.assertEqual(h2.resets, [])
        wait_until(lambda: c.request("GET", "/next").status == 200, 5,
                   message="the slot back once the upstream answered")

if __name__ == "__main__":
    unittest.main()
