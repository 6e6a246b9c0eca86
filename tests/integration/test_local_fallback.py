"""on_redis_failure: local, with real Redis and several sluice instances.

- Redis stopped under load: each of 3 instances (local.fleet_size 3) limits on
  its own, and together they admit at most C + R*T plus one starting share per
  instance; with Redis back on the same port, Redis alone decides again.
- The fleet size learned from heartbeats (local.fleet_size 0): two instances
  count 2, an instance that stops removes its member, and a size set by a
  reload wins over the count.
- The heartbeat repairs a damaged fleet key: members scored in the future are
  dropped, a key of another type is replaced, a count above local.max_fleet_size
  is taken as that bound, and a failing heartbeat is counted and logged.
"""

import re
import signal
import time
import unittest

from harness import (Load, ProcessTestCase, gateway_config, metric_sum, redis_call,
                     wait_redis_ready, wait_until)
from testkit.resp import Connection as RedisConnection

CAPACITY = 30
REFILL = 10  # tokens per second
INSTANCES = 3
SHARE = CAPACITY / INSTANCES
# Long enough that the refill (R*T = 60 tokens) outweighs the bursts, and the
# bound is checked over many refills of every share; short enough for the suite.
OUTAGE_SECONDS = 6.0
# The breaker's open period. Each worker probes Redis once per open period
# while its breaker is open, so this bounds how long a worker keeps deciding
# locally after Redis is back: small here, so the 1 s check below has room.
OPEN_MS = 200


class LocalFallbackTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.echo = self.start_echo()

    def gateway(self, redis_port, name, fleet_size, limit_key="global", **local):
        config = gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "echo",
              "limits": ["lim"], "on_redis_failure": "local"}],
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{redis_port}/0", "timeout_ms": 300,
                   "connect_timeout_ms": 200,
                   "circuit_breaker": {"failures": 3, "open_ms": OPEN_MS}},
            local={"fleet_size": fleet_size, **local},
            limits={"lim": {"key": limit_key, "capacity": CAPACITY,
                            "refill_per_second": REFILL}})
        return self.start_sluice(config, name=name)

    def test_redis_down_each_instance_enforces_its_share_then_redis_decides_again(self):
        redis = self.start_redis()
        gateways = [self.gateway(redis.port, f"sluice-{i}", INSTANCES) for i in range(INSTANCES)]
        for gw in gateways:
            wait_redis_ready(gw)
            self.assertEqual(gw.metric("sluice_fleet_size"), INSTANCES)

        redis.signal(signal.SIGKILL)
        redis.wait(5)
        down = time.monotonic()

        # Load on every instance until the outage has lasted OUTAGE_SECONDS.
        def jobs():
            i = 0
            while time.monotonic() - down < OUTAGE_SECONDS:
                yield gateways[i % INSTANCES].port, "/x", {}, i % INSTANCES
                i += 1
        load = Load(jobs(), clients=12).run()
        outage = time.monotonic() - down
        self.assertEqual(load.errors, [])

        by_instance = load.by_tag()
        admitted = []
        for i, gw in enumerate(gateways):
            statuses = [r.status for r in by_instance.get(i, [])]
            self.assertEqual(set(statuses) - {200, 429}, set(), f"instance {i}")
            admitted.append(statuses.count(200))
            # Each instance limits on its own, and spends at least its starting share.
            self.assertGreater(statuses.count(429), 0, f"instance {i} never limited")
            self.assertGreaterEqual(admitted[i], int(SHARE), f"instance {i}: {admitted}")
            self.assertEqual(metric_sum(gw, "sluice_ratelimit_fail_local_total", route="api"),
                             len(statuses), f"instance {i}: every answer was decided locally")
        # C + R*T for the fleet, plus one starting share per instance (the fleet's
        # bucket need not have been full when Redis went away; here it was).
        bound = CAPACITY + REFILL * outage + INSTANCES * SHARE
        self.assertLessEqual(sum(admitted), bound, f"admitted {admitted} over {outage:.2f}s")

        # Redis back on the same port: every worker decides with Redis again
        # within 1 s (the breakers' probes reconnect them every OPEN_MS).
        restarted = self.start_redis(port=redis.port)
        back = time.monotonic()
        for gw in gateways:
            wait_redis_ready(gw, timeout=10)
        self.assertLess(time.monotonic() - back, 1.0, "limiting with Redis took over 1 s to resume")

        # From now on Redis decides: no local decision, one script call per
        # request, and the remaining count of the one fleet-wide bucket (Redis
        # restarted empty, so it starts full): at least a share, which no local
        # bucket (a share at most, minus the request) could show.
        fail_local = [metric_sum(gw, "sluice_ratelimit_fail_local_total") for gw in gateways]
        calls_before = script_calls(restarted.port)
        remaining = []
        for gw in gateways:
            for _ in range(2):
                result = Load([(gw.port, "/x", {}, "after")], clients=1).run().results[0]
                self.assertEqual(result.status, 200)
                remaining.append(result.remaining)
        self.assertTrue(all(r >= SHARE for r in remaining), remaining)
        self.assertEqual([metric_sum(gw, "sluice_ratelimit_fail_local_total") for gw in gateways],
                         fail_local)
        self.assertGreaterEqual(script_calls(restarted.port) - calls_before,
                                len(remaining))

    def test_heartbeats_learn_the_fleet_size_and_a_stopped_instance_leaves(self):
        redis = self.start_redis()
        first = self.gateway(redis.port, "sluice-a", 0)
        second = self.gateway(redis.port, "sluice-b", 0)
        for gw in (first, second):
            wait_until(lambda gw=gw: gw.metric("sluice_fleet_size") == 2, 10,
                       message="sluice_fleet_size 2")
        members = redis_call(redis.port, "ZRANGE", "sluice:fleet", "0", "-1")
        self.assertEqual(len(members), 2, members)
        for member in members:
            self.assertRegex(member.decode(), re.compile(r"^[0-9a-f]{32}$"))
        ttl = redis_call(redis.port, "PTTL", "sluice:fleet")
        self.assertGreater(ttl, 0)
        self.assertLessEqual(ttl, 3000)

        # An orderly stop removes the member at once (its heartbeat would
        # otherwise stay for up to 3 s), and the other instance counts 1.
        second.stop()
        self.assertEqual(redis_call(redis.port, "ZCARD", "sluice:fleet"), 1)
        wait_until(lambda: first.metric("sluice_fleet_size") == 1, 10,
                   message="sluice_fleet_size 1")

        # A configured size wins over the count, from the reload on.
        self.assertIn("fleet_size: 0", first.config_text)
        first.reload(first.config_text.replace("fleet_size: 0", "fleet_size: 5"))
        wait_until(lambda: first.metric("sluice_fleet_size") == 5, 10,
                   message="sluice_fleet_size 5 after the reload")

    def test_a_poisoned_fleet_key_heals_and_a_failing_heartbeat_is_counted(self):
        redis = self.start_redis()
        # Members scored far in the future would never expire.
        future = (time.time() + 86400 * 365) * 1000
        redis_call(redis.port, "ZADD", "sluice:fleet",
                   *[x for i in range(100) for x in (str(future), f"poison-{i}")])
        gw = self.gateway(redis.port, "sluice-a", 0)
        # (sluice_fleet_size is 1 before the first heartbeat too: wait for Redis.)
        wait_until(lambda: redis_call(redis.port, "ZCARD", "sluice:fleet") == 1, 10,
                   message="the future-scored members dropped, this instance's kept")
        wait_until(lambda: gw.metric("sluice_fleet_size") == 1, 10, message="fleet size 1")
        failures = gw.metric("sluice_fleet_heartbeat_failures_total")
        logged = gw.stderr().count("fleet heartbeat failed")

        # A key of another type is replaced by the next heartbeat.
        redis_call(redis.port, "SET", "sluice:fleet", "not a sorted set")
        wait_until(lambda: redis_call(redis.port, "TYPE", "sluice:fleet") in ("zset", b"zset"),
                   10, message="the fleet key a sorted set again")
        self.assertEqual(gw.metric("sluice_fleet_heartbeat_failures_total"), failures)

        # Redis gone: every heartbeat fails and is counted; the run is logged once.
        redis.stop()
        wait_until(lambda: gw.metric("sluice_fleet_heartbeat_failures_total") >= failures + 2,
                   10, message="failing heartbeats counted")
        self.assertEqual(gw.stderr().count("fleet heartbeat failed"), logged + 1, gw.stderr())
        self.assertEqual(gw.metric("sluice_fleet_size"), 1)  # the last count stays

    def test_a_learned_count_is_bounded_by_max_fleet_size(self):
        redis = self.start_redis()
        gw = self.gateway(redis.port, "sluice-a", 0, max_fleet_size=8)
        wait_until(lambda: gw.metric("sluice_fleet_size") == 1, 10, message="fleet size 1")
        # Fifty members scored now, renewed by hand: the count believed stops at 8.
        def renew():
            now_ms = int(time.time() * 1000)
            redis_call(redis.port, "ZADD", "sluice:fleet",
                       *[x for i in range(50) for x in (str(now_ms), f"extra-{i}")])
            return gw.metric("sluice_fleet_size") == 8
        wait_until(renew, 10, message="sluice_fleet_size held at max_fleet_size 8")


def script_calls(port):
    """EVALSHA and EVAL calls Redis has served since it started."""
    with RedisConnection(port) as redis:
        stats = redis.commandstats()
    return sum(stats.get(c, {}).get("calls", 0) for c in ("evalsha", "eval"))


if __name__ == "__main__":
    unittest.main()
