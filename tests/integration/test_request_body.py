"""Requests decided on their JSON body, through the real sluice binary, a
real redis-server and the test kit's model server: the body is read ahead of
the decision (up to routes[].max_inspect_bytes), a body:model key part gives
each model its own bucket sized by limits.NAME.models, the estimate comes
from max_tokens plus the prompt's bytes / 4, and the body then reaches the
upstream byte for byte, whatever its length, framing or protocol. A body that
is not JSON, or whose model lies past the bound, shares the "missing" bucket;
a client that leaves while its body is read ahead leaves nothing behind.
"""

import hashlib
import json
import math
import socket
import struct
import time
import unittest

from harness import (gateway_config, metric_sum, redis_call, rss_kib, wait_redis_ready,
                     wait_until)
from test_ratelimit import RateLimitTestCase
from testkit.h2client import H2Client
from testkit.http import request
from testkit.model_server import ModelServer
from testkit.resp import stall_redis

BOUND = 64 * 1024
DEFAULT = 500


def chat(model, max_tokens=None, pad=0, order=("model", "messages", "max_tokens")):
    """A chat completion request body, its members in `order`."""
    members = {"model": model, "messages": [{"role": "user", "content": "x" * pad or "hi"}],
               "max_tokens": max_tokens}
    return json.dumps({k: members[k] for k in order
                       if members.get(k) is not None or k != "max_tokens"}).encode()


class RequestBodyTest(RateLimitTestCase):
    def setUp(self):
        super().setUp()
        self.model = ModelServer(seed=7)
        self.addCleanup(self.model.stop)
        limits = {
            "per_model": {"key": ["ip", "body:model"], "capacity": 100000,
                          "refill_per_second": 0.000001,
                          "models": {"gpt-4o": {"capacity": 3000},
                                     "small-*": {"capacity": 5000}}},
            "monthly": {"key": "global", "algorithm": "quota", "capacity": 100000000,
                        "period": "month"},
        }
        routes = [{"name": "chat", "match": {"path_prefix": "/v1/"}, "upstream": "llm",
                   "limits": ["per_model", "monthly"], "max_inspect_bytes": BOUND,
                   "cost": {"from_body": ["max_completion_tokens", "max_tokens"],
                            "default": DEFAULT, "add_prompt_estimate": True}}]
        self.gw = self.start_sluice(gateway_config(
            {"llm": [self.model.address]}, routes,
            server={"threads": 1, "http2": {"enabled": True}},
            log={"level": "info", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000},
            limits=limits))
        wait_redis_ready(self.gw)

    def post(self, body, headers=None, chunked=False):
        fields = {"Content-Type": "application/json", "X-Model-Tokens": "5", **(headers or {})}
        return request(self.gw.port, "POST", "/v1/chat/completions", body=body, headers=fields,
                       chunked=chunked)

    def monthly_used(self):
        keys = redis_call(self.redis.port, "KEYS", "*monthly:*")
        return struct.unpack("<dd", redis_call(self.redis.port, "GET", keys[0]))[1] if keys else 0

    def last_body(self):
        return self.model.requests[-1][2]

    def test_each_model_has_its_own_bucket_sized_by_models(self):
        # gpt-4o holds 3000: two requests of 1000 + prompt go, the third does not.
        body = chat("gpt-4o", 1000)
        cost = 1000 + math.ceil(len(body) / 4)
        statuses = [self.post(body)[0] for _ in range(3)]
        self.assertEqual(statuses, [200, 200, 429])
        status, h, _ = self.post(chat("gpt-4o", 1))
        self.assertEqual(h["X-RateLimit-Limit"], "3000")
        self.assertEqual(int(h["X-RateLimit-Remaining"]), 3000 - 2 * cost - (1 + math.ceil(
            len(chat("gpt-4o", 1)) / 4)))
        # A prefix pattern, and a model with no entry (the limit's own size).
        status, h, _ = self.post(chat("small-2", 10))
        self.assertEqual((status, h["X-RateLimit-Limit"]), (200, "5000"))
        status, h, _ = self.post(chat("mistral", 10))
        self.assertEqual((status, h["X-RateLimit-Limit"]), (200, "100000"))
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_missing_key_total"), 0)

    def test_a_body_without_its_model_shares_the_missing_bucket(self):
        spent = 0
        # Not JSON; JSON without a model; a model past max_inspect_bytes (its
        # max_tokens too: the estimate is the default plus the prompt's, clamped).
        for body in (b"model=gpt-4o", json.dumps({"messages": []}).encode(),
                     chat("gpt-4o", 10, pad=BOUND, order=("messages", "model", "max_tokens"))):
            status, h, _ = self.post(body)
            spent += DEFAULT + math.ceil(len(body) / 4)
            self.assertEqual(self.last_body(), body)  # went upstream whole all the same
            # One bucket for all three: each estimate came out of the same 100000.
            self.assertEqual((status, h["X-RateLimit-Limit"], int(h["X-RateLimit-Remaining"])),
                             (200, "100000", 100000 - spent), body[:40])
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_missing_key_total",
                                    source="body"), 3)

    def test_the_estimate_is_max_tokens_plus_the_prompt_clamped(self):
        expected = 0
        for body in (chat("gpt-4o", 120), chat("small-1", None),
                     json.dumps({"model": "small-1", "max_completion_tokens": 7,
                                 "max_tokens": 900}).encode(),
                     chat("small-big", 10 ** 12), chat("small-1", -5), b"[1,2]"):
            before = self.monthly_used()
            status, _, _ = self.post(body)
            self.assertEqual(status, 200, body)
            expected_cost = {0: 120, 1: DEFAULT, 2: 7, 3: None, 4: DEFAULT, 5: DEFAULT}
            used = self.monthly_used() - before
            expected += used
            if len(self.model.requests) == 4:
                # max_tokens 10^12: clamped to the smallest capacity it meets (5000).
                self.assertEqual(used, 5000)
            else:
                self.assertEqual(used, expected_cost[len(self.model.requests) - 1] +
                                 math.ceil(len(body) / 4), body)
        self.assertEqual(self.monthly_used(), expected)
        # A chunked body longer than the bound: its length is unknown, so the
        # prompt estimate takes the bytes read before the decision; its
        # max_tokens comes after the long messages, past the bound: the default.
        body = chat("mistral", 10, pad=2 * BOUND)
        before = self.monthly_used()
        status, _, _ = self.post(iter([body[i:i + 5000] for i in range(0, len(body), 5000)]),
                                 chunked=True)
        self.assertEqual(status, 200)
        self.assertEqual(self.monthly_used() - before, DEFAULT + BOUND // 4)
        self.assertEqual(self.last_body(), body)

    def test_long_chunked_and_continued_bodies_reach_the_upstream_unchanged(self):
        # Twenty times the bound, model first: keyed on it, streamed on after the bound.
        body = chat("gpt-4o", 1, pad=20 * BOUND)
        status, h, _ = self.post(body)
        self.assertEqual((status, h["X-RateLimit-Limit"]), (200, "3000"))
        self.assertEqual(self.last_body(), body)
        # Chunked (another model: the first took all of gpt-4o's bucket, its
        # prompt estimate clamped to the 3000 it holds).
        body = chat("small-5", 1, pad=20 * BOUND)
        pieces = [body[i:i + 7777] for i in range(0, len(body), 7777)]
        status, h, _ = self.post(iter(pieces), chunked=True)
        self.assertEqual(status, 200)
        self.assertEqual(self.last_body(), body)
        # Expect: 100-continue, answered once, before the body is read ahead.
        small = chat("small-3", 1)
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\n"
                      b"Content-Type: application/json\r\nX-Model-Tokens: 3\r\n"
                      b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(small))
            first = s.recv(100)
            self.assertTrue(first.startswith(b"HTTP/1.1 100 Continue\r\n\r\n"), first)
            s.sendall(small)
            reply = first
            while chunk := s.recv(65536):
                reply += chunk
        self.assertEqual(reply.count(b"100 Continue"), 1, reply[:300])
        self.assertIn(b"HTTP/1.1 200 OK", reply)
        self.assertEqual(self.last_body(), small)

    def test_http2_bodies_are_read_ahead_and_relayed(self):
        c = H2Client(self.gw.port)
        self.addCleanup(c.close)
        body = chat("small-9", 3, pad=3 * BOUND)
        reply = c.request("POST", "/v1/chat/completions",
                          headers=[("content-type", "application/json"),
                                   ("x-model-tokens", "2")], body=body)
        self.assertEqual(reply.status, 200)
        self.assertEqual(dict(reply.headers)["x-ratelimit-limit"], "5000")
        self.assertEqual(self.last_body(), body)

    def test_a_client_gone_while_its_body_is_read_ahead_leaves_nothing(self):
        # HTTP/1.1: half a body, then the connection closes.
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=10) as s:
            s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"
                      b"Content-Length: 100000\r\n\r\n" + b'{"model":"gpt-4o","x":"' + b"y" * 1000)
        # HTTP/2: a stream reset while its body is read ahead.
        c = H2Client(self.gw.port)
        self.addCleanup(c.close)
        sid = c.send("POST", "/v1/chat/completions", headers=[("content-length", "100000")],
                     body=b'{"model":"gpt-4o"', end=False)
        c.conn.reset_stream(sid)
        c.flush()
        # Nothing reached the model server; the gateway serves on.
        status, _, _ = self.post(chat("small-1", 1))
        self.assertEqual(status, 200)
        self.assertEqual(len(self.model.requests), 1)
        wait_until(lambda: metric_sum(self.gw, "sluice_http_requests_total", code="499") >= 2,
                   timeout=5, message="both abandoned requests recorded")


class Http2ReadAheadBudgetTest(RateLimitTestCase):
    """One HTTP/2 connection's streams share a budget for the bodies they hold
    read ahead of their decisions (server.http2.max_read_ahead_bytes, 2 MiB
    here). While Redis is stalled, three streams with 900 KiB bodies wait for
    their decisions: the first two hold theirs whole and are decided on their
    model, the third is decided on what the budget let it read (the shared
    missing bucket). Bytes replayed upstream go back to the budget: a later
    stream is read whole again. Every body reaches the upstream whole."""

    def test_bodies_past_the_connections_budget_are_decided_on_what_was_read(self):
        limits = {"per_model": {"key": ["ip", "body:model"], "capacity": 1000,
                                "refill_per_second": 1}}
        routes = [{"name": "chat", "match": {"path_prefix": "/"}, "upstream": "echo",
                   "limits": ["per_model"], "max_inspect_bytes": 1 << 20}]
        gw = self.start_gateway(routes, limits, redis={"timeout_ms": 15000}, server={
            "http2": {"enabled": True, "max_read_ahead_bytes": 2 << 20}})
        c = H2Client(gw.port, timeout=30)
        self.addCleanup(c.close)
        # The model after 900 KiB of messages: found only by a whole read ahead.
        body = (b'{"messages":[{"content":"' + b"x" * (900 << 10) + b'"}],"model":"m"}')

        def send():
            sid = c.send("POST", "/echo", headers=[("content-type", "application/json")],
                         body=None, end=False)
            c.send_body(sid, body, end=True)
            return sid

        busy = stall_redis(self.redis.port, 4.0)
        # (The third stream's body goes on once its decision came: after the stall.)
        sids = [send() for _ in range(3)]
        replies = c.run_until_done(sids, 60)
        busy.join()
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_missing_key_total", source="body"), 1)
        sids.append(send())
        replies.update(c.run_until_done(sids[3:], 60))
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_missing_key_total", source="body"), 1)
        for sid in sids:
            self.assertEqual(replies[sid].status, 200)
            self.assertEqual(json.loads(bytes(replies[sid].body))["body_length"], len(body))


class GigabyteRequestBodyTest(RateLimitTestCase):
    """A 1 GiB request body on a route keyed on body:model: read ahead up to
    the bound, decided, then streamed to the upstream whole (sluice-echo
    hashes what it gets), the gateway's memory unmoved."""

    def test_a_gigabyte_body_is_decided_on_its_head_and_streamed(self):
        limits = {"per_model": {"key": ["ip", "body:model"], "capacity": 10,
                                "refill_per_second": 1}}
        routes = [{"name": "chat", "match": {"path_prefix": "/"}, "upstream": "echo",
                   "limits": ["per_model"], "max_inspect_bytes": BOUND}]
        gw = self.start_gateway(routes, limits, server={"max_body_bytes": 2 << 30})
        head = b'{"model":"gpt-4o","messages":[{"content":"'
        block = b"x" * (1 << 20)
        total = len(head) + 1024 * len(block) + 4
        digest = hashlib.sha256()
        rss_before = rss_kib(gw.pid)
        with socket.create_connection(("127.0.0.1", gw.port), timeout=60) as s:
            s.sendall(b"POST /v1/chat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Connection: close\r\nContent-Length: %d\r\n\r\n" % total)
            for piece in [head] + [block] * 1024 + [b'"}]}']:
                s.sendall(piece)
                digest.update(piece)
            reply = b""
            while chunk := s.recv(65536):
                reply += chunk
        status_line, _, body = reply.partition(b"\r\n\r\n")
        self.assertTrue(status_line.startswith(b"HTTP/1.1 200"), reply[:300])
        doc = json.loads(body)
        self.assertEqual(doc["body_length"], total)
        self.assertEqual(doc["body_sha256"], digest.hexdigest())
        self.assertLess(rss_kib(gw.pid) - rss_before, 32 * 1024)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_missing_key_total"), 0)


if __name__ == "__main__":
    unittest.main()
