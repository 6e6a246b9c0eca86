"""The demo configuration, conf/sluice.yaml, run for real.

The file is used as it is, except for its addresses: the listeners, the Redis
url and the upstream server are rewritten to ephemeral 127.0.0.1 ports of this
test's own processes. Each rewrite must happen exactly once, so a change of the
demo's addresses fails here instead of silently testing something else. As
scripts/run does, the test gives it a key secret and stores the demo consumers
(conf/demo-consumers.ndjson) through the admin API.
"""

import json
import os
import unittest

from harness import (SOURCE_DIR, Client, ProcessTestCase, RawConnection, echo_header, free_port,
                     request, shipped_config_env, wait_redis_ready)
from testkit.configs import retarget

DEMO = os.path.join(SOURCE_DIR, "conf", "sluice.yaml")
DEMO_CONSUMERS = os.path.join(SOURCE_DIR, "conf", "demo-consumers.ndjson")
BURST = 100  # requests sent back to back with one key


class DemoConfigTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        redis = self.start_redis()
        echo = self.start_echo()
        with open(DEMO) as f:
            text = retarget(f.read(), free_port(), free_port(), redis.port, echo.address,
                                source=DEMO)
        self.gateway = self.start_sluice(text, env=shipped_config_env(self.workdir))
        wait_redis_ready(self.gateway)
        with open(DEMO_CONSUMERS, "rb") as f:
            status, _, body = request(self.gateway.admin_port, "POST", "/consumers/import",
                                      body=f.read(),
                                      headers={"Content-Type": "application/x-ndjson"})
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body), {"created": 2, "replaced": 0, "unchanged": 0,
                                            "failed": [], "failed_count": 0,
                                            "unknown": [], "unknown_count": 0})

    def burst(self, key: str, count: int = BURST):
        """`count` GETs on one keep-alive connection: [(status, headers)]."""
        with Client(self.gateway.port) as client:
            return [client.request("GET", f"/api/burst/{i}", headers={"X-API-Key": key})[:2]
                    for i in range(count)]

    def test_a_burst_shows_the_plans_free_gets_429_pro_does_not(self):
        free = self.burst("demo-free-key")
        statuses = [status for status, _ in free]
        self.assertIn(429, statuses, "the free plan (capacity 50) admitted a burst of "
                                     f"{BURST}: {statuses}")
        first_denied = statuses.index(429)
        self.assertGreaterEqual(first_denied, 50, statuses)  # the whole free bucket first
        self.assertEqual(set(statuses), {200, 429}, statuses)
        self.assertEqual(free[0][1]["X-RateLimit-Limit"], "50")

        pro = self.burst("demo-pro-key")
        statuses = [status for status, _ in pro]
        self.assertEqual(statuses, [200] * BURST, "the pro plan (capacity 500) denied part of a "
                                                  f"burst of {BURST}")
        # X-RateLimit-* shows the most restrictive limit, here the pro plan's bucket;
        # RateLimit-Policy lists every limit of the route.
        headers = pro[-1][1]
        self.assertEqual(headers["X-RateLimit-Limit"], "500")
        self.assertGreaterEqual(int(headers["X-RateLimit-Remaining"]), 500 - BURST)  # + refill
        self.assertEqual(headers["RateLimit-Policy"],
                         '"per_key";q=500;w=5, "global";q=2000;w=2')
        self.assertRegex(headers["RateLimit"], r'^"per_key";r=\d+;t=0, "global";r=\d+;t=0$')

    def test_the_upstream_learns_the_consumer_never_from_the_client(self):
        status, _, body = request(self.gateway.port, "GET", "/api/who",
                                  headers={"X-API-Key": "demo-pro-key",
                                           "X-Consumer-Id": "someone-else",
                                           "X-Consumer-Plan": "enterprise"})
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertEqual(echo_header(doc, "X-Consumer-Id"), ["demo-pro"])
        self.assertEqual(echo_header(doc, "X-Consumer-Plan"), ["pro"])
        self.assertEqual(echo_header(doc, "X-API-Key"), ["demo-pro-key"])

    def test_methods_the_api_route_does_not_list_are_still_limited(self):
        # They fall through to the catch-all, which limits per client IP.
        for method in ("TRACE", "PURGE"):
            with self.subTest(method=method), RawConnection(self.gateway.port) as conn:
                conn.send(f"{method} /api/x HTTP/1.1\r\nHost: demo\r\n"
                          "X-API-Key: demo-pro-key\r\n\r\n".encode())
                response = conn.read_response()
                self.assertEqual(response.status, 200, response)
                self.assertEqual(response.header("RateLimit-Policy"), '"per_ip";q=100;w=5')
        with RawConnection(self.gateway.port) as conn:
            conn.send(b"get /api/x HTTP/1.1\r\nHost: demo\r\n\r\n")
            response = conn.read_response()
            # Refused by the parser, or routed to a limited route: never unlimited.
            if response.status == 200:
                self.assertEqual(response.header("RateLimit-Policy"), '"per_ip";q=100;w=5')
            else:
                self.assertEqual(response.status, 400, response)


if __name__ == "__main__":
    unittest.main()
