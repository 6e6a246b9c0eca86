"""The Redis circuit breaker on an idle gateway, and the Retry-After of a fail-closed
503 (docs/metrics.md, sluice_redis_circuit_open).

While the breaker is open each worker probes Redis by itself (once per open
period: it reconnects at once rather than after the Redis client's own backoff,
then sends a PING), so the gauge and /readyz return to normal within one open
period after Redis comes back, even when no request arrives. The bound: the
open period plus a margin for a loaded machine.
"""

import math
import signal
import time
import unittest

from harness import metric_sum, readyz, request, wait_until
from test_redis_failure import FAILURES, RedisFailureCase

MARGIN = 1.0


class IdleBreakerRecoveryTest(RedisFailureCase):
    OPEN_MS = 1000

    def breaker_state(self, gw):
        _, doc = readyz(gw)
        deps = doc["dependencies"]
        return (deps["redis"], deps["redis_circuit_open"], gw.metric("sluice_redis_up"),
                gw.metric("sluice_redis_circuit_open"))

    def open_breaker(self, gw, redis):
        redis.signal(signal.SIGKILL)
        redis.wait(5)
        wait_until(lambda: gw.metric("sluice_redis_up") == 0, 5, message="sluice_redis_up 0")
        client = self.fresh_client()
        for i in range(FAILURES):
            self.assert_fails_open(gw, client, f"failure {i + 1} with Redis killed")
        self.assertEqual(gw.metric("sluice_redis_circuit_open"), 1)
        return time.monotonic()

    def test_idle_instance_closes_the_breaker_after_redis_returns(self):
        redis = self.start_redis()
        gw = self.start_gateway(f"redis://127.0.0.1:{redis.port}/0")
        requests_before = metric_sum(gw, "sluice_http_requests_total")
        opened = self.open_breaker(gw, redis)
        self.assertEqual(self.breaker_state(gw)[1], True, "/readyz: breaker not reported open")

        # Redis still down, no traffic: the probes fail and the breaker stays open
        # past its open period.
        wait_until(lambda: time.monotonic() - opened > 2.5 * self.OPEN_MS / 1000, 10,
                   interval=0.05, message="two open periods to pass")
        state = self.breaker_state(gw)
        self.assertEqual((state[1], state[3]), (True, 1), f"breaker closed with Redis down: {state}")

        # Redis back on the same port; not one request is sent from here on.
        self.start_redis(port=redis.port)
        back = time.monotonic()
        bound = self.OPEN_MS / 1000 + MARGIN
        seen = []

        def recovered():
            state = self.breaker_state(gw)
            seen.append(state)
            return state == ("ready", False, 1, 0)
        try:
            wait_until(recovered, bound, interval=0.05,
                       message="/readyz and /metrics to report Redis ready and the breaker closed")
        except AssertionError as e:
            raise AssertionError(f"{e}; last (redis, breaker open, sluice_redis_up, "
                                 f"sluice_redis_circuit_open): {seen[-1:]}") from None
        elapsed = time.monotonic() - back
        self.assertLess(elapsed, bound)
        # The recovery came from the gateway itself: no data-plane request was made.
        self.assertEqual(metric_sum(gw, "sluice_http_requests_total"),
                         requests_before + FAILURES)
        # And decisions are made again at once, without a failed first request.
        before = self.fail_counts(gw)
        self.assert_limiting_works(gw, "after an idle recovery", "/closed/x")
        self.assertEqual(self.fail_counts(gw), before)


class FailClosedRetryAfterTest(RedisFailureCase):
    def start_with_open_ms(self, redis, open_ms):
        gw = self.start_gateway(f"redis://127.0.0.1:{redis.port}/0")
        config = gw.config_text.replace("open_ms: 1000", f"open_ms: {open_ms}")
        self.assertIn(f"open_ms: {open_ms}", config)
        gw.reload(config)
        wait_until(lambda: gw.metric("sluice_config_reloads_total", result="ok") == 1, 5,
                   message="reload with the new open_ms")
        return gw

    def retry_after(self, gw, client):
        status, headers, body, elapsed = self.timed_get(gw, "/closed/x", client)
        self.assertEqual(status, 503, body[:300])
        self.assertEqual(headers.get("Content-Type"), "application/problem+json")
        value = headers.get("Retry-After")
        self.assertIsNotNone(value, f"no Retry-After on a fail-closed 503: {dict(headers)}")
        self.assertRegex(value, r"^[1-9][0-9]*$")
        return int(value)

    def test_retry_after_is_the_breakers_remaining_open_time(self):
        open_ms = 3000
        redis = self.start_redis()
        gw = self.start_with_open_ms(redis, open_ms)
        redis.signal(signal.SIGKILL)
        redis.wait(5)
        wait_until(lambda: gw.metric("sluice_redis_up") == 0, 5, message="sluice_redis_up 0")
        client = self.fresh_client()
        ceiling = math.ceil(open_ms / 1000)

        # Failures that do not open the breaker yet: Redis may be back any moment.
        for i in range(FAILURES - 1):
            self.assertEqual(self.retry_after(gw, client), 1, f"failure {i + 1}")
        # The failure that opens it: the whole open period.
        opened = time.monotonic()
        self.assertEqual(self.retry_after(gw, client), ceiling)
        self.assertEqual(gw.metric("sluice_redis_circuit_open"), 1)

        # While open: what is left of the period, rounded up, never below 1.
        values = []
        while time.monotonic() - opened < open_ms / 1000 * 0.8:
            started = time.monotonic()
            value = self.retry_after(gw, client)
            values.append(value)
            self.assertGreaterEqual(value, 1)
            self.assertLessEqual(value, ceiling)
            left = open_ms / 1000 - (started - opened)
            self.assertLessEqual(value, math.ceil(left) + 0.5,
                                 f"Retry-After {value} with {left:.2f}s of the period left")
            time.sleep(0.1)  # pacing
        self.assertIn(ceiling, values)
        self.assertLess(min(values), ceiling, f"Retry-After never counted down: {values}")


if __name__ == "__main__":
    unittest.main()
