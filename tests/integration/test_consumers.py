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
- Two instances: a PUT, a plan change, a disable and a DELETE made through one
  are applied by the other within 1 s (change events over pub/sub), not after
  the cache's time; with the subscription killed, a change made meanwhile is
  applied within cache_ttl_ms, and events flow again afterwards.
- The same on a 3-primary Cluster and on Sentinel: two instances see each change.
- A record another writer damaged is an unknown key, counted and logged once;
  the admin API needs the token when admin.token_file is set.
- The NDJSON import streams: bad lines fail alone with their numbers, a second
  import of the same file changes nothing, a cut-short body applies the whole
  lines before the cut and not the partial one, and 100,000 consumers import
  with the gateway's memory flat (time and Redis memory printed).
"""

import collections
import json
import os
import re
import socket
import threading
import time
import unittest
import urllib.parse

from harness import (SANITIZED, Client, ProcessTestCase, gateway_config, metric_sum, redis_call, request,
                     require_binaries, require_topology_support, rss_kib, topology_redis,
                     wait_redis_ready, wait_until)
from testkit import resp
from testkit.cluster import RedisCluster
from testkit.sentinel import MASTER_NAME, RedisSentinelSet

PREFIX = "sluice:"


class CountingRedisProxy:
    """Forwards every connection to `port` and keeps, over all connections,
    the most script calls (EVALSHA: an import's line) one had sent and not had
    answered yet (as seen here: a call is counted before Redis gets it, its
    reply before the gateway does)."""

    def __init__(self, port):
        self.port, self.most, self.lock, self.socks = port, 0, threading.Lock(), []
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = self.listener.getsockname()
        threading.Thread(target=self.accept, daemon=True).start()

    def accept(self):
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.port))
            self.socks += [client, server]
            state = {"open": 0, "calls": collections.deque()}
            threading.Thread(target=self.pump, args=(client, server, state, 1), daemon=True).start()
            threading.Thread(target=self.pump, args=(server, client, state, -1), daemon=True).start()

    def pump(self, src, dst, state, step):
        buf, pos = b"", 0
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                for sock in (src, dst):
                    sock.close()
                return
            buf += data
            while True:
                try:
                    value, pos = resp.parse(buf, pos)
                except resp.Incomplete:
                    break
                with self.lock:
                    if step > 0:  # a command: is it a script call?
                        call = isinstance(value, list) and value[0].upper() == b"EVALSHA"
                        state["calls"].append(call)
                    elif not state["calls"]:
                        continue  # a pushed message (a subscription's)
                    else:
                        call = state["calls"].popleft()
                    if call:
                        state["open"] += step
                        self.most = max(self.most, state["open"])
            buf, pos = buf[pos:], 0
            try:
                dst.sendall(data)
            except OSError:
                return

    def close(self):
        self.listener.close()
        for sock in self.socks:
            sock.close()


class ConsumerCase(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis() if self.standalone else None
        self.echo = self.start_echo()

    standalone = True

    def secret_file(self) -> str:
        path = os.path.join(self.workdir, "key-secret")
        with open(path, "w") as f:
            f.write("consumer-store-test-secret-0123456789\n")
        os.chmod(path, 0o600)
        return path

    def config(self, unknown_key="missing", threads=2, redis=None, admin=None, **api_keys):
        config = gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "echo",
              "limits": ["per_key"]},
             {"name": "open", "match": {"path_prefix": "/open"}, "upstream": "echo"}],
            server={"threads": threads},
            log={"level": "info", "access_log": False},
            plans=["free", "pro"],
            redis={**(redis or {"url": f"redis://127.0.0.1:{self.redis.port}/0"}),
                   "timeout_ms": 1000, "key_prefix": PREFIX,
                   "key_secret_file": self.secret_file()},
            api_keys={"header": "X-API-Key", "default_plan": "free", "store": "redis",
                      "unknown_key": unknown_key, **api_keys},
            limits={"per_key": {"key": "api_key", "capacity": 3, "refill_per_second": 0.001,
                                "plans": {"pro": {"capacity": 6, "refill_per_second": 0.001}}}})
        if admin:
            config["admin"].update(admin)
        return config

    def gateway(self, name="sluice", **kw):
        gw = self.start_sluice(self.config(**kw), name=name)
        wait_redis_ready(gw)
        return gw

    def admin(self, gw, method, target, body=None, headers=None):
        if isinstance(body, (dict, list)):
            body = json.dumps(body).encode()
        if body is not None and method in ("PUT", "POST"):
            own = "application/x-ndjson" if target == "/consumers/import" else "application/json"
            headers = {"Content-Type": own, **(headers or {})}
        return request(gw.admin_port, method, target, body=body, headers=headers)

    def change_seen_within_a_second(self, a, b, cid, key, doc, expected):
        """Puts `doc` as consumer `cid` through `a` (None: deletes it), after
        every worker of `b` cached the old answer for `key`; `b` must answer
        `expected` for it within 1 s. Returns the seconds it took."""
        for _ in range(4):
            self.plan_seen(b, key)
        if doc is None:
            self.assertEqual(self.admin(a, "DELETE", f"/consumers/{cid}")[0], 204)
        else:
            self.assertIn(self.put(a, cid, doc)[0], (200, 201))
        changed = time.monotonic()
        wait_until(lambda: all(self.plan_seen(b, key) == expected for _ in range(4)),
                   timeout=1.0)
        return time.monotonic() - changed

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

    def plan_seen(self, gw, key):
        """The plan the upstream is told for `key`, 403 when disabled, None when unknown."""
        status, _, body = request(gw.port, "GET", "/open/echo", headers={"X-API-Key": key})
        if status == 403:
            return 403
        headers = {name.lower(): value for name, value in json.loads(body)["headers"]}
        return headers.get("x-consumer-plan")


class ConsumerStoreCase(ConsumerCase):
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
            sock.sendall(b"PUT /consumers/big HTTP/1.1\r\nHost: 127.0.0.1\r\n"
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

    def test_a_damaged_record_is_an_unknown_key(self):
        gw = self.gateway(unknown_key="reject")
        self.put(gw, "acme", {"keys": ["acme-k"], "plan": "pro"}, 201)
        self.put(gw, "ghost", {"keys": ["ghost-k"], "plan": "pro"}, 201)
        redis_call(self.redis.port, "DEL", f"{PREFIX}{{consumers}}:c:acme")
        redis_call(self.redis.port, "SET", f"{PREFIX}{{consumers}}:c:acme", "garbage")
        redis_call(self.redis.port, "HSET", f"{PREFIX}{{consumers}}:c:ghost", "doc", "{]")
        for key in ("acme-k", "ghost-k", "acme-k"):
            status, _, body = request(gw.port, "GET", "/open/x", headers={"X-API-Key": key})
            self.assertEqual(status, 401, body)
        wait_until(lambda: metric_sum(gw, "sluice_consumer_store_damaged_total") >= 2)
        self.assertEqual(gw.output_tail(10 ** 7).count("not one Sluice wrote"), 1)
        self.assertEqual(self.admin(gw, "GET", "/consumers/acme")[0], 503)
        # Writing it again repairs it (a record of the wrong type is replaced whole).
        self.assertIn(self.put(gw, "acme", {"keys": ["acme-k"], "plan": "pro"})[0], (200, 201))
        self.assertEqual(self.plan_seen(gw, "acme-k"), "pro")

    def test_the_admin_token_guards_the_api(self):
        token = os.path.join(self.workdir, "admin-token")
        with open(token, "w") as f:
            f.write("admin-token-0123456789abcdef\n")
        gw = self.gateway(admin={"token_file": token})
        doc = json.dumps({"keys": ["k"], "plan": "free"}).encode()
        self.assertEqual(self.admin(gw, "PUT", "/consumers/a", doc)[0], 401)
        self.assertEqual(self.admin(gw, "PUT", "/consumers/a", doc,
                                    {"Authorization": "Bearer wrong"})[0], 401)
        self.assertEqual(self.admin(gw, "POST", "/consumers/import", doc)[0], 401)
        self.assertEqual(redis_call(self.redis.port, "EXISTS", f"{PREFIX}{{consumers}}:c:a"), 0)
        good = {"Authorization": "Bearer admin-token-0123456789abcdef"}
        self.assertEqual(self.admin(gw, "PUT", "/consumers/a", doc, good)[0], 201)
        self.assertEqual(self.admin(gw, "DELETE", "/consumers/a", None, good)[0], 204)
        log = gw.output_tail(10 ** 7)
        # Each change names who made it: the peer and the token's fingerprint.
        created = re.search(r"consumer a created .*peer 127\.0\.0\.1, token ([0-9a-f]{12})\)", log)
        deleted = re.search(r"consumer a deleted \(peer 127\.0\.0\.1, token ([0-9a-f]{12})\)", log)
        self.assertTrue(created and deleted, log)
        self.assertEqual(created.group(1), deleted.group(1))
        self.assertNotIn("admin-token-0123456789abcdef", log)


class ConsumerTopologyCase(ConsumerCase):
    """Two instances on a Cluster or a Sentinel set see each other's changes."""

    standalone = False

    def two_instances_agree(self, redis):
        long = {"cache_ttl_ms": 60000, "unknown_cache_ttl_ms": 60000}
        a = self.start_sluice(self.config(redis=redis, **long), name="a")
        b = self.start_sluice(self.config(redis=redis, **long), name="b")
        wait_redis_ready(a)
        wait_redis_ready(b)
        # b's subscription is open before the first change.
        wait_until(lambda: self.plan_seen(b, "topo-k") is None, timeout=5)
        for doc, expected in [({"keys": ["topo-k"], "plan": "free"}, "free"),
                              ({"keys": ["topo-k"], "plan": "pro"}, "pro"),
                              (None, None)]:
            self.change_seen_within_a_second(a, b, "topo", "topo-k", doc, expected)

    def test_on_a_cluster(self):
        require_binaries("redis-server", "redis-cli")
        require_topology_support("cluster")
        cluster = RedisCluster()
        self.addCleanup(cluster.stop)
        seeds = cluster.seeds()
        self.two_instances_agree(topology_redis(seeds[0], seeds[1:], "cluster"))

    def test_on_sentinel(self):
        require_binaries("redis-server", "redis-sentinel")
        require_topology_support("sentinel")
        group = RedisSentinelSet(workdir=self.workdir)
        self.addCleanup(group.stop)
        sentinels = group.sentinels()
        self.two_instances_agree(topology_redis(sentinels[0], sentinels[1:], "sentinel",
                                                sentinel_master=MASTER_NAME))


def redis_used_memory(port: int) -> int:
    info = redis_call(port, "INFO", "memory").decode()
    return int(next(line.split(":")[1] for line in info.splitlines()
                    if line.startswith("used_memory:")))


class ConsumerFleetCase(ConsumerCase):
    def test_changes_reach_the_other_instance_within_a_second(self):
        long = {"cache_ttl_ms": 60000, "unknown_cache_ttl_ms": 60000}
        a = self.gateway(name="a", **long)
        b = self.gateway(name="b", **long)
        self.assertIsNone(self.plan_seen(b, "fleet-k"))  # cached as unknown for a minute
        steps = [({"keys": ["fleet-k"], "plan": "free"}, "free"),
                 ({"keys": ["fleet-k"], "plan": "pro"}, "pro"),
                 ({"keys": ["fleet-k"], "plan": "pro", "disabled": True}, 403),
                 (None, None)]
        for doc, expected in steps:
            with self.subTest(expected=expected):
                took = self.change_seen_within_a_second(a, b, "fleet", "fleet-k", doc, expected)
                print(f"\n  b applied the change after {took:.3f} s", end="")

    def test_a_lost_subscription_misses_nothing_past_the_cache_time(self):
        a = self.gateway(name="a")
        b = self.gateway(name="b", cache_ttl_ms=3000, unknown_cache_ttl_ms=3000)
        self.put(a, "acme", {"keys": ["acme-k"], "plan": "free"}, 201)
        wait_until(lambda: self.plan_seen(b, "acme-k") == "free", timeout=1.0)
        killed = redis_call(self.redis.port, "CLIENT", "KILL", "TYPE", "pubsub")
        self.assertGreaterEqual(killed, 2)  # a's and b's subscriptions
        self.put(a, "acme", {"keys": ["acme-k"], "plan": "pro"}, 200)
        wait_until(lambda: all(self.plan_seen(b, "acme-k") == "pro" for _ in range(4)),
                   timeout=3.5)
        # The subscription is back: the next change arrives within a second again.
        channel = f"{PREFIX}{{consumers}}:changes"
        wait_until(lambda: redis_call(self.redis.port, "PUBSUB", "NUMSUB", channel)[1] == 2,
                   timeout=3.0)
        self.put(a, "acme", {"keys": ["acme-k"], "plan": "free"}, 200)
        wait_until(lambda: all(self.plan_seen(b, "acme-k") == "free" for _ in range(4)),
                   timeout=1.0)


class ConsumerImportCase(ConsumerCase):
    def import_body(self, gw, body: bytes):
        status, _, answer = self.admin(gw, "POST", "/consumers/import", body)
        self.assertEqual(status, 200, answer)
        return json.loads(answer)

    def test_bad_lines_fail_alone_and_a_second_import_changes_nothing(self):
        gw = self.gateway()
        lines = [json.dumps({"id": f"imp{i}", "keys": [f"imp-key-{i}"], "plan": "free"})
                 for i in range(10)]
        lines[2] = "{not json"
        lines[4] = json.dumps({"id": "imp4", "keys": ["k4"], "plan": "gold"})
        lines[5] = ""
        lines[6] = json.dumps({"id": "imp6", "keys": ["x" * (10 * 1024 * 1024)], "plan": "free"})
        lines[8] = json.dumps({"id": "imp8", "keys": ["imp-key-1"], "plan": "free"})
        body = ("\n".join(lines) + "\n").encode()
        result = self.import_body(gw, body)
        self.assertEqual(result["created"], 5, result)
        self.assertEqual(result["replaced"], 0)
        self.assertEqual({f["line"] for f in result["failed"]}, {3, 5, 7, 9}, result)
        reasons = {f["line"]: f["reason"] for f in result["failed"]}
        self.assertIn("plan", reasons[5])
        self.assertIn("1 MiB", reasons[7])
        self.assertIn("keys[0]", reasons[9])
        again = self.import_body(gw, body)
        self.assertEqual((again["created"], again["replaced"], again["unchanged"]), (0, 0, 5))
        self.assertEqual(self.plan_seen(gw, "imp-key-3"), "free")

    def test_a_cut_short_body_applies_the_whole_lines_only(self):
        gw = self.gateway()
        whole = "".join(json.dumps({"id": f"cut{i}", "keys": [f"cut-key-{i}"], "plan": "free"})
                        + "\n" for i in range(3)).encode()
        partial = json.dumps({"id": "cut3", "keys": ["cut-key-3"], "plan": "free"}).encode()[:-5]
        with socket.create_connection(("127.0.0.1", gw.admin_port), timeout=5) as sock:
            sock.sendall(b"POST /consumers/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/x-ndjson\r\n"
                         b"Content-Length: 100000\r\n\r\n" + whole + partial)
            wait_until(lambda: redis_call(self.redis.port, "EXISTS",
                                          f"{PREFIX}{{consumers}}:c:cut2") == 1, timeout=5)
        wait_until(lambda: "import cut short" in self.sluice_log(gw), timeout=5)
        for i in range(3):
            self.assertEqual(redis_call(self.redis.port, "EXISTS",
                                        f"{PREFIX}{{consumers}}:c:cut{i}"), 1)
        self.assertEqual(redis_call(self.redis.port, "EXISTS", f"{PREFIX}{{consumers}}:c:cut3"), 0)
        self.assertEqual(self.admin(gw, "GET", "/consumers")[0], 200)

    def sluice_log(self, gw):
        return gw.output_tail(10 ** 7)

    def test_100000_consumers_stream_in(self):
        gw = self.gateway()
        # Under the sanitizers a fifth of it: the same path, in a fifth of the time
        # (the figures and the memory bound are the plain build's).
        count = 20_000 if SANITIZED else 100_000
        redis_before = redis_used_memory(self.redis.port)

        def lines():
            batch = []
            for i in range(count):
                key = f"bulk-{i:06d}-" + "k" * 240
                batch.append(json.dumps({"id": f"bulk{i:06d}", "keys": [key], "plan": "pro"}))
                if len(batch) == 1000:
                    yield ("\n".join(batch) + "\n").encode()
                    batch = []

        rss_before = rss_kib(gw.pid)
        started = time.monotonic()
        status, _, answer = request(gw.admin_port, "POST", "/consumers/import", body=lines(),
                                    chunked=True, timeout=300,
                                    headers={"Content-Type": "application/x-ndjson"})
        elapsed = time.monotonic() - started
        self.assertEqual(status, 200, answer)
        result = json.loads(answer)
        self.assertEqual(result["created"], count, result)
        self.assertEqual(result["failed_count"], 0)
        rss_growth = rss_kib(gw.pid) - rss_before
        redis_growth = redis_used_memory(self.redis.port) - redis_before
        print(f"\n  {count} consumers imported in {elapsed:.1f} s ({count / elapsed:.0f}/s); "
              f"Redis memory +{redis_growth / 1048576:.1f} MiB; sluice RSS +{rss_growth} KiB "
              f"for a body of {count * 330 / 1048576:.0f} MiB", end="")
        # The body (about 31 MiB) was never held: the gateway grew far less. (ASan
        # keeps freed memory in quarantine: no bound under the sanitizers.)
        if not SANITIZED:
            self.assertLess(rss_growth, 16 * 1024)
        self.assertEqual(self.plan_seen(gw, f"bulk-{count - 1:06d}-" + "k" * 240), "pro")


    def test_an_import_keeps_at_most_64_lines_in_flight(self):
        # Lines in 64 KiB pieces (hundreds a piece): the bound holds within a
        # piece too, not only between pieces.
        proxy = CountingRedisProxy(self.redis.port)
        self.addCleanup(proxy.close)
        gw = self.gateway(redis={"url": f"redis://127.0.0.1:{proxy.address[1]}/0"})
        body = "".join(json.dumps({"id": f"fl{i}", "keys": [f"fl-key-{i}"], "plan": "free"}) + "\n"
                       for i in range(5000)).encode()
        result = self.import_body(gw, body)
        self.assertEqual(result["created"], 5000, result)
        print(f"\n  most import lines in flight: {proxy.most}", end="")
        self.assertLessEqual(proxy.most, 64)


class ConsumerAdminTest(ConsumerCase):
    def test_the_bucket_api_finds_a_store_consumers_bucket(self):
        gw = self.gateway()
        self.put(gw, "acme", {"keys": ["acme-k1", "acme-k2"], "plan": "pro"}, 201)
        for _ in range(2):
            self.assertEqual(request(gw.port, "GET", "/api/x",
                                     headers={"X-API-Key": "acme-k1"})[0], 200)
        seen = {}
        for key in ("acme-k1", "acme-k2"):
            target = "/ratelimit/buckets/per_key?" + urllib.parse.urlencode({"value": key})
            status, _, body = request(gw.admin_port, "GET", target)
            self.assertEqual(status, 200, body)
            seen[key] = json.loads(body)
        # Either key names the consumer's one bucket, on its plan, with what was spent.
        self.assertEqual(seen["acme-k1"]["bucket"], seen["acme-k2"]["bucket"])
        self.assertEqual((seen["acme-k2"]["plan"], seen["acme-k2"]["capacity"]), ("pro", 6))
        self.assertTrue(seen["acme-k2"]["exists"])
        self.assertLess(seen["acme-k2"]["tokens"], 4.5)
        target = "/ratelimit/buckets/per_key?value=acme-k2"
        self.assertEqual(request(gw.admin_port, "DELETE", target)[0], 204)
        after = json.loads(request(gw.admin_port, "GET", target)[2])
        self.assertEqual((after["exists"], after["tokens"]), (False, 6))
        # A key no consumer holds has no bucket of its own.
        status, _, body = request(gw.admin_port, "GET", "/ratelimit/buckets/per_key?value=nobody")
        self.assertEqual(status, 400, body)

    def test_lines_of_a_stalled_import_are_unknown_and_importing_again_settles_them(self):
        gw = self.gateway()
        lines = [(json.dumps({"id": f"st{i}", "keys": [f"st-key-{i}"], "plan": "free"}) + "\n")
                 .encode() for i in range(10)]
        body = b"".join(lines)
        with socket.create_connection(("127.0.0.1", gw.admin_port), timeout=20) as sock:
            sock.sendall(b"POST /consumers/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/x-ndjson\r\n"
                         b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + lines[0])
            wait_until(lambda: redis_call(self.redis.port, "EXISTS",
                                          f"{PREFIX}{{consumers}}:c:st0") == 1, timeout=5)
            # Redis holds the writes past the gateway's 1 s timeout, then runs them.
            redis_call(self.redis.port, "CLIENT", "PAUSE", "2500", "WRITE")
            sock.sendall(b"".join(lines[1:]))
            answer = b""
            while not answer.endswith(b"\n") or b"\r\n\r\n" not in answer:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        result = json.loads(answer.partition(b"\r\n\r\n")[2])
        self.assertEqual(result["failed_count"], 0, result)
        self.assertEqual(result["created"], 1, result)
        self.assertEqual(result["unknown_count"], 9, result)
        self.assertEqual({u["line"] for u in result["unknown"]}, set(range(2, 11)), result)
        self.assertIn("may have been written", result["unknown"][0]["reason"])
        # Once Redis runs again (a write of ours waits for the pause's end), importing
        # the same lines settles every one of them.
        redis_call(self.redis.port, "SET", "after-the-pause", "1", timeout=10)
        status, _, answer = self.admin(gw, "POST", "/consumers/import", body)
        self.assertEqual(status, 200, answer)
        again = json.loads(answer)
        self.assertEqual((again["failed_count"], again["unknown_count"]), (0, 0), again)
        self.assertEqual(again["created"] + again["unchanged"], 10, again)
        for i in range(10):
            self.assertEqual(redis_call(self.redis.port, "EXISTS",
                                        f"{PREFIX}{{consumers}}:c:st{i}"), 1)

    def script_clients(self):
        """Ids of the Redis connections whose last command ran a script."""
        listing = redis_call(self.redis.port, "CLIENT", "LIST").decode()
        fields = [dict(f.split("=", 1) for f in line.split() if "=" in f)
                  for line in listing.splitlines()]
        return {f["id"] for f in fields if f.get("cmd", "").startswith("eval")}

    def test_an_import_runs_on_a_connection_of_its_own_not_a_workers(self):
        gw = self.gateway(threads=1)
        # The worker's own store connection has run a script (a lookup).
        self.assertEqual(request(gw.port, "GET", "/api/x", headers={"X-API-Key": "nobody"})[0],
                         200)
        lines = [(json.dumps({"id": f"own{i}", "keys": [f"own-key-{i}"], "plan": "free"}) + "\n")
                 .encode() for i in range(3)]
        before = self.script_clients()
        with socket.create_connection(("127.0.0.1", gw.admin_port), timeout=20) as sock:
            sock.sendall(b"POST /consumers/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                         b"Content-Type: application/x-ndjson\r\n"
                         b"Content-Length: 100000\r\n\r\n" + lines[0])
            wait_until(lambda: redis_call(self.redis.port, "EXISTS",
                                          f"{PREFIX}{{consumers}}:c:own0") == 1, timeout=5)
            # The line was written by a connection the worker does not use.
            during = self.script_clients() - before
            self.assertEqual(len(during), 1, (before, during))
            # The data plane answers while the import is open.
            self.assertEqual(request(gw.port, "GET", "/open/x")[0], 200)
        # The import's connection closes with it (here, cut short).
        wait_until(lambda: not (self.script_clients() & during), timeout=5)


if __name__ == "__main__":
    unittest.main()
