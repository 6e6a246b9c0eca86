"""The bucket API on the admin listener, through the real sluice binary and a real
redis-server: GET shows a bucket, DELETE resets it, found from the values a request
carries (an API key, an IP, a composite key), with the admin token or the loopback
rule.

- Tokens spent through the data port show in GET; after DELETE the next requests
  pass again and GET shows the bucket full.
- A 429 that the denial cache remembers is forgotten by DELETE: the next request
  passes at once, on every worker.
- With admin.token_file, requests without the token, or with another, get 401;
  without a token file, an admin listener bound to 0.0.0.0 (not loopback) answers
  403. /healthz and /metrics stay open.
- An unknown limit is 404, a wrong number of values 400; raw values never reach
  the log nor the answer.
- A sliding window is shown with its window and reset the same way.
- On a Redis Cluster (3 primaries), buckets of keys in different slots are read
  and reset on the node that owns each.
"""

import json
import os
import shutil
import tempfile
import unittest
import urllib.parse

from harness import (Client, ProcessTestCase, SharedCluster, free_port, gateway_config, limit,
                     metric_sum, redis_call, request, require_binaries, route, topology_redis,
                     wait_redis_ready, wait_until)

API_KEY = "demo-pro-key"


class AdminBucketsCase(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()

    def config(self, limits, routes, admin=None, threads=2, **ports):
        config = gateway_config(
            {"echo": [self.echo.address]}, routes, server={"threads": threads},
            log={"level": "info", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000},
            api_keys={"header": "X-API-Key",
                      "consumers": [{"key": API_KEY, "plan": "pro"}]},
            limits=limits, **ports)
        if admin:
            config["admin"].update(admin)
        return config

    def start_gateway(self, limits, routes, admin=None, threads=2):
        gateway = self.start_sluice(self.config(limits, routes, admin, threads))
        wait_redis_ready(gateway)
        return gateway

    def admin(self, gw, method, limit_name, values=(), headers=None, plan=None):
        params = [("value", v) for v in values] + ([("plan", plan)] if plan else [])
        query = urllib.parse.urlencode(params)
        target = f"/ratelimit/buckets/{limit_name}" + (f"?{query}" if query else "")
        status, h, body = request(gw.admin_port, method, target, headers=headers)
        return status, h, body

    def bucket(self, gw, limit_name, values, **kw):
        status, _, body = self.admin(gw, "GET", limit_name, values, **kw)
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def reset(self, gw, limit_name, values, **kw):
        status, _, body = self.admin(gw, "DELETE", limit_name, values, **kw)
        self.assertEqual(status, 204, body)
        self.assertEqual(body, b"")

    def spend(self, gw, target, count, headers=None):
        """`count` requests on one connection; their statuses."""
        with Client(gw.port) as conn:
            return [conn.request("GET", target, headers=headers)[0] for _ in range(count)]


class BucketApiTest(AdminBucketsCase):
    def test_api_key_bucket_shown_spent_then_reset(self):
        gw = self.start_gateway(
            {"per_key": limit("api_key", 10, plans={"pro": {"capacity": 5,
                                                             "refill_per_second": 0.001}})},
            [route("api", "/api", ["per_key"])])
        before = self.bucket(gw, "per_key", [API_KEY])
        self.assertEqual((before["limit"], before["algorithm"], before["plan"]),
                         ("per_key", "token_bucket", "pro"))
        self.assertEqual((before["capacity"], before["tokens"], before["full_in_ms"]), (5, 5, 0))
        self.assertEqual(before["refill_per_second"], 0.001)
        self.assertRegex(before["bucket"], r"^per_key:[0-9a-f]{32}$")

        key = {"X-API-Key": API_KEY}
        self.assertEqual(self.spend(gw, "/api/x", 3, key), [200] * 3)
        spent = self.bucket(gw, "per_key", [API_KEY])
        self.assertAlmostEqual(spent["tokens"], 2, delta=0.05)
        self.assertGreater(spent["full_in_ms"], 0)
        self.assertEqual(spent["bucket"], before["bucket"])
        # Another plan's parameters, same bucket.
        other = self.bucket(gw, "per_key", [API_KEY], plan="free")
        self.assertEqual((other["capacity"], other["bucket"]), (10, before["bucket"]))

        self.assertEqual(self.spend(gw, "/api/x", 3, key), [200, 200, 429])
        self.reset(gw, "per_key", [API_KEY])
        self.assertEqual(self.bucket(gw, "per_key", [API_KEY])["tokens"], 5)
        self.assertEqual(self.spend(gw, "/api/x", 5, key), [200] * 5)

        # The raw key is never in an answer nor in the log; without a key
        # secret the bucket's hash is not logged either (a plain hash of an IP
        # address can be reversed), only its limit.
        log = gw.stderr()
        self.assertNotIn(API_KEY, log)
        self.assertNotIn(before["bucket"], log)
        self.assertIn("admin: a bucket of limit per_key reset", log)
        self.assertEqual(metric_sum(gw, "sluice_admin_bucket_requests_total", method="DELETE",
                                    result="ok"), 1)

    def test_ip_bucket_after_a_cached_denial_passes_at_once_on_every_worker(self):
        gw = self.start_gateway({"per_ip": limit("ip", 2)},
                                [route("api", "/api", ["per_ip"])], threads=2)
        # Two connections, likely on both workers; each gets a cached denial.
        conns = [Client(gw.port), Client(gw.port)]
        try:
            statuses = [c.request("GET", "/api/x")[0] for c in conns for _ in range(3)]
            self.assertEqual(statuses.count(200), 2, statuses)
            view = self.bucket(gw, "per_ip", ["127.0.0.1"])
            self.assertLess(view["tokens"], 1)
            for c in conns:
                self.assertEqual(c.request("GET", "/api/x")[0], 429)
            self.reset(gw, "per_ip", ["127.0.0.1"])
            # At once: neither worker's denial cache answers for the bucket.
            self.assertEqual([c.request("GET", "/api/x")[0] for c in conns], [200, 200])
            self.assertAlmostEqual(self.bucket(gw, "per_ip", ["127.0.0.1"])["tokens"], 0,
                                   delta=0.05)
        finally:
            for c in conns:
                c.close()

    def test_composite_bucket(self):
        gw = self.start_gateway({"per_key_path": limit(["api_key", "path"], 3)},
                                [route("api", "/api", ["per_key_path"])])
        key = {"X-API-Key": API_KEY}
        self.assertEqual(self.spend(gw, "/api/a", 2, key), [200, 200])
        self.assertEqual(self.spend(gw, "/api/b", 1, key), [200])
        self.assertAlmostEqual(self.bucket(gw, "per_key_path", [API_KEY, "/api/a"])["tokens"], 1,
                               delta=0.05)
        self.assertAlmostEqual(self.bucket(gw, "per_key_path", [API_KEY, "/api/b"])["tokens"], 2,
                               delta=0.05)
        self.reset(gw, "per_key_path", [API_KEY, "/api/a"])
        self.assertEqual(self.bucket(gw, "per_key_path", [API_KEY, "/api/a"])["tokens"], 3)
        self.assertAlmostEqual(self.bucket(gw, "per_key_path", [API_KEY, "/api/b"])["tokens"], 2,
                               delta=0.05)
        self.assertEqual(self.spend(gw, "/api/a", 4, key), [200, 200, 200, 429])

    def test_sliding_window_shown_spent_then_reset(self):
        window = {"key": "api_key", "algorithm": "sliding_window", "capacity": 3,
                  "window_ms": 60000}
        gw = self.start_gateway({"per_minute": window}, [route("api", "/api", ["per_minute"])])
        key = {"X-API-Key": API_KEY}
        self.assertEqual(self.spend(gw, "/api/x", 2, key), [200, 200])
        view = self.bucket(gw, "per_minute", [API_KEY])
        self.assertEqual((view["algorithm"], view["window_ms"], view["capacity"]),
                         ("sliding_window", 60000, 3))
        self.assertNotIn("refill_per_second", view)
        self.assertAlmostEqual(view["tokens"], 1, delta=0.1)
        self.assertGreater(view["full_in_ms"], 0)
        self.assertEqual(self.spend(gw, "/api/x", 2, key), [200, 429])
        self.reset(gw, "per_minute", [API_KEY])
        view = self.bucket(gw, "per_minute", [API_KEY])
        self.assertEqual((view["tokens"], view["full_in_ms"]), (3, 0))
        self.assertEqual(self.spend(gw, "/api/x", 4, key), [200, 200, 200, 429])

    def test_unknown_limit_and_wrong_values(self):
        gw = self.start_gateway({"per_key_path": limit(["api_key", "path"], 3)},
                                [route("api", "/api", ["per_key_path"])])
        status, _, body = self.admin(gw, "GET", "nope", ["x"])
        self.assertEqual(status, 404, body)
        status, _, body = self.admin(gw, "DELETE", "per_key_path", [API_KEY])
        self.assertEqual(status, 400, body)
        self.assertIn("give 2 value parameter(s), got 1", json.loads(body)["error"])
        self.assertNotIn(API_KEY.encode(), body)


class BucketApiAuthTest(AdminBucketsCase):
    def test_token_file_requires_the_bearer_token(self):
        token = "t0ken-for-the-admin-api"
        with tempfile.NamedTemporaryFile("w", suffix=".token", delete=False) as f:
            f.write(token + "\n")
        self.addCleanup(os.unlink, f.name)
        gw = self.start_gateway({"per_ip": limit("ip", 2)}, [route("api", "/api", ["per_ip"])],
                                admin={"token_file": f.name})
        for headers in (None, {"Authorization": "Bearer wrong"},
                        {"Authorization": f"Bearer {token}x"}):
            for method in ("GET", "DELETE"):
                status, h, body = self.admin(gw, method, "per_ip", ["127.0.0.1"], headers=headers)
                self.assertEqual(status, 401, f"{method} {headers}: {body!r}")
                self.assertEqual(h.get("WWW-Authenticate"), "Bearer")
                self.assertNotIn(token.encode(), body)
        ok = {"Authorization": f"Bearer {token}"}
        self.assertEqual(self.bucket(gw, "per_ip", ["127.0.0.1"], headers=ok)["tokens"], 2)
        self.reset(gw, "per_ip", ["127.0.0.1"], headers=ok)
        self.assertEqual(request(gw.admin_port, "GET", "/healthz")[0], 200)
        self.assertEqual(request(gw.admin_port, "GET", "/metrics")[0], 200)

    def test_a_reload_brings_the_new_token_and_the_new_limits(self):
        workdir = tempfile.mkdtemp(prefix="sluice-admin-token-")
        self.addCleanup(shutil.rmtree, workdir, True)
        token_file = os.path.join(workdir, "token")
        with open(token_file, "w") as f:
            f.write("first-token\n")
        limits = {"per_ip": limit("ip", 2)}
        routes = [route("api", "/api", ["per_ip"])]
        gw = self.start_gateway(limits, routes, admin={"token_file": token_file})
        first = {"Authorization": "Bearer first-token"}
        second = {"Authorization": "Bearer second-token"}
        self.assertEqual(self.admin(gw, "GET", "per_ip", ["127.0.0.1"], headers=first)[0], 200)
        self.assertEqual(self.admin(gw, "GET", "per_path", ["/api/x"], headers=first)[0], 404)

        with open(token_file, "w") as f:
            f.write("second-token\n")
        limits["per_path"] = limit("path", 7)
        config = self.config(limits, routes, {"token_file": token_file}, port=gw.port,
                             admin_port=gw.admin_port)
        gw.reload(config)
        wait_until(lambda: self.admin(gw, "GET", "per_path", ["/api/x"], headers=second)[0] == 200,
                   10, message="the reload did not bring the new token and limit")
        self.assertEqual(self.bucket(gw, "per_path", ["/api/x"], headers=second)["capacity"], 7)
        self.assertEqual(self.admin(gw, "GET", "per_ip", ["127.0.0.1"], headers=first)[0], 401)

    def test_no_token_and_a_listener_off_loopback_is_forbidden(self):
        # 0.0.0.0 is not a loopback address, and the harness still reaches it on 127.0.0.1.
        gw = self.start_gateway({"per_ip": limit("ip", 2)}, [route("api", "/api", ["per_ip"])],
                                admin={"listen": f"0.0.0.0:{free_port()}"})
        for method in ("GET", "DELETE"):
            status, _, body = self.admin(gw, method, "per_ip", ["127.0.0.1"])
            self.assertEqual(status, 403, body)
        self.assertEqual(request(gw.admin_port, "GET", "/healthz")[0], 200)


class BucketApiClusterTest(SharedCluster, AdminBucketsCase):
    """The same API on a Redis Cluster: each bucket lives on its slot's primary."""

    def setUp(self):
        ProcessTestCase.setUp(self)
        self.echo = self.start_echo()

    def holders(self, limit_name):
        """Bucket key -> the primary's port holding it."""
        found = {}
        for node, _ in self.cluster.primaries():
            for key in redis_call(node.port, "KEYS", f"sluice:{limit_name}:*"):
                found[key] = node.port
        return found

    def test_buckets_in_every_slot_are_read_and_reset_on_their_owner(self):
        seeds = self.cluster.seeds()
        config = gateway_config(
            {"echo": [self.echo.address]}, [route("api", "/api", ["per_key"])],
            log={"level": "info", "access_log": False},
            redis=topology_redis(seeds[0], seeds[1:], "cluster", timeout_ms=1000),
            limits={"per_key": limit("api_key", 4)})
        gw = self.start_sluice(config)
        wait_redis_ready(gw)
        keys = [f"cluster-key-{i}" for i in range(12)]
        for key in keys:
            self.assertEqual(self.spend(gw, "/api/x", 3, {"X-API-Key": key}), [200] * 3)
        holders = self.holders("per_key")
        self.assertEqual(len(holders), len(keys))
        self.assertGreater(len(set(holders.values())), 1, "every bucket on one node")
        for key in keys:
            view = self.bucket(gw, "per_key", [key])
            self.assertAlmostEqual(view["tokens"], 1, delta=0.05, msg=key)
        for key in keys[:6]:
            self.reset(gw, "per_key", [key])
        self.assertEqual(len(self.holders("per_key")), len(keys) - 6)
        for key in keys:
            expected = 4 if key in keys[:6] else 1
            self.assertAlmostEqual(self.bucket(gw, "per_key", [key])["tokens"], expected,
                                   delta=0.05, msg=key)


def setUpModule():
    require_binaries()


if __name__ == "__main__":
    unittest.main()
