"""HTTP/2 upstreams (upstreams.NAME.protocol h2c | h2) and gRPC proxying,
through the real sluice binary: a real gRPC server (testkit/grpc_upstream.py,
python3-grpcio, plain and TLS) and a plain python3-h2 server (testkit/h2server.py)
as upstreams; grpcio, nghttp, python3-h2 and http.client as clients; a test CA
made by the openssl CLI for the TLS upstream.
"""

import json
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import unittest

from harness import (ProcessTestCase, closed_port, gateway_config, limit, make_ca,
                     make_server_cert, metric_sum, request, route, wait_until)
from testkit.h2client import H2Client

CURL = shutil.which("curl")


def grpc_frame(message: bytes) -> bytes:
    """A gRPC length-prefixed message (not compressed)."""
    return b"\x00" + len(message).to_bytes(4, "big") + message


class GrpcUpstreamTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        try:
            import grpc  # noqa: F401
        except ImportError:
            self.skipTest("python3-grpcio not installed")
        self.redis = self.start_redis()

    def gateway(self, upstream: dict, routes=None, limits=None, **sections):
        return self.start_http2_sluice({"grpc": upstream},
                                       routes or [route("all", "/", [], upstream="grpc")],
                                       self.redis.port, limits, **sections)

    def channel(self, gw):
        import grpc
        channel = grpc.insecure_channel(f"127.0.0.1:{gw.port}")
        self.addCleanup(channel.close)
        return channel

    def call(self, channel, method, kind="unary_unary"):
        identity = {"request_serializer": None, "response_deserializer": None}
        return getattr(channel, kind)(f"/test.Echo/{method}", **identity)

    # ---- Calls of every kind --------------------------------------------------

    def test_unary_call_with_metadata_both_ways(self):
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        channel = self.channel(gw)
        reply, call = self.call(channel, "Unary").with_call(
            b"hello", metadata=(("x-tenant", "acme"),), timeout=10)
        self.assertEqual(reply, b"hello")
        initial = dict(call.initial_metadata())
        trailing = dict(call.trailing_metadata())
        # Request metadata reached the server, with Sluice's forwarded headers.
        self.assertEqual(initial.get("x-seen-x-tenant"), "acme")
        self.assertEqual(initial.get("x-seen-x-forwarded-for"), "127.0.0.1")
        self.assertIn("x-seen-x-request-id", initial)
        # The server's trailers came back as trailers.
        self.assertEqual(trailing.get("x-usage"), "5")
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="grpc",
                                   outcome="ok"), 1)
        wait_until(lambda: '"status":200' in gw.stdout(), 5, message="the call in the access log")

    def test_streaming_calls(self):
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        channel = self.channel(gw)
        got = list(self.call(channel, "ServerStream", "unary_stream")(b"50", timeout=10))
        self.assertEqual(got, [f"message {i}".encode() for i in range(50)])
        joined = self.call(channel, "ClientStream", "stream_unary")(
            iter([b"a", b"bc", b"def"]), timeout=10)
        self.assertEqual(joined, b"abcdef")

    def test_bidirectional_call_is_relayed_both_ways_at_once(self):
        """Each reply comes back before the next request message is sent: the
        request and response bodies are relayed at the same time."""
        import queue
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        channel = self.channel(gw)
        outbox = queue.Queue()

        def requests():
            while True:
                item = outbox.get(timeout=10)
                if item is None:
                    return
                yield item

        replies = self.call(channel, "Bidi", "stream_stream")(requests(), timeout=20)
        for word in (b"one", b"two", b"three"):
            outbox.put(word)
            self.assertEqual(next(replies), word.upper())
        outbox.put(None)
        self.assertEqual(list(replies), [])

    def test_upstream_status_and_trailers_are_relayed(self):
        import grpc
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        with self.assertRaises(grpc.RpcError) as raised:
            self.call(self.channel(gw), "Fail")(b"", timeout=10)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.NOT_FOUND)
        self.assertEqual(raised.exception.details(), "no such thing")
        self.assertEqual(dict(raised.exception.trailing_metadata()).get("x-why"), "test")

    def test_large_response_streams_through_the_windows(self):
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        size = 3 * 1024 * 1024
        reply = self.call(self.channel(gw), "Big")(str(size).encode(), timeout=20)
        self.assertEqual(len(reply), size)

    def test_many_concurrent_calls_share_one_connection(self):
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        channel = self.channel(gw)
        stub = self.call(channel, "Unary")
        futures = [stub.future(f"call {i}".encode(), timeout=20) for i in range(40)]
        self.assertEqual(sorted(f.result() for f in futures),
                         sorted(f"call {i}".encode() for i in range(40)))
        # One worker, streams multiplexed: a single connection to the server.
        self.assertEqual(metric_sum(gw, "sluice_upstream_connections_total", upstream="grpc"), 1)

    def test_without_idle_connections_each_call_has_its_own(self):
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c",
                           "max_idle_connections": 0})
        stub = self.call(self.channel(gw), "Unary")
        self.assertEqual(stub(b"1", timeout=10), b"1")
        self.assertEqual(stub(b"2", timeout=10), b"2")
        self.assertEqual(metric_sum(gw, "sluice_upstream_connections_total", upstream="grpc"), 2)

    def test_cancelled_calls_leave_the_connection_usable(self):
        """Calls cancelled while their responses stream give what they held of
        the shared connection's flow-control window back: after more than a
        connection window's worth of them, calls still go through the one
        connection."""
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        channel = self.channel(gw)
        chunks = self.call(channel, "Chunks", "unary_stream")
        for _ in range(80):  # 80 x up to 256 KiB held: more than the 16 MiB window
            call = chunks(b"100:65536", timeout=20)
            self.assertEqual(len(next(call)), 65536)
            call.cancel()
        self.assertEqual(self.call(channel, "Big")(b"1000000", timeout=20), b"x" * 1000000)
        self.assertEqual(metric_sum(gw, "sluice_upstream_connections_total", upstream="grpc"), 1)

    def test_client_leaving_a_streaming_call_is_logged(self):
        """A client that cancels a client-streaming call while Sluice waits for its
        next message ends the exchange: logged as 499."""
        import queue
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        outbox = queue.Queue()

        def requests():
            yield b"first"
            outbox.get(timeout=20)

        future = self.call(self.channel(gw), "ClientStream", "stream_unary").future(
            requests(), timeout=20)
        # The call is under way (its stream opened the connection to the
        # server): cancelled while its body is being read.
        wait_until(lambda: metric_sum(gw, "sluice_upstream_connections_total",
                                      upstream="grpc") == 1, 10, message="the call under way")
        future.cancel()
        outbox.put(None)
        wait_until(lambda: '"status":499' in gw.stdout(), 10, message="the 499 in the access log")

    def test_http1_upload_is_not_cut_by_the_body_timeout_while_the_upstream_works(self):
        """An HTTP/1.1 client's request went whole; the HTTP/2 upstream takes
        longer than body_timeout_ms to answer: the wait is the upstream's
        (response_timeout_ms), not the client's."""
        upstream = self.start_grpc_upstream()
        config = gateway_config(
            {"grpc": {"servers": [upstream.address], "protocol": "h2c",
                      "response_timeout_ms": 10000}},
            [route("all", "/", [], upstream="grpc")],
            server={"threads": 1, "body_timeout_ms": 300, "send_timeout_ms": 300})
        gw = self.start_sluice(config)
        status, headers, body = request(
            gw.port, "POST", "/test.Echo/Slow", body=grpc_frame(b"1"),
            headers={"Content-Type": "application/grpc", "TE": "trailers"}, timeout=15)
        self.assertEqual(status, 200)
        self.assertEqual(body, grpc_frame(b"late"))

    def test_a_reload_keeps_the_upstream_connection_and_a_drain_lets_calls_finish(self):
        """A reload that leaves the upstream's protocol and TLS alone keeps its
        HTTP/2 connection; SIGTERM lets a call in flight finish whole."""
        upstream = self.start_grpc_upstream()
        upstreams = {"grpc": {"servers": [upstream.address], "protocol": "h2c"}}
        config = gateway_config(upstreams, [route("all", "/", [], upstream="grpc")],
                                server={"threads": 1, "http2": {"enabled": True}})
        gw = self.start_sluice(config)
        channel = self.channel(gw)
        self.assertEqual(self.call(channel, "Unary")(b"before", timeout=10), b"before")
        config["upstreams"]["grpc"]["response_timeout_ms"] = 20000
        done = gw.metric("sluice_config_reloads_total", result="ok") or 0
        gw.reload(config)
        wait_until(lambda: (gw.metric("sluice_config_reloads_total", result="ok") or 0) > done,
                   10, message="the reload")
        self.assertEqual(self.call(channel, "Unary")(b"after", timeout=10), b"after")
        self.assertEqual(metric_sum(gw, "sluice_upstream_connections_total", upstream="grpc"), 1)
        # A slow call in flight when the drain starts still gets its answer.
        slow = self.call(channel, "Slow").future(b"1", timeout=20)
        wait_until(lambda: "slow call started" in upstream.stdout(), 10,
                   message="the call at the server")
        os.kill(gw.pid, signal.SIGTERM)
        self.assertEqual(slow.result(), b"late")
        self.assertEqual(gw.wait(20), 0)

    # ---- Deadlines and failures -----------------------------------------------

    def test_grpc_timeout_bounds_the_call(self):
        import grpc
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c",
                           "response_timeout_ms": 30000})
        channel = self.channel(gw)
        # The deadline reaches the server. gRPC's client rounds grpc-timeout
        # up when it writes it (once seen: 5,008 ms left of a 5 s call), so a
        # little more than 5 s may arrive; a lost header would read "none".
        _, call = self.call(channel, "Unary").with_call(b"x", timeout=5)
        remaining = int(dict(call.trailing_metadata())["x-deadline-ms"])
        self.assertTrue(0 < remaining <= 5100, remaining)
        # A server slower than the call's deadline: Sluice gives up when it
        # passes, not at response_timeout; the client learns DEADLINE_EXCEEDED.
        started = time.monotonic()
        with self.assertRaises(grpc.RpcError) as raised:
            self.call(channel, "Slow")(b"20", timeout=1)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.DEADLINE_EXCEEDED)
        self.assertLess(time.monotonic() - started, 15)
        # Sluice's own side of it, with a server that never learns the deadline
        # (the route removes grpc-timeout from what goes upstream, so only
        # Sluice can end the call): answered 504 -> grpc-status 4 when it passes.
        deaf = self.gateway({"servers": [upstream.address], "protocol": "h2c",
                             "response_timeout_ms": 30000},
                            routes=[route("all", "/", [], upstream="grpc",
                                          request_headers={"remove": ["grpc-timeout"]})])
        c = H2Client(deaf.port)
        self.addCleanup(c.close)
        started = time.monotonic()
        reply = c.request("POST", "/test.Echo/Slow", body=grpc_frame(b"20"),
                          headers=[("content-type", "application/grpc"), ("te", "trailers"),
                                   ("grpc-timeout", "300m")], timeout=15)
        self.assertLess(time.monotonic() - started, 10)
        self.assertEqual(reply.header("grpc-status"), "4", reply.headers)
        self.assertEqual(reply.header("grpc-message"), "Gateway Timeout", reply.headers)
        self.assertEqual(deaf.metric("sluice_upstream_requests_total", upstream="grpc",
                                     outcome="timeout"), 1)

    def test_a_server_that_stops_answering_loses_its_connection(self):
        """A stream that gets no answer in time makes Sluice PING the server; a
        server that answers nothing (not even the PING) loses the connection, so
        that the next request opens a new one rather than waiting on it."""
        from testkit.h2server import H2Upstream
        mute = H2Upstream(mute=True)
        self.addCleanup(mute.stop)
        gw = self.gateway({"servers": [mute.address], "protocol": "h2c",
                           "response_timeout_ms": 300, "connect_timeout_ms": 300})
        status, _, _ = request(gw.port, "GET", "/first", timeout=10)
        self.assertEqual(status, 504)
        wait_until(lambda: "no answer to a PING" in gw.stderr() + gw.stdout(), 10,
                   message="the connection closed for its unanswered PING")
        status, _, _ = request(gw.port, "GET", "/second", timeout=10)
        self.assertEqual(status, 504)
        self.assertEqual(metric_sum(gw, "sluice_upstream_connections_total", upstream="grpc"), 2)
        self.assertEqual(mute.connections, 2)

    def test_dead_upstream_is_unavailable(self):
        import grpc
        gw = self.gateway({"servers": [f"127.0.0.1:{closed_port()}"], "protocol": "h2c"})
        with self.assertRaises(grpc.RpcError) as raised:
            self.call(self.channel(gw), "Unary")(b"x", timeout=10)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="grpc",
                                   outcome="connect_error"), 1)

    def test_upstream_restart_is_survived(self):
        """The server goes away (its connection with it) and comes back on the
        same port: the next call opens a new connection."""
        import grpc
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c",
                           "fail_cooldown_ms": 1})
        channel = self.channel(gw)
        self.assertEqual(self.call(channel, "Unary")(b"a", timeout=10), b"a")
        port = upstream.port
        upstream.stop()
        with self.assertRaises(grpc.RpcError):
            self.call(channel, "Unary")(b"b", timeout=10)
        again = self.start_grpc_upstream_on(port)
        self.assertTrue(again.alive())
        wait_until(lambda: self.try_call(channel) == b"c", 10, message="a call through again")

    def start_grpc_upstream_on(self, port):
        from testkit.processes import GrpcUpstream
        from harness import wait_until as wait

        def started():
            try:
                return self._own(GrpcUpstream(self.workdir, name=f"grpc-{port}", port=port))
            except AssertionError:
                return None
        return wait(started, 10, message="the gRPC server back on its port")

    def try_call(self, channel):
        import grpc
        try:
            return self.call(channel, "Unary")(b"c", timeout=5)
        except grpc.RpcError:
            return None

    # ---- Limits ------------------------------------------------------------------

    def test_limited_call_is_resource_exhausted_and_never_reaches_the_server(self):
        import grpc
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"},
                          routes=[route("echo", "/test.Echo/", ["per_ip"], upstream="grpc")],
                          limits={"per_ip": limit("ip", 2)})
        stub = self.call(self.channel(gw), "Unary")
        self.assertEqual(stub(b"1", timeout=10), b"1")
        self.assertEqual(stub(b"2", timeout=10), b"2")
        with self.assertRaises(grpc.RpcError) as raised:
            stub(b"3", timeout=10)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="grpc",
                                   outcome="ok"), 2)

    def test_cost_is_settled_from_a_response_trailer(self):
        """cost_from_response reads its header from the trailers too (an LLM
        gateway's usage comes at the end of the stream)."""
        upstream = self.start_grpc_upstream()
        routes = [{**route("echo", "/test.Echo/", ["tokens"], upstream="grpc"), "cost": 100,
                   "cost_from_response": {"header": "x-usage"}}]
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"}, routes=routes,
                          limits={"tokens": limit("ip", 1000)})
        stub = self.call(self.channel(gw), "Unary")
        stub(b"x" * 30, timeout=10)  # estimated 100, used 30 (x-usage, a trailer)
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_settlements_total",
                                      result="refund") == 1, 5, message="the refund")
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_settled_units_total",
                                    direction="refund"), 70)

    # ---- HTTP/1.1 clients and other clients -------------------------------------

    def test_http1_client_to_an_h2c_upstream(self):
        upstream = self.start_grpc_upstream()
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        # Not a gRPC call: the gRPC server answers it with its own refusal,
        # relayed as an HTTP/1.1 response.
        status, headers, _ = request(gw.port, "GET", "/test.Echo/Unary")
        self.assertNotEqual(status, 502)
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="grpc",
                                   outcome="ok"), 1)

    def test_trailers_both_ways_with_a_plain_h2_upstream(self):
        """An HTTP/2 client's request trailers reach the upstream; the upstream's
        response trailers reach an HTTP/2 client; an HTTP/1.1 client gets the
        body without them."""
        from testkit.h2server import H2Upstream
        upstream = H2Upstream()
        self.addCleanup(upstream.stop)
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        c = H2Client(gw.port)
        self.addCleanup(c.close)
        sid = c.send("POST", "/with-trailers", headers=[("content-type", "text/plain")],
                     body=b"abc" * 1000, end=False)
        c.conn.send_headers(sid, [("x-client-trailer", "sent")], end_stream=True)
        c.flush()
        reply = c.run_until_done([sid])[sid]
        self.assertEqual(reply.status, 200)
        seen = json.loads(bytes(reply.body))
        self.assertEqual(seen["body_bytes"], 3000)
        self.assertEqual(seen["trailers"], [["x-client-trailer", "sent"]])
        self.assertEqual(reply.trailers, [("x-upstream-trailer", "done")])
        # HTTP/1.1: the head and body only, the request's fields in HTTP/2 terms.
        status, headers, body = request(gw.port, "GET", "/plain", headers={"X-Tenant": "acme"})
        self.assertEqual(status, 200)
        seen = dict((name, value) for name, value in json.loads(body)["headers"])
        self.assertEqual(seen[":method"], "GET")
        self.assertEqual(seen[":path"], "/plain")
        self.assertEqual(seen["x-tenant"], "acme")
        self.assertNotIn("connection", seen)
        self.assertIsNone(headers.get("x-upstream-trailer"))
        self.assertEqual(upstream.connections, 1)

    def test_headers_meant_for_sluice_reach_no_h2_upstream_in_head_or_trailers(self):
        """The route's cost_header and cost_from_response header, which only
        Sluice reads, are left out of the head and of an HTTP/2 client's
        request trailers; the other trailers go on."""
        from testkit.h2server import H2Upstream
        upstream = H2Upstream()
        self.addCleanup(upstream.stop)
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"},
                          routes=[route("all", "/", ["per_ip"], upstream="grpc",
                                        cost_header="X-Cost",
                                        cost_from_response={"header": "X-Usage-Tokens"})],
                          limits={"per_ip": limit("ip", 1000)})
        c = H2Client(gw.port)
        self.addCleanup(c.close)
        sid = c.send("POST", "/with-trailers",
                     headers=[("content-type", "text/plain"), ("x-usage-tokens", "0"),
                              ("x-cost", "2")],
                     body=b"abc", end=False)
        c.conn.send_headers(sid, [("x-usage-tokens", "0"), ("x-cost", "1"),
                                  ("x-client-trailer", "sent")], end_stream=True)
        c.flush()
        reply = c.run_until_done([sid])[sid]
        self.assertEqual(reply.status, 200)
        seen = json.loads(bytes(reply.body))
        names = [name for name, _ in seen["headers"]]
        self.assertNotIn("x-usage-tokens", names)
        self.assertNotIn("x-cost", names)
        self.assertEqual(seen["trailers"], [["x-client-trailer", "sent"]])

    def test_expect_100_continue_from_an_http11_client(self):
        """An HTTP/1.1 client that waits for 100 Continue gets it once the
        upstream connection is ready, then its body goes; one that leaves
        instead is logged and the gateway goes on serving."""
        from testkit.h2server import H2Upstream
        upstream = H2Upstream()
        self.addCleanup(upstream.stop)
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"},
                          log={"level": "info", "access_log": True})
        head = (b"POST /continue HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"
                b"Expect: 100-continue\r\nConnection: close\r\n\r\n")
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as c:
            c.sendall(head)
            self.assertTrue(c.recv(65536).startswith(b"HTTP/1.1 100 Continue\r\n"))
            c.sendall(b"hello")
            reply = b""
            while chunk := c.recv(65536):
                reply += chunk
        self.assertTrue(reply.startswith(b"HTTP/1.1 200 "), reply[:100])
        self.assertIn(b'"body_bytes": 5', reply)
        # A client that leaves before its body: its exchange still ends.
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as c:
            c.sendall(head.replace(b"/continue", b"/gone"))
        wait_until(lambda: '"path":"/gone"' in gw.stdout(), 10, message="the exchange logged")
        self.assertEqual(request(gw.port, "GET", "/after")[0], 200)

    def test_slow_clients_do_not_stop_the_other_streams_of_their_connection(self):
        """An HTTP/2 client that asks for 40 responses and reads none leaves each
        of their upstream streams holding a stream window (256 KiB) in Sluice,
        10 MiB in all; a 24 MiB response on the same upstream connection still
        comes whole, which needs the connection's 16 MiB window given back while
        they hold theirs."""
        from testkit.h2server import H2Upstream
        size = 24 * 1024 * 1024
        upstream = H2Upstream(body_bytes=size)
        self.addCleanup(upstream.stop)
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c",
                           "response_timeout_ms": 30000})
        reader = H2Client(gw.port)  # its windows (64 KiB) are never given back
        self.addCleanup(reader.close)
        for i in range(40):
            reader.send("GET", f"/slow/{i}")
        reader.flush()
        wait_until(lambda: upstream.sent_body_bytes >= 40 * 256 * 1024, 20,
                   message="the slow streams' windows filled")
        status, _, body = request(gw.port, "GET", "/fast", timeout=20)
        self.assertEqual((status, len(body)), (200, size))
        self.assertEqual(upstream.connections, 1)

    @unittest.skipUnless(shutil.which("nghttp"), "nghttp (nghttp2-client) is not installed")
    def test_nghttp_through_to_a_plain_h2_upstream(self):
        """nghttp (prior knowledge) posts a body through Sluice to an HTTP/2
        upstream and sees the upstream's trailers at the end of the stream."""
        from testkit.h2server import H2Upstream
        upstream = H2Upstream()
        self.addCleanup(upstream.stop)
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2c"})
        body = os.path.join(self.workdir, "body.bin")
        with open(body, "wb") as f:
            f.write(b"n" * 100000)
        out = subprocess.run(["nghttp", "-v", "-d", body, f"http://127.0.0.1:{gw.port}/nghttp"],
                             capture_output=True, text=True, timeout=30).stdout
        self.assertIn(":status: 200", out)
        self.assertIn("x-upstream-trailer: done", out)
        self.assertIn('"body_bytes": 100000', out)

    # ---- Health checks ---------------------------------------------------------------

    def test_health_checks_speak_http2(self):
        upstream = self.start_grpc_upstream()
        dead = f"127.0.0.1:{closed_port()}"
        gw = self.gateway({"servers": [upstream.address, dead], "protocol": "h2c",
                           "health_check": {"path": "/test.Echo/Unary", "interval_ms": 200,
                                            "timeout_ms": 150, "healthy_threshold": 1,
                                            "unhealthy_threshold": 1,
                                            "expected_status": [200]}})
        wait_until(lambda: gw.metric("sluice_upstream_healthy", upstream="grpc",
                                     server=dead) == 0, 10, message="the dead server unhealthy")
        self.assertEqual(gw.metric("sluice_upstream_healthy", upstream="grpc",
                                   server=upstream.address), 1)


class TlsGrpcUpstreamTest(ProcessTestCase):
    """protocol h2: TLS with ALPN h2, verified against a test CA."""

    def setUp(self):
        super().setUp()
        try:
            import grpc  # noqa: F401
        except ImportError:
            self.skipTest("python3-grpcio not installed")
        self.ca = make_ca(self.workdir, "ca")
        self.cert, self.key = make_server_cert(self.workdir, "ca", "upstream",
                                               dns=("greeter.internal",))

    def gateway(self, upstream):
        config = gateway_config(
            {"grpc": upstream}, [route("all", "/", [], upstream="grpc")],
            server={"threads": 1, "http2": {"enabled": True}})
        return self.start_sluice(config)

    def test_h2_upstream_verified_by_name(self):
        import grpc
        upstream = self.start_grpc_upstream(tls=(self.cert, self.key))
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2",
                           "tls": {"ca_file": self.ca,
                                   "server_name": "greeter.internal"}})
        channel = grpc.insecure_channel(f"127.0.0.1:{gw.port}")
        self.addCleanup(channel.close)
        stub = channel.unary_unary("/test.Echo/Unary")
        self.assertEqual(stub(b"secure", timeout=10), b"secure")

    def test_a_reload_that_changes_tls_retires_the_old_connection(self):
        """With max_connections 1, a reload that changes the upstream's TLS
        settings while a call is in flight: the old connection takes no new
        call and closes once that call is done, so the next call gets the slot
        (it used to stay open, idle, for a minute, holding the slot)."""
        upstream = self.start_grpc_upstream(tls=(self.cert, self.key))
        tls = {"ca_file": self.ca, "server_name": "greeter.internal"}
        config = gateway_config(
            {"grpc": {"servers": [upstream.address], "protocol": "h2", "tls": tls,
                      "max_connections": 1, "connect_timeout_ms": 5000}},
            [route("all", "/", [], upstream="grpc")],
            server={"threads": 1, "http2": {"enabled": True}})
        gw = self.start_sluice(config)
        import grpc
        channel = grpc.insecure_channel(f"127.0.0.1:{gw.port}")
        self.addCleanup(channel.close)
        slow = channel.unary_unary("/test.Echo/Slow").future(b"1", timeout=20)
        wait_until(lambda: "slow call started" in upstream.stdout(), 10,
                   message="the call at the server")
        copy = os.path.join(self.workdir, "ca-copy.crt")
        shutil.copyfile(self.ca, copy)
        config["upstreams"]["grpc"]["tls"] = {**tls, "ca_file": copy}
        done = gw.metric("sluice_config_reloads_total", result="ok") or 0
        gw.reload(config)
        wait_until(lambda: (gw.metric("sluice_config_reloads_total", result="ok") or 0) > done,
                   10, message="the reload")
        # A call now finds the old connection retired and its slot held: it
        # waits for the slot, which comes back when the slow call is done.
        after = channel.unary_unary("/test.Echo/Unary").future(b"after", timeout=10)
        self.assertEqual(slow.result(), b"late")
        self.assertEqual(after.result(), b"after")
        self.assertEqual(metric_sum(gw, "sluice_upstream_connections_total", upstream="grpc"), 2)

    def test_h2_upstream_with_a_wrong_name_is_a_tls_error(self):
        import grpc
        upstream = self.start_grpc_upstream(tls=(self.cert, self.key))
        gw = self.gateway({"servers": [upstream.address], "protocol": "h2",
                           "tls": {"ca_file": self.ca,
                                   "server_name": "someone.else"}})
        self.assert_tls_error(gw, "certificate verify failed")

    def assert_tls_error(self, gw, reason):
        """A call through `gw` is UNAVAILABLE, counted as a tls_error and logged with `reason`."""
        import grpc
        channel = grpc.insecure_channel(f"127.0.0.1:{gw.port}")
        self.addCleanup(channel.close)
        with self.assertRaises(grpc.RpcError) as raised:
            channel.unary_unary("/test.Echo/Unary")(b"x", timeout=10)
        self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="grpc",
                                   outcome="tls_error"), 1)
        wait_until(lambda: reason in gw.stderr() + gw.stdout(), 5, message="the reason logged")

    def test_mutual_tls_accepted_and_refused(self):
        import grpc
        from test_upstream_tls import make_client_cert
        make_ca(self.workdir, "clients")
        client_cert, client_key = make_client_cert(self.workdir, "clients", "sluice")
        upstream = self.start_grpc_upstream(
            tls=(self.cert, self.key, os.path.join(self.workdir, "clients.crt")))
        tls = {"ca_file": self.ca, "server_name": "greeter.internal"}
        with_cert = self.gateway({"servers": [upstream.address], "protocol": "h2",
                                  "tls": {**tls, "certificate_file": client_cert,
                                          "key_file": client_key}})
        without = self.gateway({"servers": [upstream.address], "protocol": "h2", "tls": tls})
        for gw, accepted in ((with_cert, True), (without, False)):
            channel = grpc.insecure_channel(f"127.0.0.1:{gw.port}")
            self.addCleanup(channel.close)
            stub = channel.unary_unary("/test.Echo/Unary")
            if accepted:
                self.assertEqual(stub(b"mtls", timeout=10), b"mtls")
            else:
                with self.assertRaises(grpc.RpcError) as raised:
                    stub(b"mtls", timeout=10)
                self.assertEqual(raised.exception.code(), grpc.StatusCode.UNAVAILABLE)
                # (grpc's server closes the connection without a TLS alert: to
                # Sluice that is a connection that broke, not a TLS failure.)

    def test_server_without_h2_alpn_is_a_tls_error(self):
        """A TLS server that speaks only HTTP/1.1 (no h2 by ALPN) is refused at
        the handshake rather than sent HTTP/2 it cannot read."""
        import grpc
        import socket
        import ssl
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        context.set_alpn_protocols(["http/1.1"])
        listener = socket.create_server(("127.0.0.1", 0))
        self.addCleanup(listener.close)
        stop = threading.Event()

        def serve():
            listener.settimeout(0.2)
            while not stop.is_set():
                try:
                    conn, _ = listener.accept()
                except OSError:
                    continue
                try:
                    with context.wrap_socket(conn, server_side=True) as tls_conn:
                        tls_conn.settimeout(2)
                        tls_conn.recv(1024)
                except (OSError, ssl.SSLError):
                    pass
        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        self.addCleanup(thread.join, 5)
        self.addCleanup(stop.set)
        port = listener.getsockname()[1]
        gw = self.gateway({"servers": [f"127.0.0.1:{port}"], "protocol": "h2",
                           "tls": {"ca_file": self.ca, "server_name": "greeter.internal"}})
        self.assert_tls_error(gw, "did not choose h2")


if __name__ == "__main__":
    unittest.main()
