"""Cost settled from the response through the real sluice binary and a real
redis-server: an upstream reports the real cost in a response header or a
trailer; the estimate debited at admission is settled to it on a token
bucket and a monthly quota, to the unit: the quota's count is the sum of the
real costs. Statuses not counted cost nothing, invalid values settle at the
estimate, a debit stops at max_debt, and the settlement metrics count each. A
client's own copy of the usage header never reaches the upstream.
"""

import random
import socket
import struct
import threading
import unittest
import urllib.parse

from harness import (PythonUpstream, gateway_config, metric_sum, redis_call, stall_redis,
                     wait_redis_ready, wait_until)
from test_ratelimit import RateLimitTestCase
from testkit.h2client import H2Client

ESTIMATE = 500


def usage_upstream():
    """Answers `status` (query, default 200) with the usage `usage` (query) in
    its head (mode=head, the default), in a trailer of a chunked body
    (mode=trailer), twice in its head (mode=twice), or not at all (no usage)."""

    def do_get(handler, query):
        status = int(query.get("status", ["200"])[0])
        usage = query.get("usage", [None])[0]
        mode = query.get("mode", ["head"])[0]
        if mode == "trailer":
            handler.wfile.write(
                f"HTTP/1.1 {status} OK\r\nTransfer-Encoding: chunked\r\n"
                f"Trailer: X-Usage-Tokens\r\n\r\n5\r\nhello\r\n0\r\n"
                f"X-Usage-Tokens: {usage}\r\n\r\n".encode())
            return
        body = b"done\n"
        handler.send_response(status)
        if usage is not None:
            handler.send_header("X-Usage-Tokens", usage)
            if mode == "twice":
                handler.send_header("X-Usage-Tokens", usage)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    return PythonUpstream(do_get)


class SettlementTest(RateLimitTestCase):
    def setUp(self):
        super().setUp()
        self.upstream = usage_upstream()
        self.addCleanup(self.upstream.stop)
        limits = {
            "tokens": {"key": "global", "capacity": 100000, "refill_per_second": 0.000001},
            "monthly": {"key": "global", "algorithm": "quota", "capacity": 10000000,
                        "period": "month"},
        }
        routes = [{"name": "completions", "match": {"path_prefix": "/"}, "upstream": "llm",
                   "limits": list(limits), "cost": ESTIMATE,
                   "cost_from_response": {"header": "X-Usage-Tokens",
                                          "statuses": ["200-299"], "max_debt": 5000}}]
        config = gateway_config(
            {"llm": [self.upstream.address]}, routes, server={"threads": 2},
            log={"level": "info", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000},
            limits=limits)
        self.gw = self.start_sluice(config)
        wait_redis_ready(self.gw)

    def stored(self, limit):
        keys = redis_call(self.redis.port, "KEYS", f"*{limit}:*")
        self.assertEqual(len(keys), 1, keys)
        return struct.unpack("<dd", redis_call(self.redis.port, "GET", keys[0]))

    def tokens(self):
        return self.stored("tokens")[0]

    def quota_used(self):
        return self.stored("monthly")[1]

    def settled(self):
        return sum(metric_sum(self.gw, "sluice_ratelimit_settlements_total", result=r)
                   for r in ("refund", "debit", "even", "failed"))

    def call(self, query, expected=200):
        status, _, body = self.get(self.gw, "/?" + query)
        self.assertEqual(status, expected, body)

    def settle(self, query, expected=200):
        """One request, and its settlement awaited (counted in the metrics)."""
        before = self.settled()
        self.call(query, expected)
        wait_until(lambda: self.settled() == before + 1, timeout=5, message="settled")

    def test_head_trailer_statuses_invalid_values_and_max_debt(self):
        self.settle("usage=120")
        self.assertAlmostEqual(self.tokens(), 100000 - 120, places=2)
        self.assertEqual(self.quota_used(), 120)
        self.settle("usage=42&mode=trailer")
        self.assertEqual(self.quota_used(), 162)
        self.settle("usage=900&status=503", expected=503)  # not counted: costs 0
        self.assertEqual(self.quota_used(), 162)
        for bad in ("12abc", "-5", "1.5", "99999999999999999999"):
            self.settle("usage=" + urllib.parse.quote(bad))  # the estimate
        self.settle("usage=7&mode=twice")  # repeated: the estimate
        self.settle("")  # none: the estimate
        self.assertEqual(self.quota_used(), 162 + 6 * ESTIMATE)
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_settlements_total",
                                    route="completions", result="even"), 6)
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_settlements_total",
                                    route="completions", result="refund"), 3)
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_settled_units_total",
                                    route="completions", direction="refund"),
                         (ESTIMATE - 120) + (ESTIMATE - 42) + ESTIMATE)
        # A debit far beyond the bucket stops at max_debt below empty; the quota
        # counts what it can hold (its capacity is large).
        self.settle("usage=200000")
        self.assertAlmostEqual(self.tokens(), -5000, places=2)
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_settlements_total",
                                    route="completions", result="debit"), 1)
        status, h, _ = self.get(self.gw, "/?usage=1")
        self.assertEqual(status, 429)  # the debt is paid off before anything else goes

    def test_the_quota_counts_the_sum_of_the_real_costs_to_the_unit(self):
        rng = random.Random(28)
        real = 0
        for _ in range(60):
            usage = rng.randint(0, 2000)
            mode = rng.choice(("head", "trailer"))
            self.settle(f"usage={usage}&mode={mode}")
            real += usage
        self.assertEqual(self.quota_used(), real)
        self.assertAlmostEqual(self.tokens(), 100000 - real, places=1)

    def test_a_client_gone_after_the_head_is_settled_with_the_head_usage(self):
        before = self.settled()
        with socket.create_connection(("127.0.0.1", self.gw.port)) as s:
            s.sendall(b"GET /?usage=77 HTTP/1.1\r\nHost: x\r\n\r\n")
            s.recv(1)  # the head has come
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        wait_until(lambda: self.settled() == before + 1, timeout=5, message="settled")
        self.assertEqual(self.quota_used(), 77)


class UsageHeaderFromTheClientTest(RateLimitTestCase):
    """A client that sends the usage header itself: an upstream that reflects
    request headers would answer with the client's value and settle the call
    at it. Sluice removes it from the request, over HTTP/1.1 and HTTP/2."""

    def test_the_clients_usage_header_is_not_forwarded(self):
        seen = []

        def do_get(handler, query):
            # Reflects the request's usage header when it has one (any case).
            reflected = [v for n, v in handler.headers.items() if n.lower() == "x-usage-tokens"]
            seen.extend(reflected)
            body = b"done\n"
            handler.send_response(200)
            handler.send_header("X-Usage-Tokens", reflected[0] if reflected else query["usage"][0])
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        upstream = PythonUpstream(do_get)
        self.addCleanup(upstream.stop)
        limits = {"monthly": {"key": "global", "algorithm": "quota", "capacity": 1000000,
                              "period": "month"}}
        routes = [{"name": "completions", "match": {"path_prefix": "/"}, "upstream": "llm",
                   "limits": ["monthly"], "cost": ESTIMATE,
                   "cost_from_response": {"header": "X-Usage-Tokens"}}]
        gw = self.start_sluice(gateway_config(
            {"llm": [upstream.address]}, routes,
            server={"threads": 1, "http2": {"enabled": True}},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0"}, limits=limits))
        wait_redis_ready(gw)

        def settled():
            return metric_sum(gw, "sluice_ratelimit_settlements_total")

        def quota_used():
            keys = redis_call(self.redis.port, "KEYS", "*monthly:*")
            self.assertEqual(len(keys), 1, keys)
            return struct.unpack("<dd", redis_call(self.redis.port, "GET", keys[0]))[1]

        # HTTP/1.1, two lines of it in two spellings.
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as s:
            s.sendall(b"GET /?usage=900 HTTP/1.1\r\nHost: x\r\nX-Usage-Tokens: 0\r\n"
                      b"x-usage-tokens: 0\r\nConnection: close\r\n\r\n")
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        self.assertTrue(reply.startswith(b"HTTP/1.1 200 "), reply[:200])
        wait_until(lambda: settled() == 1, timeout=5, message="settled")
        self.assertEqual(quota_used(), 900)
        # HTTP/2.
        c = H2Client(gw.port)
        self.addCleanup(c.close)
        reply = c.request("GET", "/?usage=900", headers=[("x-usage-tokens", "0")])
        self.assertEqual(reply.status, 200)
        wait_until(lambda: settled() == 2, timeout=5, message="settled")
        self.assertEqual(quota_used(), 1800)
        self.assertEqual(seen, [])


class SettlementNeverTwiceTest(RateLimitTestCase):
    """A settlement Redis took but answered too late (a command timeout) may
    have been applied: it is counted unknown (not failed) and never sent again."""

    def test_a_settlement_that_timed_out_is_not_sent_again(self):
        arrived, answer = threading.Event(), threading.Event()

        def do_get(handler, query):
            arrived.set()
            answer.wait(10)
            handler.send_response(200)
            handler.send_header("X-Usage-Tokens", "120")
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        upstream = PythonUpstream(do_get)
        self.addCleanup(upstream.stop)
        limits = {"monthly": {"key": "global", "algorithm": "quota", "capacity": 1000000,
                              "period": "month"}}
        routes = [{"name": "completions", "match": {"path_prefix": "/"}, "upstream": "llm",
                   "limits": ["monthly"], "cost": ESTIMATE,
                   "cost_from_response": {"header": "X-Usage-Tokens"}}]
        gw = self.start_sluice(gateway_config(
            {"llm": [upstream.address]}, routes, server={"threads": 1},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 100},
            limits=limits))
        wait_redis_ready(gw)
        reply = {}
        client = threading.Thread(target=lambda: reply.update(status=self.get(gw, "/")[0]))
        client.start()
        self.assertTrue(arrived.wait(10))  # admitted: 500 debited
        # Redis busy for 1.5 s; the settlement goes while it is.
        busy = stall_redis(self.redis.port, 1.5)
        answer.set()
        client.join(10)
        self.assertEqual(reply.get("status"), 200)
        # Timed out: counted unknown at once, not retried.
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_settlements_total",
                                      result="unknown") == 1, 5, message="the unknown settlement")
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_settlements_total", result="failed"), 0)
        busy.join(10)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_settlements_total", result="refund"), 0)
        # Redis ran it once after the busy script (120 used), or not at all
        # (500); twice would have left 0.
        keys = redis_call(self.redis.port, "KEYS", "*monthly:*")
        self.assertEqual(len(keys), 1, keys)
        used = struct.unpack("<dd", redis_call(self.redis.port, "GET", keys[0]))[1]
        self.assertIn(used, (120, ESTIMATE))


if __name__ == "__main__":
    unittest.main()
