"""Calendar quotas through the real sluice binary and a real redis-server: a
daily quota of America/New_York counts down to 429 with the period's headers
(Retry-After and X-RateLimit-Reset: the time to New York's next midnight;
RateLimit-Policy w: that day's length), a plan's capacity, the bucket API's
used / remaining / resets_at and its reset, all or nothing with a token
bucket on one Redis and across the slots of a Redis Cluster, and exactly
capacity admitted by two instances sharing the quota.

A stored quota is two little-endian doubles: its period's end in
microseconds since the epoch, the units used in it.
"""

import json
import os
import struct
import unittest
import urllib.parse
from datetime import datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from harness import (SharedCluster, gateway_config, redis_call, request, run_cli, to_yaml,
                     topology_redis, wait_redis_ready, wait_until)
from test_ratelimit import RateLimitTestCase, parse_rate_limit, route

NEW_YORK = ZoneInfo("America/New_York")
API_KEYS = {"header": "X-API-Key",
            "consumers": [{"key": "key-free", "plan": "free"},
                          {"key": "key-pro", "plan": "pro"}]}


def quota(key, capacity, period, tz=None, **extra):
    q = {"key": key, "algorithm": "quota", "capacity": capacity, "period": period, **extra}
    if tz:
        q["timezone"] = tz
    return q


def new_york_day(now=None):
    """(start, end) of the New York day holding `now`, as UTC datetimes."""
    local = (now or datetime.now(timezone.utc)).astimezone(NEW_YORK)
    start = datetime(local.year, local.month, local.day, tzinfo=NEW_YORK)
    nxt = (start + timedelta(days=1, hours=12)).replace(hour=0)  # the next calendar day
    return start.astimezone(timezone.utc), nxt.astimezone(timezone.utc)


def away_from_midnight(seconds=30):
    """Waits (bounded) until New York's next midnight is over `seconds` away,
    so that a test's requests all fall into one day."""
    wait_until(lambda: (new_york_day()[1] - datetime.now(timezone.utc)).total_seconds() > seconds,
               timeout=seconds + 5, message="away from New York's midnight")


class QuotaTest(RateLimitTestCase):
    def stored(self, limit):
        keys = redis_call(self.redis.port, "KEYS", f"*{limit}:*")
        self.assertEqual(len(keys), 1, keys)
        value = redis_call(self.redis.port, "GET", keys[0])
        self.assertEqual(len(value), 16, value)
        end_us, used = struct.unpack("<dd", value)
        return keys[0], end_us, used

    def admin(self, gw, method, limit, value):
        target = f"/ratelimit/buckets/{limit}?" + urllib.parse.urlencode({"value": value})
        return request(gw.admin_port, method, target)

    def test_daily_quota_in_new_york_counts_down_to_the_next_midnight(self):
        away_from_midnight()
        gw = self.start_gateway(
            [route("q", "/q", ["daily"])],
            {"daily": quota("api_key", 3, "day", "America/New_York",
                            plans={"pro": {"capacity": 5}})},
            api_keys=API_KEYS)
        start, end = new_york_day()
        day_seconds = int((end - start).total_seconds())  # 82800, 86400 or 90000
        free = {"X-API-Key": "key-free"}
        for k in range(1, 4):
            h = self.assert_allowed(gw, "/q", free, remaining=3 - k)
            self.assertEqual(h["X-RateLimit-Limit"], "3")
            self.assertEqual(h["RateLimit-Policy"], f'"daily";q=3;w={day_seconds}')
            to_midnight = (end - datetime.now(timezone.utc)).total_seconds()
            self.assertLessEqual(abs(int(h["X-RateLimit-Reset"]) - to_midnight), 2, h)
        h, doc = self.assert_limited(gw, "/q", free)
        to_midnight = (end - datetime.now(timezone.utc)).total_seconds()
        self.assertEqual(doc["violated-policies"], ["daily"])
        self.assertLessEqual(abs(int(h["Retry-After"]) - to_midnight), 2, h)
        self.assertLessEqual(abs(doc["retry_after_ms"] / 1000 - to_midnight), 2, doc)
        [(name, r, t)] = parse_rate_limit(h["RateLimit"])
        self.assertEqual((name, r, t), ("daily", 0, int(h["Retry-After"])))

        # Stored: the period's end (New York's midnight) and the units used; the
        # key goes a second after that midnight.
        key, end_us, used = self.stored("daily")
        self.assertEqual(end_us, end.timestamp() * 1e6)
        self.assertEqual(used, 3)
        before = (end - datetime.now(timezone.utc)).total_seconds() * 1000
        pttl = redis_call(self.redis.port, "PTTL", key)
        after = (end - datetime.now(timezone.utc)).total_seconds() * 1000
        self.assertTrue(after + 1000 - 2 <= pttl <= before + 1000 + 2, (after, pttl, before))

        # The pro plan's capacity, in a bucket of its own key.
        pro = {"X-API-Key": "key-pro"}
        for k in range(1, 6):
            self.assert_allowed(gw, "/q", pro, remaining=5 - k)
        self.assert_limited(gw, "/q", pro)

        # The bucket API: used, remaining, resets_at; DELETE starts the period afresh.
        status, _, body = self.admin(gw, "GET", "daily", "key-free")
        self.assertEqual(status, 200, body)
        view = json.loads(body)
        self.assertEqual((view["algorithm"], view["period"], view["timezone"]),
                         ("quota", "day", "America/New_York"))
        self.assertEqual((view["exists"], view["used"], view["remaining"]), (True, 3, 0))
        self.assertEqual(view["resets_at"], end.strftime("%Y-%m-%dT%H:%M:%SZ"))
        status, _, body = self.admin(gw, "DELETE", "daily", "key-free")
        self.assertEqual(status, 204, body)
        self.assert_allowed(gw, "/q", free, remaining=2)
        view = json.loads(self.admin(gw, "GET", "daily", "key-free")[2])
        self.assertEqual((view["used"], view["remaining"]), (1, 2))

    def test_all_or_nothing_with_a_token_bucket(self):
        away_from_midnight()
        gw = self.start_gateway(
            [route("q", "/q", ["daily", "burst"])],
            {"daily": quota("api_key", 10, "day", "America/New_York"),
             "burst": {"key": "api_key", "capacity": 2, "refill_per_second": 0.001}},
            api_keys=API_KEYS)
        free = {"X-API-Key": "key-free"}
        self.assert_allowed(gw, "/q", free)
        self.assert_allowed(gw, "/q", free)
        for _ in range(3):
            _, doc = self.assert_limited(gw, "/q", free)
            self.assertEqual(doc["violated-policies"], ["burst"])
        # The denied requests took nothing of the quota.
        self.assertEqual(self.stored("daily")[2], 2)

    def test_two_instances_admit_exactly_capacity(self):
        away_from_midnight()
        limits = {"daily": quota("api_key", 40, "day", "America/New_York")}
        gateways = [self.start_gateway([route("q", "/q", ["daily"])], limits, name=f"sluice{i}",
                                       api_keys=API_KEYS) for i in range(2)]
        statuses = self.concurrent_statuses(gateways, "/q", 50, {"X-API-Key": "key-free"})
        self.assertEqual(len(statuses), 200)
        self.assertEqual(statuses.count(200), 40, statuses)
        self.assertEqual(statuses.count(429), 160)
        self.assertEqual(self.stored("daily")[2], 40)

    def test_check_refuses_a_leased_quota_and_an_unknown_zone(self):
        limits = {"monthly": quota("api_key", 100, "month", "Mars/Olympus_Mons",
                                   lease_tokens=10)}
        config = gateway_config({"echo": [self.echo.address]}, [route("q", "/q", ["monthly"])],
                                redis={"url": f"redis://127.0.0.1:{self.redis.port}/0"},
                                limits=limits, api_keys=API_KEYS)
        path = os.path.join(self.workdir, "quota.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(config))
        result = run_cli(["--config", path, "--check"])
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("limits.monthly.timezone: invalid timezone \"Mars/Olympus_Mons\"",
                      result.stderr)
        self.assertIn("limits.monthly.lease_tokens: needs algorithm: token_bucket (leases are "
                      "taken from token buckets only)", result.stderr)


class QuotaClusterTest(SharedCluster, RateLimitTestCase):
    """A quota and a token bucket in different slots of a Redis Cluster: the
    slot that admitted a request another slot denied gives its debit back."""

    def test_a_denial_in_another_slot_leaves_the_quota_as_it_was(self):
        away_from_midnight()
        seeds = self.cluster.seeds()
        config = gateway_config(
            {"echo": [self.echo.address]}, [route("q", "/q", ["daily", "global_burst"])],
            log={"level": "info", "access_log": False},
            redis=topology_redis(seeds[0], seeds[1:], "cluster", timeout_ms=1000),
            api_keys=API_KEYS,
            limits={"daily": quota("api_key", 10, "day", "America/New_York"),
                    "global_burst": {"key": "global", "capacity": 2,
                                     "refill_per_second": 0.001}})
        gw = self.start_sluice(config)
        wait_redis_ready(gw)
        headers = {"X-API-Key": "key-free"}
        statuses = [self.get(gw, "/q", headers)[0] for _ in range(6)]
        self.assertEqual(statuses, [200, 200, 429, 429, 429, 429])

        def used():
            for node, _ in self.cluster.primaries():
                for key in redis_call(node.port, "KEYS", "sluice:daily:*"):
                    return struct.unpack("<dd", redis_call(node.port, "GET", key))[1]
            return None

        # The refunds go out after the answers: poll until they have landed.
        wait_until(lambda: used() == 2, timeout=5, message="the quota back at 2")


if __name__ == "__main__":
    unittest.main()
