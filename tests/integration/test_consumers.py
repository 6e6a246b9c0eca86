"""The consumer store in Redis and its admin API, through the real binary and a
real redis-server (api_keys.store: redis).

- PUT creates (201) and replaces (200); GET shows the keys as fingerprints only;
  DELETE removes (204), and its keys are unknown from then on.
- A request with a stored consumer's key gets the consumer's plan (and its own
  override of a limit), whichever of its keys it carries: one bucket per consumer.
- unknown_key: reject answers 401 with WWW-Authenticate before any limit; a
  disabled consumer gets 403.
- X-Consumer-Id and X-Consumer-Plan reach the upstream; a client's own copies never do.
- A key another consumer holds is refused (400, naming the field), nothing written;
  two concurrent PUTs claiming one key: exactly one wins.
- Bad bodies get 400 naming the field, a body over 1 MiB 413; raw keys never appear
  in Redis or in the log.
- The list is paginated in id order and filtered by plan.
- Redis stopped: a cached consumer keeps its plan, an unknown key follows unknown_key.
- Many requests missing the cache at once for one key cost one lookup.
"""

import json
import os
import socket
import threading
import unittest
import urllib.parse

from harness import (Client, ProcessTestCase, gateway_config, metric_sum, redis_call, request,
                     wait_redis_ready, wait_until)

PREFIX = "sluice:"


class ConsumerStoreCase(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()

    def secret_file(self) -> str:
        path = os.path.join(self.workdir, "key-secret")
        with open(path, "w") as f:
            f.write("consumer-store-test-secret-0123456789\n")
        return path

    def config(self, unknown_key="missing", threads=2, **api_keys):
        return gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "echo",
              "limits": ["per_key"]},
             {"name": "open", "match": {"path_prefix": "/open"}, "upstream": "echo"}],
            server={"threads": threads},
            log={"level": "info", "access_log": False},
            plans=["free", "pro"],
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000,
                   "key_prefix": PREFIX, "key_secret_file": self.secret_file()},
            api_keys={"header": "X-API-Key", "default_plan": "free", "store": "redis",
                      "unknown_key": unknown_key, **api_keys},
            limits={"per_key": {"key": "api_key", "capacity": 3, "refill_per_second": 0.001,
                                "plans": {"pro": {"capacity": 6, "refill_per_second": 0.001}}}})

    def gateway(self, **kw):
        gw = self.start_sluice(self.config(**kw))
        wait_redis_ready(gw)
        return gw

    def admin(self, gw, method, target, body=None, headers=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        return request(gw.admin_port, method, target, body=body, headers=headers)

    def put(self, gw, cid, doc, expect=None):
        status, headers, body = self.admin(gw, "PUT", f"/consumers/{cid}", doc)
        if expect is not None:
            self.assertEqual(status, expect, body)
        return status, json.loads(body) if body else None

    def spend(self, gw, key, count, target="/api/x"):
        headers = {"X-API-Key": key} if key else {}
        with Client(gw.port) as conn:
            return [conn.request("GET", target, headers=headers)[0] for _ in range(count)]

    def upstream_headers(self, gw, headers):
        status, _, body = request(gw.port, "GET", "/open/echo", headers=headers)
        self.assertEqual(status, 200, body)
        return {name.lower(): value for name, value in json.loads(body)["headers"]}

    def test_put_get_delete_and_requests_follow(self):
        gw = self.gateway()
        _, doc = self.put(gw, "acme", {"keys": ["acme-k1", "acme-k2"], "plan": "pro"}, 201)
        self.assertEqual(doc["id"], "acme")
        self.assertEqual(doc["plan"], "pro")
        self.assertEqual(len(doc["keys"]), 2)
        self.assertNotIn("acme-k1", json.dumps(doc))
        self.put(gw, "acme", {"keys": ["acme-k1", "acme-k2"], "plan": "pro"}, 200)
        status, _, body = self.admin(gw, "GET", "/consumers/acme")
        self.assertEqual(status, 200, body)
        self.assertEqual(json.loads(body)["keys"], doc["keys"])
        # The pro plan's 6 tokens, shared by both keys of the consumer.
        self.assertEqual(self.spend(gw, "acme-k1", 4), [200] * 4)
        self.assertEqual(self.spend(gw, "acme-k2", 3), [200, 200, 429])
        # No raw key anywhere in Redis.
        for key in redis_call(self.redis.port, "KEYS", "*"):
            self.assertNotIn(b"acme-k", key)
            if redis_call(self.redis.port, "TYPE", key) == b"hash":
                for value in redis_call(self.redis.port, "HGETALL", key):
                    self.assertNotIn(b"acme-k", value)
        status, _, _ = self.admin(gw, "DELETE", "/consumers/acme")
        self.assertEqual(status, 204)
        self.assertEqual(self.admin(gw, "DELETE", "/consumers/acme")[0], 404)
        self.assertEqual(self.admin(gw, "GET", "/consumers/acme")[0], 404)
        # Its keys are unknown now: missing, so limited by IP on the default plan
        # (3 tokens), not by the consumer's spent bucket.
        self.assertEqual(self.spend(gw, "acme-k1", 4), [200, 200, 200, 429])
        self.assertNotIn("acme-k", gw.output_tail(10 ** 7))

    def test_override_disable_and_reject(self):
        gw = self.gateway(unknown_key="reject")
        self.put(gw, "small", {"keys": ["small-k"], "plan": "pro",
                               "limits": {"per_key": {"capacity": 1}}}, 201)
        self.assertEqual(self.spend(gw, "small-k", 2), [200, 429])
        status, headers, body = request(gw.port, "GET", "/api/x", headers={"X-API-Key": "nobody"})
        self.assertEqual(status, 401, body)
        self.assertIn("ApiKey", headers["WWW-Authenticate"])
        self.assertEqual(headers["Content-Type"], "application/problem+json")
        # No key at all is not rejected: limited by IP.
        self.assertEqual(request(gw.port, "GET", "/api/x")[0], 200)
        self.put(gw, "small", {"keys": ["small-k"], "plan": "pro", "disabled": True}, 200)
        status, _, body = request(gw.port, "GET", "/open/x", headers={"X-API-Key": "small-k"})
        self.assertEqual(status, 403, body)
        self.assertEqual(json.loads(body)["status"], 403)

    def test_consumer_headers_reach_the_upstream_and_spoofs_never_do(self):
        gw = self.gateway()
        self.put(gw, "acme", {"keys": ["acme-k"], "plan": "pro"}, 201)
        seen = self.upstream_headers(gw, {"X-API-Key": "acme-k", "X-Consumer-Id": "root",
                                          "X-Consumer-Plan": "enterprise"})
        self.assertEqual(seen["x-consumer-id"], "acme")
        self.assertEqual(seen["x-consumer-plan"], "pro")
        seen = self.upstream_headers(gw, {"X-Consumer-Id": "root", "x-consumer-plan": "gold"})
        self.assertNotIn("x-consumer-id", seen)
        self.assertNotIn("x-consumer-plan", seen)

    def test_keys_belong_to_one_consumer(self):
        gw = self.gateway()
        self.put(gw, "a", {"keys": ["shared"], "plan": "free"}, 201)
        status, doc = self.put(gw, "b", {"keys": ["own", "shared"], "plan": "free"})
        self.assertEqual(status, 400)
        self.assertEqual(doc["field"], "keys[1]")
        self.assertEqual(self.admin(gw, "GET", "/consumers/b")[0], 404)
        # Two PUTs claiming one new key at once: exactly one wins.
        results = []

        def claim(cid):
            results.append(self.put(gw, cid, {"keys": ["contested"], "plan": "free"})[0])

        threads = [threading.Thread(target=claim, args=(f"c{i}",)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(sorted(results), [201] + [400] * 7)

    def test_bad_input(self):
        gw = self.gateway()
        cases = [
            (b"not json", ""), (b'{"plan":"pro"}', "keys"),
            (json.dumps({"keys": [], "plan": "pro"}).encode(), "keys"),
            (json.dumps({"keys": [f"k{i}" for i in range(17)], "plan": "pro"}).encode(), "keys"),
            (json.dumps({"keys": [""], "plan": "pro"}).encode(), "keys[0]"),
            (json.dumps({"keys": ["a b"], "plan": "pro"}).encode(), "keys[0]"),
            (json.dumps({"keys": ["a\u0001"], "plan": "pro"}).encode(), "keys[0]"),
            (json.dumps({"keys": ["k" * 257], "plan": "pro"}).encode(), "keys[0]"),
            (json.dumps({"keys": ["a"], "plan": "gold"}).encode(), "plan"),
            (json.dumps({"keys": ["a"], "plan": 1}).encode(), "plan"),
            (json.dumps({"keys": ["a"], "plan": "pro", "limits": {"nope": {"capacity": 1}}})
             .encode(), "limits.nope"),
            (json.dumps({"keys": ["a"], "plan": "pro",
                         "limits": {"per_key": {"window_ms": 10}}}).encode(),
             "limits.per_key.window_ms"),
        ]
        for body, field in cases:
            with self.subTest(body=body[:40]):
                status, _, answer = self.admin(gw, "PUT", "/consumers/x", body)
                self.assertEqual(status, 400, answer)
                doc = json.loads(answer)
                self.assertEqual(doc.get("field", ""), field)
        for bad_id in ["a%2Fb", "..", "a%20b", "i" * 129]:
            with self.subTest(id=bad_id):
                status, _, _ = self.admin(gw, "PUT", f"/consumers/{bad_id}",
                                          {"keys": ["a"], "plan": "free"})
                self.assertEqual(status, 400)
        # A body over 1 MiB is refused from its Content-Length, before it is read.
        with socket.create_connection(("127.0.0.1", gw.admin_port), timeout=5) as sock:
            sock.sendall(b"PUT /consumers/big HTTP/1.1\r\nHost: a\r\n"
                         b"Content-Type: application/json\r\nContent-Length: 1048577\r\n\r\n{")
            answer = b""
            while b"\r\n\r\n" not in answer:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                answer += chunk
        self.assertTrue(answer.startswith(b"HTTP/1.1 413"), answer)
        self.assertEqual(redis_call(self.redis.port, "EXISTS", f"{PREFIX}{{consumers}}:c:x"), 0)
        # The gateway keeps serving.
        self.assertEqual(self.admin(gw, "GET", "/consumers")[0], 200)

    def test_list_pages_and_plan_filter(self):
        gw = self.gateway()
        for i in range(7):
            self.put(gw, f"id{i}", {"keys": [f"key{i}"], "plan": "pro" if i % 2 else "free"}, 201)
        seen, cursor = [], ""
        while True:
            query = urllib.parse.urlencode({"count": 3, "cursor": cursor})
            status, _, body = self.admin(gw, "GET", f"/consumers?{query}")
            self.assertEqual(status, 200, body)
            page = json.loads(body)
            self.assertLessEqual(len(page["consumers"]), 3)
            seen += [c["id"] for c in page["consumers"]]
            cursor = page["next_cursor"]
            if not cursor:
                break
        self.assertEqual(seen, [f"id{i}" for i in range(7)])
        status, _, body = self.admin(gw, "GET", "/consumers?plan=pro")
        self.assertEqual([c["id"] for c in json.loads(body)["consumers"]], ["id1", "id3", "id5"])
        self.assertEqual(self.admin(gw, "GET", "/consumers?plan=gold")[0], 400)
        self.assertEqual(self.admin(gw, "GET", "/consumers?count=0")[0], 400)

    def test_redis_down_keeps_cached_consumers(self):
        gw = self.gateway(unknown_key="reject")
        self.put(gw, "acme", {"keys": ["acme-k"], "plan": "pro"}, 201)
        self.assertEqual(request(gw.port, "GET", "/open/x", headers={"X-API-Key": "acme-k"})[0],
                         200)
        self.redis.stop()
        for _ in range(3):
            seen = self.upstream_headers(gw, {"X-API-Key": "acme-k"})
            self.assertEqual(seen["x-consumer-plan"], "pro")
        status, _, _ = request(gw.port, "GET", "/open/x", headers={"X-API-Key": "never-seen"})
        self.assertEqual(status, 401)
        wait_until(lambda: metric_sum(gw, "sluice_consumer_lookups_total", result="error") >= 1)

    def test_concurrent_misses_cost_one_lookup(self):
        gw = self.gateway()
        self.put(gw, "acme", {"keys": ["acme-k"], "plan": "pro"}, 201)
        redis_call(self.redis.port, "CONFIG", "RESETSTAT")
        statuses = []

        def one():
            statuses.append(request(gw.port, "GET", "/open/x", headers={"X-API-Key": "acme-k"})[0])

        # Scripts wait while Redis is paused for writes: the lookup is under
        # way while every request misses the cache.
        redis_call(self.redis.port, "CLIENT", "PAUSE", "500", "WRITE")
        threads = [threading.Thread(target=one) for _ in range(20)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(statuses, [200] * 20)
        stats = redis_call(self.redis.port, "INFO", "commandstats").decode()
        evalsha = [line for line in stats.splitlines() if line.startswith("cmdstat_evalsha:")]
        self.assertTrue(evalsha, stats)
        calls = int(evalsha[0].split("calls=")[1].split(",")[0])
        self.assertEqual(calls, 1, stats)


if __name__ == "__main__":
    unittest.main()
