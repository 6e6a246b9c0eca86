"""Rate limiting with Redis Sentinel: a real primary, replica and three sentinels per
test (tests/testkit/sentinel.py; down-after 1000 ms, failover-timeout 3000 ms).

Under load, a failover (SENTINEL FAILOVER, or the primary SIGKILLed) must cost no
socket error and no answer other than a decision (200/429) or the route's failure
answer (fail-open 200 without rate-limit headers, fail-closed 503); limiting is
exact again on the new primary within a bounded time. A sentinel naming a primary
nobody serves leaves a gateway that serves and says why.
"""

import time
import unittest

from harness import (Load, ProcessTestCase, assert_serves_without_redis,
                     closed_port, gateway_config, limit, metric_sum, readyz, redis_call,
                     redis_nodes, request, require_binaries, require_topology_support, route,
                     topology_redis, wait_redis_ready, wait_until)
from testkit.sentinel import MASTER_NAME, RedisSentinelSet

CAPACITY = 5
RESUME_SECONDS = 5.0  # from the sentinels naming the new primary to decisions on it


def setUpModule():
    require_binaries("redis-server", "redis-sentinel")
    require_topology_support("sentinel")


class SentinelCase(ProcessTestCase):
    routes = [route("open", "/open", ["per_key"], on_redis_failure="open"),
              route("closed", "/closed", ["per_key"], on_redis_failure="closed")]

    def setUp(self):
        super().setUp()
        self.echo = self.start_echo()
        self.group = RedisSentinelSet(workdir=self.workdir)
        self.addCleanup(self.group.stop)

    def start_gateway(self, name="sluice", master=MASTER_NAME, wait_ready=True):
        sentinels = self.group.sentinels()
        config = gateway_config(
            {"echo": [self.echo.address]}, self.routes, server={"threads": 2},
            redis=topology_redis(sentinels[0], sentinels[1:], "sentinel",
                                 sentinel_master=master, timeout_ms=500,
                                 connect_timeout_ms=500, key_prefix="it:",
                                 circuit_breaker={"failures": 5, "open_ms": 500}),
            limits={"per_key": limit("api_key", CAPACITY)})
        gateway = self.start_sluice(config, name=name)
        if wait_ready:
            wait_redis_ready(gateway)
        return gateway

    def assert_exact_on(self, gateways, keys, primary, what):
        """Fresh keys: CAPACITY answers counting down, then 429, alternating instances;
        their buckets are on `primary`."""
        before = set(redis_call(primary.port, "KEYS", "it:per_key:*"))
        for k in keys:
            for n, expected in enumerate(range(CAPACITY - 1, -1, -1)):
                status, h, body = request(gateways[n % 2].port, "GET", "/closed",
                                          headers={"X-API-Key": k})
                self.assertEqual((status, h.get("X-RateLimit-Remaining")), (200, str(expected)),
                                 f"{what}: key {k}: {body[:200]!r}")
            self.assertEqual(request(gateways[1].port, "GET", "/closed",
                                     headers={"X-API-Key": k})[0], 429, f"{what}: key {k}")
        self.assertEqual(len(set(redis_call(primary.port, "KEYS", "it:per_key:*")) - before), len(keys),
                         f"{what}: the buckets are not on the primary {primary.address}")

    def failover_under_load(self, change, what):
        """Two gateways under load while change() moves the primary; returns the new one."""
        gateways = [self.start_gateway(name=f"sluice-{i}") for i in range(2)]
        old = self.group.primary()
        self.assert_exact_on(gateways, [f"before-{k}" for k in range(5)], old, "before")
        refreshed = [metric_sum(gw, "sluice_redis_topology_refresh_total", result="ok")
                     for gw in gateways]

        def jobs():
            n = 0
            while True:
                yield (gateways[n % 2].port, "/open" if n % 3 else "/closed",
                       {"X-API-Key": f"load-{n % 40}"}, n % 40)
                n += 1
        load = Load(jobs(), clients=16, timeout=10).start()
        self.addCleanup(load.stop)
        wait_until(lambda: len(load.results) > 100, 20, message="load running")
        change()
        new = self.group.wait_for_new_primary(old, timeout=30)
        named = time.monotonic()

        def deciding_again():
            recent = [r for r in load.results if r.at > time.monotonic() - 0.3]
            return len(recent) > 5 and all(r.decided for r in recent)
        wait_until(deciding_again, RESUME_SECONDS, interval=0.05,
                   message=f"decisions on the new primary after {what}")
        resumed = time.monotonic() - named
        load.stop()
        load.join()
        self.assertEqual(load.errors, [], what)
        for r in load.results:
            allowed = (200, 429, 503) if r.target == "/closed" else (200, 429)
            self.assertIn(r.status, allowed, f"{what}: {r}")
            if r.status == 503:
                self.assertFalse(r.decided, r)
        self.assertGreater(len(load.results), 200, what)

        self.assert_exact_on(gateways, [f"after-{k}" for k in range(5)], new,
                             f"after {what} (resumed {resumed:.2f}s after the switch)")
        for gw, before in zip(gateways, refreshed):
            self.assertEqual(gw.metric("sluice_redis_up"), 1)
            self.assertGreater(metric_sum(gw, "sluice_redis_topology_refresh_total",
                                          result="ok"), before)
            primaries = [n for n in redis_nodes(gw) if n.get("role") == "primary"]
            self.assertEqual([(n["address"], n["state"]) for n in primaries],
                             [(new.address, "ready")], redis_nodes(gw))
        return new


class SentinelFailoverTest(SentinelCase):
    def test_sentinel_failover_under_load(self):
        self.failover_under_load(self.group.failover, "SENTINEL FAILOVER")

    def test_killed_primary_under_load(self):
        killed = []
        new = self.failover_under_load(lambda: killed.append(self.group.kill_primary()),
                                       "the primary SIGKILLed")
        self.assertIsNot(new, killed[0])


class SentinelBadInputTest(SentinelCase):
    def test_sentinels_name_a_primary_nobody_serves(self):
        nowhere = closed_port()
        for sentinel in self.group.sentinel_processes:
            self.assertEqual(redis_call(sentinel.port, "SENTINEL", "MONITOR", "ghost",
                                        "127.0.0.1", nowhere, 2), "OK")
        gw = self.start_gateway(master="ghost", wait_ready=False)
        assert_serves_without_redis(self, gw, f"127.0.0.1:{nowhere}")
        self.assertNotEqual(readyz(gw)[1]["dependencies"]["redis"], "ready")

    def test_master_name_no_sentinel_knows(self):
        gw = self.start_gateway(master="nobody-knows-me", wait_ready=False)
        assert_serves_without_redis(self, gw, "nobody-knows-me")


if __name__ == "__main__":
    unittest.main()
