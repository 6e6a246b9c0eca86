"""Organisations through the real sluice binary, a real redis-server and
sluice-echo: consumers in YAML and in the consumer store belong to one, and a
limit keyed by `org` is the sum of its consumers, beside their own limits.

- Two YAML consumers of one organisation share its bucket; another
  organisation's consumer has its own; a consumer without one is keyed by its
  client IP and counted as a missing org.
- Store consumers with `org`: the same sharing, the organisation in the
  consumer's JSON, GET /consumers?org= lists them, and moving a consumer to
  another organisation moves it in that list.
"""

import json
import os
import unittest

from harness import (ProcessTestCase, gateway_config, metric_sum, request, wait_redis_ready)

PREFIX = "orgtest:"


class OrganisationTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()

    def secret_file(self) -> str:
        path = os.path.join(self.workdir, "key-secret")
        with open(path, "w") as f:
            f.write("organisation-test-secret-0123456789\n")
        os.chmod(path, 0o600)
        return path

    def gateway(self, api_keys):
        gw = self.start_sluice(gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "echo",
              "limits": ["per_key", "per_org"]}],
            log={"level": "warn", "access_log": False},
            plans=["free"],
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 2000, "key_prefix": PREFIX,
                   "key_secret_file": self.secret_file()},
            api_keys={"header": "X-API-Key", **api_keys},
            limits={"per_key": {"key": "api_key", "capacity": 10, "refill_per_second": 0.001},
                    "per_org": {"key": "org", "capacity": 3, "refill_per_second": 0.001}}))
        wait_redis_ready(gw)
        return gw

    def call(self, gw, key):
        return request(gw.port, "GET", "/api/x", headers={"X-API-Key": key})

    def assert_org_shared(self, gw, first, second, other):
        # first and second (one organisation) share 3 between them.
        statuses = [self.call(gw, k)[0] for k in (first, second, first, second)]
        self.assertEqual(statuses, [200, 200, 200, 429])
        status, headers, body = self.call(gw, second)
        self.assertEqual(status, 429)
        self.assertEqual(json.loads(body)["violated-policies"], ["per_org"])
        # Its own key still had room: the organisation refused it.
        self.assertEqual(self.call(gw, other)[0], 200)  # another organisation

    def test_yaml_consumers_share_their_organisation(self):
        gw = self.gateway({"consumers": [
            {"key": "acme-web", "plan": "free", "id": "acme-web", "org": "acme"},
            {"key": "acme-batch", "plan": "free", "id": "acme-batch", "org": "acme"},
            {"key": "globex-1", "plan": "free", "id": "globex-1", "org": "globex"},
            {"key": "loner", "plan": "free", "id": "loner"}]})
        self.assert_org_shared(gw, "acme-web", "acme-batch", "globex-1")
        self.assertEqual(self.call(gw, "loner")[0], 200)
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_missing_key_total", route="api",
                                    source="org"), 1)

    def test_store_consumers_share_and_are_listed_by_organisation(self):
        gw = self.gateway({"store": "redis"})

        def put(cid, key, org):
            body = {"keys": [key], "plan": "free", **({"org": org} if org else {})}
            return request(gw.admin_port, "PUT", f"/consumers/{cid}",
                           body=json.dumps(body).encode(),
                           headers={"Content-Type": "application/json"})

        for cid, key, org in (("s-web", "s-web-key", "initech"), ("s-batch", "s-batch-key", "initech"),
                              ("s-other", "s-other-key", "umbrella")):
            status, _, body = put(cid, key, org)
            self.assertEqual(status, 201, body)
            self.assertEqual(json.loads(body)["org"], org)
        self.assert_org_shared(gw, "s-web-key", "s-batch-key", "s-other-key")

        def listed(org):
            status, _, body = request(gw.admin_port, "GET", f"/consumers?org={org}")
            self.assertEqual(status, 200, body)
            return [c["id"] for c in json.loads(body)["consumers"]]

        self.assertEqual(listed("initech"), ["s-batch", "s-web"])
        self.assertEqual(listed("umbrella"), ["s-other"])
        # Moved to another organisation: listed there only.
        self.assertEqual(put("s-batch", "s-batch-key", "umbrella")[0], 200)
        self.assertEqual(listed("initech"), ["s-web"])
        self.assertEqual(listed("umbrella"), ["s-batch", "s-other"])
        # Left without one: in no organisation's list.
        self.assertEqual(put("s-batch", "s-batch-key", None)[0], 200)
        self.assertEqual(listed("umbrella"), ["s-other"])
        status, _, body = request(gw.admin_port, "GET", "/consumers/s-batch")
        self.assertNotIn("org", json.loads(body))
        self.assertEqual(request(gw.admin_port, "GET", "/consumers?org=a&plan=free")[0], 400)
        # Deleted: gone from its organisation's list too.
        self.assertEqual(request(gw.admin_port, "DELETE", "/consumers/s-other")[0], 204)
        self.assertEqual(listed("umbrella"), [])


if __name__ == "__main__":
    unittest.main()
