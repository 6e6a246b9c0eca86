"""Shadow limits (shadow: true) through the real sluice binary, a real redis-server
and sluice-echo.

- A shadow limit that would deny does not: every request it alone would refuse
  goes through (200), counted as decisions_total{decision="shadow_limited"}.
- On the same route an enforced limit still limits and counts as usual, and the
  429 and the rate-limit headers name the enforced limit only.
- A route whose only limit is shadow shows clients no rate-limit header at all.
"""

import json
import unittest

from harness import (RATE_LIMIT_HEADERS, ProcessTestCase, gateway_config, limit, metric_sum,
                     request, require_store_policies, route, wait_redis_ready)


def setUpModule():
    require_store_policies()


class ShadowTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()
        limits = {
            "enforced": limit("ip", 3),
            "dry": limit("ip", 1, shadow=True),
        }
        routes = [route("both", "/both", ["enforced", "dry"]),
                  route("dry_only", "/dry", ["dry"])]
        config = gateway_config(
            {"echo": [self.echo.address]}, routes,
            server={"threads": 2},
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000},
            limits=limits)
        self.gw = self.start_sluice(config)
        wait_redis_ready(self.gw)

    def decisions(self, route_name, limit_name, decision):
        return metric_sum(self.gw, "sluice_ratelimit_decisions_total", route=route_name,
                          limit=limit_name, decision=decision)

    def test_shadow_limit_never_denies_and_the_enforced_one_still_does(self):
        statuses = []
        for i in range(5):
            status, headers, body = request(self.gw.port, "GET", f"/both/{i}")
            statuses.append(status)
            # Clients see the enforced limit only.
            self.assertEqual(headers["X-RateLimit-Limit"], "3", dict(headers))
            self.assertNotIn('"dry"', headers["RateLimit-Policy"])
            self.assertNotIn('"dry"', headers["RateLimit"])
            if status == 429:
                self.assertEqual(json.loads(body)["violated-policies"], ["enforced"])
        # dry (capacity 1) would have refused from the second request on; enforced
        # (capacity 3) refuses the fourth and fifth.
        self.assertEqual(statuses, [200, 200, 200, 429, 429])
        self.assertEqual(self.decisions("both", "dry", "allowed"), 1)
        self.assertEqual(self.decisions("both", "dry", "shadow_limited"), 4)
        self.assertEqual(self.decisions("both", "dry", "limited"), 0)
        self.assertEqual(self.decisions("both", "enforced", "allowed"), 3)
        self.assertEqual(self.decisions("both", "enforced", "limited"), 2)

    def test_shadow_only_route_shows_no_rate_limit_headers(self):
        for i in range(3):
            status, headers, _ = request(self.gw.port, "GET", f"/dry/{i}")
            self.assertEqual(status, 200)
            shown = {n: headers[n] for n in (*RATE_LIMIT_HEADERS, "Retry-After") if n in headers}
            self.assertEqual(shown, {}, "a dry run changes nothing clients see")
        # dry holds 1 token: the first request takes it, the others find it short.
        self.assertEqual(self.decisions("dry_only", "dry", "allowed"), 1)
        self.assertEqual(self.decisions("dry_only", "dry", "shadow_limited"), 2)


if __name__ == "__main__":
    unittest.main()
