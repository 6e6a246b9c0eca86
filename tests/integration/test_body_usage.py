"""Usage read from the response body (cost_from_response.body) through the
real sluice binary, a real redis-server and the test kit's model server:
OpenAI chat completions (JSON, and streams with and without include_usage),
the Responses API and Anthropic Messages (JSON and event streams), chunked at
awkward boundaries, gzip encoded, and with lying or missing usage. Each
request is admitted at its estimate and settled to the usage its body
reported; a monthly quota's count is the sum, to the unit. HTTP/1.1 and
HTTP/2 clients alike; a client gone mid-stream settles once.
"""

import json
import socket
import struct
import unittest
import zlib

from harness import (gateway_config, metric_sum, redis_call, rss_kib, wait_redis_ready,
                     wait_until)
from test_ratelimit import RateLimitTestCase
from testkit.h2client import H2Client
from testkit.h2server import H2Upstream
from testkit.http import request
from testkit.model_server import USAGE_PATHS, ModelServer

ESTIMATE = 500
PATHS = {"chat": "/v1/chat/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}


class BodyUsageCase(RateLimitTestCase):
    """A gateway with a route per model API in front of the model server."""

    def setUp(self):
        super().setUp()
        self.model = ModelServer(seed=46)
        self.addCleanup(self.model.stop)
        self.limits = {"monthly": {"key": "global", "algorithm": "quota",
                                   "capacity": 100000000, "period": "month"}}
        routes = [{"name": shape, "match": {"path_prefix": path}, "upstream": "llm",
                   "limits": ["monthly"], "cost": ESTIMATE,
                   "cost_from_response": {"body": USAGE_PATHS[shape],
                                          "statuses": ["200-299"]}}
                  for shape, path in PATHS.items()]
        self.gw = self.start_sluice(gateway_config(
            {"llm": [self.model.address]}, routes,
            server={"threads": 2, "http2": {"enabled": True}},
            log={"level": "info", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000},
            limits=self.limits))
        wait_redis_ready(self.gw)

    def quota_used(self):
        keys = redis_call(self.redis.port, "KEYS", "*monthly:*")
        if not keys:
            return 0
        self.assertEqual(len(keys), 1, keys)
        return struct.unpack("<dd", redis_call(self.redis.port, "GET", keys[0]))[1]

    def settled(self):
        return metric_sum(self.gw, "sluice_ratelimit_settlements_total")

    def outcomes(self, result, route=None):
        labels = {"result": result}
        if route:
            labels["route"] = route
        return metric_sum(self.gw, "sluice_ratelimit_body_usage_total", **labels)

    def complete(self, shape, stream=False, headers=None, include_usage=True, h2=None):
        """One completion, its body read whole, and its settlement awaited."""
        body = {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hello there"}],
                "max_tokens": 100}
        if stream:
            body["stream"] = True
            if include_usage:
                body["stream_options"] = {"include_usage": True}
        data = json.dumps(body).encode()
        fields = {"Content-Type": "application/json", **(headers or {})}
        before = self.settled()
        if h2:
            reply = h2.request("POST", PATHS[shape], headers=list(fields.items()), body=data)
            status, payload = reply.status, reply.body
        else:
            status, _, payload = request(self.gw.port, "POST", PATHS[shape], body=data,
                                         headers=fields)
        self.assertEqual(status, 200, payload[:300])
        wait_until(lambda: self.settled() == before + 1, timeout=5, message="settled")
        return payload


class BodyUsageTest(BodyUsageCase):
    def test_every_shape_json_and_stream_settles_to_the_reported_usage(self):
        expected = 0
        for shape in PATHS:
            for stream in (False, True):
                for chunking in ("whole", "awkward"):
                    self.complete(shape, stream, {"X-Model-Chunking": chunking})
                    expected += self.model.reported[-1]
                    self.assertEqual(self.quota_used(), expected, (shape, stream, chunking))
        self.assertEqual(self.outcomes("found"), 12)
        self.assertEqual(self.outcomes("found", route="messages"), 4)

    def test_gzip_bodies_are_read_and_relayed_unchanged(self):
        expected = 0
        for shape in PATHS:
            for stream in (False, True):
                payload = self.complete(shape, stream, {"X-Model-Gzip": "1",
                                                        "Accept-Encoding": "gzip, br"})
                expected += self.model.reported[-1]
                self.assertEqual(self.quota_used(), expected, (shape, stream))
                text = zlib.decompress(payload, 31)  # the client got the gzip as it was sent
                self.assertIn(b"usage" if not stream or shape != "chat" else b"total_tokens",
                              text)
        # Only the codings Sluice decodes were asked of the model server.
        asked = [h.get("Accept-Encoding") for _, h, _ in self.model.requests]
        self.assertEqual(set(asked), {"gzip"}, asked)

    def test_a_request_without_accept_encoding_asks_for_identity(self):
        self.complete("chat")
        self.assertEqual(self.model.requests[-1][1].get("Accept-Encoding"), "identity")

    def test_lying_or_missing_usage_settles_at_the_estimate(self):
        cases = ["-1", "string", "null", "huge", "digits", "missing"]
        for shape in PATHS:
            for stream in (False, True):
                for mode in cases:
                    self.complete(shape, stream, {"X-Model-Usage": mode})
        self.assertEqual(self.quota_used(), ESTIMATE * len(cases) * 6)
        self.assertEqual(self.outcomes("found"), 0)
        self.assertEqual(self.outcomes("missing"), 6)
        self.assertEqual(self.outcomes("invalid"), 5 * 6)  # null is not a number either

    def test_a_duplicate_usage_member_counts_the_last_one(self):
        expected = 0
        for shape in PATHS:
            for stream in (False, True):
                self.complete(shape, stream, {"X-Model-Usage": "duplicate"})
                expected += self.model.reported[-1]
        self.assertEqual(self.quota_used(), expected)

    def test_a_stream_without_include_usage_settles_at_the_estimate(self):
        self.complete("chat", stream=True, include_usage=False)
        self.assertEqual(self.quota_used(), ESTIMATE)
        self.assertEqual(self.outcomes("missing", route="chat"), 1)

    def test_http2_clients_settle_the_same(self):
        c = H2Client(self.gw.port)
        self.addCleanup(c.close)
        expected = 0
        for shape in PATHS:
            for stream in (False, True):
                self.complete(shape, stream, {"x-model-chunking": "awkward"}, h2=c)
                expected += self.model.reported[-1]
        self.assertEqual(self.quota_used(), expected)

    def test_a_client_gone_mid_stream_settles_once_at_the_estimate(self):
        body = json.dumps({"model": "m", "stream": True, "messages": [],
                           "stream_options": {"include_usage": True}}).encode()
        before = self.settled()
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Type: application/json\r\nX-Model-Tokens: 100000\r\n"
                      b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
            s.recv(1)  # the head has come, the stream is under way
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        wait_until(lambda: self.settled() == before + 1, timeout=10, message="settled")
        self.assertEqual(self.quota_used(), ESTIMATE)


class H2UpstreamBodyUsageTest(RateLimitTestCase):
    """An HTTP/2 (h2c) upstream's JSON answer is read the same way: the test
    kit's H2Upstream answers {"headers": ..., "body_bytes": N}, N the request
    body's length, which the route takes as the usage."""

    def test_an_h2c_answer_settles_to_its_body(self):
        upstream = H2Upstream()
        self.addCleanup(upstream.stop)
        limits = {"monthly": {"key": "global", "algorithm": "quota", "capacity": 100000000,
                              "period": "month"}}
        routes = [{"name": "h2", "match": {"path_prefix": "/"}, "upstream": "llm",
                   "limits": ["monthly"], "cost": ESTIMATE,
                   "cost_from_response": {"body": "body_bytes"}}]
        gw = self.start_sluice(gateway_config(
            {"llm": {"servers": [f"127.0.0.1:{upstream.port}"], "protocol": "h2c"}}, routes,
            server={"threads": 1}, limits=limits,
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000}))
        wait_redis_ready(gw)
        expected = 0
        for size in (1, 1234, 70000):
            before = metric_sum(gw, "sluice_ratelimit_settlements_total")
            status, _, _ = request(gw.port, "POST", "/v1/x", body=b"x" * size)
            self.assertEqual(status, 200)
            wait_until(lambda: metric_sum(gw, "sluice_ratelimit_settlements_total") == before + 1,
                       timeout=5, message="settled")
            expected += size
            keys = redis_call(self.redis.port, "KEYS", "*monthly:*")
            used = struct.unpack("<dd", redis_call(self.redis.port, "GET", keys[0]))[1]
            self.assertEqual(used, expected, size)


class HostileBodyTest(BodyUsageCase):
    """Bodies built to break a reader: each is relayed whole, settles by the
    rule (past the bound: the estimate), and the gateway's memory stays put."""

    def stream_through(self, kind, n, path="/v1/chat/completions"):
        """Sends one request; reads and counts the answer's body without keeping it."""
        before = self.settled()
        received = 0
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=30) as s:
            s.sendall(f"POST {path} HTTP/1.1\r\nHost: x\r\nX-Model-Hostile: {kind}\r\n"
                      f"X-Model-Bytes: {n}\r\nContent-Length: 2\r\nConnection: close\r\n"
                      "\r\n{}".encode())
            buffer = bytearray(1 << 20)
            while True:
                got = s.recv_into(buffer)
                if not got:
                    break
                received += got
        wait_until(lambda: self.settled() == before + 1, timeout=10, message="settled")
        return received

    def test_bodies_that_break_readers_settle_by_the_rule_in_bounded_memory(self):
        rss_before = rss_kib(self.gw.pid)
        # 1 GiB of JSON before its usage: past max_inspect_bytes, the estimate.
        received = self.stream_through("long-json", 1 << 30)
        self.assertGreater(received, 1 << 30)
        self.assertEqual(self.quota_used(), ESTIMATE)
        self.assertEqual(self.outcomes("truncated"), 1)
        # Nested 100,000 deep: the reader stops, the estimate.
        self.stream_through("deep", 100000)
        self.assertEqual(self.quota_used(), 2 * ESTIMATE)
        # A 10 MB event, then one with a usage: the long one is skipped past
        # its bound, the next is read.
        self.stream_through("long-event", 10 * 1000 * 1000)
        self.assertEqual(self.quota_used(), 2 * ESTIMATE + 7)
        # An event stream with no newline ever: nothing found, the estimate.
        self.stream_through("no-newline", 64 << 20)
        self.assertEqual(self.quota_used(), 3 * ESTIMATE + 7)
        self.assertLess(rss_kib(self.gw.pid) - rss_before, 32 * 1024)


if __name__ == "__main__":
    unittest.main()
