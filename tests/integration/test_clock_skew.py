"""A gateway whose clock is wrong cannot move the fleet's quota period: the
real sluice binary under faketime (two minutes and an hour ahead, a day
behind) beside one whose clock is right, on one real redis-server. Both count
into the period that holds Redis' TIME: exactly capacity per real minute, the
stored period is Redis' minute, and the two agree on the headers. The skewed
one reports its skew in sluice_clock_skew_seconds.
"""

import struct
import unittest

from harness import gateway_config, metric_sum, redis_call, wait_redis_ready, wait_until
from test_ratelimit import RateLimitTestCase, route
from testkit.processes import faketime_env

CAPACITY = 6
SKEWS = {"plus2m": ("+2m", 120), "plus1h": ("+1h", 3600), "minus1d": ("-1d", -86400)}


def redis_now(port) -> float:
    seconds, micros = redis_call(port, "TIME")
    return int(seconds) + int(micros) / 1e6


class ClockSkewTest(RateLimitTestCase):
    threads = 1

    def start_at(self, name, skew=None):
        """A gateway with one minute quota keyed by path; with `skew`, its
        system clock moved by that much (libfaketime; its monotonic clock left
        alone)."""
        config = gateway_config(
            {"echo": [self.echo.address]}, [route("q", "/q", ["minutely"])],
            server={"threads": self.threads},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000},
            limits={"minutely": {"key": "path", "algorithm": "quota", "capacity": CAPACITY,
                                 "period": "minute"}})
        gw = self.start_sluice(config, name=name, env=faketime_env(skew) if skew else None)
        wait_redis_ready(gw)
        return gw

    def test_a_skewed_gateway_counts_in_redis_period(self):
        if not faketime_env("+0"):
            self.skipTest("faketime (libfaketime) not installed")
        right = self.start_at("right")
        skewed = {path: self.start_at(path, skew) for path, (skew, _) in SKEWS.items()}
        for path, (_, seconds) in SKEWS.items():
            wait_until(lambda gw=skewed[path], s=seconds: abs(
                metric_sum(gw, "sluice_clock_skew_seconds") - s) < 1, 10,
                message=f"{path}'s skew measured")
        self.assertLess(abs(metric_sum(right, "sluice_clock_skew_seconds")), 1)
        # Far enough from the end of Redis' minute for every request to fall in it.
        wait_until(lambda: redis_now(self.redis.port) % 60 < 50, 15,
                   message="10 s left in Redis' minute")
        minute_end = (int(redis_now(self.redis.port)) // 60 + 1) * 60
        for path in SKEWS:
            target = f"/q/{path}"
            admitted = []
            for i in range(CAPACITY + 4):
                gw = right if i % 2 == 0 else skewed[path]
                status, h, _ = self.get(gw, target)
                self.assertIn(status, (200, 429), f"{path} request {i}")
                if status == 200:
                    admitted.append(gw)
                    self.assertEqual(int(h["X-RateLimit-Remaining"]), CAPACITY - len(admitted),
                                     f"{path} request {i}")
                # Both count down to the end of Redis' minute, whatever their clock.
                reset = int(h["X-RateLimit-Reset"])
                to_end = minute_end - redis_now(self.redis.port)
                self.assertLessEqual(reset, 60, f"{path} request {i}: {dict(h)}")
                self.assertGreaterEqual(reset, int(to_end) - 1, f"{path} request {i}")
                self.assertLessEqual(reset, int(to_end) + 2, f"{path} request {i}")
            self.assertEqual(len(admitted), CAPACITY, path)
            self.assertIn(right, admitted)
            self.assertIn(skewed[path], admitted)
        # Each stored period is Redis' minute, and holds exactly capacity.
        keys = redis_call(self.redis.port, "KEYS", "*minutely:*")
        values = [struct.unpack("<dd", redis_call(self.redis.port, "GET", k)) for k in keys]
        self.assertEqual(values, [(minute_end * 1e6, float(CAPACITY))] * len(SKEWS))
        self.assertEqual(metric_sum(right, "sluice_redis_errors_total"), 0)


if __name__ == "__main__":
    unittest.main()
