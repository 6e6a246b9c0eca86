"""How many streams an HTTP/2 upstream takes at once (upstreams.NAME.protocol
h2c), through the real sluice binary: a python3-h2 server (testkit/h2server.py)
that advertises SETTINGS_MAX_CONCURRENT_STREAMS and refuses streams beyond it
with REFUSED_STREAM, as nghttp2 and most servers do, or that sends GOAWAY
under streams it never processed; HTTP/1.1 and HTTP/2 clients.
"""

import json
import threading
import time
import unittest

from harness import ProcessTestCase, metric_sum, request, route, wait_until
from testkit.h2client import H2Client, H2Response
from testkit.h2server import H2Upstream

CLIENTS = 20
ROUNDS = 3


class H2UpstreamStreamsTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()

    def gateway(self, upstream: H2Upstream, **settings):
        return self.start_http2_sluice(
            {"one": {"servers": [upstream.address], "protocol": "h2c", **settings}},
            [route("all", "/", [], upstream="one")], self.redis.port)

    def upstream(self, **options) -> H2Upstream:
        server = H2Upstream(**options)
        self.addCleanup(server.stop)
        return server

    def concurrent_round(self, gw, n: int = CLIENTS) -> list[int]:
        """n HTTP/1.1 clients at once, one request each: their statuses."""
        statuses: list[int] = [0] * n
        start = threading.Barrier(n)

        def client(i: int):
            start.wait()
            try:
                statuses[i] = request(gw.port, "GET", f"/r{i}", timeout=20)[0]
            except OSError:
                statuses[i] = -1

        threads = [threading.Thread(target=client, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        return statuses

    def test_one_stream_at_a_time_serves_every_client(self):
        """A server that takes one stream at a time: 20 concurrent clients,
        round after round, all get 200; Sluice never sends it a stream it
        would refuse (one stream on a new connection until its SETTINGS are
        known, then no more than it allows)."""
        upstream = self.upstream(max_streams=1, hold=0.05)
        gw = self.gateway(upstream)
        for n in range(ROUNDS):
            statuses = self.concurrent_round(gw)
            self.assertEqual(statuses, [200] * CLIENTS, f"round {n + 1}")
        self.assertEqual(upstream.refused, 0)
        self.assertEqual(upstream.most_open, 1)
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="one",
                                   outcome="ok"), CLIENTS * ROUNDS)

    def test_streams_wait_for_room_within_max_connections(self):
        """max_connections 2 and one stream per connection: the other
        streams wait for a free one (within connect_timeout_ms) and all get
        200, over two connections at most."""
        upstream = self.upstream(max_streams=1, hold=0.02)
        gw = self.gateway(upstream, max_connections=2, connect_timeout_ms=10000)
        for n in range(ROUNDS):
            statuses = self.concurrent_round(gw)
            self.assertEqual(statuses, [200] * CLIENTS, f"round {n + 1}")
        self.assertEqual(upstream.refused, 0)
        self.assertLessEqual(upstream.connections, 2)
        self.assertLessEqual(metric_sum(gw, "sluice_upstream_connections_total", upstream="one"),
                             2)

    def test_a_stream_waiting_for_room_gets_503_at_connect_timeout(self):
        """At max_connections with every stream taken for longer than
        connect_timeout_ms, a further request waits that long and gets 503
        (connection_limit); the one in flight is unharmed."""
        upstream = self.upstream(max_streams=1, hold=1.5)
        gw = self.gateway(upstream, max_connections=1, connect_timeout_ms=300)
        statuses = self.concurrent_round(gw, 2)
        self.assertEqual(sorted(statuses), [200, 503])
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="one",
                                   outcome="connection_limit"), 1)
        self.assertEqual(upstream.refused, 0)

    def test_many_streams_from_one_http2_client(self):
        """An HTTP/2 client's 20 streams on one connection, to a server that
        takes one at a time: all 200."""
        upstream = self.upstream(max_streams=1, hold=0.02)
        gw = self.gateway(upstream)
        c = H2Client(gw.port, timeout=20)
        self.addCleanup(c.close)
        for _ in range(ROUNDS):
            ids = [c.send("GET", f"/s{i}") for i in range(CLIENTS)]
            replies = c.run_until_done(ids, timeout=20)
            self.assertEqual([replies[i].status for i in ids], [200] * CLIENTS)
            self.assertEqual([json.loads(bytes(replies[i].body))["body_bytes"] for i in ids],
                             [0] * CLIENTS)
        self.assertEqual(upstream.refused, 0)

    def test_streams_of_one_connection_each_wait_their_own_response_timeout(self):
        """A server that holds every answer for 3 s, and response_timeout_ms
        600: two HTTP/2 client streams sent 0.3 s apart on one connection (and
        one upstream connection, whose streams share one timer) each get 504
        once their own 600 ms have passed, the first before the second."""
        upstream = self.upstream(hold=3.0)
        gw = self.gateway(upstream, response_timeout_ms=600)
        c = H2Client(gw.port)
        self.addCleanup(c.close)
        started = {"a": time.monotonic()}
        a = c.send("GET", "/a")
        c.pump_for(0.3)
        started["b"] = time.monotonic()
        b = c.send("GET", "/b")
        done = c.run_until_done([a, b])
        self.assertEqual((done[a].status, done[b].status), (504, 504))
        self.assertGreaterEqual(done[a].ended_at - started["a"], 0.6)
        self.assertGreaterEqual(done[b].ended_at - started["b"], 0.6)
        self.assertLess(done[a].ended_at, done[b].ended_at)
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="one",
                                   outcome="timeout"), 2)
        self.assertEqual(upstream.connections, 1)

    def test_a_whole_request_goes_to_the_server_in_one_write(self):
        """A request whose head and body came whole (an HTTP/2 client's HEADERS
        and DATA with END_STREAM in one write) reaches the server the same way:
        its HEADERS and one DATA frame with the body and END_STREAM, in one read
        of the server's; no empty DATA frame after the body to end the stream
        (an HTTP/1.1 client's body too)."""
        upstream = self.upstream()
        gw = self.gateway(upstream)
        c = H2Client(gw.port, timeout=20)
        self.addCleanup(c.close)
        # The upstream connection made first: on a connection still being
        # made, the HEADERS go as it becomes ready, before the body may be in.
        self.assertEqual(c.request("GET", "/warm-up").status, 200)
        for i in range(3):
            sid = c.conn.get_next_available_stream_id()
            c.conn.send_headers(sid, [(":method", "POST"), (":path", f"/whole{i}"),
                                      (":scheme", "http"), (":authority", "127.0.0.1")])
            c.conn.send_data(sid, b"x" * 100, end_stream=True)
            c.responses[sid] = H2Response()
            c.flush()  # HEADERS and DATA in one write
            reply = c.run_until_done([sid], timeout=20)[sid]
            self.assertEqual(reply.status, 200)
            seen = json.loads(bytes(reply.body))
            self.assertEqual(seen["data_frames"], [100])
            self.assertEqual(seen["ended_by"], "data")
            self.assertEqual(seen["reads"], 1)
        status, _, body = request(gw.port, "POST", "/whole-http1", body=b"y" * 50, timeout=20)
        self.assertEqual(status, 200)
        seen = json.loads(body)
        # (An HTTP/1.1 client's body is a read of its own: the HEADERS may
        # have gone before it, so only the frames are checked.)
        self.assertEqual((seen["data_frames"], seen["ended_by"]), ([50], "data"))

    def test_streams_refused_by_the_server_are_sent_again(self):
        """Streams the server refused though it had room for them
        (REFUSED_STREAM), twice in a row: it never processed them, so each is
        sent again where a stream can be taken, a POST as well, and gets 200."""
        upstream = self.upstream()
        gw = self.gateway(upstream)
        for method in ("GET", "POST"):
            upstream.refuse_next = 2
            self.assertEqual(request(gw.port, method, "/a", body=b"")[0], 200, method)
        self.assertEqual(upstream.refused, 4)
        self.assertEqual(gw.metric("sluice_upstream_retries_total"), 4)

    def test_streams_a_goaway_left_unprocessed_are_sent_again(self):
        """A server going away (GOAWAY with last-stream-id 0) under a request,
        on two connections in a row: the request goes again on a new
        connection each time and gets 200."""
        upstream = self.upstream()
        gw = self.gateway(upstream)
        upstream.goaway_next = 2
        self.assertEqual(request(gw.port, "GET", "/a")[0], 200)
        self.assertEqual(upstream.connections, 3)
        self.assertEqual(gw.metric("sluice_upstream_retries_total"), 2)

if __name__ == "__main__":
    unittest.main()
