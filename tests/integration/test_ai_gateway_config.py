"""The AI-gateway example, conf/ai-gateway.yaml, run for real with its
addresses moved to this test's own processes: an upstream that reports each
completion's tokens in X-Usage-Tokens (in the head, or a trailer of a
streamed body). The monthly quota counts the real tokens, not the estimate;
a failed completion costs nothing; the plans' concurrency caps hold.
"""

import os
import struct
import threading
import time
import unittest

from harness import (SOURCE_DIR, Client, ProcessTestCase, PythonUpstream, free_port, metric_sum,
                     redis_call, wait_redis_ready, wait_until)
from testkit.configs import retarget

CONFIG = os.path.join(SOURCE_DIR, "conf", "ai-gateway.yaml")


def model_server():
    """POST-less model: GET /v1/...?tokens=N[&stream=1][&status=S][&hold_ms=M]."""
    def do_get(handler, query):
        tokens = query.get("tokens", ["0"])[0]
        status = int(query.get("status", ["200"])[0])
        time.sleep(int(query.get("hold_ms", ["0"])[0]) / 1000)
        if query.get("stream"):
            event = b'data: {"a":1}\n\n'
            handler.wfile.write(
                f"HTTP/1.1 {status} OK\r\nContent-Type: text/event-stream\r\n"
                f"Transfer-Encoding: chunked\r\nTrailer: X-Usage-Tokens\r\n\r\n"
                f"{len(event):x}\r\n".encode() + event +
                f"\r\n0\r\nX-Usage-Tokens: {tokens}\r\n\r\n".encode())
            return
        body = b'{"choices":[]}'
        handler.send_response(status)
        handler.send_header("X-Usage-Tokens", tokens)
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return PythonUpstream(do_get)


class AiGatewayConfigTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.model = model_server()
        self.addCleanup(self.model.stop)
        with open(CONFIG) as f:
            text = retarget(f.read(), free_port(), free_port(), self.redis.port,
                            self.model.address, source=CONFIG)
        self.gateway = self.start_sluice(text)
        wait_redis_ready(self.gateway)

    def monthly_used(self):
        keys = redis_call(self.redis.port, "KEYS", "*tokens_monthly:*")
        if not keys:
            return 0
        return struct.unpack("<dd", redis_call(self.redis.port, "GET", keys[0]))[1]

    def settled(self):
        return sum(metric_sum(self.gateway, "sluice_ratelimit_settlements_total", result=r)
                   for r in ("refund", "debit", "even", "failed"))

    def test_the_monthly_quota_counts_the_real_tokens(self):
        key = {"X-API-Key": "demo-free-key"}
        with Client(self.gateway.port) as client:
            for query in ("tokens=120", "tokens=900&stream=1", "tokens=700&status=500"):
                client.request("GET", f"/v1/chat/completions?{query}", headers=key)
        wait_until(lambda: self.settled() == 3, timeout=5, message="three settlements")
        self.assertEqual(self.monthly_used(), 120 + 900)  # the failed one cost nothing

    def test_the_free_plan_has_four_completions_in_progress_at_most(self):
        statuses = []
        lock = threading.Lock()
        # All eight sent together, each held for 2 s: none ends before the
        # last is decided, even on a slow host.
        start = threading.Barrier(8)

        def one():
            with Client(self.gateway.port) as client:
                start.wait(10)
                status = client.request("GET", "/v1/x?tokens=1&hold_ms=2000",
                                        headers={"X-API-Key": "demo-free-key"})[0]
            with lock:
                statuses.append(status)

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        # A decision Redis could not make within the config's 50 ms (a host
        # slowed by sanitizers) fails open: counted, and the only way past four.
        failed_open = metric_sum(self.gateway, "sluice_ratelimit_fail_open_total")
        self.assertEqual(statuses.count(200), 4 + failed_open, statuses)
        self.assertEqual(statuses.count(429), 4 - failed_open, statuses)


if __name__ == "__main__":
    unittest.main()
