"""HTTP/2 from clients (server.http2), through the real sluice binary, a real
redis-server and sluice-echo as the HTTP/1.1 upstream.

Clients: curl (--http2-prior-knowledge, --http2 over TLS), python3-h2 (many
streams on one connection, and raw frames for the attacks), grpcio (a gRPC
client, for Sluice's own gRPC replies) and h2load.
"""

import json
import os
import shutil
import signal
import ssl
import subprocess
import threading
import time
import unittest

import hyperframe.frame as frames

from harness import (SANITIZED, ProcessTestCase, PythonUpstream, closed_port, gateway_config,
                     limit, make_ca, make_server_cert, metric_sum, pattern_sha256, request,
                     route, rss_kib, wait_until)
from testkit.h2client import H2Client, H2Response, RawH2

CURL = shutil.which("curl")
H2LOAD = shutil.which("h2load")

ENHANCE_YOUR_CALM = 0xB
PROTOCOL_ERROR = 0x1
INTERNAL_ERROR = 0x2
FLOW_CONTROL_ERROR = 0x3
REFUSED_STREAM = 0x7
STREAM_CLOSED = 0x5


def curl(*args, timeout=20) -> subprocess.CompletedProcess:
    return subprocess.run([CURL, "-sS", *args], capture_output=True, timeout=timeout)


class Http2Test(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()

    def gateway(self, routes=None, limits=None, server=None, upstreams=None, **sections):
        return self.start_http2_sluice(upstreams or {"echo": [self.echo.address]},
                                       routes or [route("all", "/", [])], self.redis.port,
                                       limits, server, **sections)

    def goaways(self, gw, reason) -> float:
        return metric_sum(gw, "sluice_http2_goaways_total", reason=reason)

    def assert_goaway_ends_only_it(self, gw, raw, code, reason):
        """The connection got a GOAWAY with `code`, counted as `reason`, and
        other clients are still served."""
        goaway = raw.goaway()
        self.assertIsNotNone(goaway)
        self.assertEqual(goaway.error_code, code)
        raw.close()
        wait_until(lambda: self.goaways(gw, reason) >= 1, 5, message="the GOAWAY counted")
        self.assert_still_serves(gw)

    def assert_still_serves(self, gw):
        c = H2Client(gw.port)
        try:
            self.assertEqual(c.request("GET", "/still").status, 200)
        finally:
            c.close()

    # ---- Requests ------------------------------------------------------------

    @unittest.skipUnless(CURL, "curl is not installed")
    def test_h2c_with_prior_knowledge_is_proxied_routed_and_logged(self):
        gw = self.gateway()
        out = curl("--http2-prior-knowledge", "-w", "\n%{http_version}",
                   "-H", "Cookie: a=1", "-H", "Cookie: b=2",
                   f"http://127.0.0.1:{gw.port}/hello?x=1")
        body, version = out.stdout.rsplit(b"\n", 1)
        self.assertEqual(version, b"2", out.stderr)
        doc = json.loads(body)
        self.assertEqual(doc["method"], "GET")
        self.assertEqual(doc["target"], "/hello?x=1")
        self.assertEqual(doc["version"], "1.1")  # HTTP/1.1 to the upstream
        headers = {n.lower(): v for n, v in doc["headers"]}
        self.assertEqual(headers["host"], f"127.0.0.1:{gw.port}")  # from :authority
        self.assertEqual(headers["x-forwarded-proto"], "http")
        self.assertEqual(headers["cookie"], "a=1; b=2")  # crumbs joined again
        wait_until(lambda: '"path":"/hello"' in gw.stdout(), 5, message="the access log line")
        line = next(l for l in gw.stdout().splitlines() if '"path":"/hello"' in l)
        self.assertEqual(json.loads(line)["protocol"], "HTTP/2")
        # HTTP/1.1 on the same listener still works.
        self.assertEqual(request(gw.port, "GET", "/h1")[0], 200)
        wait_until(lambda: '"path":"/h1"' in gw.stdout(), 5, message="the HTTP/1.1 line")
        line = next(l for l in gw.stdout().splitlines() if '"path":"/h1"' in l)
        self.assertEqual(json.loads(line)["protocol"], "HTTP/1.1")

    def test_streams_of_one_connection_are_limited_independently(self):
        gw = self.gateway(routes=[route("lim", "/lim", ["per_ip"])],
                          limits={"per_ip": limit("ip", 3)})
        c = H2Client(gw.port)
        sids = [c.send("GET", f"/lim/{i}") for i in range(6)]
        answers = c.run_until_done(sids)
        statuses = sorted(r.status for r in answers.values())
        self.assertEqual(statuses, [200, 200, 200, 429, 429, 429])
        limited = [r for r in answers.values() if r.status == 429][0]
        self.assertIsNotNone(limited.header("retry-after"))
        self.assertEqual(limited.header("x-ratelimit-limit"), "3")
        self.assertIsNotNone(limited.header("ratelimit-policy"))
        allowed = [r for r in answers.values() if r.status == 200][0]
        self.assertIsNotNone(allowed.header("x-ratelimit-remaining"))
        c.close()

    def test_bodies_stream_both_ways_with_bounded_memory(self):
        gw = self.gateway(server={"max_body_bytes": 64 * 1024 * 1024})
        c = H2Client(gw.port, timeout=60)
        body = os.urandom(3 * 1024 * 1024)
        import hashlib
        digest = hashlib.sha256(body).hexdigest()
        # With a content-length, and without one (chunked to the upstream).
        for headers in ([("content-length", str(len(body)))], []):
            r = c.request("POST", "/upload", headers=headers, body=body, timeout=60)
            self.assertEqual(r.status, 200)
            doc = json.loads(r.body)
            self.assertEqual((doc["body_length"], doc["body_sha256"]), (len(body), digest))
        size = 64 * 1024 * 1024
        for query in ("", "?chunked=1"):
            r = c.request("GET", f"/__download/{size}{query}", timeout=120)
            self.assertEqual(r.status, 200)
            self.assertEqual(len(r.body), size)
            import hashlib as h
            self.assertEqual(h.sha256(r.body).hexdigest(), pattern_sha256(size))
        c.close()
        if not SANITIZED:
            self.assertLess(rss_kib(gw.pid), 48 * 1024)  # a 64 MiB body never held

    def test_upstream_connections_are_pooled_across_streams(self):
        gw = self.gateway()
        c = H2Client(gw.port)
        for path in ("/a", "/b", "/__status/204", "/c"):
            self.assertIn(c.request("GET", path).status, (200, 204))
        self.assertEqual(c.request("HEAD", "/d").status, 200)
        c.close()
        # One worker, one stream at a time: one upstream connection served them all.
        self.assertEqual(metric_sum(gw, "sluice_upstream_connections_total"), 1)
        self.assertEqual(metric_sum(gw, "sluice_upstream_requests_total", outcome="ok"), 5)
        wait_until(lambda: gw.stdout().count('"status":204') == 1, 5, message="the 204 logged")

    def test_bodies_nobody_reads_yet_do_not_stall_the_other_uploads(self):
        """16 streams whose bodies wait unread (their upstream's one connection
        is busy) fill their 64 KiB windows, 1 MiB in all; an upload of 1 MiB
        on another stream of the same connection still goes through."""
        busy = self.start_echo("busy")
        gw = self.gateway(
            routes=[route("wait", "/__slow", [], upstream="busy"), route("go", "/go", [])],
            upstreams={"echo": [self.echo.address],
                       "busy": {"servers": [busy.address], "max_connections": 1,
                                "connect_timeout_ms": 20000}})
        held = threading.Thread(target=lambda: request(gw.port, "GET", "/__slow/5000",
                                                       timeout=30))
        held.start()
        self.addCleanup(held.join)
        wait_until(lambda: busy.stats()["slow_peak"] >= 1, 10, message="the busy upstream held")
        c = H2Client(gw.port, timeout=20)
        self.addCleanup(c.close)
        for i in range(16):
            sid = c.send("POST", f"/__slow/{i}", end=False)
            c.send_body(sid, b"w" * 65535, end=False)  # its whole stream window
        reply = c.request("POST", "/go/upload", body=b"u" * (1024 * 1024), timeout=20)
        self.assertEqual(reply.status, 200)
        self.assertEqual(json.loads(bytes(reply.body))["body_length"], 1024 * 1024)

    def test_a_body_ended_by_an_empty_frame_reaches_the_upstream_whole(self):
        gw = self.gateway()
        c = H2Client(gw.port)
        body = b"x" * 100_000
        sid = c.send("POST", "/chunked", body=body, end=False)  # no content-length: chunked
        time.sleep(0.05)  # the last DATA on its way upstream before END_STREAM comes
        c.conn.end_stream(sid)
        c.flush()
        r = c.run_until_done([sid])[sid]
        self.assertEqual(r.status, 200)
        self.assertEqual(json.loads(r.body)["body_length"], len(body))
        c.close()

    def test_an_unfinished_header_block_ends_the_connection_after_header_timeout(self):
        gw = self.gateway(server={"header_timeout_ms": 300})
        raw = RawH2(gw.port)
        first = frames.HeadersFrame(1)
        first.data = raw.headers_block("/never-ends")  # no END_HEADERS, nothing after
        raw.send(first)
        goaway = raw.goaway()
        self.assertIsNotNone(goaway)
        raw.close()
        wait_until(lambda: self.goaways(gw, "header_timeout") >= 1, 5, message="counted")

    def test_idle_timeout_counts_from_the_last_stream(self):
        """A connection idle for idle_timeout gets a GOAWAY; one whose client
        sends a request now and then is kept, however long, and the timeout
        counts from its last stream's end."""
        gw = self.gateway(server={"idle_timeout_ms": 400})
        c = H2Client(gw.port, timeout=10)
        self.addCleanup(c.close)
        started = time.monotonic()
        while True:  # 2.5 timeouts, never idle for one
            self.assertEqual(c.request("GET", "/busy").status, 200)
            last = time.monotonic()
            if last - started >= 1.0:
                break
            time.sleep(0.15)
        self.assertIsNone(c.goaway)
        goaway = c.wait_goaway(timeout=5)
        self.assertIsNotNone(goaway)
        self.assertGreaterEqual(time.monotonic() - last, 0.35)

    def test_a_body_over_max_body_bytes_is_never_forwarded_cut_short(self):
        """A body without a length that passes server.max_body_bytes in the
        same read as its END_STREAM (the part under the limit already handed
        to the upstream) is refused: the upstream never gets it ended short."""
        gw = self.gateway(server={"max_body_bytes": 100})
        c = H2Client(gw.port, timeout=10)
        self.addCleanup(c.close)
        for i in range(5):
            sid = c.conn.get_next_available_stream_id()
            c.conn.send_headers(sid, [(":method", "POST"), (":path", f"/over{i}"),
                                      (":scheme", "http"), (":authority", "127.0.0.1")])
            c.responses[sid] = H2Response()
            c.flush()  # the head first: the exchange may start reading the body
            c.conn.send_data(sid, b"a" * 80)
            c.conn.send_data(sid, b"b" * 80, end_stream=True)
            c.flush()  # both pieces and the end in one write
            reply = c.run_until_done([sid], timeout=10)[sid]
            self.assertNotEqual(reply.status, 200, "the upstream answered a body cut short")

    def test_a_stream_reset_while_waiting_for_an_upstream_connection_is_logged(self):
        config_upstream = {"servers": [self.echo.address], "max_connections": 1,
                           "connect_timeout_ms": 5000}
        gw = self.gateway(upstreams={"echo": config_upstream})
        c = H2Client(gw.port)
        slow = c.send("GET", "/__slow/1500")
        waiting = c.send("GET", "/waits")
        time.sleep(0.3)  # both streams in: the second waits for the one connection
        c.conn.reset_stream(waiting, error_code=0x8)
        c.flush()
        self.assertEqual(c.run_until_done([slow], timeout=10)[slow].status, 200)
        wait_until(lambda: '"path":"/waits"' in gw.stdout(), 5, message="the reset stream logged")
        line = next(l for l in gw.stdout().splitlines() if '"path":"/waits"' in l)
        self.assertIn('"status":499', line)
        c.close()

    def test_late_trailers_after_a_reset_stream_are_ignored(self):
        gw = self.gateway(routes=[route("app", "/app", [])])
        raw = RawH2(gw.port)
        head = frames.HeadersFrame(1)
        head.data = raw.encoder.encode([(":method", "POST"), (":path", "/no-route"),
                                        (":scheme", "http"), (":authority", "127.0.0.1")])
        head.flags.add("END_HEADERS")
        data = frames.DataFrame(1, data=b"partial")
        raw.send(head, data)
        # Answered (404) while the body was still coming, then reset with NO_ERROR.
        got = raw.read_frames(lambda f: isinstance(f, frames.RstStreamFrame), 5)
        self.assertTrue(any(isinstance(f, frames.RstStreamFrame) and f.error_code == 0
                            for f in got), got)
        # The client, not yet aware, ends its request with trailers.
        trailers = frames.HeadersFrame(1)
        trailers.data = raw.encoder.encode([("x-trailer", "1")])
        trailers.flags.add("END_HEADERS")
        trailers.flags.add("END_STREAM")
        raw.send(trailers, raw.request_frame(3, "/app/after"))
        got = raw.read_frames(lambda f: isinstance(f, frames.DataFrame) and f.stream_id == 3
                              and "END_STREAM" in f.flags, 5)
        self.assertFalse([f for f in got if isinstance(f, frames.GoAwayFrame)], got)
        self.assertTrue(any(isinstance(f, frames.DataFrame) and f.stream_id == 3 for f in got))
        raw.close()

    def test_a_reset_stream_gives_its_concurrency_slot_back_at_once(self):
        gw = self.gateway(routes=[route("one", "/", ["inflight"])],
                          limits={"inflight": {"key": "ip", "algorithm": "concurrency",
                                               "capacity": 1, "lease_ms": 60000}})
        c = H2Client(gw.port)
        held = c.send("GET", "/__slow/5000")
        wait_until(lambda: json.loads(request(self.echo.port, "GET", "/__stats")[2])
                   ["slow_peak"] >= 1, 5, message="the first request at the upstream")
        self.assertEqual(c.request("GET", "/second").status, 429)  # the one slot is taken
        c.conn.reset_stream(held, error_code=0x8)  # CANCEL, as a gRPC client would
        c.flush()
        # Given back when the stream ended, not when the lease (60 s) runs out.
        wait_until(lambda: c.request("GET", "/third").status == 200, 5,
                   message="the slot given back")
        wait_until(lambda: '"path":"/__slow/5000"' in gw.stdout(), 5, message="the reset logged")
        line = next(l for l in gw.stdout().splitlines() if '"path":"/__slow/5000"' in l)
        self.assertIn('"status":499', line)
        c.close()

    def test_a_stream_reset_while_its_limit_decision_is_delayed_sends_nothing_upstream(self):
        gw = self.gateway(routes=[route("slow", "/", ["tight"], on_limit="delay",
                                        max_delay_ms=3000)],
                          limits={"tight": limit("ip", 1, rate=1)})
        c = H2Client(gw.port)
        self.assertEqual(c.request("GET", "/first").status, 200)
        before = json.loads(request(self.echo.port, "GET", "/__stats")[2])["requests"]
        waiting = c.send("GET", "/delayed")  # no token: it waits up to a second for one
        time.sleep(0.2)
        c.conn.reset_stream(waiting, error_code=0x8)
        c.flush()
        time.sleep(1.5)  # past the time the token would have come
        after = json.loads(request(self.echo.port, "GET", "/__stats")[2])["requests"]
        self.assertEqual(after, before + 1)  # only the /__stats request itself
        self.assertEqual(c.request("GET", "/still").status, 200)
        c.close()

    def test_expect_100_continue_is_answered_before_the_body(self):
        gw = self.gateway()
        c = H2Client(gw.port)
        sid = c.send("POST", "/continue", headers=[("content-length", "5"),
                                                   ("expect", "100-continue")], end=False)
        deadline = time.monotonic() + 10
        while not c.responses[sid].informational and time.monotonic() < deadline:
            self.assertTrue(c.pump())
        self.assertEqual(c.responses[sid].informational, [100])
        c.send_body(sid, b"hello")
        r = c.run_until_done([sid])[sid]
        self.assertEqual(r.status, 200)
        doc = json.loads(r.body)
        self.assertEqual(doc["body_length"], 5)
        self.assertNotIn("expect", {n.lower() for n, _ in doc["headers"]})
        c.close()

    def test_a_stalled_request_body_gets_408(self):
        gw = self.gateway(server={"body_timeout_ms": 300})
        c = H2Client(gw.port)
        sid = c.send("POST", "/slow-body", headers=[("content-length", "10")], body=b"abc",
                     end=False)
        r = c.run_until_done([sid])[sid]
        self.assertEqual(r.status, 408)
        self.assert_still_serves(gw)

    def test_streams_of_one_connection_each_time_out_at_their_own_deadline(self):
        """Two stalled bodies on one connection, 0.3 s apart, each get 408 once
        body_timeout has passed for that stream (the connection's streams
        share one timer); a stream that keeps sending in time is not cut."""
        gw = self.gateway(server={"body_timeout_ms": 600})
        c = H2Client(gw.port)
        self.addCleanup(c.close)
        started = {}
        started["a"] = time.monotonic()
        a = c.send("POST", "/a", headers=[("content-length", "10")], body=b"abc", end=False)
        live = c.send("POST", "/live", headers=[("content-length", "8")], body=b"x", end=False)
        c.pump_for(0.3)
        started["b"] = time.monotonic()
        b = c.send("POST", "/b", headers=[("content-length", "10")], body=b"abc", end=False)
        for _ in range(6):  # a byte every 0.25 s: within body_timeout, past both deadlines
            c.pump_for(0.25)
            c.send_body(live, b"x", end=False)
        c.send_body(live, b"x", end=True)
        done = c.run_until_done([a, b, live])
        self.assertEqual((done[a].status, done[b].status, done[live].status), (408, 408, 200))
        self.assertEqual(json.loads(done[live].body)["body_length"], 8)
        self.assertGreaterEqual(done[a].ended_at - started["a"], 0.6)
        self.assertGreaterEqual(done[b].ended_at - started["b"], 0.6)
        self.assertLess(done[a].ended_at, done[b].ended_at)
        self.assert_still_serves(gw)

    def test_a_header_list_over_max_header_bytes_gets_431(self):
        gw = self.gateway(server={"max_header_bytes": 4096})
        c = H2Client(gw.port)
        r = c.request("GET", "/big", headers=[("x-big", "a" * 5000)])
        self.assertEqual(r.status, 431)
        self.assertEqual(c.request("GET", "/small").status, 200)  # the connection goes on
        c.close()

    @unittest.skipUnless(CURL, "curl is not installed")
    def test_tls_listener_offers_h2_by_alpn_beside_http11(self):
        make_ca(self.workdir, "ca")
        cert, key = make_server_cert(self.workdir, "ca", "gw", dns=("localhost",))
        tls_port = self.free_tls_port()
        self.gateway(server={"tls": {"listen": f"127.0.0.1:{tls_port}", "cert_file": cert,
                                     "key_file": key}})
        ca = os.path.join(self.workdir, "ca.crt")
        url = f"https://localhost:{tls_port}/tls"
        resolve = f"localhost:{tls_port}:127.0.0.1"
        for flag, version in (("--http2", b"2"), ("--http1.1", b"1.1")):
            out = curl(flag, "--cacert", ca, "--resolve", resolve, "-o", "/dev/null", "-w",
                       "%{http_version} %{http_code}", url)
            self.assertEqual(out.stdout, version + b" 200", out.stderr)
        context = ssl.create_default_context(cafile=ca)
        context.set_alpn_protocols(["h2"])
        c = H2Client(tls_port, tls=context)
        doc = json.loads(c.request("GET", "/over-tls").body)
        self.assertEqual({n.lower(): v for n, v in doc["headers"]}["x-forwarded-proto"], "https")
        c.close()

    def free_tls_port(self) -> int:
        from harness import free_port
        return free_port()

    def test_http2_off_keeps_the_preface_refused(self):
        config = gateway_config({"echo": [self.echo.address]}, [route("all", "/", [])])
        gw = self.start_sluice(config)
        raw = RawH2(gw.port)
        reply = raw.sock.recv(4096)
        self.assertTrue(reply.startswith(b"HTTP/1.1 400"), reply)
        raw.close()

    def test_chunked_trailers_of_an_http1_upstream_reach_the_client(self):
        def do_get(handler, query):
            if query.get("mode") == ["same-name"]:
                # A trailer with a head field's name: the trailer goes, not
                # the head's field or another one.
                handler.wfile.write(
                    b"HTTP/1.1 200 OK\r\nX-A: head-a\r\nTransfer-Encoding: chunked\r\n"
                    b"X-Z: head-z\r\n\r\n5\r\nhello\r\n0\r\nX-A: trailer-a\r\n"
                    b"X-Checksum: abc123\r\n\r\n")
                return
            handler.wfile.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
                b"5\r\nhello\r\n0\r\nX-Checksum: abc123\r\n\r\n")
        upstream = PythonUpstream(do_get)
        self.addCleanup(upstream.stop)
        gw = self.gateway(upstreams={"echo": [upstream.address]})
        c = H2Client(gw.port)
        self.addCleanup(c.close)
        reply = c.request("GET", "/with-trailers")
        self.assertEqual(reply.status, 200)
        self.assertEqual(bytes(reply.body), b"hello")
        self.assertEqual(reply.trailers, [("x-checksum", "abc123")])
        reply = c.request("GET", "/with-trailers?mode=same-name")
        self.assertEqual(reply.status, 200)
        self.assertEqual(bytes(reply.body), b"hello")
        self.assertEqual(sorted(reply.trailers), [("x-a", "trailer-a"), ("x-checksum", "abc123")])
        self.assertIn(("x-a", "head-a"), reply.headers)

    # ---- gRPC ----------------------------------------------------------------

    def test_sluice_answers_grpc_calls_as_grpc(self):
        import grpc
        gw = self.gateway(
            routes=[route("limited", "/pkg.Limited/", ["per_ip"]),
                    route("down", "/pkg.Down/", [], upstream="down"),
                    route("open", "/pkg.Open/", [])],
            limits={"per_ip": limit("ip", 1)},
            upstreams={"echo": [self.echo.address], "down": [f"127.0.0.1:{closed_port()}"]})
        channel = grpc.insecure_channel(f"127.0.0.1:{gw.port}")
        self.addCleanup(channel.close)

        def call(method):
            stub = channel.unary_unary(method)
            with self.assertRaises(grpc.RpcError) as raised:
                stub(b"\x0a\x03abc", timeout=10)
            return raised.exception

        call("/pkg.Limited/Get")  # the one call allowed: the echo is no gRPC server
        limited = call("/pkg.Limited/Get")
        self.assertEqual(limited.code(), grpc.StatusCode.RESOURCE_EXHAUSTED)
        metadata = dict(limited.trailing_metadata() or ()) | dict(limited.initial_metadata() or ())
        self.assertIn("retry-after", metadata)
        self.assertIn("ratelimit-policy", metadata)
        self.assertEqual(metadata.get("x-ratelimit-limit"), "1")
        self.assertEqual(call("/pkg.Down/Get").code(), grpc.StatusCode.UNAVAILABLE)
        self.assertEqual(call("/nowhere/Get").code(), grpc.StatusCode.UNIMPLEMENTED)
        # The log says what the reply stands for.
        wait_until(lambda: '"status":429' in gw.stdout(), 5, message="the 429 in the access log")

    # ---- Limits and protections -----------------------------------------------

    def test_more_streams_than_advertised_end_the_connection(self):
        gw = self.gateway(server={"http2": {"enabled": True, "max_concurrent_streams": 2}})
        # Before the client acknowledged the setting, an extra stream is refused.
        raw = RawH2(gw.port)
        raw.send(*[raw.request_frame(sid, "/__slow/300") for sid in (1, 3, 5)])
        got = raw.read_frames(lambda f: isinstance(f, frames.RstStreamFrame), 5)
        resets = [(f.stream_id, f.error_code) for f in got if isinstance(f, frames.RstStreamFrame)]
        self.assertEqual(resets, [(5, REFUSED_STREAM)])
        raw.close()
        # Once it did, a third stream at once is a connection error.
        raw = RawH2(gw.port)
        raw.read_frames(lambda f: isinstance(f, frames.SettingsFrame) and "ACK" not in f.flags, 5)
        raw.send(frames.SettingsFrame(0, flags=["ACK"]))
        raw.send(*[raw.request_frame(sid, "/__slow/300") for sid in (1, 3, 5)])
        self.assert_goaway_ends_only_it(gw, raw, PROTOCOL_ERROR, "protocol_error")

    def test_rapid_reset_ends_the_connection(self):
        gw = self.gateway()
        raw = RawH2(gw.port)
        sid = 1
        for _ in range(40):
            batch = []
            for _ in range(100):
                batch += [raw.request_frame(sid, "/__slow/1000"), frames.RstStreamFrame(sid)]
                batch[-1].error_code = 0x8  # CANCEL
                sid += 2
            try:
                raw.send(*batch)
            except (BrokenPipeError, ConnectionResetError):
                break
        # INTERNAL_ERROR: nghttp2's choice for this one.
        self.assert_goaway_ends_only_it(gw, raw, INTERNAL_ERROR, "rapid_reset")

    def test_continuation_flood_ends_the_connection(self):
        gw = self.gateway()
        raw = RawH2(gw.port)
        first = frames.HeadersFrame(1)
        first.data = raw.headers_block("/c")
        raw.send(first)
        try:
            for _ in range(50):
                c = frames.ContinuationFrame(1)
                c.data = raw.encoder.encode([("x-pad", "b" * 100)])
                raw.send(c)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.assert_goaway_ends_only_it(gw, raw, ENHANCE_YOUR_CALM, "continuation_flood")

    def test_hpack_bomb_ends_the_connection(self):
        gw = self.gateway(server={"max_header_bytes": 8192})
        raw = RawH2(gw.port)
        # One 4000-byte value in the dynamic table, then referenced a byte at a time.
        block = raw.encoder.encode([(":method", "GET"), (":path", "/bomb"), (":scheme", "http"),
                                    (":authority", "x"), ("x-bomb", "z" * 4000)])
        block += bytes([0x80 | 62]) * 200  # the newest dynamic entry, 200 times
        f = frames.HeadersFrame(1)
        f.data = block
        f.flags.add("END_HEADERS")
        f.flags.add("END_STREAM")
        raw.send(f)
        self.assert_goaway_ends_only_it(gw, raw, ENHANCE_YOUR_CALM, "header_flood")

    def test_a_flood_with_a_request_in_flight_is_read_no_further(self):
        """A client with a request in flight floods PINGs and reads nothing:
        once nghttp2 has given up on the session nothing more is read from it,
        also when the request's answer comes meanwhile (reading again counted a
        second flood and rewrote the GOAWAY being written)."""
        gw = self.gateway()
        before = self.goaways(gw, "flood")
        raw = RawH2(gw.port, receive_buffer=4096)
        raw.send(raw.request_frame(1, "/__slow/1000"))
        ping = frames.PingFrame(0, opaque_data=b"12345678").serialize()
        raw.flood(ping, 2_000_000, seconds=4)  # the answer comes after 1 s
        wait_until(lambda: self.goaways(gw, "flood") > before, 10, message="the flood counted")
        self.assertEqual(self.goaways(gw, "flood"), before + 1)
        raw.close()
        self.assert_still_serves(gw)

    def test_settings_and_ping_floods_end_the_connection(self):
        gw = self.gateway()
        floods = {"settings": frames.SettingsFrame(0).serialize(),
                  "ping": frames.PingFrame(0, opaque_data=b"12345678").serialize()}
        for what, frame in floods.items():
            with self.subTest(what):
                before = self.goaways(gw, "flood")
                # Each frame asks for an acknowledgement; the client reads none
                # (a small receive buffer fills at once), so they queue up.
                raw = RawH2(gw.port, receive_buffer=4096)
                raw.flood(frame, 2_000_000, seconds=15)
                wait_until(lambda: self.goaways(gw, "flood") > before, 10,
                           message="the flood detected and counted")
                goaway = raw.goaway_after_anything()
                self.assertIsNotNone(goaway)
                self.assertEqual(goaway[1], ENHANCE_YOUR_CALM)
                raw.close()
        self.assert_still_serves(gw)

    def test_protocol_violations_get_goaway(self):
        gw = self.gateway()
        # A stream id going backwards, and one used twice.
        for ids in ((5, 3), (1, 1)):
            raw = RawH2(gw.port)
            raw.send(raw.request_frame(ids[0], "/a"))
            raw.read_frames(lambda f: isinstance(f, frames.DataFrame) and "END_STREAM" in f.flags, 5)
            raw.send(raw.request_frame(ids[1], "/b"))
            goaway = raw.goaway()
            self.assertIsNotNone(goaway, ids)
            self.assertEqual(goaway.error_code, PROTOCOL_ERROR, ids)
            raw.close()
        # A window update past 2^31-1.
        raw = RawH2(gw.port)
        raw.send(frames.WindowUpdateFrame(0, window_increment=0x7FFFFFFF))
        goaway = raw.goaway()
        self.assertEqual(goaway.error_code, FLOW_CONTROL_ERROR)
        raw.close()
        wait_until(lambda: self.goaways(gw, "stream_id_reused") >= 2
                   and self.goaways(gw, "flow_control_error") >= 1, 5,
                   message="the GOAWAYs counted")
        self.assert_still_serves(gw)

    def test_data_after_the_end_of_a_stream_has_its_own_goaway_reason(self):
        """DATA on a stream the client had ended (half-closed): GOAWAY
        STREAM_CLOSED, counted as stream_closed, not as a reused stream id."""
        gw = self.gateway()
        raw = RawH2(gw.port)
        # In one write: the stream is still half-closed when its DATA arrives.
        raw.send(raw.request_frame(1, "/a"), frames.DataFrame(1, data=b"late"))
        self.assert_goaway_ends_only_it(gw, raw, STREAM_CLOSED, "stream_closed")
        self.assertEqual(self.goaways(gw, "stream_id_reused"), 0)

    def test_a_client_holding_a_zero_window_is_cut_after_send_timeout(self):
        gw = self.gateway(server={"send_timeout_ms": 500})
        # SETTINGS_INITIAL_WINDOW_SIZE 0: no response DATA may be sent.
        c = H2Client(gw.port, settings={0x4: 0})
        sid = c.send("GET", f"/__download/{8 * 1024 * 1024}")
        r = c.run_until_done([sid], timeout=10)[sid]
        self.assertEqual(r.status, 200)
        self.assertIsNotNone(r.reset_code)  # cut, not finished
        self.assertEqual(len(r.body), 0)
        c.close()
        self.assert_still_serves(gw)
        wait_until(lambda: '"status":200' in gw.stdout(), 5, message="the access log line")

    # ---- Drain and reload --------------------------------------------------------

    def test_drain_sends_goaway_and_lets_streams_finish(self):
        gw = self.gateway()
        raw = RawH2(gw.port)  # (python-h2 stops reading at a GOAWAY)
        raw.send(raw.request_frame(1, "/__slow/800"))
        wait_until(lambda: json.loads(request(self.echo.port, "GET", "/__stats")[2])
                   ["slow_peak"] >= 1, 5, message="the request at the upstream")
        os.kill(gw.pid, signal.SIGTERM)
        got = raw.read_frames(lambda f: isinstance(f, frames.DataFrame)
                              and "END_STREAM" in f.flags, 10)
        kinds = [type(f).__name__ for f in got]
        self.assertIn("GoAwayFrame", kinds)
        goaway = next(f for f in got if isinstance(f, frames.GoAwayFrame))
        self.assertEqual((goaway.error_code, goaway.last_stream_id), (0, 1))
        self.assertEqual(kinds[-2:], ["HeadersFrame", "DataFrame"])  # the response, whole
        raw.close()

    def test_a_reload_keeps_the_connection_and_applies_to_new_streams(self):
        config = gateway_config({"echo": [self.echo.address]}, [route("all", "/", [])],
                                server={"threads": 1, "http2": {"enabled": True}})
        gw = self.start_sluice(config)
        c = H2Client(gw.port)
        self.assertEqual(c.request("GET", "/before").status, 200)
        config["routes"] = [route("other", "/only-this", [])]
        done = gw.metric("sluice_config_reloads_total", result="ok") or 0
        gw.reload(config)
        wait_until(lambda: (gw.metric("sluice_config_reloads_total", result="ok") or 0) > done,
                   10, message="the reload")
        self.assertEqual(c.request("GET", "/before").status, 404)
        self.assertEqual(c.request("GET", "/only-this").status, 200)
        c.close()

    @unittest.skipUnless(H2LOAD, "h2load (nghttp2-client) is not installed")
    def test_h2load_many_streams_many_connections(self):
        gw = self.gateway(server={"threads": 2})
        out = subprocess.run([H2LOAD, "-n", "4000", "-c", "8", "-m", "16",
                              f"http://127.0.0.1:{gw.port}/load"],
                             capture_output=True, text=True, timeout=120)
        self.assertIn("4000 succeeded, 0 failed, 0 errored", out.stdout, out.stdout)
        self.assertIn("status codes: 4000 2xx", out.stdout)


if __name__ == "__main__":
    unittest.main()
