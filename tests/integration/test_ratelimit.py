"""Distributed rate limiting through the real sluice binary and a real redis-server.

Every test starts its own redis-server, sluice-echo and gateway(s) on ephemeral
ports, and waits for /readyz to report Redis ready before the first decision
(a decision made before the connection is up fails open or closed by design).
Waits for token refills are real time, with rates chosen to keep them short.
"""

import json
import math
import re
import signal
import threading
import time
import unittest

from harness import (RATE_LIMIT_HEADERS, Client, ProcessTestCase, RawConnection,
                     gateway_config, metric_sum, redis_call, request, wait_redis_ready,
                     wait_until)

QUOTA_EXCEEDED = "https://iana.org/assignments/http-problem-types#quota-exceeded"
TINY = 0.001  # refill rate that refills nothing within a test


def limit(key, capacity, rate, **extra):
    return {"key": key, "capacity": capacity, "refill_per_second": rate, **extra}


def route(name, prefix, limits, **extra):
    return {"name": name, "match": {"path_prefix": prefix}, "upstream": "echo",
            "limits": list(limits), **extra}


def parse_rate_limit(value):
    """`"name";r=N;t=N, ...` -> [(name, r, t)]; fails on any other shape."""
    items = []
    for item in value.split(", "):
        m = re.fullmatch(r'"([^"\\]+)";r=(\d+);t=(\d+)', item)
        assert m, f"RateLimit item not in the exact format: {item!r} (in {value!r})"
        items.append((m.group(1), int(m.group(2)), int(m.group(3))))
    return items


def policy(name, capacity, rate):
    """The exact RateLimit-Policy item of a limit."""
    return f'"{name}";q={capacity};w={math.ceil(capacity / rate)}'


class RateLimitTestCase(ProcessTestCase):
    """A redis-server and a sluice-echo per test; start_gateway() adds sluice."""

    threads = 2
    timeout_ms = 1000  # generous: these tests are about decisions, not about Redis failures

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()

    def start_gateway(self, routes, limits, name="sluice", redis=None, api_keys=None,
                      server=None, wait_ready=True, **sections):
        """sections: other top-level sections (exemptions...)."""
        sections.update({
            "redis": {"url": f"redis://127.0.0.1:{self.redis.port}/0",
                      "timeout_ms": self.timeout_ms, **(redis or {})},
            "limits": limits,
        })
        if api_keys is not None:
            sections["api_keys"] = api_keys
        config = gateway_config(
            {"echo": [self.echo.address]}, routes,
            server={"threads": self.threads, "trusted_proxies": ["127.0.0.1/32"],
                    **(server or {})},
            **sections)
        gateway = self.start_sluice(config, name=name)
        if wait_ready:
            wait_redis_ready(gateway)
        return gateway

    # -- requests and assertions

    def get(self, gateway, target, headers=None):
        return request(gateway.port, "GET", target, headers=headers or {})

    def concurrent_statuses(self, gateways, target, count, headers=None, per_gateway=2):
        """`per_gateway` clients on each gateway at once, each sending `count`
        requests on one connection; every status."""
        statuses = []
        lock = threading.Lock()

        def client(gateway):
            with Client(gateway.port) as conn:
                got = [conn.request("GET", target, headers=headers)[0] for _ in range(count)]
            with lock:
                statuses.extend(got)

        threads = [threading.Thread(target=client, args=(gw,))
                   for gw in gateways for _ in range(per_gateway)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
        return statuses

    def assert_allowed(self, gateway, target, headers=None, remaining=None, msg=""):
        status, h, body = self.get(gateway, target, headers)
        self.assertEqual(status, 200, f"{msg} GET {target} {headers}: {body[:300]!r}")
        self.assertIsNotNone(h.get("X-RateLimit-Remaining"),
                             f"{msg} GET {target} {headers}: no rate-limit headers: {h}")
        if remaining is not None:
            self.assertEqual(int(h["X-RateLimit-Remaining"]), remaining,
                             f"{msg} GET {target} {headers}")
        return h

    def assert_limited(self, gateway, target, headers=None, msg=""):
        status, h, body = self.get(gateway, target, headers)
        self.assertEqual(status, 429, f"{msg} GET {target} {headers}: expected 429, got "
                                      f"{status} {dict(h)} {body[:300]!r}")
        self.assertEqual(h.get("X-RateLimit-Remaining"), "0", f"{msg} {dict(h)}")
        return h, json.loads(body)

    def assert_no_rate_limit_headers(self, headers, msg=""):
        present = {n: headers.get(n) for n in (*RATE_LIMIT_HEADERS, "Retry-After")
                   if headers.get(n) is not None}
        self.assertEqual(present, {}, f"{msg}: unexpected rate-limit headers")


class BurstAndHeadersTest(RateLimitTestCase):
    def test_burst_counts_down_then_429_with_exact_headers_and_problem_body(self):
        capacity, rate = 5, 0.1  # w = 50 s; nothing refills noticeably during the test
        gw = self.start_gateway([route("burst", "/burst", ["burst"])],
                                {"burst": limit("ip", capacity, rate)})
        for k in range(1, capacity + 1):
            status, h, body = self.get(gw, "/burst/x")
            self.assertEqual(status, 200, body[:300])
            self.assertEqual(json.loads(body)["target"], "/burst/x")  # reached the upstream
            self.assertEqual(h["X-RateLimit-Limit"], str(capacity))
            self.assertEqual(h["X-RateLimit-Remaining"], str(capacity - k), f"request {k}")
            # Seconds until full: ceil((C - tokens) / R) = 10 k (a little less as time passes).
            reset = int(h["X-RateLimit-Reset"])
            self.assertTrue(10 * k - 1 <= reset <= 10 * k, f"request {k}: Reset {reset}")
            self.assertEqual(h["RateLimit-Policy"], '"burst";q=5;w=50')
            [(name, r, t)] = parse_rate_limit(h["RateLimit"])
            self.assertEqual((name, r), ("burst", capacity - k), h["RateLimit"])
            if k < capacity:
                self.assertEqual(t, 0, f"request {k}: a token is available: {h['RateLimit']}")
            else:
                self.assertTrue(1 <= t <= 10, h["RateLimit"])
            self.assertIsNone(h.get("Retry-After"), "Retry-After on an allowed request")

        status, h, body = self.get(gw, "/burst/x")
        self.assertEqual(status, 429, body[:300])
        self.assertEqual(h.get("Content-Type"), "application/problem+json")
        self.assertEqual(h.get("Cache-Control"), "no-store")
        self.assertRegex(h.get("Retry-After") or "", r"^\d+$")
        retry_after = int(h["Retry-After"])
        self.assertTrue(1 <= retry_after <= 10, retry_after)  # ceil(1 token / 0.1 per s)
        self.assertEqual(h["X-RateLimit-Limit"], "5")
        self.assertEqual(h["X-RateLimit-Remaining"], "0")
        self.assertTrue(49 <= int(h["X-RateLimit-Reset"]) <= 50, h["X-RateLimit-Reset"])
        self.assertEqual(h["RateLimit-Policy"], '"burst";q=5;w=50')
        [(name, r, t)] = parse_rate_limit(h["RateLimit"])
        self.assertEqual((name, r, t), ("burst", 0, retry_after), h["RateLimit"])

        doc = json.loads(body)
        self.assertEqual(doc["type"], QUOTA_EXCEEDED)
        self.assertEqual(doc["title"], "Too Many Requests")
        self.assertEqual(doc["status"], 429)
        self.assertEqual(doc["violated-policies"], ["burst"])
        self.assertIsInstance(doc["retry_after_ms"], int)
        self.assertTrue(0 < doc["retry_after_ms"] <= 10000, doc)
        self.assertLessEqual(abs(math.ceil(doc["retry_after_ms"] / 1000) - retry_after), 1, doc)

        self.assertEqual(self.echo.counts()["requests"], capacity, "a denied request went upstream")
        self.assertEqual(gw.metric("sluice_ratelimit_decisions_total", route="burst",
                                   limit="burst", decision="allowed"), capacity)
        self.assertEqual(gw.metric("sluice_ratelimit_decisions_total", route="burst",
                                   limit="burst", decision="limited"), 1)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_fail_open_total"), 0)

    def test_refill_after_waiting(self):
        capacity, rate = 2, 2  # one token per 500 ms
        gw = self.start_gateway([route("refill", "/refill", ["refill"])],
                                {"refill": limit("ip", capacity, rate)})
        self.assertEqual(self.assert_allowed(gw, "/refill")["RateLimit-Policy"],
                         '"refill";q=2;w=1')
        self.assert_allowed(gw, "/refill", remaining=0)
        _, doc = self.assert_limited(gw, "/refill")
        self.assertTrue(0 < doc["retry_after_ms"] <= 500, doc)
        # Waiting the announced time is enough for one more request.
        time.sleep(doc["retry_after_ms"] / 1000 + 0.02)
        self.assert_allowed(gw, "/refill", msg="after waiting retry_after_ms")
        # Waiting the time to refill completely (C / R) gives a full bucket again.
        time.sleep(capacity / rate + 0.05)
        h = self.assert_allowed(gw, "/refill", remaining=capacity - 1,
                                msg="after waiting C/R seconds")
        self.assertEqual(h["X-RateLimit-Reset"], "1")  # ceil(1 token / 2 per s)

    def test_fractional_rates(self):
        gw = self.start_gateway(
            [route("half", "/half", ["half"]), route("odd", "/odd", ["odd"])],
            {"half": limit("ip", 3, 0.5), "odd": limit("ip", 1, 2.5)})
        for k in range(1, 4):
            h = self.assert_allowed(gw, "/half", remaining=3 - k)
            self.assertEqual(h["RateLimit-Policy"], '"half";q=3;w=6')  # ceil(3 / 0.5)
            self.assertTrue(2 * k - 1 <= int(h["X-RateLimit-Reset"]) <= 2 * k, dict(h))
        h, doc = self.assert_limited(gw, "/half")
        self.assertEqual(h["Retry-After"], "2")  # ceil(1 token / 0.5 per s)
        self.assertTrue(1000 < doc["retry_after_ms"] <= 2000, doc)

        # 2.5 tokens/s: one token takes 400 ms (not 500 ms as with a rate rounded to 2).
        started = time.monotonic()
        h = self.assert_allowed(gw, "/odd", remaining=0)
        self.assertEqual(h["RateLimit-Policy"], '"odd";q=1;w=1')
        h, doc = self.assert_limited(gw, "/odd")
        elapsed_ms = (time.monotonic() - started) * 1000
        self.assertEqual(h["Retry-After"], "1")
        # 400 ms less the time between the two decisions (at most what passed here).
        self.assertTrue(400 - elapsed_ms - 1 < doc["retry_after_ms"] <= 400, (doc, elapsed_ms))
        time.sleep(doc["retry_after_ms"] / 1000 + 0.02)
        self.assert_allowed(gw, "/odd", msg="0.42 s after the denial at 2.5 tokens/s")

    def test_cost_greater_than_one(self):
        gw = self.start_gateway(
            [route("costly", "/costly", ["shared"], cost=2), route("cheap", "/cheap", ["shared"])],
            {"shared": limit("ip", 5, 0.01)})
        h = self.assert_allowed(gw, "/costly", remaining=3)
        self.assertEqual(h["RateLimit-Policy"], '"shared";q=5;w=500')
        self.assertEqual(parse_rate_limit(h["RateLimit"]), [("shared", 3, 0)])
        h = self.assert_allowed(gw, "/costly", remaining=1)
        [(_, r, t)] = parse_rate_limit(h["RateLimit"])
        self.assertEqual(r, 1)
        self.assertTrue(99 <= t <= 100, h["RateLimit"])  # 1 more token at 0.01/s
        status, h, body = self.get(gw, "/costly")
        self.assertEqual(status, 429, body[:300])
        self.assertEqual(h["X-RateLimit-Remaining"], "1")  # 1 token left, 2 needed
        [(_, r, t)] = parse_rate_limit(h["RateLimit"])
        self.assertEqual(r, 1)
        self.assertTrue(99 <= t <= 100, h["RateLimit"])
        self.assertEqual(h["Retry-After"], str(t))
        # The denial debited nothing: the last token still serves a cost-1 request.
        self.assert_allowed(gw, "/cheap", remaining=0)
        self.assert_limited(gw, "/cheap")


class KeySourcesTest(RateLimitTestCase):
    """Each key source gives separate buckets; a missing source falls back to the IP."""

    def setUp(self):
        super().setUp()
        one = lambda key: limit(key, 1, TINY)  # noqa: E731  one request per bucket
        self.gw = self.start_gateway(
            [route("ip", "/ip", ["by_ip"]),
             route("path", "/path", ["by_path"]),
             route("header", "/header", ["by_header"]),
             route("query", "/query", ["by_query"]),
             route("key", "/key", ["by_key"]),
             route("combo", "/combo", ["by_combo"])],
            {"by_ip": one("ip"), "by_path": one("path"), "by_header": one("header:X-Tenant"),
             "by_query": one("query:tenant"), "by_key": one("api_key"),
             "by_combo": one(["api_key", "path"])},
            api_keys={"header": "X-API-Key"})

    def missing(self, route_name, source):
        return metric_sum(self.gw, "sluice_ratelimit_missing_key_total", route=route_name,
                          source=source)

    def test_ip_key_uses_trusted_forwarded_for(self):
        gw = self.gw
        self.assert_allowed(gw, "/ip", {"X-Forwarded-For": "10.2.0.1"})
        self.assert_limited(gw, "/ip", {"X-Forwarded-For": "10.2.0.1"})
        self.assert_allowed(gw, "/ip", {"X-Forwarded-For": "10.2.0.2"})
        # The right-most untrusted entry is the client: 10.2.0.1 again.
        self.assert_limited(gw, "/ip", {"X-Forwarded-For": "10.9.9.9, 10.2.0.1"})
        # 127.0.0.1 is a trusted proxy: the client is 10.2.0.3.
        self.assert_allowed(gw, "/ip", {"X-Forwarded-For": "10.2.0.3, 127.0.0.1"})
        self.assert_limited(gw, "/ip", {"X-Forwarded-For": "10.2.0.3"})
        self.assert_allowed(gw, "/ip")  # the TCP peer 127.0.0.1 itself
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_missing_key_total"), 0)

    def test_path_key(self):
        gw = self.gw
        self.assert_allowed(gw, "/path/a")
        self.assert_limited(gw, "/path/a?x=1", msg="the query is not part of the path")
        self.assert_limited(gw, "/path/a", {"X-Forwarded-For": "10.2.1.1"},
                            msg="another client, same path")
        self.assert_allowed(gw, "/path/b")

    def test_path_key_uses_the_normalized_path(self):
        # Spellings of one path share its bucket: slashes merged, unreserved
        # characters decoded, ";parameters" removed (the upstream still gets them).
        gw = self.gw
        self.assert_allowed(gw, "/path/n/x")
        for variant in ("//path/n/x", "/path//n/x", "/p%61th/n/%78", "/path;v=1/n/x",
                        "/path/n;jsessionid=2/x", "/path/n/x;", "/path/n/;p/x"):
            with self.subTest(variant=variant):
                self.assert_limited(gw, variant)
        # Routes are case-sensitive, so /PATH is no spelling of /path: no route at all.
        self.assertEqual(self.get(gw, "/PATH/n/x")[0], 404)

    def test_header_key_and_fallback_to_ip(self):
        gw = self.gw
        self.assert_allowed(gw, "/header", {"X-Tenant": "t1"})
        self.assert_limited(gw, "/header", {"X-Tenant": "t1", "X-Forwarded-For": "10.2.2.9"})
        self.assert_allowed(gw, "/header", {"x-tenant": "t2"})
        self.assertEqual(self.missing("header", "header"), 0)
        # Missing header: the client IP's bucket.
        self.assert_allowed(gw, "/header", {"X-Forwarded-For": "10.2.2.1"})
        self.assert_limited(gw, "/header", {"X-Forwarded-For": "10.2.2.1"})
        self.assert_allowed(gw, "/header", {"X-Forwarded-For": "10.2.2.2"})
        self.assertEqual(self.missing("header", "header"), 3)

    def test_query_key_and_fallback_to_ip(self):
        gw = self.gw
        self.assert_allowed(gw, "/query?tenant=a")
        self.assert_limited(gw, "/query/other?x=1&tenant=a")
        self.assert_allowed(gw, "/query?tenant=b")
        self.assertEqual(self.missing("query", "query"), 0)
        self.assert_allowed(gw, "/query?other=1", {"X-Forwarded-For": "10.2.3.1"})
        self.assert_limited(gw, "/query", {"X-Forwarded-For": "10.2.3.1"})
        self.assertEqual(self.missing("query", "query"), 2)

    def test_api_key_header_and_fallback_to_ip(self):
        gw = self.gw
        self.assert_allowed(gw, "/key", {"X-API-Key": "key-a"})
        self.assert_limited(gw, "/key", {"X-API-Key": "key-a", "X-Forwarded-For": "10.2.4.9"},
                            msg="same key from another IP")
        self.assert_allowed(gw, "/key", {"X-API-Key": "key-b"})
        self.assertEqual(self.missing("key", "api_key"), 0)
        # No key: limited by client IP, and counted.
        self.assert_allowed(gw, "/key", {"X-Forwarded-For": "10.2.4.1"})
        self.assert_limited(gw, "/key", {"X-Forwarded-For": "10.2.4.1"})
        self.assert_allowed(gw, "/key", {"X-Forwarded-For": "10.2.4.2"})
        self.assertEqual(self.missing("key", "api_key"), 3)
        # A key's bucket does not depend on the IP it comes from.
        self.assert_allowed(gw, "/key", {"X-API-Key": "key-c", "X-Forwarded-For": "10.2.4.1"})
        # A key longer than 256 bytes counts as missing: IP bucket.
        self.assert_limited(gw, "/key", {"X-API-Key": "k" * 300, "X-Forwarded-For": "10.2.4.1"})
        self.assertEqual(self.missing("key", "api_key"), 4)

    def test_composite_key(self):
        gw = self.gw
        self.assert_allowed(gw, "/combo/a", {"X-API-Key": "k1"})
        self.assert_limited(gw, "/combo/a", {"X-API-Key": "k1"})
        self.assert_allowed(gw, "/combo/b", {"X-API-Key": "k1"}, msg="same key, other path")
        self.assert_allowed(gw, "/combo/a", {"X-API-Key": "k2"}, msg="other key, same path")
        self.assertEqual(self.missing("combo", "api_key"), 0)
        # No key: IP + path.
        self.assert_allowed(gw, "/combo/a", {"X-Forwarded-For": "10.2.5.1"})
        self.assert_limited(gw, "/combo/a", {"X-Forwarded-For": "10.2.5.1"})
        self.assert_allowed(gw, "/combo/b", {"X-Forwarded-For": "10.2.5.1"})
        self.assertEqual(self.missing("combo", "api_key"), 3)


class ApiKeyConfigTest(RateLimitTestCase):
    def test_authorization_bearer(self):
        gw = self.start_gateway([route("bearer", "/b", ["per_key"])],
                                {"per_key": limit("api_key", 1, TINY)},
                                api_keys={"header": "Authorization"})
        self.assert_allowed(gw, "/b", {"Authorization": "Bearer tok-a"})
        self.assert_limited(gw, "/b", {"Authorization": "Bearer tok-a",
                                       "X-Forwarded-For": "10.3.0.9"})
        self.assert_allowed(gw, "/b", {"Authorization": "Bearer tok-b"})
        missing = lambda: metric_sum(gw, "sluice_ratelimit_missing_key_total",  # noqa: E731
                                     route="bearer", source="api_key")
        self.assertEqual(missing(), 0)
        # Not a Bearer token, or the key in another header: missing, so the IP's bucket.
        self.assert_allowed(gw, "/b", {"X-API-Key": "tok-c", "X-Forwarded-For": "10.3.0.1"})
        self.assert_limited(gw, "/b", {"Authorization": "Basic dXNlcjpwYXNz",
                                       "X-Forwarded-For": "10.3.0.1"})
        self.assertEqual(missing(), 2)

    def test_plans_and_unknown_keys(self):
        gw = self.start_gateway(
            [route("plans", "/plans", ["per_key"])],
            {"per_key": limit("api_key", 2, TINY,
                              plans={"pro": {"capacity": 4, "refill_per_second": 0.002}})},
            api_keys={"header": "X-API-Key", "default_plan": "free",
                      "consumers": [{"key": "pro-key", "plan": "pro"},
                                    {"key": "free-key", "plan": "free"},
                                    {"key": "free-key-2", "plan": "free"}]})
        for k in range(1, 5):
            h = self.assert_allowed(gw, "/plans", {"X-API-Key": "pro-key"}, remaining=4 - k)
            self.assertEqual(h["X-RateLimit-Limit"], "4")
            self.assertEqual(h["RateLimit-Policy"], '"per_key";q=4;w=2000')
        self.assert_limited(gw, "/plans", {"X-API-Key": "pro-key"})
        for k in range(1, 3):
            h = self.assert_allowed(gw, "/plans", {"X-API-Key": "free-key"}, remaining=2 - k)
            self.assertEqual(h["X-RateLimit-Limit"], "2")
            self.assertEqual(h["RateLimit-Policy"], '"per_key";q=2;w=2000')
        self.assert_limited(gw, "/plans", {"X-API-Key": "free-key"})
        self.assert_allowed(gw, "/plans", {"X-API-Key": "free-key-2"}, remaining=1)
        missing = lambda: metric_sum(gw, "sluice_ratelimit_missing_key_total",  # noqa: E731
                                     route="plans", source="api_key")
        self.assertEqual(missing(), 0)

        # Unknown keys are missing keys: they share the client IP's bucket, so fresh random
        # keys cannot mint fresh buckets.
        xff = {"X-Forwarded-For": "10.3.1.1"}
        h = self.assert_allowed(gw, "/plans", {"X-API-Key": "random-0", **xff})
        capacity = int(h["X-RateLimit-Limit"])
        for i in range(1, capacity):
            self.assert_allowed(gw, "/plans", {"X-API-Key": f"random-{i}", **xff},
                                remaining=capacity - 1 - i)
        self.assert_limited(gw, "/plans", {"X-API-Key": f"random-{capacity}", **xff})
        self.assert_limited(gw, "/plans", xff, msg="no key, same IP as the unknown keys")
        self.assert_allowed(gw, "/plans", {"X-API-Key": "random-x",
                                           "X-Forwarded-For": "10.3.1.2"})
        self.assertEqual(missing(), capacity + 3)


class IdentityTest(RateLimitTestCase):
    """The limiter keys on exactly what the upstream receives: a keyed header sent twice,
    or a keyed query parameter given twice, is refused (the upstream would see both), and
    equivalent spellings of one identity share one bucket."""

    def setUp(self):
        super().setUp()
        one = lambda key: limit(key, 1, TINY)  # noqa: E731  one request per bucket
        self.gw = self.start_gateway(
            [route("key", "/key", ["by_key"]),
             route("header", "/header", ["by_header"]),
             route("query", "/query", ["by_query"]),
             route("ip", "/ip", ["by_ip"])],
            {"by_key": one("api_key"), "by_header": one("header:X-Tenant"),
             "by_query": one("query:user"), "by_ip": limit("ip", 100, TINY)},
            api_keys={"header": "X-API-Key"})

    def raw(self, target, header_lines=()):
        """One request with exactly these header lines; returns (response, closed after)."""
        head = f"GET {target} HTTP/1.1\r\nHost: sluice.test\r\n"
        head += "".join(f"{line}\r\n" for line in header_lines) + "\r\n"
        with RawConnection(self.gw.port) as conn:
            conn.send(head.encode())
            response = conn.read_response()
            return response, conn.is_closed()

    def rejected(self, route_name, reason):
        return metric_sum(self.gw, "sluice_ratelimit_rejected_total", route=route_name,
                          reason=reason)

    def assert_refused(self, target, header_lines=(), message=None):
        response, closed = self.raw(target, header_lines)
        self.assertEqual(response.status, 400, f"{target} {header_lines}: {response}")
        doc = response.json()
        self.assertEqual(doc["status"], 400, doc)
        if message is not None:
            self.assertEqual(doc["message"], message, doc)
        self.assertTrue(closed, f"{target} {header_lines}: connection kept after the 400")
        self.assertIsNone(response.header("X-RateLimit-Remaining"), response)
        return doc

    def test_two_api_key_lines_are_refused_and_never_reach_the_upstream(self):
        doc = self.assert_refused("/key", ["X-API-Key: random-1", "X-API-Key: victim-key"])
        self.assertNotIn("victim-key", json.dumps(doc))
        self.assert_refused("/key", ["x-api-key: random-2", "X-API-KEY: victim-key"])
        self.assertEqual(self.echo.counts()["requests"], 0, "a refused request went upstream")
        self.assertEqual(self.rejected("key", "duplicate_identity"), 2)
        # The victim's bucket was not touched; a single line is keyed as before.
        self.assert_allowed(self.gw, "/key", {"X-API-Key": "victim-key"}, remaining=0)
        self.assert_limited(self.gw, "/key", {"X-API-Key": "victim-key"})
        # A route whose limits do not key on the API key lets duplicates through.
        response, _ = self.raw("/ip", ["X-API-Key: a", "X-API-Key: b"])
        self.assertEqual(response.status, 200, response)
        self.assertEqual(self.rejected("ip", "duplicate_identity"), 0)
        self.assertNotIn("victim-key", self.gw.metrics())

    def test_two_lines_of_a_keyed_header_are_refused(self):
        self.assert_refused("/header", ["X-Tenant: t-random", "X-Tenant: t-victim"])
        self.assertEqual(self.rejected("header", "duplicate_identity"), 1)
        self.assertEqual(self.echo.counts()["requests"], 0)
        # Other headers may repeat.
        response, _ = self.raw("/header", ["X-Tenant: t1", "X-Other: a", "X-Other: b"])
        self.assertEqual(response.status, 200, response)

    def test_a_keyed_query_parameter_given_twice_is_refused(self):
        self.assert_refused("/query?user=random&user=victim")
        self.assert_refused("/query?user=random&us%65r=victim")  # names compared decoded
        self.assert_refused("/query?user&user=victim")
        self.assertEqual(self.rejected("query", "duplicate_identity"), 3)
        self.assertEqual(self.echo.counts()["requests"], 0)
        # Other parameters may repeat.
        self.assert_allowed(self.gw, "/query?user=u1&x=1&x=2")

    def test_form_encoded_query_values_share_one_bucket(self):
        self.assert_allowed(self.gw, "/query?user=a+b", remaining=0)
        self.assert_limited(self.gw, "/query?user=a%20b")
        self.assert_limited(self.gw, "/query?%75ser=a%20b")
        self.assert_allowed(self.gw, "/query?user=a%2Bb", msg="an escaped '+' is a '+'")


class BearerTest(RateLimitTestCase):
    """api_keys.header: Authorization takes exactly "Bearer <token68>"."""

    def setUp(self):
        super().setUp()
        self.gw = self.start_gateway(
            [route("bearer", "/b", ["per_key"]), route("open", "/open", ["per_ip"])],
            {"per_key": limit("api_key", 1, TINY), "per_ip": limit("ip", 100, TINY)},
            api_keys={"header": "Authorization"})

    def test_malformed_bearer_credentials_are_refused(self):
        for value in ("Bearer tok-a,", "Bearer tok-a extra", "Bearer", "Bearer tok a",
                      "Bearer to=k", "Bearer\ttok-a"):
            with RawConnection(self.gw.port) as conn:
                conn.send(f"GET /b HTTP/1.1\r\nHost: h\r\nAuthorization: {value}\r\n\r\n"
                          .encode())
                response = conn.read_response()
                self.assertEqual(response.status, 400, f"{value!r}: {response}")
                self.assertEqual(response.json()["message"], "malformed Authorization header")
                self.assertTrue(conn.is_closed(), f"{value!r}: connection kept")
        self.assertEqual(self.echo.counts()["requests"], 0)
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_rejected_total", route="bearer",
                                    reason="malformed_authorization"), 6)
        # The same value on a route that does not key on the API key passes.
        status, _, body = self.get(self.gw, "/open", {"Authorization": "Bearer tok-a,"})
        self.assertEqual(status, 200, body[:300])

    def test_equivalent_bearer_spellings_share_one_bucket(self):
        self.assert_allowed(self.gw, "/b", {"Authorization": "Bearer tok-a"}, remaining=0)
        self.assert_limited(self.gw, "/b", {"Authorization": "bearer   tok-a "})
        self.assert_limited(self.gw, "/b", {"Authorization": "BEARER tok-a"})
        self.assert_allowed(self.gw, "/b", {"Authorization": "Bearer dG9r+/_.~-=="})
        # Another scheme is a missing key (the client IP's bucket), not a malformed one.
        self.assert_allowed(self.gw, "/b", {"Authorization": "Basic dXNlcjpwYXNz",
                                            "X-Forwarded-For": "10.4.0.1"})
        self.assert_limited(self.gw, "/b", {"Authorization": "Basic dXNlcjpwYXNz",
                                            "X-Forwarded-For": "10.4.0.1"})

    def test_two_authorization_lines_are_refused(self):
        with RawConnection(self.gw.port) as conn:
            conn.send(b"GET /b HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer random\r\n"
                      b"Authorization: Bearer victim\r\n\r\n")
            response = conn.read_response()
            self.assertEqual(response.status, 400, response)
            self.assertTrue(conn.is_closed())
        self.assertEqual(self.echo.counts()["requests"], 0)
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_rejected_total", route="bearer",
                                    reason="duplicate_identity"), 1)
        self.assert_allowed(self.gw, "/b", {"Authorization": "Bearer victim"}, remaining=0)


class AllOrNothingTest(RateLimitTestCase):
    def test_denied_request_debits_no_other_limit(self):
        gw = self.start_gateway(
            [route("both", "/both", ["small", "big"]), route("bigonly", "/bigonly", ["big"])],
            {"small": limit("ip", 2, TINY), "big": limit("ip", 10, TINY)})
        h = self.assert_allowed(gw, "/both", remaining=1)
        self.assertEqual(h["RateLimit-Policy"], '"small";q=2;w=2000, "big";q=10;w=10000')
        self.assertEqual(parse_rate_limit(h["RateLimit"]), [("small", 1, 0), ("big", 9, 0)])
        self.assertEqual(h["X-RateLimit-Limit"], "2")  # the most restrictive limit
        h = self.assert_allowed(gw, "/both", remaining=0)
        self.assertEqual([(n, r) for n, r, _ in parse_rate_limit(h["RateLimit"])],
                         [("small", 0), ("big", 8)])
        for _ in range(3):
            h, doc = self.assert_limited(gw, "/both")
            self.assertEqual(h["X-RateLimit-Limit"], "2")
            items = parse_rate_limit(h["RateLimit"])
            self.assertEqual([(n, r) for n, r, _ in items], [("small", 0), ("big", 8)],
                             "a denied request debited the limit it did not violate")
            self.assertEqual(items[1][2], 0, h["RateLimit"])  # big still has tokens
            self.assertEqual(doc["violated-policies"], ["small"])
        # The other limit alone: 2 debited, not 5.
        h = self.assert_allowed(gw, "/bigonly", remaining=7)
        self.assertEqual(h["X-RateLimit-Limit"], "10")


class ConcurrencyTest(RateLimitTestCase):
    timeout_ms = 3000  # a decision must not time out under load: it would blur the count

    def test_two_instances_64_clients_exactly_capacity_allowed(self):
        capacity, clients, per_client = 50, 64, 4
        routes = [route("conc", "/conc", ["shared"], on_redis_failure="closed")]
        limits = {"shared": limit("api_key", capacity, TINY)}
        gateways = [self.start_gateway(routes, limits, name=f"sluice-{i}") for i in range(2)]
        barrier = threading.Barrier(clients)
        results, errors = [], []
        lock = threading.Lock()

        def client(index):
            conns = [Client(gw.port, timeout=30) for gw in gateways]
            try:
                barrier.wait(timeout=30)
                for n in range(per_client):
                    status, h, _ = conns[(index + n) % 2].request(
                        "GET", f"/conc/{index}/{n}", headers={"X-API-Key": "one-shared-key"})
                    with lock:
                        results.append((status, h.get("X-RateLimit-Remaining")))
            except Exception as e:  # noqa: BLE001  reported below
                with lock:
                    errors.append(repr(e))
            finally:
                for c in conns:
                    c.close()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        self.assertEqual(errors, [])
        self.assertFalse(any(t.is_alive() for t in threads), "clients still running")
        statuses = {}
        for status, _ in results:
            statuses[status] = statuses.get(status, 0) + 1
        self.assertEqual(statuses, {200: capacity, 429: clients * per_client - capacity})
        # Every token was handed out once: the 200s saw remaining 49, 48, ... 0.
        self.assertEqual(sorted(int(r) for s, r in results if s == 200), list(range(capacity)))
        allowed = sum(metric_sum(gw, "sluice_ratelimit_decisions_total", decision="allowed")
                      for gw in gateways)
        self.assertEqual(allowed, capacity)
        self.assertEqual(sum(metric_sum(gw, "sluice_ratelimit_fail_closed_total")
                             for gw in gateways), 0)


class RedisStateTest(RateLimitTestCase):
    def test_redis_keys_hold_no_raw_key_material_and_all_expire(self):
        markers = {"api_key": "RAWKEY-7f3c9a", "path": "RAWPATH-b81d",
                   "header": "RAWTENANT-55e2", "query": "RAWQUERY-c4a7", "ip": "10.123.45.67"}
        limits = {"per_key": limit("api_key", 5, 1), "per_ip": limit("ip", 5, 1),
                  "per_path": limit("path", 5, 1), "per_header": limit("header:X-Tenant", 5, 1),
                  "per_query": limit("query:tenant", 5, 1),
                  "per_combo": limit(["api_key", "path", "query:tenant"], 5, 1),
                  "per_global": limit("global", 5, 1)}
        gw = self.start_gateway([route("secret", "/secret", list(limits))], limits,
                                redis={"key_prefix": "it-prefix:"})
        target = f"/secret/{markers['path']}?tenant={markers['query']}"
        headers = {"X-API-Key": markers["api_key"], "X-Tenant": markers["header"],
                   "X-Forwarded-For": markers["ip"]}
        for remaining in (4, 3):
            self.assert_allowed(gw, target, headers, remaining=remaining)

        keys = redis_call(self.redis.port, "KEYS", "*")
        self.assertEqual(len(keys), len(limits), keys)
        names = set()
        for key in keys:
            m = re.fullmatch(rb"it-prefix:([a-z_]+):([0-9a-f]{32})", key)
            self.assertTrue(m, f"Redis key not prefix + limit + ':' + 32 hex: {key!r}")
            names.add(m.group(1).decode())
            value = redis_call(self.redis.port, "GET", key)
            self.assertIsInstance(value, bytes, key)
            for source, marker in markers.items():
                for blob in (key, value):
                    self.assertNotIn(marker.encode(), blob, f"raw {source} in Redis: {key!r}")
                    self.assertNotIn(marker.lower().encode(), blob.lower())
            self.assertNotIn(bytes([10, 123, 45, 67]), value)
            pttl = redis_call(self.redis.port, "PTTL", key)
            # Time to refill completely is 5 s here; allow a generous margin.
            self.assertTrue(0 < pttl <= 5000 + 60000, f"{key!r}: PTTL {pttl}")
        self.assertEqual(names, set(limits))

        # The raw API key is nowhere Sluice writes (logs, metrics); metric labels carry
        # no request data at all.
        logs = gw.stdout() + gw.stderr()
        self.assertIn(markers["path"], logs, "the access log should have logged the requests")
        self.assertNotIn(markers["api_key"], logs)
        metrics = gw.metrics()
        for source, marker in markers.items():
            self.assertNotIn(marker, metrics, f"raw {source} in /metrics")

    def test_unlimited_route_has_no_headers_and_works_without_redis(self):
        gw = self.start_gateway(
            [route("free", "/free", []), route("limited", "/limited", ["lim"])],
            {"lim": limit("ip", 5, 1)})
        status, h, body = self.get(gw, "/free")
        self.assertEqual(status, 200, body[:300])
        self.assert_no_rate_limit_headers(h, "route with limits: []")
        self.assert_allowed(gw, "/limited", remaining=4)

        self.redis.signal(signal.SIGKILL)
        self.redis.wait(5)
        wait_until(lambda: gw.metric("sluice_redis_up") == 0, 5, message="sluice_redis_up 0")
        for i in range(5):
            started = time.monotonic()
            status, h, body = self.get(gw, f"/free/{i}")
            elapsed = time.monotonic() - started
            self.assertEqual(status, 200, body[:300])
            self.assertEqual(json.loads(body)["target"], f"/free/{i}")
            self.assert_no_rate_limit_headers(h, "unlimited route with Redis down")
            self.assertLess(elapsed, 1.0)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_fail_open_total", route="free"), 0)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_fail_open_total"), 0)

    def test_script_flush_is_recovered_without_a_failed_decision(self):
        gw = self.start_gateway(
            [route("flush", "/flush", ["lim"], on_redis_failure="closed"),
             route("flush_open", "/flush-open", ["lim"])],
            {"lim": limit("ip", 12, TINY)})
        remaining = 11
        for _ in range(3):
            self.assert_allowed(gw, "/flush", remaining=remaining)
            remaining -= 1
        for flush in range(2):
            self.assertEqual(redis_call(self.redis.port, "SCRIPT", "FLUSH"), "OK")
            # Fresh connections, so both workers (each with its own Redis connection) see it.
            for target in ("/flush", "/flush-open", "/flush", "/flush-open"):
                self.assert_allowed(gw, target, remaining=remaining,
                                    msg=f"after SCRIPT FLUSH #{flush + 1}")
                remaining -= 1
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_fail_open_total"), 0)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_fail_closed_total"), 0)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_decisions_total", decision="allowed"),
                         11)
        # The flushes were really seen (and absorbed): Redis answered NOSCRIPT after each.
        stats = redis_call(self.redis.port, "INFO", "errorstats").decode()
        m = re.search(r"errorstat_NOSCRIPT:count=(\d+)", stats)
        self.assertTrue(m and int(m.group(1)) >= 2, f"no NOSCRIPT seen by Redis:\n{stats}")


if __name__ == "__main__":
    unittest.main()


class ReloadTest(RateLimitTestCase):
    """SIGHUP with new limits or a new Redis: the new settings apply at once and
    no request is lost or left without a decision."""

    def config(self, gateway, redis_port, capacity):
        return gateway_config(
            {"echo": [self.echo.address]}, [route("r", "/r", ["per_ip"])],
            server={"threads": self.threads}, port=gateway.port, admin_port=gateway.admin_port,
            redis={"url": f"redis://127.0.0.1:{redis_port}/0", "timeout_ms": self.timeout_ms},
            limits={"per_ip": limit("ip", capacity, TINY)})

    def test_reload_changes_limits_and_redis_without_failed_decisions(self):
        gateway = self.start_gateway([route("r", "/r", ["per_ip"])],
                                     {"per_ip": limit("ip", 5, TINY)})
        status, headers, _ = request(gateway.port, "GET", "/r/1")
        self.assertEqual((status, headers.get("X-RateLimit-Limit")), (200, "5"))

        # A new capacity takes effect at once on the same bucket (state kept).
        gateway.reload(self.config(gateway, self.redis.port, 8))
        wait_until(lambda: request(gateway.port, "GET", "/r/x")[1].get("X-RateLimit-Limit") == "8",
                   timeout=10)

        # A new Redis: requests keep being decided throughout, and land there.
        other = self.start_redis()
        stop = threading.Event()
        outcomes = []

        def load():
            while not stop.is_set():
                s, h, _ = request(gateway.port, "GET", "/r/load")
                outcomes.append((s, "X-RateLimit-Limit" in h))

        worker = threading.Thread(target=load)
        worker.start()
        try:
            gateway.reload(self.config(gateway, other.port, 1000))
            wait_until(lambda: redis_call(other.port, "DBSIZE") == 1, timeout=10)
        finally:
            stop.set()
            worker.join()
        self.assertTrue(outcomes)
        self.assertTrue(all(s in (200, 429) and has for s, has in outcomes),
                        f"a request went without a decision: {outcomes[-10:]}")
        self.assertEqual(metric_sum(gateway, "sluice_ratelimit_fail_open_total"), 0)
        self.assertEqual(metric_sum(gateway, "sluice_config_reloads_total", result="ok"), 2)
