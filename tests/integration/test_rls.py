"""The Envoy rate-limit service (rls:) through the real sluice binary and a
real redis-server, called by a gRPC client generated from Sluice's .proto
files by python3-grpc-tools, playing Envoy: the RateLimitRequests its
rate_limits actions produce (remote address, request headers, generic key,
header value match). Counts are exact across several instances on one
Redis, a call is all or nothing, envoyproxy/ratelimit's own configuration
format loads unchanged and keeps its meaning, and bad calls get their
documented gRPC status while the service goes on.
"""

import json
import os
import signal
import socket
import struct
import threading
import unittest

from harness import (gateway_config, make_ca, make_server_cert, metric_sum, redis_call,
                     request, wait_redis_ready, wait_until)
from test_ratelimit import RateLimitTestCase
from testkit.h2client import H2Client
from testkit.ports import free_port
from testkit.rls_client import (RlsClient, generate_stubs, generic_key, header_value_match,
                                remote_address, request_header)

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "rls",
                       "envoyproxy-example.yaml")
MINUTE, HOUR = 2, 3

EDGE = {"domain": "edge", "descriptors": [
    {"key": "remote_address", "rate_limit": {"unit": "minute", "requests_per_unit": 5}},
    {"key": "generic_key", "value": "checkout",
     "descriptors": [{"key": "user", "rate_limit": {"unit": "hour", "requests_per_unit": 3}}]},
    {"key": "header_match", "value": "bots",
     "rate_limit": {"unit": "minute", "requests_per_unit": 2}},
]}


class RlsCase(RateLimitTestCase):
    def setUp(self):
        super().setUp()
        try:
            import grpc  # noqa: F401
            import grpc_tools  # noqa: F401
        except ImportError:
            self.skipTest("python3-grpcio or python3-grpc-tools not installed")
        generate_stubs(os.path.join(self.workdir, "stubs"))

    def start_rls(self, name="sluice", rls=None, **sections):
        settings = {"listen": f"127.0.0.1:{free_port()}", "domains": [EDGE],
                    "config_files": [FIXTURE], **(rls or {})}
        config = gateway_config(
            {"echo": [self.echo.address]}, [],
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 500},
            rls=settings, **sections)
        config["routes"] = [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}]
        gw = self.start_sluice(config, name=name)
        wait_redis_ready(gw)
        gw.rls_port = int(settings["listen"].rsplit(":", 1)[1])
        return gw

    def client(self, gw, **options):
        client = RlsClient(gw.rls_port, **options)
        self.addCleanup(client.close)
        return client


class DecisionTest(RlsCase):
    def test_envoy_actions_are_limited_by_their_rules(self):
        gw = self.start_rls()
        c = self.client(gw)
        codes = [c.call("edge", [[remote_address("10.0.0.1")]]).overall_code for _ in range(7)]
        self.assertEqual(codes, [c.OK] * 5 + [c.OVER_LIMIT] * 2)
        # Another address has its own bucket; a status says what limits it.
        r = c.call("edge", [[remote_address("10.0.0.2")]])
        s = r.statuses[0]
        self.assertEqual((r.overall_code, s.code), (c.OK, c.OK))
        self.assertEqual((s.current_limit.requests_per_unit, s.current_limit.unit), (5, MINUTE))
        self.assertEqual(s.limit_remaining, 4)
        self.assertTrue(0 < s.duration_until_reset.seconds + s.duration_until_reset.nanos / 1e9
                        <= 60)
        # Nested: the generic key, then the user's request header.
        for i in range(3):
            self.assertEqual(c.call("edge", [[generic_key("checkout"),
                                              request_header("user", "ann")]]).overall_code,
                             c.OK, i)
        self.assertEqual(c.call("edge", [[generic_key("checkout"),
                                          request_header("user", "ann")]]).overall_code,
                         c.OVER_LIMIT)
        # A header value match, and a descriptor no rule limits (OK, no limit).
        self.assertEqual([c.call("edge", [[header_value_match("bots")]]).overall_code
                          for _ in range(3)], [c.OK, c.OK, c.OVER_LIMIT])
        r = c.call("edge", [[generic_key("other")]])
        self.assertEqual((r.overall_code, r.statuses[0].HasField("current_limit")), (c.OK, False))
        self.assertEqual(metric_sum(gw, "sluice_rls_calls_total", domain="edge",
                                    code="over_limit"), 4)

    def test_a_call_is_all_or_nothing(self):
        gw = self.start_rls()
        c = self.client(gw)
        for _ in range(2):
            c.call("edge", [[header_value_match("bots")]])
        # The bots rule is exhausted: the call is over the limit, and the
        # address's bucket in it was not debited.
        r = c.call("edge", [[remote_address("10.9.9.9")], [header_value_match("bots")]])
        self.assertEqual(r.overall_code, c.OVER_LIMIT)
        self.assertEqual([s.code for s in r.statuses], [c.OK, c.OVER_LIMIT])
        r = c.call("edge", [[remote_address("10.9.9.9")]])
        self.assertEqual(r.statuses[0].limit_remaining, 4)

    def test_hits_addend_of_the_call_and_of_a_descriptor(self):
        gw = self.start_rls()
        c = self.client(gw)
        r = c.call("edge", [[remote_address("10.1.1.1")]], hits=3)
        self.assertEqual(r.statuses[0].limit_remaining, 2)
        r = c.call("edge", [[remote_address("10.1.1.1")]], hits=3)
        self.assertEqual(r.overall_code, c.OVER_LIMIT)
        # 2^32 - 1 hits: over any limit, nothing debited.
        r = c.call("edge", [[remote_address("10.1.1.2")]], hits=2**32 - 1)
        self.assertEqual(r.overall_code, c.OVER_LIMIT)
        # A descriptor's own hits_addend is 64 bits: 2^32 is over the limit too.
        r = c.call("edge", [[remote_address("10.1.1.2")]], descriptor_hits=[2**32])
        self.assertEqual(r.overall_code, c.OVER_LIMIT)
        r = c.call("edge", [[remote_address("10.1.1.2")]], descriptor_hits=[0])
        self.assertEqual((r.overall_code, r.statuses[0].limit_remaining), (c.OK, 5))

    def test_several_instances_on_one_redis_admit_exactly_the_limit(self):
        gateways = [self.start_rls(name=f"sluice-{i}") for i in range(3)]
        results = []
        lock = threading.Lock()

        def hammer(gw):
            c = RlsClient(gw.rls_port)
            try:
                for _ in range(20):
                    code = c.call("rl", [[("files", "files/a.pdf")]]).overall_code
                    with lock:
                        results.append(code)
            finally:
                c.close()

        threads = [threading.Thread(target=hammer, args=(gw,)) for gw in gateways for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        ok = RlsClient(gateways[0].rls_port)
        self.addCleanup(ok.close)
        self.assertEqual(len(results), 120)
        self.assertEqual(results.count(ok.OK), 10)  # files/* shares 10 per hour


class EnvoyproxyFormatTest(RlsCase):
    """tests/fixtures/rls/envoyproxy-example.yaml, envoyproxy/ratelimit's format."""

    def test_its_rules_mean_what_they_mean_there(self):
        gw = self.start_rls()
        c = self.client(gw)

        def codes(descriptors, n):
            return [c.call("rl", descriptors).overall_code for _ in range(n)]

        self.assertEqual(codes([[("foo", "x")]], 3), [c.OK, c.OK, c.OVER_LIMIT])
        # The most specific value wins; a banned value has 0 per minute.
        self.assertEqual(codes([[("foo", "x"), ("bar", "bkthomps")]], 2),
                         [c.OK, c.OVER_LIMIT])
        self.assertEqual(codes([[("foo", "x"), ("bar", "banned")]], 1), [c.OVER_LIMIT])
        self.assertEqual(codes([[("foo", "x"), ("bar", "other")]], 4),
                         [c.OK, c.OK, c.OK, c.OVER_LIMIT])
        # shadow_mode: counted, never over; unlimited: never asks Redis.
        self.assertEqual(codes([[("foo", "x"), ("baz", "shady")]], 5), [c.OK] * 5)
        r = c.call("rl", [[("foo", "x"), ("bay", "y")]])
        self.assertEqual(r.statuses[0].limit_remaining, 2**32 - 1)
        self.assertGreaterEqual(metric_sum(gw, "sluice_rls_descriptors_total", domain="rl",
                                           result="shadow_over_limit"), 2)
        # replaces: with category/account in the call, bkthomps's limit is not applied.
        r = c.call("rl", [[("category", "account")], [("foo", "y"), ("bar", "bkthomps")]])
        self.assertEqual(r.overall_code, c.OK)
        self.assertFalse(r.statuses[1].HasField("current_limit"))
        # A more specific value: 0 per second for one address, 10 for the others.
        self.assertEqual(codes([[("remote_address", "50.0.0.5")]], 1), [c.OVER_LIMIT])
        self.assertEqual(codes([[("remote_address", "50.0.0.6")]], 1), [c.OK])
        # Wildcards in the middle of a value.
        self.assertEqual(c.call("rl", [[("path", "/api/7/action")]]).statuses[0]
                         .current_limit.requests_per_unit, 20)
        self.assertFalse(c.call("rl", [[("path", "/api/7/other")]]).statuses[0]
                         .HasField("current_limit"))
        # detailed_metric: the value is in the rule's label.
        c.call("rl", [[("unspec", "v1")]])
        self.assertEqual(metric_sum(gw, "sluice_rls_descriptors_total", rule="rl.unspec_v1"), 1)

    def test_a_limit_the_descriptor_carries_is_honoured(self):
        gw = self.start_rls()
        c = self.client(gw)
        got = [c.call("edge", [[generic_key("free")]], override=[(2, HOUR)]).overall_code
               for _ in range(3)]
        self.assertEqual(got, [c.OK, c.OK, c.OVER_LIMIT])
        # Not for a domain Sluice does not know: nothing is limited there.
        got = [c.call("nowhere", [[generic_key("free")]], override=[(1, HOUR)]).overall_code
               for _ in range(3)]
        self.assertEqual(got, [c.OK] * 3)


class BadCallTest(RlsCase):
    def status(self, fn):
        import grpc
        try:
            fn()
        except grpc.RpcError as e:
            return e.code()
        return grpc.StatusCode.OK

    def test_bad_calls_get_their_status_and_the_service_goes_on(self):
        import grpc
        gw = self.start_rls(rls={"max_descriptors": 64})
        c = self.client(gw)
        self.assertEqual(self.status(lambda: c.call("", [[remote_address("1.1.1.1")]])),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(self.status(lambda: c.call("edge", [])),
                         grpc.StatusCode.INVALID_ARGUMENT)
        many = [[remote_address(f"10.0.{i // 250}.{i % 250}")] for i in range(10000)]
        self.assertEqual(self.status(lambda: c.call("edge", many)),
                         grpc.StatusCode.INVALID_ARGUMENT)
        self.assertEqual(self.status(lambda: c.call("edge", [[]])),
                         grpc.StatusCode.INVALID_ARGUMENT)
        # A message over rls.max_message_bytes (1 MiB).
        huge = [[("remote_address", "x" * (2 << 20))]]
        self.assertEqual(self.status(lambda: c.call("edge", huge)),
                         grpc.StatusCode.RESOURCE_EXHAUSTED)
        # An unknown domain limits nothing.
        r = c.call("nowhere", [[remote_address("1.1.1.1")]])
        self.assertEqual(r.overall_code, c.OK)
        # A deadline of a millisecond while Redis is stopped: the deadline's
        # answer; the next call, Redis back, is decided.
        self.redis.signal(signal.SIGSTOP)
        try:
            self.assertEqual(self.status(lambda: c.call("edge", [[remote_address("9.9.9.9")]],
                                                        timeout=0.001)),
                             grpc.StatusCode.DEADLINE_EXCEEDED)
        finally:
            self.redis.signal(signal.SIGCONT)
        wait_until(lambda: c.call("edge", [[remote_address("9.9.9.8")]]).overall_code == c.OK,
                   timeout=10)
        self.assertEqual(metric_sum(gw, "sluice_rls_calls_total", code="ok") >= 2, True)

    def test_another_method_or_a_compressed_message_is_refused(self):
        import grpc
        gw = self.start_rls()
        channel = grpc.insecure_channel(f"127.0.0.1:{gw.rls_port}")
        self.addCleanup(channel.close)
        other = channel.unary_unary("/envoy.service.ratelimit.v3.RateLimitService/Other",
                                    request_serializer=lambda b: b,
                                    response_deserializer=lambda b: b)
        self.assertEqual(self.status(lambda: other(b"", timeout=5)),
                         grpc.StatusCode.UNIMPLEMENTED)
        # A message whose frame says it is compressed (grpc-encoding gzip).
        c = self.client(gw)
        message = c.request("edge", [[remote_address("1.2.3.4")]]).SerializeToString()
        h2 = H2Client(gw.rls_port)
        self.addCleanup(h2.close)
        answer = h2.request("POST", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                            headers=[("content-type", "application/grpc"), ("te", "trailers"),
                                     ("grpc-encoding", "gzip")],
                            body=b"\x01" + struct.pack(">I", len(message)) + message)
        self.assertEqual(dict(answer.headers).get("grpc-status"), "12")
        # Not gRPC at all, and a frame that is not one message.
        answer = h2.request("POST", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                            headers=[("content-type", "application/json")], body=b"{}")
        self.assertEqual(dict(answer.headers).get("grpc-status"), "3")
        answer = h2.request("POST", "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
                            headers=[("content-type", "application/grpc")],
                            body=b"\x00\x00\x00\x00\x09abc")
        self.assertEqual(dict(answer.headers).get("grpc-status"), "3")
        self.assertEqual(c.call("edge", [[remote_address("1.2.3.4")]]).overall_code, c.OK)


class ConnectionTest(RlsCase):
    def test_idle_connections_get_goaway_and_the_count_is_bounded(self):
        gw = self.start_rls(rls={"max_connections": 2}, server={"idle_timeout_ms": 500})
        first, second = H2Client(gw.rls_port), H2Client(gw.rls_port)
        self.addCleanup(first.close)
        self.addCleanup(second.close)
        for held in (first, second):  # each answered once: both are served now
            answer = held.request("POST", "/other", headers=[("content-type", "application/grpc")])
            self.assertEqual(dict(answer.headers).get("grpc-status"), "12")
        # A third connection is closed as it is accepted.
        third = socket.create_connection(("127.0.0.1", gw.rls_port), timeout=5)
        self.addCleanup(third.close)
        self.assertEqual(third.recv(100), b"")
        # Idle: GOAWAY, then the close; a call is answered on a new connection.
        self.assertIsNotNone(first.wait_goaway(timeout=10))
        c = self.client(gw)
        self.assertEqual(c.call("edge", [[remote_address("4.4.4.4")]]).overall_code, c.OK)


class AuditTest(RlsCase):
    def test_denials_reach_the_stream_and_the_most_limited_view(self):
        gw = self.start_rls(audit={"redis_stream": "sluice:denials"})
        c = self.client(gw)
        for _ in range(4):
            c.call("edge", [[header_value_match("bots")]])
        wait_until(lambda: metric_sum(gw, "sluice_audit_appended_total") >= 2, 10,
                   message="two denials appended")
        entries = redis_call(self.redis.port, "XRANGE", "sluice:denials", "-", "+")
        fields = entries[0][1]
        doc = {fields[i].decode(): fields[i + 1].decode() for i in range(0, len(fields), 2)}
        self.assertEqual((doc["route"], doc["limit"]), ("rls:edge", "edge.header_match_bots"))
        self.assertRegex(doc["consumer"], r"^[0-9a-f]{32}$")  # the bucket's fingerprint

        def top():
            status, _, body = request(gw.admin_port, "GET",
                                      "/ratelimit/top?limit=edge.header_match_bots&window_s=60")
            return status == 200 and [k["denials"] for k in json.loads(body)["keys"]] == [2]
        wait_until(top, 10, message="the denials in the most-limited view")


class FailureTest(RlsCase):
    def test_redis_down_answers_as_configured(self):
        import grpc
        answers = {}
        for mode in ("error", "open", "closed"):
            gw = self.start_rls(name=f"sluice-{mode}", rls={"on_redis_failure": mode})
            answers[mode] = gw
        self.redis.stop()
        for mode, gw in answers.items():
            c = self.client(gw)
            try:
                code = c.call("edge", [[remote_address("7.7.7.7")]], timeout=5).overall_code
            except grpc.RpcError as e:
                code = e.code()
            expected = {"error": grpc.StatusCode.UNAVAILABLE, "open": c.OK,
                        "closed": c.OVER_LIMIT}[mode]
            self.assertEqual(code, expected, mode)
        self.assertEqual(metric_sum(answers["error"], "sluice_rls_calls_total", code="error"), 1)


class TlsTest(RlsCase):
    def test_grpc_over_tls(self):
        ca = make_ca(self.workdir, "ca")
        cert, key = make_server_cert(self.workdir, "ca", "rls", dns=("rls.test",))
        gw = self.start_rls(rls={"tls": {"cert_file": cert, "key_file": key}})
        c = self.client(gw, tls_ca=ca, server_name="rls.test")
        self.assertEqual(c.call("edge", [[remote_address("5.5.5.5")]]).overall_code, c.OK)


if __name__ == "__main__":
    unittest.main()
