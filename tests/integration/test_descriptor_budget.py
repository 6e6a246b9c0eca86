"""One client cannot starve the gateway of descriptors: HTTP/2 clients whose
streams never open their receive window, on a route with a large response,
against the real binary run under a lowered RLIMIT_NOFILE (prlimit), a real
redis-server and sluice-echo.

While the attack runs, a capacity-1 key never admits a second request, the
admin listener's /healthz answers, and another client's requests are served;
after it, the gateway's descriptors come back to their level before.
"""

import os
import select
from concurrent.futures import ThreadPoolExecutor
import shutil
import threading
import time
import unittest

from harness import (ProcessTestCase, gateway_config, limit, metric_sum, request, route,
                     wait_redis_ready, wait_until)
from testkit.h2client import H2Client

PRLIMIT = shutil.which("prlimit")
NOFILE = 512          # the gateway's descriptor limit (soft and hard)
RESERVED = 128        # kept for Redis, the admin listener, health checks, logs
PER_THREAD = 16       # and for each worker's event loop and Redis connections
CLIENT_CAP = (NOFILE - RESERVED) // 2     # client connections at once
UPSTREAM_BUDGET = NOFILE - RESERVED - PER_THREAD - CLIENT_CAP  # upstream ones, one worker
PER_SERVER = UPSTREAM_BUDGET // 4         # the default bound, one worker
CONNECTIONS = 12      # attacking HTTP/2 connections
STREAMS = 100         # streams on each, all stalled
BIG = 64 * 1024 * 1024  # the response each stalled stream asks for
INITIAL_WINDOW_SIZE = 0x4


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


class StallingClients:
    """CONNECTIONS HTTP/2 connections, each with STREAMS streams asking for a
    large download and a stream receive window of 0: nothing of the bodies can
    be sent. A thread reads the connections (frames other than DATA still
    flow) until stopped."""

    def __init__(self, port: int, path: str):
        self.clients: list[H2Client] = []
        self.refused = 0  # connections the gateway would not take
        for _ in range(CONNECTIONS):
            try:
                c = H2Client(port, timeout=5.0, settings={INITIAL_WINDOW_SIZE: 0})
                for _ in range(STREAMS):
                    c.send("GET", path)
                self.clients.append(c)
            except OSError:
                self.refused += 1
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        deadline = time.monotonic() + 120
        while not self.stopping.is_set() and time.monotonic() < deadline:
            live = [c for c in self.clients if not c.closed]
            if not live:
                return
            readable, _, _ = select.select([c.sock for c in live], [], [], 0.1)
            for c in live:
                if c.sock in readable:
                    c.pump()

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        for c in self.clients:
            c.close()


@unittest.skipUnless(PRLIMIT, "prlimit (util-linux) is not installed")
class DescriptorBudgetTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.big = self.start_echo("big")
        self.other = self.start_echo("other")

    def gateway(self, big_upstream=None, server=None):
        config = gateway_config(
            {"big": big_upstream or [self.big.address], "other": [self.other.address]},
            [route("big", "/__download/", [], upstream="big"),
             route("slow", "/__slow/", [], upstream="big"),
             route("limited", "/limited", ["one"], upstream="other"),
             route("other", "/", [], upstream="other")],
            server={"threads": 1, "http2": {"enabled": True}, **(server or {})},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0"},
            limits={"one": limit("header:X-Caller", 1)})
        gw = self.start_sluice(config, wrapper=(PRLIMIT, f"--nofile={NOFILE}:{NOFILE}", "--"))
        wait_redis_ready(gw)
        return gw

    def attack_and_check(self, gw, big_connections_at_least, other_must_succeed, rounds=20):
        pid = gw.pids()[-1]
        self.assertEqual(request(gw.port, "GET", "/warm")[0], 200)
        before = open_descriptors(pid)

        attack = StallingClients(gw.port, f"/__download/{BIG}")
        self.addCleanup(attack.stop)
        try:
            # The stalled streams hold every upstream connection they may have.
            wait_until(lambda: self.big.counts()["connections"] >= big_connections_at_least, 10,
                       message="the stalled streams reached the upstream")
            denied = 0
            others = []
            for _ in range(rounds):
                status, _, _ = request(gw.admin_port, "GET", "/healthz", timeout=3.0)
                self.assertEqual(status, 200, "the admin's /healthz answers during the attack")
                others.append(request(gw.port, "GET", "/other", timeout=5.0)[0])
                status, _, _ = request(gw.port, "GET", "/limited",
                                       headers={"X-Caller": "only-one"}, timeout=5.0)
                # 503: admitted, and no upstream connection free in time.
                self.assertIn(status, (200, 429, 503), "the limited route answers from Redis")
                denied += status == 429
            self.assertEqual(denied, rounds - 1, "a capacity-1 key admits exactly one request")
            if other_must_succeed:
                self.assertEqual(set(others), {200}, "another client's requests are served")
            self.assertEqual(metric_sum(gw, "sluice_redis_errors_total"), 0)
            held = self.big.counts()["connections"]
        finally:
            attack.stop()

        wait_until(lambda: open_descriptors(pid) <= before + 2, 60,
                   message="the gateway's descriptors back to their level before the attack")
        return held

    def test_stalled_streams_hold_at_most_the_default_bound_of_one_server(self):
        gw = self.gateway()
        held = self.attack_and_check(gw, PER_SERVER, other_must_succeed=True)
        self.assertLessEqual(held, PER_SERVER, "the default bound per server and worker")

    def test_without_a_bound_per_server_the_reserve_still_holds(self):
        gw = self.gateway(big_upstream={"servers": [self.big.address], "max_connections": 0})
        # Requests to other servers wait connect_timeout_ms for a descriptor: few rounds.
        held = self.attack_and_check(gw, UPSTREAM_BUDGET - 4, other_must_succeed=False, rounds=5)
        self.assertLessEqual(held, UPSTREAM_BUDGET, "upstream connections within their budget")
        self.assertGreater(metric_sum(gw, "sluice_descriptor_reserve_hits_total"), 0)

    def test_a_stream_whose_client_reads_nothing_gives_its_upstream_connection_back(self):
        gw = self.gateway(
            big_upstream={"servers": [self.big.address], "connect_timeout_ms": 200},
            server={"send_timeout_ms": 1000})
        attack = StallingClients(gw.port, f"/__download/{BIG}")
        self.addCleanup(attack.stop)
        wait_until(lambda: metric_sum(gw, "sluice_upstream_connections_open") >= PER_SERVER, 10,
                   message="the stalled streams hold upstream connections")
        # Within send_timeout_ms the stalled streams are reset and their upstream
        # connections closed, while their clients are still connected.
        wait_until(lambda: metric_sum(gw, "sluice_upstream_connections_open") == 0, 10,
                   message="no upstream connection held for clients that read nothing")
        self.assertTrue(any(not c.closed for c in attack.clients))
        attack.stop()

    def test_idle_pooled_connections_make_room_for_another_server(self):
        gw = self.gateway(big_upstream={"servers": [self.big.address], "max_connections": 0,
                                        "max_idle_connections": 1000})
        # As many slow requests at once as there are upstream descriptors: once
        # answered, their connections stay idle in the pool, holding them all.
        with ThreadPoolExecutor(UPSTREAM_BUDGET) as pool:
            statuses = list(pool.map(
                lambda _: request(gw.port, "GET", "/__slow/500", timeout=10)[0],
                range(UPSTREAM_BUDGET)))
        self.assertEqual(set(statuses), {200})
        wait_until(lambda: metric_sum(gw, "sluice_upstream_connections_open") >= UPSTREAM_BUDGET - 8,
                   5, message="the pool holds (nearly) every upstream descriptor")
        # Another server's request closes an idle one instead of waiting for a 503.
        for _ in range(5):
            self.assertEqual(request(gw.port, "GET", "/other", timeout=5)[0], 200)


if __name__ == "__main__":
    unittest.main()
