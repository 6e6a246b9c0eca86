"""Route matchers on headers, query parameters and cookies, and weighted splits
between upstreams (routes[].upstreams, split_on), through the real sluice
binary and sluice-echo upstreams told apart by their request counts.

- A header, query or cookie matcher sends a request to another upstream, over
  HTTP/1.1 and HTTP/2 alike (HTTP/2 cookies in separate lines too); a route
  whose matchers fail gives no 405.
- A 95/5 split of 10,000 requests is exact within each worker (two workers:
  within two requests of the weights), with weight 0 taking nothing.
- split_on a cookie keeps each session on one side, the same on two gateways.
- A route's timeout_ms bounds the whole exchange (504 before the head), and its
  idle_timeout_ms replaces the upstream's response_timeout_ms, either way.
"""

import unittest

from harness import ProcessTestCase, gateway_config, pipelined, request
from testkit.h2client import H2Client


class TrafficRoutingTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.stable = self.start_echo("stable")
        self.canary = self.start_echo("canary")
        self.idle = self.start_echo("idle")

    def start(self, routes, threads=2, upstreams=None):
        config = gateway_config(
            {"stable": [self.stable.address], "canary": [self.canary.address],
             "idle": [self.idle.address], **(upstreams or {})},
            routes, server={"threads": threads, "http2": {"enabled": True}},
            log={"level": "warn", "access_log": False})
        return self.start_sluice(config)

    def served(self):
        return (self.stable.counts()["requests"], self.canary.counts()["requests"],
                self.idle.counts()["requests"])

    def went_to(self, send):
        """Which upstream served the one request send() makes."""
        before = self.served()
        status = send()
        after = self.served()
        self.assertEqual(status, 200)
        delta = [a - b for a, b in zip(after, before)]
        self.assertEqual(sorted(delta), [0, 0, 1], delta)
        return ("stable", "canary", "idle")[delta.index(1)]

    def test_matchers_over_http1_and_http2(self):
        gw = self.start([
            {"name": "beta", "upstream": "canary",
             "match": {"path_prefix": "/", "headers": [{"name": "X-Beta", "exact": "1"}]}},
            {"name": "v2", "upstream": "canary",
             "match": {"path_prefix": "/", "query": [{"name": "version", "prefix": "2"}]}},
            {"name": "cookie", "upstream": "idle",
             "match": {"path_prefix": "/", "cookies": [{"name": "lane", "regex": "fast|idle"}]}},
            {"name": "admin", "upstream": "idle",
             "match": {"path_prefix": "/", "methods": ["DELETE"],
                       "headers": [{"name": "X-Admin", "present": True}]}},
            {"name": "rest", "upstream": "stable",
             "match": {"path_prefix": "/", "methods": ["GET"]}},
        ])

        def h1(target, headers=None, method="GET"):
            return lambda: request(gw.port, method, target, headers=headers or {})[0]

        self.assertEqual(self.went_to(h1("/a", {"X-Beta": "1"})), "canary")
        self.assertEqual(self.went_to(h1("/a", {"X-Beta": "2"})), "stable")
        self.assertEqual(self.went_to(h1("/a?version=2.1")), "canary")
        self.assertEqual(self.went_to(h1("/a?version=1")), "stable")
        self.assertEqual(self.went_to(h1("/a", {"Cookie": "a=b; lane=fast"})), "idle")
        self.assertEqual(self.went_to(h1("/a", {"X-Admin": ""}, "DELETE")), "idle")
        # The admin route's matcher fails: it is not there, so no 405 from it.
        status, headers, _ = request(gw.port, "DELETE", "/a")
        self.assertEqual(status, 405)
        self.assertEqual(headers.get("Allow"), "GET")

        client = H2Client(gw.port)
        try:
            def h2(path, headers=()):
                return lambda: client.request("GET", path, headers=list(headers)).status

            self.assertEqual(self.went_to(h2("/a", [("x-beta", "1")])), "canary")
            self.assertEqual(self.went_to(h2("/a?version=20")), "canary")
            # HTTP/2 clients send each cookie in a line of its own.
            self.assertEqual(self.went_to(h2("/a", [("cookie", "a=b"), ("cookie", "lane=idle")])),
                             "idle")
            self.assertEqual(self.went_to(h2("/a")), "stable")
        finally:
            client.close()

    def test_split_is_exact_per_worker(self):
        gw = self.start([{"name": "shop", "match": {"path_prefix": "/"},
                          "upstreams": [{"name": "stable", "weight": 95},
                                        {"name": "canary", "weight": 5},
                                        {"name": "idle", "weight": 0}]}])
        n = 10_000
        heads = [f"GET /s/{i} HTTP/1.1\r\nHost: shop\r\n\r\n".encode() for i in range(n)]
        # Two connections, so that both workers take a share.
        statuses = pipelined(gw.port, heads[:n // 2])
        more = pipelined(gw.port, heads[n // 2:])
        self.assertEqual(statuses.get(200, 0) + more.get(200, 0), n, (statuses, more))
        stable, canary, idle = self.served()
        self.assertEqual(stable + canary, n)
        self.assertEqual(idle, 0)
        # Each worker is exact over every 100 of its requests: within 2 overall.
        self.assertLessEqual(abs(canary - n * 5 // 100), 2, (stable, canary))

    def test_split_on_cookie_is_sticky_everywhere(self):
        routes = [{"name": "shop", "match": {"path_prefix": "/"},
                   "upstreams": [{"name": "stable", "weight": 70},
                                 {"name": "canary", "weight": 30}],
                   "split_on": "cookie:session"}]
        gws = [self.start(routes), self.start(routes)]
        sides = {}
        for session in range(60):
            cookie = {"Cookie": f"session=s-{session}"}
            seen = {self.went_to(lambda gw=gw: request(gw.port, "GET", "/p", headers=cookie)[0])
                    for gw in gws for _ in range(2)}
            self.assertEqual(len(seen), 1, f"session s-{session} went to {seen}")
            sides[session] = seen.pop()
        canary = sum(1 for side in sides.values() if side == "canary")
        self.assertGreater(canary, 5, sides)
        self.assertLess(canary, 35, sides)

    def test_route_timeouts(self):
        slow = "/__slow/400"
        gw = self.start([
            {"name": "total", "upstream": "stable", "timeout_ms": 150,
             "match": {"path_prefix": "/total/"}, "strip_prefix": True},
            {"name": "idle-short", "upstream": "stable", "idle_timeout_ms": 150,
             "match": {"path_prefix": "/short/"}, "strip_prefix": True},
            {"name": "idle-long", "upstream": "patient", "idle_timeout_ms": 2000,
             "match": {"path_prefix": "/long/"}, "strip_prefix": True},
            {"name": "plain", "upstream": "stable", "match": {"path_prefix": "/"}},
        ], upstreams={"patient": {"servers": [self.stable.address],
                                  "response_timeout_ms": 100}})
        self.assertEqual(request(gw.port, "GET", "/total" + slow)[0], 504)
        self.assertEqual(request(gw.port, "GET", "/short" + slow)[0], 504)
        # The upstream alone would give up after 100 ms; the route waits 2 s.
        self.assertEqual(request(gw.port, "GET", "/long" + slow)[0], 200)
        self.assertEqual(request(gw.port, "GET", slow)[0], 200)


if __name__ == "__main__":
    unittest.main()
