"""Every feature under the restricted Redis user the docs give, through the real
sluice binary and a real redis-server.

- The `ACL SETUSER` line is read from docs/operations.md ("The Redis user"), and
  README.md must carry the same line, so the docs and this test cannot drift.
- Every command a Lua script under middleware/ calls is in that line.
- One gateway whose url names that user (db 1, so SELECT too) runs the
  consumer store (admin PUT, GET and NDJSON import, and the change channel),
  the denial stream, the most-limited view, a quota, a sliding log, a sliding
  window, a concurrency limit (held, renewed and released), cost settlement, a
  leased token bucket (leases and their refunds), the fail-local heartbeat, the
  EVAL fallback after SCRIPT FLUSH and the bucket API; each gives its expected
  outcome, and at the end Redis' ACL LOG is empty (any key, channel or command
  refused is named there), the gateway counted no Redis error nor failure of
  any feature, and every key is under the prefix.
- The same user on every data node of a Redis Cluster (CLUSTER SHARDS/SLOTS)
  and of a Sentinel set (ROLE), with the sentinels' own user as documented.
"""

from __future__ import annotations

import glob
import json
import os
import re
import shlex
import unittest

from harness import (SOURCE_DIR, Client, ProcessTestCase, PythonUpstream, gateway_config,
                     metric_sum, redis_call, request, require_binaries,
                     require_topology_support, wait_redis_ready, wait_until)

PREFIX = "sluice:"  # the prefix the documented line is written for
PASSWORD = "acl-test-password-0123"
TINY = 0.001  # a refill that refills nothing within the test
DB = 1  # a database other than 0, so that every connection sends SELECT


def documented_acl_line(path: str) -> str:
    """The one `ACL SETUSER` line of a document."""
    with open(os.path.join(SOURCE_DIR, path)) as f:
        lines = [line.strip() for line in f if line.strip().startswith("ACL SETUSER ")]
    if len(lines) != 1:
        raise AssertionError(f"{path}: expected one ACL SETUSER line, found {lines}")
    return lines[0]


def lua_commands() -> dict[str, set[str]]:
    """Command (lower case) -> the .lua files under middleware/ that call it."""
    found: dict[str, set[str]] = {}
    call = re.compile(r"\b(?:call|pcall|try)\(\s*['\"]([A-Za-z]+)['\"]")
    for path in glob.glob(os.path.join(SOURCE_DIR, "middleware", "**", "*.lua"), recursive=True):
        with open(path) as f:
            for name in call.findall(f.read()):
                found.setdefault(name.lower(), set()).add(os.path.relpath(path, SOURCE_DIR))
    return found


def create_documented_user(redis_port: int):
    """ACL SETUSER with the documented line, its password placeholder filled in."""
    rules = shlex.split(documented_acl_line("docs/operations.md"))
    if rules[:3] != ["ACL", "SETUSER", "sluice"] or ">CHANGE-ME" not in rules:
        raise AssertionError(f"not the documented form: {rules}")
    rules = [f">{PASSWORD}" if rule == ">CHANGE-ME" else rule for rule in rules]
    if redis_call(redis_port, *rules) != "OK":
        raise AssertionError(f"ACL SETUSER refused on port {redis_port}")


def refusals(redis_port: int) -> list[str]:
    """Redis' ACL LOG, one line per entry: why, what (command, key or channel), where."""
    entries = redis_call(redis_port, "ACL", "LOG")
    lines = []
    for entry in entries:
        fields = dict(zip(entry[::2], entry[1::2]))
        lines.append(" ".join(f"{name}={fields.get(name.encode(), b'').decode()}"
                              for name in ("reason", "object", "context", "username")))
    return lines


def usage_upstream():
    """Answers 200 with `X-Usage-Tokens: <usage>` (query) in its head."""
    def do_get(handler, query):
        body = b"done\n"
        handler.send_response(200)
        handler.send_header("X-Usage-Tokens", query.get("usage", ["1"])[0])
        handler.send_header("Content-Length", str(len(body)))
        handler.end_headers()
        handler.wfile.write(body)
    return PythonUpstream(do_get)


class DocumentedLineTest(unittest.TestCase):
    def test_readme_and_operations_give_the_same_line(self):
        self.assertEqual(documented_acl_line("README.md"),
                         documented_acl_line("docs/operations.md"))

    def test_every_script_command_is_allowed(self):
        rules = shlex.split(documented_acl_line("docs/operations.md"))
        allowed = {rule[1:].lower() for rule in rules if rule.startswith("+")}
        missing = {name: files for name, files in lua_commands().items() if name not in allowed}
        self.assertEqual(missing, {}, "commands the scripts call that the documented user lacks")
        self.assertIn(f"~{PREFIX}*", rules)
        self.assertIn(f"&{PREFIX}*", rules)


class RestrictedUserTest(ProcessTestCase):
    maxDiff = None

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        create_documented_user(self.redis.port)
        self.echo = self.start_echo()
        self.llm = usage_upstream()
        self.addCleanup(self.llm.stop)

    def config(self):
        secret = os.path.join(self.workdir, "key-secret")
        with open(secret, "w") as f:
            f.write("acl-test-secret-0123456789abcdef\n")

        def route(name, limits, upstream="echo", **extra):
            return {"name": name, "match": {"path_prefix": f"/{name}"}, "upstream": upstream,
                    "limits": limits, **extra}
        routes = [
            route("key", ["per_key"]),
            route("quota", ["monthly"]),
            route("log", ["strict"]),
            route("window", ["approx"]),
            route("slots", ["one_at_a_time"], strip_prefix=True),
            route("settle", ["tokens"], upstream="llm", cost=500,
                  cost_from_response={"header": "X-Usage-Tokens"}),
            route("leased", ["leased"]),
            route("local", ["fallback"], on_redis_failure="local"),
        ]
        limits = {
            "per_key": {"key": "api_key", "capacity": 2, "refill_per_second": TINY,
                        "plans": {"pro": {"capacity": 4, "refill_per_second": TINY}}},
            "monthly": {"key": "ip", "algorithm": "quota", "capacity": 2, "period": "month"},
            "strict": {"key": "ip", "algorithm": "sliding_log", "capacity": 2,
                       "window_ms": 60000},
            "approx": {"key": "ip", "algorithm": "sliding_window", "capacity": 2,
                       "window_ms": 60000},
            "one_at_a_time": {"key": "global", "algorithm": "concurrency", "capacity": 1,
                              "lease_ms": 1000},
            "tokens": {"key": "global", "capacity": 100000, "refill_per_second": TINY},
            "leased": {"key": "ip", "capacity": 1000, "refill_per_second": TINY,
                       "lease_tokens": 20},
            "fallback": {"key": "ip", "capacity": 100, "refill_per_second": TINY},
        }
        return gateway_config(
            {"echo": [self.echo.address], "llm": [self.llm.address]}, routes,
            log={"level": "info", "access_log": False},
            plans=["free", "pro"],
            redis={"url": f"redis://sluice:{PASSWORD}@127.0.0.1:{self.redis.port}/{DB}",
                   "timeout_ms": 1000, "key_prefix": PREFIX, "key_secret_file": secret},
            api_keys={"header": "X-API-Key", "default_plan": "free", "store": "redis"},
            audit={"redis_stream": f"{PREFIX}denials", "max_len": 100},
            local={"fleet_size": 0},
            limits=limits)

    def statuses(self, gw, target, count, headers=None):
        with Client(gw.port) as conn:
            return [conn.request("GET", target, headers=headers)[0] for _ in range(count)]

    def admin(self, gw, method, target, body=None, headers=None):
        return request(gw.admin_port, method, target, body=body, headers=headers)

    def test_every_feature_runs_under_the_documented_user(self):
        gw = self.start_sluice(self.config())
        wait_redis_ready(gw)
        # The gateway's connections are the restricted user's.
        clients = redis_call(self.redis.port, "CLIENT", "LIST").decode()
        self.assertIn(" user=sluice ", clients)

        # Consumer store: admin PUT and GET, an import, the change channel.
        doc = json.dumps({"keys": ["acme-key"], "plan": "pro"}).encode()
        status, _, body = self.admin(gw, "PUT", "/consumers/acme", doc,
                                     {"Content-Type": "application/json"})
        self.assertEqual(status, 201, body)
        status, _, body = self.admin(gw, "GET", "/consumers/acme")
        self.assertEqual((status, json.loads(body)["plan"]), (200, "pro"), body)
        lines = "".join(json.dumps({"id": f"imp{i}", "keys": [f"imp-key-{i}"], "plan": "free"})
                        + "\n" for i in range(5)).encode()
        status, _, body = self.admin(gw, "POST", "/consumers/import", lines,
                                     {"Content-Type": "application/x-ndjson"})
        self.assertEqual(status, 200, body)
        self.assertEqual((json.loads(body)["created"], json.loads(body)["failed_count"]), (5, 0))
        channel = f"{PREFIX}{{consumers}}:changes"
        wait_until(lambda: redis_call(self.redis.port, "PUBSUB", "NUMSUB", channel)[1] == 1,
                   timeout=5.0, message="subscribed to the consumer store's channel")

        # A stored consumer's plan (4), then denials: the stream and the view.
        self.assertEqual(self.statuses(gw, "/key/x", 5, {"X-API-Key": "acme-key"}),
                         [200] * 4 + [429])
        self.assertEqual(self.statuses(gw, "/key/x", 3, {"X-API-Key": "imp-key-1"}),
                         [200, 200, 429])
        wait_until(lambda: metric_sum(gw, "sluice_audit_appended_total") == 2, 10,
                   message="both denials appended to the stream")
        self.assertEqual(redis_call(self.redis.port, "XLEN", f"{PREFIX}denials", db=DB), 2)

        # The view's outcome is asserted after ACL LOG, which names what was refused.
        top = []

        def top_lists_both():
            top[:] = self.admin(gw, "GET", "/ratelimit/top?limit=per_key&window_s=60")[::2]
            return top[0] == 200 and len(json.loads(top[1])["keys"]) == 2
        try:
            wait_until(top_lists_both, 10, interval=0.1)
        except AssertionError:
            pass

        # Quota, sliding log, sliding window: capacity 2 each.
        for name in ("quota", "log", "window"):
            self.assertEqual(self.statuses(gw, f"/{name}/x", 3), [200, 200, 429], name)

        # Concurrency: a request held 2.5 leases (its slot renewed) keeps the
        # other out; its slot is released when it ends.
        with Client(gw.port) as held:
            held.conn.putrequest("GET", "/slots/__slow/2500")
            held.conn.endheaders()
            wait_until(lambda: metric_sum(gw, "sluice_ratelimit_in_flight") == 1, 5,
                       message="the slow request holds the slot")
            self.assertEqual(request(gw.port, "GET", "/slots/x")[0], 429)
            self.assertEqual(held.conn.getresponse().status, 200)
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_slot_releases_total",
                                      result="released") == 1, 5, message="slot released")
        self.assertEqual(request(gw.port, "GET", "/slots/x")[0], 200)

        # Settlement: estimated 500, cost 120, 380 refunded.
        self.assertEqual(request(gw.port, "GET", "/settle/x?usage=120")[0], 200)
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_settlements_total",
                                      result="refund") == 1, 5, message="settled")

        # Leases: a busy bucket is leased, and the rest of a lease refunded.
        self.assertEqual(self.statuses(gw, "/leased/x", 60), [200] * 60)
        self.assertGreater(metric_sum(gw, "sluice_ratelimit_leases_total"), 0)
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_refunds_total") > 0, 5,
                   message="an unspent lease given back")

        # Fail-local heartbeat: this instance counted in the fleet key.
        wait_until(lambda: gw.metric("sluice_fleet_size") == 1, 5, message="fleet size 1")
        self.assertEqual(redis_call(self.redis.port, "ZCARD", f"{PREFIX}fleet", db=DB), 1)
        self.assertEqual(self.statuses(gw, "/local/x", 2), [200, 200])

        # Scripts flushed: the next calls fall back to EVAL (and load them again).
        self.assertEqual(redis_call(self.redis.port, "SCRIPT", "FLUSH"), "OK")
        self.assertEqual(self.statuses(gw, "/local/x", 2), [200, 200])

        # Bucket API: read and reset a bucket.
        status, _, body = self.admin(gw, "GET", "/ratelimit/buckets/strict?value=127.0.0.1")
        self.assertEqual(status, 200, body)
        self.assertEqual(self.admin(gw, "DELETE", "/ratelimit/buckets/strict?value=127.0.0.1")[0],
                         204)

        # Nothing refused, nothing failed.
        self.assertEqual(refusals(self.redis.port), [])
        self.assertEqual(top[0], 200, top)
        self.assertEqual(len(json.loads(top[1])["keys"]), 2, top)
        for family in ("sluice_redis_errors_total", "sluice_fleet_heartbeat_failures_total",
                       "sluice_audit_dropped_total", "sluice_ratelimit_top_dropped_total",
                       "sluice_ratelimit_fail_open_total", "sluice_ratelimit_fail_closed_total",
                       "sluice_ratelimit_fail_local_total"):
            self.assertEqual(metric_sum(gw, family), 0, family)
        self.assertEqual(metric_sum(gw, "sluice_consumer_lookups_total", result="error"), 0)
        self.assertEqual(metric_sum(gw, "sluice_admin_top_requests_total", result="unavailable"),
                         0)
        for result in ("failed", "unknown"):
            self.assertEqual(metric_sum(gw, "sluice_ratelimit_settlements_total", result=result),
                             0, result)
            self.assertEqual(metric_sum(gw, "sluice_ratelimit_slot_releases_total",
                                        result=result), 0, result)
        # Every key Sluice wrote is under the prefix.
        keys = [k.decode() for k in redis_call(self.redis.port, "KEYS", "*", db=DB)]
        self.assertEqual([k for k in keys if not k.startswith(PREFIX)], [])
        self.assertEqual(redis_call(self.redis.port, "DBSIZE", db=0), 0)


class TopologiesTest(ProcessTestCase):
    """The same user on every data node of a Redis Cluster and of a Sentinel set:
    the topology's own commands (ROLE, CLUSTER SHARDS/SLOTS) and a decision of
    each kind, the consumer store and the heartbeat, with no denial (the view is
    the first test's)."""

    def setUp(self):
        super().setUp()
        self.echo = self.start_echo()

    def run_features(self, redis: dict, data_ports: list[int]):
        for port in data_ports:
            create_documented_user(port)
        secret = os.path.join(self.workdir, "key-secret")
        with open(secret, "w") as f:
            f.write("acl-test-secret-0123456789abcdef\n")
        limits = {
            "bucket": {"key": "ip", "capacity": 100, "refill_per_second": TINY},
            "log": {"key": "ip", "algorithm": "sliding_log", "capacity": 100,
                    "window_ms": 60000},
            "slots": {"key": "global", "algorithm": "concurrency", "capacity": 10},
        }
        routes = [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo",
                   "limits": list(limits), "on_redis_failure": "local"}]
        gw = self.start_sluice(gateway_config(
            {"echo": [self.echo.address]}, routes,
            log={"level": "info", "access_log": False}, plans=["free", "pro"],
            redis={**redis, "timeout_ms": 1000, "key_prefix": PREFIX,
                   "key_secret_file": secret},
            api_keys={"header": "X-API-Key", "default_plan": "free", "store": "redis"},
            local={"fleet_size": 0}, limits=limits))
        wait_redis_ready(gw)
        doc = json.dumps({"keys": ["topo-key"], "plan": "pro"}).encode()
        status, _, body = request(gw.admin_port, "PUT", "/consumers/topo", body=doc,
                                  headers={"Content-Type": "application/json"})
        self.assertEqual(status, 201, body)
        with Client(gw.port) as conn:
            for _ in range(5):
                status, _, body = conn.request("GET", "/x", headers={"X-API-Key": "topo-key"})
                self.assertEqual(status, 200, body)
                seen = {name.lower(): value for name, value in json.loads(body)["headers"]}
                self.assertEqual(seen.get("x-consumer-plan"), "pro")
        wait_until(lambda: metric_sum(gw, "sluice_ratelimit_slot_releases_total",
                                      result="released") == 5, 5, message="slots released")
        wait_until(lambda: gw.metric("sluice_fleet_size") == 1, 5, message="fleet size 1")
        self.assertEqual(
            {port: refusals(port) for port in data_ports}, {port: [] for port in data_ports})
        for family in ("sluice_redis_errors_total", "sluice_fleet_heartbeat_failures_total",
                       "sluice_ratelimit_fail_local_total"):
            self.assertEqual(metric_sum(gw, family), 0, family)
        self.assertEqual(metric_sum(gw, "sluice_consumer_lookups_total", result="error"), 0)
        users = "".join(redis_call(port, "CLIENT", "LIST").decode() for port in data_ports)
        self.assertIn(" user=sluice ", users)

    def test_on_a_cluster(self):
        require_binaries("redis-server", "redis-cli")
        require_topology_support("cluster")
        from testkit.cluster import RedisCluster
        cluster = RedisCluster(self.workdir, replicas=0)
        self.addCleanup(cluster.stop)
        seeds = cluster.seeds()
        self.run_features({"url": f"redis://sluice:{PASSWORD}@{seeds[0]}/0",
                           "topology": "cluster", "nodes": seeds[1:]},
                          [node.port for node in cluster.nodes])

    def test_on_sentinel(self):
        require_binaries("redis-server", "redis-sentinel")
        require_topology_support("sentinel")
        from testkit.sentinel import MASTER_NAME, RedisSentinelSet
        group = RedisSentinelSet(workdir=self.workdir)
        self.addCleanup(group.stop)
        sentinels = group.sentinels()
        # The sentinels' own user, as docs/operations.md gives it.
        for sentinel in group.sentinel_processes:
            self.assertEqual(redis_call(sentinel.port, "ACL", "SETUSER", "sluice-sentinel",
                                        "reset", "on", f">{PASSWORD}", "&+switch-master",
                                        "+sentinel|get-master-addr-by-name", "+subscribe"),
                             "OK")
        self.run_features({"url": f"redis://sluice:{PASSWORD}@{sentinels[0]}/0",
                           "topology": "sentinel", "nodes": sentinels[1:],
                           "sentinel_master": MASTER_NAME,
                           "sentinel_username": "sluice-sentinel",
                           "sentinel_password": PASSWORD},
                          [node.port for node in group.data])
        for sentinel in group.sentinel_processes:
            self.assertEqual(refusals(sentinel.port), [], sentinel.address)


if __name__ == "__main__":
    unittest.main()
