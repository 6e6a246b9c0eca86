"""The Envoy rate-limit service with Sluice's own: plans and consumers, and
concurrency limits given back by a release call. Through the real binary and
a real redis-server, called by the gRPC client generated from Sluice's .proto
files, as Envoy calls it.

- A descriptor entry marked api_key carries the API key Envoy read from a
  request header: a YAML consumer's plan sizes the limit it names; a store
  consumer's plan and its own override do, and its keys share one bucket; an
  unknown key is missing (one bucket for all such keys, the default plan) or
  over the limit with unknown_key: reject; a disabled consumer is over the
  limit; an exempt plan is never limited. No raw key reaches Redis or the
  metrics.
- A concurrency limit takes a slot named by the request's id, and the same
  descriptor with the release entry after it (Envoy's apply_on_stream_done
  rate limit) gives it back, on any instance; a slot never given back comes
  back when its lease ends.
"""

import json
import os
import unittest

from harness import gateway_config, metric_sum, redis_call, request, wait_redis_ready, wait_until
from test_rls import RlsCase
from testkit.ports import free_port
from testkit.rls_client import RlsClient, generic_key, request_header

UNLIMITED = 2 ** 32 - 1

KEYS = {"domain": "keys", "descriptors": [
    {"key": "api_key", "api_key": True, "rate_limit": {"limit": "per_consumer"},
     "descriptors": [{"key": "path", "rate_limit": {"unit": "hour", "requests_per_unit": 3}}]},
    {"key": "trial_key", "api_key": True, "shadow_mode": True,
     "rate_limit": {"limit": "per_consumer"}},
    {"key": "remote_address", "rate_limit": {"unit": "hour", "requests_per_unit": 5}},
]}

SLOTS = {"domain": "slots", "descriptors": [
    {"key": "tenant", "descriptors": [
        {"key": "request_id", "rate_limit": {"limit": "in_flight"}}]},
]}


def key(value):
    """What Envoy's request_headers action on X-API-Key sends."""
    return request_header("api_key", value)


def release(entries):
    """The same descriptor, as Envoy's apply_on_stream_done rate limit sends it."""
    return entries + [generic_key("1", key="release")]


class RlsConsumersCase(RlsCase):
    def secret_file(self):
        path = os.path.join(self.workdir, "key-secret")
        with open(path, "w") as f:
            f.write("rls-consumer-test-secret-0123456789\n")
        os.chmod(path, 0o600)
        return path

    def start_service(self, api_keys, name="sluice", lease_ms=30000, **sections):
        listen = f"127.0.0.1:{free_port()}"
        config = gateway_config(
            {"echo": [self.echo.address]}, [],
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000,
                   "key_prefix": "sluice:", "key_secret_file": self.secret_file()},
            plans=["free", "pro", "vip"],
            api_keys={"header": "X-API-Key", "default_plan": "free", **api_keys},
            limits={"per_consumer": {"key": "api_key", "algorithm": "quota", "period": "hour",
                                     "capacity": 2, "plans": {"pro": {"capacity": 4}}},
                    "in_flight": {"key": "global", "algorithm": "concurrency", "capacity": 2,
                                  "lease_ms": lease_ms}},
            rls={"listen": listen, "domains": [KEYS, SLOTS]},
            log={"level": "info", "access_log": False}, **sections)
        config["routes"] = [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}]
        gw = self.start_sluice(config, name=name)
        wait_redis_ready(gw)
        gw.rls_port = int(listen.rsplit(":", 1)[1])
        return gw

    def codes(self, c, entries, n):
        return [c.call("slots" if entries[-1][0] == "request_id" else "keys",
                       [entries]).overall_code for _ in range(n)]

    def put(self, gw, cid, doc):
        status, _, body = request(gw.admin_port, "PUT", f"/consumers/{cid}",
                                  body=json.dumps(doc).encode(),
                                  headers={"Content-Type": "application/json"})
        self.assertIn(status, (200, 201), body)

    def assert_no_raw_key(self, gw, *raw):
        metrics = request(gw.admin_port, "GET", "/metrics")[2].decode()
        for value in raw:
            self.assertNotIn(value, metrics)
            for name in redis_call(self.redis.port, "KEYS", "*"):
                self.assertNotIn(value.encode(), name)


class RlsPlansTest(RlsConsumersCase):
    def test_yaml_consumers_size_the_limit_by_plan(self):
        gw = self.start_service(
            {"consumers": [{"key": "ann-key-1", "plan": "free", "id": "ann"},
                           {"key": "bob-key-1", "plan": "pro", "id": "bob"},
                           {"key": "vic-key-1", "plan": "vip", "id": "vic"}]},
            exemptions={"plans": ["vip"]})
        c = self.client(gw)
        self.assertEqual(self.codes(c, [key("ann-key-1")], 3), [c.OK] * 2 + [c.OVER_LIMIT])
        self.assertEqual(self.codes(c, [key("bob-key-1")], 5), [c.OK] * 4 + [c.OVER_LIMIT])
        r = c.call("keys", [[key("bob-key-1")]])
        self.assertEqual(r.statuses[0].current_limit.requests_per_unit, 4)
        # Keys no consumer holds are missing: one bucket for all, the default plan.
        self.assertEqual(self.codes(c, [key("stranger-1")], 2), [c.OK] * 2)
        self.assertEqual(self.codes(c, [key("stranger-2")], 1), [c.OVER_LIMIT])
        # An exempt plan is never limited.
        r = c.call("keys", [[key("vic-key-1")]] * 3)
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (c.OK, UNLIMITED))
        # A unit rule below the key: the consumer's bucket, per path, its own size.
        self.assertEqual(self.codes(c, [key("ann-key-1"), ("path", "/a")], 4),
                         [c.OK] * 3 + [c.OVER_LIMIT])
        self.assertEqual(metric_sum(gw, "sluice_rls_descriptors_total", domain="keys",
                                    result="exempt"), 3)
        self.assert_no_raw_key(gw, "ann-key-1", "bob-key-1", "stranger-1")

    def test_store_consumers_share_a_bucket_and_are_refused_when_unknown_or_disabled(self):
        gw = self.start_service({"store": "redis", "unknown_key": "reject"})
        self.put(gw, "acme", {"keys": ["acme-k1", "acme-k2"], "plan": "pro"})
        self.put(gw, "tiny", {"keys": ["tiny-k1"], "plan": "pro",
                              "limits": {"per_consumer": {"capacity": 1}}})
        c = self.client(gw)
        # The pro plan's 4, shared by both keys of the consumer.
        self.assertEqual(self.codes(c, [key("acme-k1")], 3), [c.OK] * 3)
        self.assertEqual(self.codes(c, [key("acme-k2")], 2), [c.OK, c.OVER_LIMIT])
        # The store consumer's own override of the limit the rule names.
        self.assertEqual(self.codes(c, [key("tiny-k1")], 2), [c.OK, c.OVER_LIMIT])
        # unknown_key: reject: over the limit, and no bucket of the call touched.
        r = c.call("keys", [[key("nobody")], [("remote_address", "10.0.0.1")]])
        self.assertEqual((r.overall_code, [s.code for s in r.statuses]),
                         (c.OVER_LIMIT, [c.OVER_LIMIT, c.OK]))
        self.assertFalse(r.statuses[0].HasField("current_limit"))
        r = c.call("keys", [[("remote_address", "10.0.0.1")]])
        self.assertEqual(r.statuses[0].limit_remaining, 4)
        # Under a shadow_mode rule a refused key is counted, answered OK, and
        # the call's other descriptors are decided.
        r = c.call("keys", [[("trial_key", "nobody")], [("remote_address", "10.0.0.1")]])
        self.assertEqual((r.overall_code, r.statuses[1].limit_remaining), (c.OK, 3))
        self.assertEqual(metric_sum(gw, "sluice_rls_descriptors_total", domain="keys",
                                    result="skipped"), 1)
        self.put(gw, "acme", {"keys": ["acme-k1", "acme-k2"], "plan": "pro", "disabled": True})
        wait_until(lambda: c.call("keys", [[key("acme-k1")]]).overall_code == c.OVER_LIMIT
                   and metric_sum(gw, "sluice_rls_descriptors_total", domain="keys",
                                  result="disabled") >= 1)
        self.assertEqual(metric_sum(gw, "sluice_rls_descriptors_total", domain="keys",
                                    result="unknown_key"), 2)
        self.assert_no_raw_key(gw, "acme-k1", "acme-k2", "tiny-k1", "nobody")


class RlsConcurrencyTest(RlsConsumersCase):
    def test_slots_are_taken_and_given_back_on_any_instance(self):
        a = self.start_service({}, name="sluice-a")
        b = self.start_service({}, name="sluice-b")
        ca, cb = self.client(a), self.client(b)
        r1, r2, r3 = ([("tenant", "t1"), ("request_id", rid)] for rid in ("r1", "r2", "r3"))
        self.assertEqual([ca.call("slots", [r1]).overall_code,
                          cb.call("slots", [r2]).overall_code,
                          ca.call("slots", [r3]).overall_code], [ca.OK, ca.OK, ca.OVER_LIMIT])
        # Another tenant has slots of its own.
        self.assertEqual(ca.call("slots", [[("tenant", "t2"), ("request_id", "r1")]]).overall_code,
                         ca.OK)
        # A release of a request that holds no slot changes nothing.
        self.assertEqual(cb.call("slots", [release([("tenant", "t1"),
                                                    ("request_id", "r9")])]).overall_code, cb.OK)
        self.assertEqual(ca.call("slots", [r3]).overall_code, ca.OVER_LIMIT)
        # r1's release, sent to the other instance, gives its slot back: r3 fits.
        r = cb.call("slots", [release(r1)])
        self.assertEqual(r.overall_code, cb.OK)
        self.assertEqual(ca.call("slots", [r3]).overall_code, ca.OK)
        self.assertEqual(ca.call("slots", [[("tenant", "t1"), ("request_id", "r4")]]).overall_code,
                         ca.OVER_LIMIT)
        for rid in (r2, r3):
            cb.call("slots", [release(rid)])
        self.assertEqual([ca.call("slots", [[("tenant", "t1"), ("request_id", f"n{i}")]])
                          .overall_code for i in range(3)], [ca.OK, ca.OK, ca.OVER_LIMIT])
        self.assertEqual(metric_sum(b, "sluice_rls_descriptors_total", domain="slots",
                                    result="released"), 4)

    def test_an_envoy_override_does_not_turn_slots_into_a_quota(self):
        gw = self.start_service({})
        c = self.client(gw)
        minute = 2
        codes = [c.call("slots", [[("tenant", "t1"), ("request_id", rid)]],
                        override=[(100, minute)]).overall_code for rid in ("a", "b", "c")]
        self.assertEqual(codes, [c.OK, c.OK, c.OVER_LIMIT])
        c.call("slots", [release([("tenant", "t1"), ("request_id", "a")])],
               override=[(100, minute)])
        self.assertEqual(c.call("slots", [[("tenant", "t1"), ("request_id", "c")]]).overall_code,
                         c.OK)

    def test_a_slot_never_given_back_returns_when_its_lease_ends(self):
        gw = self.start_service({}, lease_ms=1000)
        c = self.client(gw)
        held = [[("tenant", "t1"), ("request_id", rid)] for rid in ("r1", "r2")]
        self.assertEqual([c.call("slots", [h]).overall_code for h in held], [c.OK, c.OK])
        late = [("tenant", "t1"), ("request_id", "late")]
        self.assertEqual(c.call("slots", [late]).overall_code, c.OVER_LIMIT)
        wait_until(lambda: c.call("slots", [late]).overall_code == c.OK, timeout=5)


if __name__ == "__main__":
    unittest.main()
