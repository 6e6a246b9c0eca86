"""on_limit: delay through the real sluice binary, a real redis-server and sluice-echo.

- A burst of C + k requests on a bucket of capacity C refilled at R per second,
  with k / R within max_delay_ms: nobody gets a 429, the k delayed requests are
  answered one after another at least ~1/R apart (the waits are lower bounds, so
  only the spacing's floor is asserted), and decisions_total{decision="delayed"}
  and the delay histogram count k.
- A burst whose later requests would wait longer than max_delay_ms: those get 429.
- A client that disconnects while waiting: its reserved token goes back to the
  bucket in Redis, the upstream never sees the request, the wait is counted as
  abandoned and the exchange as 499.
- SIGTERM while a request waits: it is still forwarded when its wait ends.
"""

import hashlib
import json
import signal
import socket
import ssl
import threading
import time
import unittest

from harness import (ProcessTestCase, RawConnection, bucket_state, client_context, gateway_config,
                     limit, make_ca, make_server_cert, metric_sum, redis_call, request,
                     require_store_policies, route,
                     wait_redis_ready, wait_until)


def setUpModule():
    require_store_policies()


class DelayCase(ProcessTestCase):
    """A redis-server and a sluice-echo per test; start_gateway() adds sluice."""

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()

    def start_gateway(self, capacity, rate, max_delay_ms, server=None):
        delayed = route("delayed", "/d", ["burst"], on_limit="delay", max_delay_ms=max_delay_ms)
        config = gateway_config(
            {"echo": [self.echo.address]}, [delayed],
            server={"threads": 2, **(server or {})},
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000},
            limits={"burst": limit("global", capacity, rate)})
        gateway = self.start_sluice(config)
        wait_redis_ready(gateway)
        return gateway

    def upstream_requests(self) -> int:
        """Requests sluice-echo served, its own /__stats calls left out."""
        stats = self.echo.stats()
        return stats["requests"] - self.echo.stats_calls

    def burst(self, gateway, count):
        """`count` requests on their own connections, released together; returns
        [(status, seconds from the release to the answer)] in completion order."""
        results, lock = [], threading.Lock()
        ready = threading.Barrier(count + 1)

        def one():
            ready.wait()
            status, _, _ = request(gateway.port, "GET", "/d/x", timeout=30)
            with lock:
                results.append((status, time.monotonic() - released))

        threads = [threading.Thread(target=one) for _ in range(count)]
        for t in threads:
            t.start()
        released = time.monotonic()
        ready.wait()
        for t in threads:
            t.join(60)
        self.assertEqual(len(results), count, "every request answered")
        return sorted(results, key=lambda r: r[1])

    def decisions(self, gateway, decision) -> float:
        return metric_sum(gateway, "sluice_ratelimit_decisions_total", route="delayed",
                          limit="burst", decision=decision)

    def bucket_key(self) -> bytes:
        keys = redis_call(self.redis.port, "KEYS", "*burst*")
        self.assertEqual(len(keys), 1, keys)
        return keys[0]


class DelayedBurstTest(DelayCase):
    def test_burst_within_max_delay_is_spread_over_time_without_429(self):
        # Waits of about 0.5, 1.0, 1.5 and 2.0 s: the burst may spread over up to
        # 0.25 s (a loaded machine) before a refilled token spoils the count.
        capacity, rate, k = 2, 2.0, 4
        gw = self.start_gateway(capacity, rate, max_delay_ms=3000)
        results = self.burst(gw, capacity + k)
        self.assertEqual([s for s, _ in results], [200] * (capacity + k), results)
        times = [t for _, t in results]
        at_once, delayed = times[:capacity], times[capacity:]
        # Each delayed request waited for its own token: answers at least about 1/R
        # apart (half of it as tolerance for scheduling), the last about k/R after
        # the release.
        gaps = [b - a for a, b in zip(delayed, delayed[1:])]
        self.assertTrue(all(g >= 0.5 / rate for g in gaps), f"gaps {gaps} (times {times})")
        self.assertGreaterEqual(delayed[-1], 0.8 * k / rate, times)
        self.assertLess(max(at_once), delayed[0], times)
        self.assertEqual(self.upstream_requests(), capacity + k)

        self.assertEqual(self.decisions(gw, "delayed"), k)
        self.assertEqual(self.decisions(gw, "allowed"), capacity)
        self.assertEqual(self.decisions(gw, "limited"), 0)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_delay_seconds_count",
                                    route="delayed"), k)
        waited = metric_sum(gw, "sluice_ratelimit_delay_seconds_sum", route="delayed")
        # The waits of 1/R, 2/R, ... k/R less the refill while the burst was sent.
        self.assertGreaterEqual(waited, 0.8 * sum(i / rate for i in range(1, k + 1)), waited)

    def test_waits_beyond_max_delay_get_429(self):
        capacity, rate = 2, 1.0  # waits of about 1, 2, 3 and 4 s
        gw = self.start_gateway(capacity, rate, max_delay_ms=2500)
        results = self.burst(gw, capacity + 4)
        statuses = sorted(s for s, _ in results)
        self.assertEqual(statuses, [200] * 4 + [429] * 2, results)
        # The refusals come at once, before any delayed request is answered.
        refused = [t for s, t in results if s == 429]
        delayed = sorted(t for s, t in results if s == 200)[capacity:]
        self.assertLess(max(refused), min(delayed), results)
        self.assertEqual(self.decisions(gw, "delayed"), 2)
        self.assertEqual(self.decisions(gw, "limited"), 2)
        self.assertEqual(self.upstream_requests(), 4)


class AbandonedWaitTest(DelayCase):
    def test_client_gone_while_waiting_is_refunded_and_never_forwarded(self):
        gw = self.start_gateway(capacity=1, rate=0.1, max_delay_ms=20000)  # a 10 s wait
        status, _, _ = request(gw.port, "GET", "/d/first")
        self.assertEqual(status, 200)
        key = self.bucket_key()
        tokens_after_first, _ = bucket_state(self.redis.port, key)
        self.assertAlmostEqual(tokens_after_first, 0, delta=0.05)

        waiting = RawConnection(gw.port)
        waiting.send(b"GET /d/second HTTP/1.1\r\nHost: t\r\n\r\n")
        wait_until(lambda: self.decisions(gw, "delayed") == 1, 5, message="a delayed decision")
        reserved, _ = bucket_state(self.redis.port, key)
        self.assertLess(reserved, -0.9, "the token is reserved: the bucket went below zero")
        waiting.close()

        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_delay_abandoned_total",
                                      route="delayed") == 1, 5, message="the wait abandoned")
        wait_until(lambda: bucket_state(self.redis.port, key)[0] > -0.5, 5,
                   message="the reservation refunded")
        self.assertEqual(self.upstream_requests(), 1, "the upstream never saw the request")
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_delay_seconds_count",
                                    route="delayed"), 0)
        wait_until(lambda: metric_sum(gw, "sluice_http_requests_total", route="delayed",
                                      code="499") == 1, 5, message="a 499 recorded")

    def test_a_tls_client_saying_close_notify_while_waiting_is_gone(self):
        make_ca(self.workdir, "ca")
        cert, key = make_server_cert(self.workdir, "ca", "gw", dns=("gw.test",))
        gw = self.start_gateway(capacity=1, rate=0.1, max_delay_ms=20000,  # a 10 s wait
                                server={"tls": {"cert_file": cert, "key_file": key}})
        context = client_context(f"{self.workdir}/ca.crt")
        raw = socket.create_connection(("127.0.0.1", gw.port), timeout=5)
        self.addCleanup(raw.close)
        first = context.wrap_socket(raw, server_hostname="gw.test")
        first.sendall(b"GET /d/first HTTP/1.1\r\nHost: t\r\n\r\n")
        wait_until(lambda: self.decisions(gw, "allowed") == 1, 5, message="the first decision")
        first.sendall(b"GET /d/second HTTP/1.1\r\nHost: t\r\n\r\n")
        wait_until(lambda: self.decisions(gw, "delayed") == 1, 5, message="a delayed decision")
        # close_notify, with the TCP connection left open: unwrap() sends it,
        # then gives up waiting for the gateway's own.
        first.settimeout(0.2)
        try:
            first.unwrap()
        except (TimeoutError, ssl.SSLError, OSError):
            pass
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_delay_abandoned_total",
                                      route="delayed") == 1, 5, message="the wait abandoned")
        self.assertEqual(self.upstream_requests(), 1, "the upstream never saw the request")

    def test_body_bytes_end_the_watch_and_the_request_goes_after_its_wait(self):
        gw = self.start_gateway(capacity=1, rate=1.0, max_delay_ms=3000)  # a 1 s wait
        self.assertEqual(request(gw.port, "GET", "/d/first")[0], 200)
        with RawConnection(gw.port) as conn:
            conn.send(b"POST /d/second HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello")
            response = conn.read_response()
        self.assertEqual(response.status, 200)
        echoed = json.loads(response.body)
        self.assertEqual(echoed["body_sha256"], hashlib.sha256(b"hello").hexdigest(),
                         "the upstream got the whole body after the wait")
        self.assertEqual(self.decisions(gw, "delayed"), 1)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_delay_abandoned_total",
                                    route="delayed"), 0)


class DrainWhileWaitingTest(DelayCase):
    def test_sigterm_while_waiting_still_forwards_after_the_wait(self):
        gw = self.start_gateway(capacity=1, rate=1.0, max_delay_ms=3000,  # a 1 s wait
                                server={"drain_timeout_ms": 10000})
        self.assertEqual(request(gw.port, "GET", "/d/first")[0], 200)
        with RawConnection(gw.port) as conn:
            conn.send(b"GET /d/second HTTP/1.1\r\nHost: t\r\n\r\n")
            wait_until(lambda: self.decisions(gw, "delayed") == 1, 5,
                       message="a delayed decision")
            gw.signal(signal.SIGTERM)
            response = conn.read_response()
        self.assertEqual(response.status, 200)
        self.assertEqual(response.header("Connection"), "close")
        self.assertEqual(gw.wait(15), 0)
        self.assertEqual(self.upstream_requests(), 2)


if __name__ == "__main__":
    unittest.main()
