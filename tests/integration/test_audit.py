"""Who was limited, and why, through the real sluice binary, a real
redis-server and sluice-echo:
- every access-log line has exactly the documented fields, with the decision
  (allowed, limited, shadow_limited, delayed, exempt, none, fail_open,
  fail_closed, fail_local), the caller (a store consumer's id or a key's
  fingerprint, never the raw key), the plan, the deciding limit, its
  remaining units, the cost and a settled cost;
- odd bytes in a logged value come out escaped, the line still JSON;
- GET /ratelimit/top merges the denials of two instances (exact counts, the
  denial cache's included), most first, and refuses bad queries with 400
  problem+json;
- audit.redis_stream holds one entry per denial with its fields, capped at
  exactly max_len;
- a valid traceparent (and its tracestate) reaches the upstream as sent, a
  missing or bad one is replaced (its tracestate dropped); the trace id is
  in the access log and in Sluice's own replies.
"""

import json
import socket
import unittest

from harness import (ProcessTestCase, SharedCluster, echo_header, gateway_config, limit,
                     metric_sum, redis_call, request, route, topology_redis, wait_redis_ready,
                     wait_until)
from test_ratelimit import RateLimitTestCase


TINY = 0.0001
# Every access-log line has these fields, no more (docs/operations.md).
FIELDS = {"ts", "request_id", "trace_id", "client_ip", "method", "protocol", "path", "route",
          "status", "duration_ms", "upstream", "attempts", "servers_tried", "local", "decision", "consumer", "plan", "limit",
          "remaining", "cost", "settled_cost"}
FREE_KEY = "free-key-0123456789abcdef"
STAFF_KEY = "staff-key-0123456789abcdef"


def log_lines(gateway):
    lines = []
    for text in gateway.stdout().splitlines():
        if text.startswith("{"):
            lines.append(json.loads(text))
    return lines


def last_line(gateway, path):
    """The newest access-log line of `path` (polled: the line follows the response)."""
    found = []

    def seen():
        found[:] = [line for line in log_lines(gateway) if line["path"] == path]
        return bool(found)
    wait_until(seen, 5, message=f"an access-log line for {path}")
    return found[-1]


class AccessLogDecisionTest(RateLimitTestCase):
    def setUp(self):
        super().setUp()
        limits = {"per_key": limit("api_key", 2, TINY),
                  "dry": limit("api_key", 1, TINY, shadow=True),
                  "burst": limit("api_key", 1, 1.0),
                  "tokens": limit("api_key", 1000, TINY)}
        routes = [route("limited", "/limited", ["per_key"]),
                  route("shadow", "/shadow", ["dry"]),
                  route("delayed", "/delayed", ["burst"], on_limit="delay", max_delay_ms=3000),
                  route("settled", "/settled", ["tokens"], cost=50,
                        cost_from_response={"header": "X-Usage-Tokens"}),
                  route("open", "/open", [])]
        api_keys = {"header": "X-API-Key", "default_plan": "free",
                    "consumers": [{"key": STAFF_KEY, "plan": "internal"}]}
        self.gw = self.start_gateway(routes, limits, api_keys=api_keys,
                                     exemptions={"plans": ["internal"]},
                                     log={"level": "info", "access_log": True})

    def get_with(self, path, key=FREE_KEY, extra=None):
        headers = {"X-API-Key": key} if key else {}
        headers.update(extra or {})
        return self.get(self.gw, path, headers)

    def assert_fields(self, line):
        self.assertEqual(set(line), FIELDS, line)
        self.assertNotIn(FREE_KEY, json.dumps(line))
        self.assertNotIn(STAFF_KEY, json.dumps(line))

    def test_each_decision_has_exactly_the_documented_fields(self):
        self.assertEqual(self.get_with("/limited/1")[0], 200)
        line = last_line(self.gw, "/limited/1")
        self.assert_fields(line)
        self.assertEqual(line["protocol"], "HTTP/1.1")
        self.assertEqual(line["decision"], "allowed")
        self.assertEqual(line["limit"], "per_key")
        self.assertEqual(line["remaining"], 1)
        self.assertEqual(line["cost"], 1)
        self.assertEqual(line["plan"], "free")
        self.assertIsNone(line["settled_cost"])
        self.assertRegex(line["consumer"], r"^[0-9a-f]{32}$")  # the key's fingerprint
        fingerprint = line["consumer"]

        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_near_limit_total",
                                    route="limited", limit="per_key"), 0)  # 1 of 2 left
        self.get_with("/limited/2")
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_near_limit_total",
                                    route="limited", limit="per_key"), 1)  # 0 of 2 left
        self.assertEqual(self.get_with("/limited/3")[0], 429)
        line = last_line(self.gw, "/limited/3")
        self.assert_fields(line)
        self.assertEqual((line["decision"], line["limit"], line["status"]),
                         ("limited", "per_key", 429))
        self.assertEqual(line["remaining"], 0)
        self.assertEqual(line["consumer"], fingerprint)  # the same key, the same caller

        self.get_with("/shadow/1")
        self.assertEqual(self.get_with("/shadow/2")[0], 200)
        line = last_line(self.gw, "/shadow/2")
        self.assert_fields(line)
        self.assertEqual((line["decision"], line["limit"]), ("shadow_limited", "dry"))

        self.get_with("/delayed/1")
        self.assertEqual(self.get_with("/delayed/2")[0], 200)
        line = last_line(self.gw, "/delayed/2")
        self.assert_fields(line)
        self.assertEqual((line["decision"], line["limit"]), ("delayed", "burst"))

        self.assertEqual(self.get_with("/limited/x", key=STAFF_KEY)[0], 200)
        line = last_line(self.gw, "/limited/x")
        self.assert_fields(line)
        self.assertEqual((line["decision"], line["plan"]), ("exempt", "internal"))
        self.assertIsNone(line["limit"])

        self.assertEqual(self.get_with("/open/1", key=None)[0], 200)
        line = last_line(self.gw, "/open/1")
        self.assert_fields(line)
        self.assertEqual(line["decision"], "none")
        self.assertIsNone(line["consumer"])
        self.assertIsNone(line["cost"])

        self.assertEqual(self.get_with("/settled/1", extra={"X-Echo-Usage": "7"})[0], 200)
        line = last_line(self.gw, "/settled/1")
        self.assert_fields(line)
        self.assertEqual((line["decision"], line["cost"], line["settled_cost"]),
                         ("allowed", 50, 7))

        self.assertEqual(self.get(self.gw, "/nowhere", {})[0], 404)
        line = last_line(self.gw, "/nowhere")
        self.assert_fields(line)
        self.assertEqual(line["decision"], "none")
        self.assertEqual(line["route"], "")  # a string, as the log always had it

    def test_odd_bytes_in_a_logged_value_are_escaped(self):
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as s:
            s.sendall(b'GET /open/q"uo\\te\xff\xfe HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n')
            while s.recv(65536):
                pass
        lines = [line for line in log_lines(self.gw) if line["path"].startswith("/open/q")]
        self.assertEqual(len(lines), 1)
        self.assertEqual(lines[0]["path"], '/open/q"uo\\te\ufffd\ufffd')
        raw = [t for t in self.gw.stdout().splitlines() if "/open/q" in t][0]
        self.assertIn('\\"uo\\\\te', raw)
        # A request id the client chose (any visible ASCII) with a quote and a backslash.
        status, headers, _ = self.get(self.gw, "/open/rid", {"X-Request-Id": 'a"b\\c'})
        self.assertEqual(headers["X-Request-Id"], 'a"b\\c')
        self.assertEqual(last_line(self.gw, "/open/rid")["request_id"], 'a"b\\c')
        # Non-UTF-8 bytes and a bare CR in header values: the id is not taken (a new one is
        # made) or the request is refused; either way every line is still one JSON document.
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as s:
            s.sendall(b"GET /open/bytes HTTP/1.1\r\nHost: x\r\nX-Request-Id: \xff\xfe\r\n"
                      b"X-API-Key: k\xc3\x28\r\nConnection: close\r\n\r\n")
            while s.recv(65536):
                pass
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as s:
            s.sendall(b"GET /open/cr HTTP/1.1\r\nHost: x\r\nX-Request-Id: a\rb\r\n"
                      b"Connection: close\r\n\r\n")
            while s.recv(65536):
                pass
        line = last_line(self.gw, "/open/bytes")
        self.assertRegex(line["request_id"], r"^[0-9a-f]{32}$")
        # The client's protocol as it spoke it.
        with socket.create_connection(("127.0.0.1", self.gw.port), timeout=5) as s:
            s.sendall(b"GET /open/old HTTP/1.0\r\nHost: x\r\n\r\n")
            while s.recv(65536):
                pass
        self.assertEqual(last_line(self.gw, "/open/old")["protocol"], "HTTP/1.0")
        for text in self.gw.stdout().splitlines():
            if text.startswith("{"):
                json.loads(text)  # every line parses


class TraceContextTest(RateLimitTestCase):
    VALID = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

    def test_trace_context_is_kept_or_started_and_logged(self):
        gw = self.start_gateway([route("api", "/api", ["one"]), route("open", "/open", [])],
                                {"one": limit("ip", 1, TINY)},
                                log={"level": "info", "access_log": True})

        status, _, body = self.get(gw, "/api/valid",
                                   {"traceparent": self.VALID, "tracestate": "vendor=1"})
        self.assertEqual(status, 200)
        doc = json.loads(body)
        self.assertEqual(echo_header(doc, "traceparent"), [self.VALID])
        self.assertEqual(echo_header(doc, "tracestate"), ["vendor=1"])
        self.assertEqual(last_line(gw, "/api/valid")["trace_id"],
                         "4bf92f3577b34da6a3ce929d0e0e4736")

        bad = ["garbage", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
               "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
               "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01" + "-x" * 300, None]
        for i, value in enumerate(bad):
            headers = {"tracestate": "vendor=2"}
            if value is not None:
                headers["traceparent"] = value
            status, _, body = self.get(gw, f"/open/bad{i}", headers)
            self.assertEqual(status, 200)
            doc = json.loads(body)
            sent = echo_header(doc, "traceparent")
            self.assertEqual(len(sent), 1, value)
            self.assertRegex(sent[0], r"^00-[0-9a-f]{32}-[0-9a-f]{16}-00$")
            self.assertNotEqual(sent[0], value)
            self.assertEqual(echo_header(doc, "tracestate"), [], value)
            self.assertEqual(last_line(gw, f"/open/bad{i}")["trace_id"], sent[0][3:35])

        # Sluice's own reply (here a 429) carries the trace id too.
        status, _, body = self.get(gw, "/api/limited", {"traceparent": self.VALID})
        self.assertEqual(status, 429)
        self.assertEqual(json.loads(body)["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736")
        self.assertEqual(last_line(gw, "/api/limited")["trace_id"],
                         "4bf92f3577b34da6a3ce929d0e0e4736")


class FailureDecisionTest(ProcessTestCase):
    def test_fail_open_closed_and_local_are_logged(self):
        dead = socket.socket()
        dead.bind(("127.0.0.1", 0))
        port = dead.getsockname()[1]
        dead.close()
        echo = self.start_echo()
        limits = {"l": limit("ip", 5, TINY)}
        routes = [route(mode, f"/{mode}", ["l"], on_redis_failure=mode)
                  for mode in ("open", "closed", "local")]
        config = gateway_config({"echo": [echo.address]}, routes, limits=limits,
                                redis={"url": f"redis://127.0.0.1:{port}/0", "timeout_ms": 200},
                                local={"fleet_size": 1},
                                log={"level": "info", "access_log": True})
        gw = self.start_sluice(config)
        for mode, status in (("open", 200), ("closed", 503), ("local", 200)):
            self.assertEqual(request(gw.port, "GET", f"/{mode}/1")[0], status)
            line = last_line(gw, f"/{mode}/1")
            self.assertEqual(set(line), FIELDS, line)
            self.assertEqual(line["decision"], f"fail_{mode}")
        self.assertEqual(last_line(gw, "/local/1")["limit"], "l")


class TopAndStreamTest(RateLimitTestCase):
    def start(self, name, audit=None):
        limits = {"per_key": limit("api_key", 1, TINY), "per_ip": limit("ip", 1000, TINY)}
        routes = [route("api", "/api", ["per_key"]), route("other", "/other", ["per_ip"])]
        sections = {"audit": audit} if audit else {}
        return self.start_gateway(routes, limits, name=name,
                                  log={"level": "info", "access_log": False}, **sections)

    def top(self, gw, query):
        status, headers, body = request(gw.admin_port, "GET", f"/ratelimit/top?{query}")
        return status, headers, json.loads(body)

    def test_the_most_limited_keys_across_two_instances(self):
        a = self.start("a", audit={"redis_stream": "sluice:denials", "max_len": 50})
        b = self.start("b")
        denials = {"heavy-key-00000001": 40, "medium-key-0000002": 12, "light-key-00000003": 3}
        for key, count in denials.items():
            for i in range(count + 1):  # the first is allowed
                gw = a if i % 2 else b
                self.get(gw, "/api/x", {"X-API-Key": key})

        def merged():
            status, _, doc = self.top(a, "limit=per_key&window_s=60&n=2")
            return status == 200 and [k["denials"] for k in doc["keys"]] == [40, 12]
        wait_until(merged, 10, message="both instances' denials in the view")
        status, _, doc = self.top(b, "limit=per_key")
        self.assertEqual(status, 200)
        self.assertEqual([k["denials"] for k in doc["keys"]], [40, 12, 3])
        for entry in doc["keys"]:
            self.assertRegex(entry["key"], r"^[0-9a-f]{32}$")  # fingerprints, never keys
            self.assertNotIn(entry["key"], denials)
        self.assertEqual(self.top(a, "limit=per_ip")[2]["keys"], [])

        # Bad queries.
        for query in ("limit=nope", "", "limit=per_key&n=100000", "limit=per_key&window_s=-5",
                      "limit=per_key&window_s=0", "limit=per_key&n=x", "limit=a&limit=b"):
            status, headers, doc = self.top(a, query)
            self.assertEqual(status, 400, query)
            self.assertEqual(headers["Content-Type"], "application/problem+json", query)
            self.assertEqual(doc["status"], 400)
        self.assertEqual(metric_sum(a, "sluice_admin_top_requests_total", result="bad_request"), 7)
        self.assertGreaterEqual(metric_sum(a, "sluice_admin_top_requests_total", result="ok"), 2)

        # Instance a's denials in the stream, capped at exactly 50 entries.
        a_denials = sum(count // 2 + (count % 2) for count in denials.values())
        wait_until(lambda: metric_sum(a, "sluice_audit_appended_total") >= a_denials, 10,
                   message="a's denials appended")
        self.assertEqual(metric_sum(a, "sluice_audit_dropped_total"), 0)
        self.assertEqual(redis_call(self.redis.port, "XLEN", "sluice:denials"), min(a_denials, 50))
        entries = redis_call(self.redis.port, "XRANGE", "sluice:denials", "-", "+", "COUNT", "1")
        fields = entries[0][1]
        doc = {fields[i].decode(): fields[i + 1].decode() for i in range(0, len(fields), 2)}
        self.assertEqual(set(doc), {"route", "limit", "consumer", "plan", "retry_after_ms",
                                    "instance"})
        self.assertEqual((doc["route"], doc["limit"]), ("api", "per_key"))
        self.assertRegex(doc["consumer"], r"^[0-9a-f]{32}$")
        self.assertGreater(int(doc["retry_after_ms"]), 1000)
        self.assertGreater(len(doc["instance"]), 0)

        # Over the cap: still exactly max_len.
        for _ in range(60):
            self.get(a, "/api/x", {"X-API-Key": "heavy-key-00000001"})
        wait_until(lambda: metric_sum(a, "sluice_audit_appended_total") >= a_denials + 60, 10,
                   message="the later denials appended")
        self.assertEqual(redis_call(self.redis.port, "XLEN", "sluice:denials"), 50)


class TopOnClusterTest(SharedCluster, RateLimitTestCase):
    """The view and the stream on a Redis Cluster: the counts go to the slot that
    holds every {top} key, the stream to its own slot, by plain commands; none
    is a script call (a flush adds nothing to what the limiter's calls count)."""

    def test_top_and_stream_on_a_cluster(self):
        seeds = self.cluster.seeds()
        config = gateway_config(
            {"echo": [self.echo.address]}, [route("api", "/api", ["per_key"])],
            log={"level": "info", "access_log": False},
            redis=topology_redis(seeds[0], seeds[1:], "cluster", timeout_ms=1000),
            audit={"redis_stream": "audit:denials", "max_len": 100},
            limits={"per_key": limit("api_key", 1, TINY)})
        gw = self.start_sluice(config)
        wait_redis_ready(gw)
        for key, count in (("cluster-key-aaaaaaaa", 7), ("cluster-key-bbbbbbbb", 3)):
            for _ in range(count + 1):
                self.get(gw, "/api/x", {"X-API-Key": key})

        def counted():
            status, _, body = request(gw.admin_port, "GET", "/ratelimit/top?limit=per_key")
            return status == 200 and [k["denials"] for k in json.loads(body)["keys"]] == [7, 3]
        wait_until(counted, 10, message="the denials counted on the cluster")
        wait_until(lambda: metric_sum(gw, "sluice_audit_appended_total") == 10, 10,
                   message="the stream entries appended")
        # The node that owns the stream's slot answers; the others redirect.
        lengths = [redis_call(node.port, "XLEN", "audit:denials")
                   for node, _ in self.cluster.primaries()]
        self.assertEqual([n for n in lengths if isinstance(n, int)], [10])
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_top_dropped_total"), 0)


if __name__ == "__main__":
    unittest.main()
