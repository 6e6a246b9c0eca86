"""Per-request limit policies through the real sluice binary and a real redis-server:
the cost taken from a request header (never forwarded), IPv6 clients grouped by
prefix, exemptions by client CIDR and by plan, and a route's own reject reply.

Client addresses come from X-Forwarded-For, which the gateway believes from
127.0.0.1 (trusted here). Refill rates are chosen so that nothing refills
noticeably during a test.
"""

import json
import unittest

from harness import bucket_state, echo_header, metric_sum, raw_exchange, redis_call, script_calls
from test_ratelimit import TINY, RateLimitTestCase, limit, route


def from_client(ip, **headers):
    return {"X-Forwarded-For": ip, **headers}


class CostHeaderTest(RateLimitTestCase):
    def start(self):
        routes = [route("cost", "/cost", ["per_ip"], cost_header="X-Cost"),
                  route("capped", "/capped", ["capped"], cost_header="X-Cost", max_cost=10),
                  route("whole", "/whole", ["whole"], cost_header="X-Cost")]
        return self.start_gateway(routes, {"per_ip": limit("ip", 100, TINY),
                                           "capped": limit("ip", 100, TINY),
                                           "whole": limit("ip", 30, TINY)})

    def test_cost_from_the_header_is_debited_and_not_forwarded(self):
        gw = self.start()
        status, h, body = self.get(gw, "/cost/a", {"X-Cost": "7", "X-Costly": "kept"})
        self.assertEqual(status, 200, body[:300])
        self.assertEqual(h["X-RateLimit-Remaining"], "93")
        doc = json.loads(body)
        self.assertEqual(echo_header(doc, "X-Cost"), [], doc["headers"])
        self.assertEqual(echo_header(doc, "X-Costly"), ["kept"])  # only that name is dropped
        # The bucket in Redis holds what the headers say.
        [key] = redis_call(self.redis.port, "KEYS", "sluice:per_ip:*")
        tokens, _ = bucket_state(self.redis.port, key)
        self.assertAlmostEqual(tokens, 93, delta=0.01)

    def test_invalid_or_missing_values_cost_the_route_cost(self):
        gw = self.start()
        remaining = 100
        for value in ("seven", "0", "-3", "2.5", None):
            headers = {} if value is None else {"X-Cost": value}
            remaining -= 1
            self.assert_allowed(gw, "/cost/a", headers, remaining=remaining, msg=f"X-Cost {value}")

    def test_values_over_max_cost_are_clamped(self):
        gw = self.start()
        self.assert_allowed(gw, "/capped/a", {"X-Cost": "50"}, remaining=90)
        self.assert_allowed(gw, "/capped/a", {"X-Cost": "3"}, remaining=87)
        # max_cost 0: at most the smallest capacity, so a huge value takes the whole bucket.
        self.assert_allowed(gw, "/whole/a", {"X-Cost": "999999999999999999999"}, remaining=0)
        status, h, _ = self.get(gw, "/whole/a", {"X-Cost": "1"})
        self.assertEqual(status, 429)

    def test_a_repeated_cost_header_is_refused(self):
        gw = self.start()
        response = raw_exchange(gw.port, b"GET /cost/a HTTP/1.1\r\nHost: x\r\n"
                                         b"X-Cost: 1\r\nX-Cost: 9\r\n\r\n")
        self.assertEqual(response.status, 400, response)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_rejected_total", route="cost",
                                    reason="duplicate_identity"), 1)


class Ipv6GroupingTest(RateLimitTestCase):
    def test_one_bucket_per_64(self):
        gw = self.start_gateway([route("api", "/api", ["per_ip", "per_host"])],
                                {"per_ip": limit("ip", 3, TINY),
                                 "per_host": limit("ip", 100, TINY, ipv6_prefix=128)})
        self.assert_allowed(gw, "/api/a", from_client("2001:db8:0:1::1"), remaining=2)
        self.assert_allowed(gw, "/api/a", from_client("2001:db8:0:1:ffff::2"), remaining=1)
        # Another /64: a bucket of its own.
        self.assert_allowed(gw, "/api/a", from_client("2001:db8:0:2::1"), remaining=2)
        self.assert_allowed(gw, "/api/a", from_client("2001:db8:0:1::3"), remaining=0)
        self.assert_limited(gw, "/api/a", from_client("2001:db8:0:1::4"))
        # IPv4 clients are keyed whole.
        self.assert_allowed(gw, "/api/a", from_client("192.0.2.1"), remaining=2)
        self.assert_allowed(gw, "/api/a", from_client("192.0.2.2"), remaining=2)
        # Two buckets of per_ip for the IPv6 clients (and two IPv4 ones); per_host keys
        # every address apart.
        self.assertEqual(len(redis_call(self.redis.port, "KEYS", "sluice:per_ip:*")), 4)
        self.assertGreaterEqual(len(redis_call(self.redis.port, "KEYS", "sluice:per_host:*")), 6)


class ExemptionsTest(RateLimitTestCase):
    def start(self):
        api_keys = {"header": "X-API-Key", "default_plan": "free",
                    "consumers": [{"key": "staff-key", "plan": "internal"},
                                  {"key": "customer-key", "plan": "free"}]}
        return self.start_gateway([route("api", "/api", ["per_ip"])],
                                  {"per_ip": limit("ip", 1, TINY)}, api_keys=api_keys,
                                  exemptions={"client_cidrs": ["203.0.113.0/24",
                                                               "2001:db8:ffff::/48"],
                                              "plans": ["internal"]})

    def assert_exempt(self, gw, headers, times=4):
        for _ in range(times):
            status, h, body = self.get(gw, "/api/a", headers)
            self.assertEqual(status, 200, body[:300])
            self.assert_no_rate_limit_headers(h, f"exempt {headers}")

    def test_an_exempt_cidr_is_never_limited_and_is_counted(self):
        gw = self.start()
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_exempt_total", route="api",
                                    reason="cidr"), 0)
        self.assertIn('sluice_ratelimit_exempt_total{route="api",reason="cidr"} 0',
                      gw.metrics())  # seeded
        calls = script_calls(self.redis.port)
        self.assert_exempt(gw, from_client("203.0.113.9"))
        self.assert_exempt(gw, from_client("2001:db8:ffff:1::1"))
        self.assertEqual(script_calls(self.redis.port), calls)  # Redis never asked
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_exempt_total", route="api",
                                    reason="cidr"), 8)
        # Everyone else is limited.
        self.assert_allowed(gw, "/api/a", from_client("198.51.100.1"), remaining=0)
        self.assert_limited(gw, "/api/a", from_client("198.51.100.1"))

    def test_an_exempt_plan_is_never_limited_and_is_counted(self):
        gw = self.start()
        client = from_client("198.51.100.7")
        self.assert_exempt(gw, {**client, "X-API-Key": "staff-key"})
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_exempt_total", route="api",
                                    reason="plan"), 4)
        self.assert_allowed(gw, "/api/a", {**client, "X-API-Key": "customer-key"}, remaining=0)
        self.assert_limited(gw, "/api/a", {**client, "X-API-Key": "customer-key"})
        self.assert_limited(gw, "/api/a", {**client, "X-API-Key": "made-up"})


class RejectReplyTest(RateLimitTestCase):
    def test_a_custom_503_with_its_body_and_retry_after(self):
        gw = self.start_gateway(
            [route("api", "/api", ["per_ip"],
                   reject={"status": 503, "body": '{"error":"slow down"}'}),
             route("plain", "/plain", ["per_ip"])],
            {"per_ip": limit("ip", 1, 0.5)})
        self.assert_allowed(gw, "/api/a", remaining=0)
        status, h, body = self.get(gw, "/api/a")
        self.assertEqual(status, 503, body[:300])
        self.assertEqual(body, b'{"error":"slow down"}')
        self.assertEqual(h.get("Content-Type"), "application/json")
        self.assertIn(h.get("Retry-After"), ("1", "2"))
        self.assertEqual(h.get("X-RateLimit-Remaining"), "0")
        self.assertEqual(h.get("Cache-Control"), "no-store")
        # Another route on the same bucket keeps the default reply.
        status, h, body = self.get(gw, "/plain/a")
        self.assertEqual(status, 429)
        self.assertEqual(h.get("Content-Type"), "application/problem+json")
        self.assertEqual(json.loads(body)["status"], 429)


if __name__ == "__main__":
    unittest.main()
