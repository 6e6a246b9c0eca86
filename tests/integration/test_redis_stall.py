"""A Redis that answers late leaves nothing behind: the real sluice binary and a
real redis-server kept busy by a script for 0.7 s while requests
arrive (sluice-echo upstream). Their decisions time out (the route fails
open); Redis runs them once
it is free again, past their deadline, and they change nothing: no phantom
concurrency slot locks the key out afterwards, and a settled-cost quota ends
at exactly the sum of the real costs of the requests Redis admitted. A read
of the most-limited view sent during a stall waits it out (its commands are
on no request's path and have a deadline of seconds, not the decision's).
"""

import json
import struct
import threading
import unittest

from harness import (gateway_config, limit, metric_sum, redis_call, request, stall_redis,
                     wait_redis_ready, wait_until)
from test_ratelimit import RateLimitTestCase, route

class RedisStallTest(RateLimitTestCase):
    threads = 1
    # The decision deadline: what is sent during a stall (about five times as
    # long, and shorter than the 1 s after which a connection with no reply is
    # replaced, so that the late replies are read) misses it; what is sent
    # after it meets it, also on a host slowed by sanitizers (where 50 ms was
    # missed now and then).
    timeout_ms = 150

    def stall(self, seconds, during):
        """Keeps Redis busy for `seconds`; once it is, runs during() (which
        sends requests), then waits for Redis to be free again."""
        busy = stall_redis(self.redis.port, seconds)
        during()
        busy.join(10)
        self.assertFalse(busy.is_alive())

    def start(self, routes, limits):
        config = gateway_config(
            {"echo": [self.echo.address]}, routes,
            server={"threads": self.threads},
            # The breaker stays closed: every decision of the stall goes to Redis.
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": self.timeout_ms,
                   "circuit_breaker": {"failures": 1000}},
            limits=limits)
        gw = self.start_sluice(config)
        wait_redis_ready(gw)
        return gw

    def parallel_gets(self, gw, target, count, headers=None):
        statuses = []
        lock = threading.Lock()

        def one():
            status = self.get(gw, target, headers)[0]
            with lock:
                statuses.append(status)
        threads = [threading.Thread(target=one) for _ in range(count)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        return statuses

    def test_a_stall_leaves_no_phantom_concurrency_slot(self):
        gw = self.start([route("c", "/c", ["in_flight"])],
                        {"in_flight": {"key": "global", "algorithm": "concurrency",
                                       "capacity": 2, "lease_ms": 30000}})
        self.assert_allowed(gw, "/c")
        statuses = []
        # Decisions sent while Redis is busy time out and fail open.
        self.stall(0.7, lambda: statuses.extend(self.parallel_gets(gw, "/c", 8)))
        self.assertEqual(statuses, [200] * 8)
        self.assertGreaterEqual(metric_sum(gw, "sluice_ratelimit_fail_open_total"), 8)
        # An idle client is admitted at once, with the limit's headers. Its
        # decisions go on the connection the late calls went on, after them.
        for _ in range(5):
            h = self.assert_allowed(gw, "/c")
            self.assertEqual(h["X-RateLimit-Limit"], "2")
        # Redis ran the late calls (their replies were read and dropped), and
        # none of them took a slot.
        wait_until(lambda: metric_sum(gw, "sluice_redis_late_replies_total") >= 1, 5,
                   message="a late reply read")
        keys = redis_call(self.redis.port, "KEYS", "*in_flight:*")
        for key in keys:
            self.assertEqual(redis_call(self.redis.port, "ZCARD", key), 0, key)

    def test_a_stall_charges_nothing_that_is_never_settled(self):
        # sluice-echo answers X-Echo-Usage as the usage header: each request costs 100.
        usage = {"X-Echo-Usage": "100"}
        route_ = {"name": "llm", "match": {"path_prefix": "/llm"}, "upstream": "echo",
                  "limits": ["daily"], "cost": 500,
                  "cost_from_response": {"header": "X-Usage-Tokens"}}
        gw = self.start([route_], {"daily": {"key": "global", "algorithm": "quota",
                                             "capacity": 10000000, "period": "day"}})
        for _ in range(3):
            self.assert_allowed(gw, "/llm", usage)
        statuses = []
        self.stall(0.75, lambda: statuses.extend(self.parallel_gets(gw, "/llm", 8, usage)))
        self.assertEqual(statuses, [200] * 8)
        # These go on the connection the late calls went on, after them.
        for _ in range(2):
            self.assert_allowed(gw, "/llm", usage)
        # The eight sent during the stall failed open. On a loaded host one
        # sent after it may too: its late reply is then undone, and it is
        # not settled. So the test counts what Redis admitted in time.
        self.assertGreaterEqual(metric_sum(gw, "sluice_ratelimit_fail_open_total"), 8)
        admitted = metric_sum(gw, "sluice_ratelimit_decisions_total", decision="allowed")
        self.assertEqual(admitted + metric_sum(gw, "sluice_ratelimit_fail_open_total"), 13)
        self.assertGreaterEqual(admitted, 1)
        # Each settled once: a refund, or (sent, but answered past the
        # deadline on a slow host) unknown, which Redis applied all the same.
        def settled():
            return sum(metric_sum(gw, "sluice_ratelimit_settlements_total", result=result)
                       for result in ("refund", "unknown"))
        wait_until(lambda: settled() == admitted, 5, message="every admitted request settled")
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_settlements_total", result="failed"), 0)
        keys = redis_call(self.redis.port, "KEYS", "*daily:*")
        self.assertEqual(len(keys), 1, keys)

        def used():
            return struct.unpack("<dd", redis_call(self.redis.port, "GET", keys[0]))[1]
        # Each request Redis admitted cost 100 in the end; the stalled ones
        # nothing (a late call that Redis did run is undone shortly after).
        wait_until(lambda: used() == 100 * admitted, 5,
                   message=f"the quota at {100 * admitted:.0f} (each admitted request costs 100)")
        self.assertGreaterEqual(metric_sum(gw, "sluice_redis_late_replies_total"), 1)

    def test_a_read_of_the_denial_view_waits_out_a_stall(self):
        gw = self.start([route("l", "/l", ["per_caller"])],
                        {"per_caller": limit("header:X-Caller", 1)})
        self.assertEqual([self.get(gw, "/l", {"X-Caller": "c"})[0] for _ in range(3)],
                         [200, 429, 429])

        def top():
            status, _, body = request(gw.admin_port, "GET", "/ratelimit/top?limit=per_caller")
            return status, json.loads(body)

        def listed():
            status, doc = top()
            return status == 200 and [k["denials"] for k in doc["keys"]] == [2]
        wait_until(listed, 10, message="the denials in the view")
        answers = []
        # Redis is busy for 0.7 s, past the decision deadline.
        self.stall(0.7, lambda: answers.append(top()))
        status, doc = answers[0]
        self.assertEqual(status, 200, doc)
        self.assertEqual([k["denials"] for k in doc["keys"]], [2])


if __name__ == "__main__":
    unittest.main()
