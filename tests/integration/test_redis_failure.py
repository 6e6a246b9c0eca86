"""Sluice when Redis cannot answer: killed, restarted, paused, stopped; and Redis over
TLS and with an ACL user.

Every test owns its redis-server(s), sluice-echo and gateway. Timing bounds are
functional ("a request never hangs on Redis"), generous for a noisy 2-core box:
with timeout_ms 300, each request must be answered within 1.5 s.
"""

import json
import os
import signal
import time
import unittest

from harness import (RATE_LIMIT_HEADERS, ProcessTestCase, gateway_config, make_ca,
                     make_server_cert, metric_sum, readyz, redis_call, redis_pipeline, request,
                     start_tls_redis, wait_redis_ready, wait_until)

TIMEOUT_MS = 300  # a healthy decision never waits this long, even under ASan
MAX_ANSWER_SECONDS = 1.5  # timeout_ms + a margin generous for a loaded machine
FAILURES = 3  # circuit_breaker.failures
OPEN_MS = 1000  # circuit_breaker.open_ms
CAPACITY = 5


class RedisFailureCase(ProcessTestCase):
    """Routes: /open (fail open), /closed (fail closed), /free (no limits). The limit is
    keyed on X-Client, so each phase of a test can use a fresh bucket."""

    def setUp(self):
        super().setUp()
        self.echo = self.start_echo()
        self.clients = 0

    def start_gateway(self, url, name="sluice", wait_ready=True, **redis):
        config = gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "open", "match": {"path_prefix": "/open"}, "upstream": "echo",
              "limits": ["lim"], "on_redis_failure": "open"},
             {"name": "closed", "match": {"path_prefix": "/closed"}, "upstream": "echo",
              "limits": ["lim"], "on_redis_failure": "closed"},
             {"name": "free", "match": {"path_prefix": "/free"}, "upstream": "echo"}],
            # One worker: one Redis connection and one breaker, so counts are exact.
            server={"threads": 1},
            redis={"url": url, "timeout_ms": TIMEOUT_MS, "connect_timeout_ms": 200,
                   "circuit_breaker": {"failures": FAILURES, "open_ms": OPEN_MS}, **redis},
            limits={"lim": {"key": "header:X-Client", "capacity": CAPACITY,
                            "refill_per_second": 0.001}})
        gateway = self.start_sluice(config, name=name)
        if wait_ready:
            wait_redis_ready(gateway)
        return gateway

    def fresh_client(self):
        self.clients += 1
        return f"client-{self.clients}"

    def timed_get(self, gw, target, client):
        started = time.monotonic()
        status, headers, body = request(gw.port, "GET", target, headers={"X-Client": client},
                                        timeout=10)
        return status, headers, body, time.monotonic() - started

    def has_rate_limit_headers(self, headers):
        return any(headers.get(n) is not None for n in RATE_LIMIT_HEADERS)

    def assert_fails_open(self, gw, client, what):
        status, h, body, elapsed = self.timed_get(gw, "/open/x", client)
        self.assertEqual(status, 200, f"{what}: {body[:300]!r}")
        self.assertEqual(json.loads(body)["target"], "/open/x", what)  # it was forwarded
        self.assertFalse(self.has_rate_limit_headers(h),
                         f"{what}: rate-limit headers on a fail-open answer: {dict(h)}")
        self.assertLess(elapsed, MAX_ANSWER_SECONDS, f"{what}: answered after {elapsed:.3f}s")

    def assert_fails_closed(self, gw, client, what):
        status, h, body, elapsed = self.timed_get(gw, "/closed/x", client)
        self.assertEqual(status, 503, f"{what}: {body[:300]!r}")
        self.assertEqual(h.get("Content-Type"), "application/problem+json", what)
        doc = json.loads(body)
        self.assertEqual(doc.get("status"), 503, doc)
        self.assertTrue(doc.get("title"), doc)
        self.assertLess(elapsed, MAX_ANSWER_SECONDS, f"{what}: answered after {elapsed:.3f}s")

    def assert_limiting_works(self, gw, what, target="/open/x"):
        """A fresh bucket: CAPACITY answers counting down, then 429."""
        client = self.fresh_client()
        for k in range(1, CAPACITY + 1):
            status, h, body, _ = self.timed_get(gw, target, client)
            self.assertEqual(status, 200, f"{what}, request {k}: {body[:300]!r}")
            self.assertEqual(h.get("X-RateLimit-Remaining"), str(CAPACITY - k),
                             f"{what}, request {k}: {dict(h)}")
        status, h, body, _ = self.timed_get(gw, target, client)
        self.assertEqual(status, 429, f"{what}: after the burst: {body[:300]!r}")
        self.assertIsNotNone(h.get("Retry-After"), dict(h))

    def wait_limiting_resumes(self, gw, what, timeout=15.0):
        """Polls the fail-open route until a decision comes from Redis again."""
        client = self.fresh_client()
        def decided():
            status, h, _, elapsed = self.timed_get(gw, "/open/x", client)
            self.assertEqual(status, 200)
            self.assertLess(elapsed, MAX_ANSWER_SECONDS, f"{what}: answered after {elapsed:.3f}s")
            return self.has_rate_limit_headers(h)
        wait_until(decided, timeout, interval=0.05, message=f"rate limiting back ({what})")

    def fail_counts(self, gw):
        return (metric_sum(gw, "sluice_ratelimit_fail_open_total", route="open"),
                metric_sum(gw, "sluice_ratelimit_fail_closed_total", route="closed"))


class RedisDownTest(RedisFailureCase):
    def test_killed_redis_fail_open_closed_breaker_and_recovery(self):
        redis = self.start_redis()
        gw = self.start_gateway(f"redis://127.0.0.1:{redis.port}/0")
        status, h, _, _ = self.timed_get(gw, "/open/x", self.fresh_client())
        self.assertEqual((status, h.get("X-RateLimit-Remaining")), (200, str(CAPACITY - 1)))
        self.assertEqual(gw.metric("sluice_redis_up"), 1)
        self.assertEqual(gw.metric("sluice_redis_circuit_open"), 0)

        redis.signal(signal.SIGKILL)
        redis.wait(5)
        wait_until(lambda: gw.metric("sluice_redis_up") == 0, 5, message="sluice_redis_up 0")
        self.assertEqual(self.fail_counts(gw), (0, 0))
        client = self.fresh_client()

        # The breaker opens after exactly FAILURES consecutive failed decisions.
        for i in range(1, FAILURES + 1):
            self.assert_fails_open(gw, client, f"failure {i} with Redis killed")
            self.assertEqual(gw.metric("sluice_redis_circuit_open"), 1 if i == FAILURES else 0,
                             f"breaker gauge after {i} of {FAILURES} failures")
        opened = time.monotonic()
        errors = metric_sum(gw, "sluice_redis_errors_total")
        self.assertGreaterEqual(errors, FAILURES)

        # While open, decisions still answer (fail open / fail closed), without Redis calls.
        for i in range(3):
            self.assert_fails_open(gw, client, f"breaker open, request {i}")
        self.assert_fails_closed(gw, client, "breaker open, fail-closed route")
        if time.monotonic() - opened < OPEN_MS / 1000 * 0.9:
            self.assertEqual(metric_sum(gw, "sluice_redis_errors_total"), errors,
                             "Redis was called while the breaker was open")
        self.assertEqual(gw.metric("sluice_redis_circuit_open"), 1)
        status, h, body, elapsed = self.timed_get(gw, "/free", client)
        self.assertEqual(status, 200, body[:300])
        self.assertLess(elapsed, MAX_ANSWER_SECONDS)

        # More failures while the breaker is half-open or open: still quick answers.
        for i in range(4):
            self.assert_fails_open(gw, client, f"Redis down, request {i}")
            self.assert_fails_closed(gw, client, f"Redis down, fail-closed request {i}")
            time.sleep(0.1)  # pacing, so some of these land after open_ms (a trial)
        self.assertEqual(self.fail_counts(gw), (FAILURES + 3 + 4, 1 + 4))
        self.assertEqual(gw.metric("sluice_redis_up"), 0)

        # Redis back on the same port: limiting resumes by itself.
        self.start_redis(port=redis.port)
        self.wait_limiting_resumes(gw, "Redis restarted after SIGKILL")
        self.assertEqual(gw.metric("sluice_redis_up"), 1)
        self.assertEqual(gw.metric("sluice_redis_circuit_open"), 0)
        before = self.fail_counts(gw)
        self.assert_limiting_works(gw, "after Redis came back", "/closed/x")
        self.assertEqual(self.fail_counts(gw), before)

    def test_restart_recovers_without_a_failed_decision(self):
        redis = self.start_redis()
        gw = self.start_gateway(f"redis://127.0.0.1:{redis.port}/0")
        self.assert_limiting_works(gw, "before the restart")
        try:
            redis_call(redis.port, "SHUTDOWN", "NOSAVE")
        except (ConnectionError, OSError):
            pass  # SHUTDOWN closes the connection without a reply
        redis.wait(5)
        wait_until(lambda: readyz(gw)[1]["dependencies"]["redis"] != "ready", 5,
                   message="/readyz to notice Redis is gone")
        self.assertEqual(gw.metric("sluice_redis_up"), 0)

        self.start_redis(port=redis.port)
        wait_redis_ready(gw)  # the client reconnects by itself, with no request needed
        before = self.fail_counts(gw)
        self.assertEqual(before, (0, 0))
        self.assert_limiting_works(gw, "after the restart (fail-closed route)", "/closed/x")
        self.assert_limiting_works(gw, "after the restart (fail-open route)", "/open/x")
        self.assertEqual(self.fail_counts(gw), before, "a decision failed after recovery")
        self.assertEqual(gw.metric("sluice_redis_up"), 1)


class RedisUnresponsiveTest(RedisFailureCase):
    def exercise_unresponsive(self, gw, seconds, what):
        """Requests paced over `seconds` while Redis does not answer: each one is
        answered within the bound (fail open / fail closed). Returns the request count."""
        client = self.fresh_client()
        started = time.monotonic()
        count = 0
        while time.monotonic() - started < seconds:
            self.assert_fails_open(gw, client, f"{what}, request {count}")
            self.assert_fails_closed(gw, client, f"{what}, request {count}")
            count += 1
            time.sleep(0.1)  # pacing
        return count

    def test_client_pause_decisions_keep_their_deadline(self):
        redis = self.start_redis()
        gw = self.start_gateway(f"redis://127.0.0.1:{redis.port}/0")
        self.assertTrue(self.has_rate_limit_headers(
            self.timed_get(gw, "/open/x", self.fresh_client())[1]))
        self.assertEqual(redis_call(redis.port, "CLIENT", "PAUSE", "3000", "ALL"), "OK")
        paused = time.monotonic()
        count = self.exercise_unresponsive(gw, 1.8, "CLIENT PAUSE 3000 ALL")
        self.assertEqual(self.fail_counts(gw), (count, count))
        self.assertGreaterEqual(metric_sum(gw, "sluice_redis_errors_total", kind="timeout"), 1)
        # After the pause, limiting resumes.
        wait_until(lambda: time.monotonic() - paused >= 3.0, 5)  # the pause's own end
        self.wait_limiting_resumes(gw, "after CLIENT PAUSE")
        before = self.fail_counts(gw)
        self.assert_limiting_works(gw, "after CLIENT PAUSE", "/closed/x")
        self.assertEqual(self.fail_counts(gw), before)

    def test_sigstop_redis_requests_do_not_hang(self):
        redis = self.start_redis()

        def resume():
            if redis.alive():
                os.kill(redis.pid, signal.SIGCONT)
        self.addCleanup(resume)  # runs before the cleanup that stops redis
        gw = self.start_gateway(f"redis://127.0.0.1:{redis.port}/0")
        self.assertTrue(self.has_rate_limit_headers(
            self.timed_get(gw, "/open/x", self.fresh_client())[1]))
        redis.signal(signal.SIGSTOP)
        count = self.exercise_unresponsive(gw, 1.5, "redis-server SIGSTOPped")
        self.assertEqual(self.fail_counts(gw), (count, count))
        redis.signal(signal.SIGCONT)
        self.wait_limiting_resumes(gw, "after SIGCONT")
        before = self.fail_counts(gw)
        self.assert_limiting_works(gw, "after SIGCONT", "/closed/x")
        self.assertEqual(self.fail_counts(gw), before)


class RedisTlsTest(RedisFailureCase):
    def setUp(self):
        super().setUp()
        d = self.workdir
        self.ca = make_ca(d, "ca")
        self.wrong_ca = make_ca(d, "wrong-ca")
        cert, key = make_server_cert(d, "ca", "server", dns=("localhost",))
        self.redis = start_tls_redis(self, cert, key, self.ca)
        self.url = f"rediss://127.0.0.1:{self.redis.port}/0"

    def test_limiting_over_tls(self):
        gw = self.start_gateway(self.url, tls_ca_file=self.ca)
        self.assert_limiting_works(gw, "Redis over TLS")
        # The bucket; the most-limited view's counts ({top}) are flushed once a second.
        keys = [k for k in redis_call(self.redis.port, "KEYS", "*",
                                      ssl_context=self.redis.ssl_context) if b"{top}" not in k]
        self.assertEqual(len(keys), 1, keys)
        self.assertEqual(self.fail_counts(gw), (0, 0))

    def test_wrong_ca_fails_open_and_is_not_ready(self):
        gw = self.start_gateway(self.url, wait_ready=False, tls_ca_file=self.wrong_ca)
        client = self.fresh_client()
        for i in range(5):
            self.assert_fails_open(gw, client, f"server certificate from another CA, request {i}")
            time.sleep(0.1)  # pacing: several connect attempts happen meanwhile
        self.assertEqual(self.fail_counts(gw)[0], 5)
        status, doc = readyz(gw)
        self.assertNotEqual(doc["dependencies"]["redis"], "ready", doc)
        self.assertEqual(gw.metric("sluice_redis_up"), 0)


class RedisAclTest(RedisFailureCase):
    # What Sluice needs: the handshake (AUTH, which every user may call, SELECT for a
    # db other than 0, PING), SCRIPT LOAD, EVALSHA and EVAL (the NOSCRIPT fallback), and
    # the commands the scripts call (TIME, GET, MGET, SET), on its own keys only.
    ACL = ["ACL", "SETUSER", "sluice", "reset", "on", ">secret", "resetkeys", "~sluice:*",
           "-@all", "+ping", "+select", "+script|load", "+evalsha", "+eval", "+time", "+get",
           "+mget", "+set"]

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.assertEqual(redis_call(self.redis.port, *self.ACL), "OK")
        # The user really is restricted.
        auth, denied = redis_pipeline(self.redis.port,
                                      [["AUTH", "sluice", "secret"], ["FLUSHALL"]])
        self.assertEqual(auth, "OK")
        self.assertIn("NOPERM", str(denied))

    def test_limiting_with_acl_user(self):
        gw = self.start_gateway(f"redis://sluice:secret@127.0.0.1:{self.redis.port}/1")
        self.assert_limiting_works(gw, "ACL user, db 1")
        self.assertEqual(redis_call(self.redis.port, "KEYS", "*", db=0), [])
        keys = redis_call(self.redis.port, "KEYS", "*", db=1)
        self.assertEqual(len(keys), 1, keys)
        self.assertTrue(keys[0].startswith(b"sluice:lim:"), keys)
        # The NOSCRIPT path works within the user's permissions too.
        self.assertEqual(redis_call(self.redis.port, "SCRIPT", "FLUSH"), "OK")
        self.assert_limiting_works(gw, "ACL user after SCRIPT FLUSH", "/closed/x")
        self.assertEqual(self.fail_counts(gw), (0, 0))

    def test_wrong_password_fails_open_and_is_not_ready(self):
        gw = self.start_gateway(f"redis://sluice:wrong@127.0.0.1:{self.redis.port}/1",
                                wait_ready=False)
        client = self.fresh_client()
        for i in range(5):
            self.assert_fails_open(gw, client, f"wrong Redis password, request {i}")
            time.sleep(0.1)  # pacing: several connect attempts happen meanwhile
        self.assertEqual(self.fail_counts(gw)[0], 5)
        status, doc = readyz(gw)
        self.assertNotEqual(doc["dependencies"]["redis"], "ready", doc)
        self.assertEqual(gw.metric("sluice_redis_up"), 0)


if __name__ == "__main__":
    unittest.main()
