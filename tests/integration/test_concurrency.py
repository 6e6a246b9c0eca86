"""Concurrency limits through the real sluice binary and a real redis-server,
measured by an upstream that counts the requests it holds at once: never
more than capacity in flight across three instances under 3 x 64
connections; every slot back when exchanges end (2xx, 4xx, 5xx, an upstream
timeout, a client that leaves); slots renewed while their request runs past
lease_ms; a killed instance's slots back after lease_ms; 429 with
Retry-After 1 and the free slots in RateLimit; sluice_ratelimit_in_flight.

A concurrency limit's slots are a sorted set per key in Redis.
"""

import http.client
import signal
import socket
import struct
import threading
import time
import unittest

from harness import (PythonUpstream, gateway_config, metric_sum, redis_call, wait_redis_ready,
                     wait_until)
from test_ratelimit import RateLimitTestCase, parse_rate_limit


class HoldingUpstream:
    """An HTTP/1.1 upstream that holds each request `hold_ms` (query, default
    100) before answering `status` (query, default 200), counting the requests
    it holds at once."""

    def __init__(self):
        self.lock = threading.Lock()
        self.current = 0
        self.peak = 0
        self.served = 0
        self.upstream = PythonUpstream(self.do_get)
        self.address = self.upstream.address

    def do_get(self, handler, query):
        hold = int(query.get("hold_ms", ["100"])[0]) / 1000
        status = int(query.get("status", ["200"])[0])
        with self.lock:
            self.current += 1
            self.peak = max(self.peak, self.current)
        try:
            time.sleep(hold)
        finally:
            with self.lock:
                self.current -= 1
                self.served += 1
        body = b"held\n"
        handler.send_response(status)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)

    def stop(self):
        self.upstream.stop()


def slots(key, capacity, lease_ms=30000):
    return {"key": key, "algorithm": "concurrency", "capacity": capacity, "lease_ms": lease_ms}


class ConcurrencyTest(RateLimitTestCase):
    threads = 2

    def setUp(self):
        super().setUp()
        self.upstream = HoldingUpstream()
        self.addCleanup(self.upstream.stop)

    def gateway(self, limits, name="sluice", response_timeout_ms=None):
        upstream = {"servers": [self.upstream.address]}
        if response_timeout_ms:
            upstream["response_timeout_ms"] = response_timeout_ms
        routes = [{"name": "held", "match": {"path_prefix": "/"}, "upstream": "held",
                   "limits": list(limits)}]
        config = gateway_config(
            {"held": upstream}, routes, server={"threads": self.threads},
            log={"level": "info", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000},
            limits=limits)
        gw = self.start_sluice(config, name=name)
        wait_redis_ready(gw)
        return gw

    def in_use(self, limit):
        keys = redis_call(self.redis.port, "KEYS", f"*{limit}:*")
        if not keys:
            return 0
        return redis_call(self.redis.port, "ZCARD", keys[0])

    def test_never_more_than_capacity_in_flight_across_three_instances(self):
        capacity = 8
        limits = {"in_flight": slots("global", capacity)}
        gateways = [self.gateway(limits, name=f"sluice{i}") for i in range(3)]
        statuses = self.concurrent_statuses(gateways, "/?hold_ms=50", 4, per_gateway=64)
        self.assertEqual(len(statuses), 3 * 64 * 4)
        self.assertLessEqual(self.upstream.peak, capacity)
        self.assertGreaterEqual(self.upstream.peak, capacity // 2)  # the load did fill it
        self.assertEqual(statuses.count(200), self.upstream.served)
        self.assertGreater(statuses.count(429), 0)
        # Every slot back once the exchanges are over (the releases of a turn
        # go out at its end).
        wait_until(lambda: self.in_use("in_flight") == 0, timeout=5, message="every slot back")
        for gw in gateways:
            wait_until(lambda: metric_sum(gw, "sluice_ratelimit_in_flight") == 0, timeout=5,
                       message="in_flight 0")

    def test_denied_with_retry_after_1_then_every_way_of_ending_gives_the_slot_back(self):
        gw = self.gateway({"one": slots("global", 1)}, response_timeout_ms=300)
        # Held: the next request is denied, Retry-After 1, no free slot.
        holder = threading.Thread(target=lambda: self.get(gw, "/?hold_ms=800"))
        holder.start()
        wait_until(lambda: self.upstream.current == 1, timeout=5, message="the slot held")
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_in_flight"), 1)
        status, h, body = self.get(gw, "/?hold_ms=0")
        self.assertEqual(status, 429, body)
        self.assertEqual(h["Retry-After"], "1")
        self.assertEqual(parse_rate_limit(h["RateLimit"]), [("one", 0, 1)])
        holder.join()  # a 504 after 300 ms: the upstream timed out
        # Each way an exchange ends gives the slot back: the next one gets it.
        for target, expected in (("/?hold_ms=0", 200), ("/?hold_ms=0&status=404", 404),
                                 ("/?hold_ms=0&status=502", 502), ("/?hold_ms=600", 504),
                                 ("/?hold_ms=0&status=500", 500)):
            wait_until(lambda: self.in_use("one") == 0, timeout=5, message="the slot back")
            status, _, body = self.get(gw, target)
            self.assertEqual(status, expected, (target, body))
        wait_until(lambda: self.in_use("one") == 0, timeout=5, message="the slot back")

        # A client whose connection is reset while the upstream still holds its
        # request: its slot comes back at once, long before the upstream would
        # answer (a close or a half-close too: test_client_abort.py).
        with socket.create_connection(("127.0.0.1", gw.port)) as s:
            s.sendall(b"GET /?hold_ms=3000 HTTP/1.1\r\nHost: x\r\n\r\n")
            wait_until(lambda: self.upstream.current == 1, timeout=5, message="held upstream")
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        left = time.monotonic()
        wait_until(lambda: self.in_use("one") == 0, timeout=2, message="back after the client left")
        self.assertLess(time.monotonic() - left, 1.0)
        self.assertEqual(self.get(gw, "/?hold_ms=0")[0], 200)
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_in_flight") == 0, timeout=5,
                   message="in_flight 0")

    def test_renewed_while_held_and_back_after_lease_when_the_holder_dies(self):
        limits = {"one": slots("global", 1, lease_ms=1000)}
        a = self.gateway(limits, name="a")
        b = self.gateway(limits, name="b")
        # a's request runs 2.5 leases: renewed, b stays denied.
        holder = threading.Thread(target=lambda: self.get(a, "/?hold_ms=2500"))
        holder.start()
        wait_until(lambda: self.upstream.current == 1, timeout=5, message="held by a")
        deadline = time.monotonic() + 2.0
        while time.monotonic() < deadline:
            self.assertEqual(self.get(b, "/?hold_ms=0")[0], 429)
            time.sleep(0.2)
        holder.join()
        wait_until(lambda: self.get(b, "/?hold_ms=0")[0] == 200, timeout=5,
                   message="b served once a's request ended")
        # b gives its slot back just after its answer went: a asks only then.
        wait_until(lambda: self.in_use("one") == 0, timeout=5, message="b's slot given back")
        # A killed holder: its slot comes back after lease_ms.
        def held_until_killed():
            try:
                self.get(a, "/?hold_ms=4000")
            except (OSError, http.client.HTTPException):
                pass  # the connection dies with a

        holder = threading.Thread(target=held_until_killed, daemon=True)
        holder.start()
        wait_until(lambda: self.upstream.current == 1, timeout=5, message="held by a again")
        a.signal(signal.SIGKILL)
        killed = time.monotonic()
        self.assertEqual(self.get(b, "/?hold_ms=0")[0], 429)
        wait_until(lambda: self.get(b, "/?hold_ms=0")[0] == 200, timeout=5,
                   message="the dead instance's slot back")
        self.assertGreaterEqual(time.monotonic() - killed, 0.5)


class LocalFallbackConcurrencyTest(RateLimitTestCase):
    threads = 1

    def setUp(self):
        super().setUp()
        self.upstream = HoldingUpstream()
        self.addCleanup(self.upstream.stop)

    def test_without_redis_the_local_share_holds_and_gives_slots_back(self):
        """on_redis_failure: local with Redis gone: the instance's share (2 of 2,
        fleet size 1) is held while requests run and back as each ends, not
        after lease_ms (30 s)."""
        limits = {"two": slots("global", 2)}
        routes = [{"name": "held", "match": {"path_prefix": "/"}, "upstream": "held",
                   "limits": list(limits), "on_redis_failure": "local"}]
        config = gateway_config(
            {"held": [self.upstream.address]}, routes, server={"threads": 1},
            log={"level": "info", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 200},
            local={"fleet_size": 1}, limits=limits)
        gw = self.start_sluice(config)
        wait_redis_ready(gw)
        self.redis.stop()
        # One after another: each ends before the next, so all go through.
        for i in range(6):
            self.assertEqual(self.get(gw, "/?hold_ms=0")[0], 200, i)
        # Two held at once: a third is denied until one of them ends.
        holders = [threading.Thread(target=lambda: self.get(gw, "/?hold_ms=1500"))
                   for _ in range(2)]
        for holder in holders:
            holder.start()
        wait_until(lambda: self.upstream.current == 2, timeout=5, message="two held")
        self.assertEqual(self.get(gw, "/?hold_ms=0")[0], 429)
        for holder in holders:
            holder.join()
        self.assertEqual(self.get(gw, "/?hold_ms=0")[0], 200)
        self.assertGreater(metric_sum(gw, "sluice_ratelimit_fail_local_total"), 0)


if __name__ == "__main__":
    unittest.main()
