"""client_headers (limits.NAME.client_headers, routes[].client_headers) through
the real sluice binary, a real redis-server and sluice-echo, over HTTP/1.1 and
HTTP/2.

- A limit with `none` still decides and is counted, but shows no header and is
  not named in its 429, which carries Retry-After; the route's other limits are
  shown as usual.
- `ietf` shows RateLimit and RateLimit-Policy only, `legacy` the X-RateLimit-*
  trio only; a route's client_headers overrides its limits'.
"""

import json
import unittest

from harness import (ProcessTestCase, gateway_config, limit, metric_sum, request, route,
                     wait_redis_ready)
from testkit.h2client import H2Client

LEGACY = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset")
IETF = ("RateLimit", "RateLimit-Policy")


class ClientHeadersTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()
        limits = {
            "abuse": limit("route", 2, client_headers="none"),
            "plan": limit("route", 100),
            "modern": limit("route", 100, client_headers="ietf"),
        }
        routes = [route("hidden", "/hidden", ["abuse", "plan"]),
                  route("modern", "/modern", ["modern"]),
                  route("old", "/old", ["plan"], client_headers="legacy"),
                  route("quiet", "/quiet", ["plan"], client_headers="none")]
        self.gw = self.start_sluice(gateway_config(
            {"echo": [self.echo.address]}, routes,
            server={"threads": 1, "http2": {"enabled": True}},
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 2000}, limits=limits))
        wait_redis_ready(self.gw)

    def test_a_hidden_limit_decides_without_showing(self):
        statuses = []
        for _ in range(3):
            status, headers, body = request(self.gw.port, "GET", "/hidden/x")
            statuses.append(status)
            if status == 200:  # only the plan limit is shown, never the abuse one
                self.assertEqual(headers["X-RateLimit-Limit"], "100")
                self.assertNotIn("abuse", headers["RateLimit-Policy"])
                self.assertNotIn("abuse", headers["RateLimit"])
        self.assertEqual(statuses, [200, 200, 429])
        # The hidden limit's 429: Retry-After, and nothing that tells of a limit.
        self.assertRegex(headers["Retry-After"], r"^[1-9][0-9]*$")
        self.assertEqual([h for h in (*LEGACY, *IETF) if h in headers], [])
        self.assertEqual(json.loads(body)["violated-policies"], [])
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_decisions_total", route="hidden",
                                    limit="abuse", decision="limited"), 1)

    def test_ietf_legacy_and_a_route_override(self):
        _, modern, _ = request(self.gw.port, "GET", "/modern/x")
        self.assertEqual([h for h in LEGACY if h in modern], [])
        self.assertRegex(modern["RateLimit-Policy"], r'^"modern";q=100;w=[0-9]+$')
        _, old, _ = request(self.gw.port, "GET", "/old/x")
        self.assertEqual([h for h in IETF if h in old], [])
        self.assertEqual(old["X-RateLimit-Limit"], "100")
        _, quiet, _ = request(self.gw.port, "GET", "/quiet/x")
        self.assertEqual([h for h in (*LEGACY, *IETF) if h in quiet], [])

    def test_http2_shows_the_same(self):
        c = H2Client(self.gw.port)
        try:
            answers = [c.request("GET", "/hidden/h2") for _ in range(3)]
        finally:
            c.close()
        self.assertEqual([a.status for a in answers], [200, 200, 429])
        for a in answers[:2]:
            self.assertEqual(a.header("x-ratelimit-limit"), "100")
            self.assertNotIn("abuse", a.header("ratelimit-policy"))
        self.assertIsNotNone(answers[2].header("retry-after"))
        self.assertIsNone(answers[2].header("x-ratelimit-limit"))


if __name__ == "__main__":
    unittest.main()
