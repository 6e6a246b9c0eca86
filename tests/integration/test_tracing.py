"""OpenTelemetry spans (tracing:) through the real sluice binary, a real
redis-server, sluice-echo and the test kit's OTLP receiver, which decodes each
export by the OTLP JSON encoding and refuses what breaks it. A recorded
request gives a server span, a "ratelimit" span and an "upstream" span per
attempt, whose parentage, timings and attributes are checked; the upstream
sees Sluice's span as its parent. Sampling follows the request's traceparent
or the ratio. A collector that is down, slow, refusing, asking to retry later
or closing mid-batch costs the requests nothing, and the queue stays bounded.
"""

import json
import signal
import unittest

from harness import (echo_header, gateway_config, limit, make_ca, make_server_cert, metric_sum,
                     route, wait_redis_ready, wait_until)
from test_ratelimit import RateLimitTestCase
from testkit.h2client import H2Client
from testkit.http import request
from testkit.otlp_receiver import OtlpReceiver
from testkit.ports import free_port

PARENT = "00f067aa0ba902b7"
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def traceparent(trace=TRACE, parent=PARENT, flags="01"):
    return f"00-{trace}-{parent}-{flags}"


class TracingCase(RateLimitTestCase):
    def setUp(self):
        super().setUp()
        self.receiver = OtlpReceiver()
        self.addCleanup(self.receiver.stop)

    def start_traced(self, routes=None, server=None, **tracing):
        settings = {"endpoint": self.receiver.url, "flush_interval_ms": 50,
                    "resource_attributes": {"deployment.environment": "test"}, **tracing}
        routes = routes or [route("api", "/api", ["per_ip"]), route("open", "/open", [])]
        return self.start_gateway(routes, {"per_ip": limit("ip", 1000)},
                                  server=server, tracing=settings)

    def wait_spans(self, trace_id, n):
        wait_until(lambda: len(self.receiver.spans_of(trace_id)) >= n, timeout=10,
                   message=f"{n} spans of trace {trace_id}")
        spans = self.receiver.spans_of(trace_id)
        self.assertEqual(len(spans), n, [s["name"] for s in spans])
        return spans


class SpanTest(TracingCase):
    def test_a_limited_route_gives_three_spans_in_one_tree(self):
        gw = self.start_traced()
        status, _, body = request(gw.port, "GET", "/api/items?key=secret",
                                  headers={"traceparent": traceparent(), "tracestate": "a=1"})
        self.assertEqual(status, 200)
        spans = self.wait_spans(TRACE, 3)
        by_kind = {s["kind"]: s for s in spans}
        server, decision, upstream = by_kind[2], by_kind[1], by_kind[3]
        # Parentage: the client's span, then Sluice's, then its two children.
        self.assertEqual(server["parent"], PARENT)
        self.assertEqual(decision["parent"], server["spanId"])
        self.assertEqual(upstream["parent"], server["spanId"])
        self.assertEqual(len({s["spanId"] for s in spans}), 3)
        # The upstream sees Sluice's span as its parent, the tracestate kept.
        doc = json.loads(body)
        self.assertEqual(echo_header(doc, "traceparent"),
                         [traceparent(parent=server["spanId"])])
        self.assertEqual(echo_header(doc, "tracestate"), ["a=1"])
        # Timings: the children lie within the server span, the decision first.
        for child in (decision, upstream):
            self.assertGreaterEqual(child["start"], server["start"])
            self.assertLessEqual(child["end"], server["end"])
        self.assertLessEqual(decision["end"], upstream["start"])
        # Attributes.
        a = server["attributes"]
        self.assertEqual(server["name"], "GET api")
        self.assertEqual(a["http.request.method"], "GET")
        self.assertEqual(a["http.route"], "api")
        self.assertEqual(a["url.path"], "/api/items")  # the query (a key) is left out
        self.assertEqual(a["http.response.status_code"], 200)
        self.assertEqual(a["network.protocol.version"], "1.1")
        self.assertEqual(a["client.address"], "127.0.0.1")
        d = decision["attributes"]
        self.assertEqual(decision["name"], "ratelimit")
        self.assertEqual(d["sluice.ratelimit.limits"], ["per_ip"])
        self.assertEqual(d["sluice.ratelimit.decision"], "allowed")
        self.assertEqual(d["sluice.ratelimit.answered_by"], "redis")
        self.assertFalse(d["sluice.ratelimit.local"])
        self.assertGreater(d["sluice.ratelimit.redis_ms"], 0)
        u = upstream["attributes"]
        self.assertEqual(upstream["name"], "upstream echo")
        self.assertEqual(f'{u["server.address"]}:{u["server.port"]}', self.echo.address)
        self.assertEqual(u["http.response.status_code"], 200)
        self.assertEqual(u["sluice.upstream.outcome"], "ok")
        self.assertNotIn("http.request.resend_count", u)
        r = server["resource"]
        self.assertEqual(r["service.name"], "sluice")
        self.assertEqual(r["deployment.environment"], "test")
        self.assertIn(":", r["service.instance.id"])
        self.assertEqual(self.receiver.errors, [])

    def test_a_denial_and_a_failed_upstream_are_errors_where_they_happened(self):
        routes = [route("tight", "/tight", ["one"]), route("dead", "/dead", [], upstream="dead")]
        config = gateway_config(
            {"echo": [self.echo.address], "dead": [f"127.0.0.1:{free_port()}"]}, routes,
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0"},
            limits={"one": limit("ip", 1)},
            tracing={"endpoint": self.receiver.url, "flush_interval_ms": 50})
        gw = self.start_sluice(config)
        wait_redis_ready(gw)
        trace2 = "5" * 32
        self.assertEqual(request(gw.port, "GET", "/tight/a")[0], 200)
        self.assertEqual(request(gw.port, "GET", "/tight/a",
                                 headers={"traceparent": traceparent(trace2)})[0], 429)
        server, decision = sorted(self.wait_spans(trace2, 2), key=lambda s: s["kind"],
                                  reverse=True)
        self.assertEqual(server["attributes"]["http.response.status_code"], 429)
        self.assertNotIn("status", server)  # a 4xx is the client's, not the server's error
        self.assertEqual(decision["attributes"]["sluice.ratelimit.decision"], "limited")
        self.assertEqual(decision["attributes"]["sluice.ratelimit.limit"], "one")
        trace3 = "6" * 32
        self.assertEqual(request(gw.port, "GET", "/dead/x",
                                 headers={"traceparent": traceparent(trace3)})[0], 502)
        server, upstream = sorted(self.wait_spans(trace3, 2), key=lambda s: s["kind"])
        self.assertEqual(server["status"]["code"], 2)
        self.assertEqual(upstream["status"]["code"], 2)
        self.assertEqual(upstream["attributes"]["sluice.upstream.outcome"], "connect_error")
        self.assertEqual(upstream["attributes"]["error.type"], "connect_error")

    def test_http2_requests_are_traced_as_http2(self):
        gw = self.start_traced(server={"http2": {"enabled": True}})
        client = H2Client(gw.port)
        self.addCleanup(client.close)
        response = client.request("GET", "/open/x",
                                  headers=[("traceparent", traceparent("7" * 32))])
        self.assertEqual(response.status, 200)
        server, upstream = sorted(self.wait_spans("7" * 32, 2), key=lambda s: s["kind"])
        self.assertEqual(server["attributes"]["network.protocol.version"], "2")
        self.assertEqual(upstream["attributes"]["sluice.upstream.protocol"], "http1")


class CollectorTlsTest(TracingCase):
    def test_spans_go_over_tls_with_the_configured_headers(self):
        ca = make_ca(self.workdir, "ca")
        self.receiver.stop()
        self.receiver = OtlpReceiver(tls=make_server_cert(self.workdir, "ca", "collector"))
        self.addCleanup(self.receiver.stop)
        gw = self.start_traced(tls={"ca_file": ca},
                               headers={"Authorization": "Bearer collector-token"})
        request(gw.port, "GET", "/open/x", headers={"traceparent": traceparent("9" * 32)})
        self.wait_spans("9" * 32, 2)
        self.assertEqual(self.receiver.headers[0]["Authorization"], "Bearer collector-token")
        self.assertTrue(self.receiver.headers[0]["User-Agent"].startswith("sluice/"))

    def test_a_collector_whose_certificate_is_not_trusted_gets_nothing(self):
        make_ca(self.workdir, "other")
        ca = make_ca(self.workdir, "ca")
        self.receiver.stop()
        self.receiver = OtlpReceiver(tls=make_server_cert(self.workdir, "other", "collector"))
        self.addCleanup(self.receiver.stop)
        gw = self.start_traced(tls={"ca_file": ca}, timeout_ms=1000)
        request(gw.port, "GET", "/open/x", headers={"traceparent": traceparent("9" * 32)})
        wait_until(lambda: metric_sum(gw, "sluice_tracing_spans_total", result="failed") >= 2,
                   timeout=20)
        self.assertEqual(self.receiver.spans, [])
        self.assertIn("TLS", gw.output_tail())


class SamplingTest(TracingCase):
    def test_the_parent_decides_and_the_ratio_decides_new_traces(self):
        gw = self.start_traced(sampling_ratio=0)
        # A sampled parent: recorded whatever the ratio.
        request(gw.port, "GET", "/open/a", headers={"traceparent": traceparent("1" * 32)})
        # An unsampled parent: not recorded; its traceparent goes upstream as sent.
        status, _, body = request(gw.port, "GET", "/open/b",
                                  headers={"traceparent": traceparent("2" * 32, flags="00")})
        self.assertEqual(echo_header(json.loads(body), "traceparent"),
                         [traceparent("2" * 32, flags="00")])
        # No traceparent at ratio 0: a new, unsampled trace.
        _, _, body = request(gw.port, "GET", "/open/c")
        started = echo_header(json.loads(body), "traceparent")[0]
        self.assertTrue(started.endswith("-00"), started)
        self.wait_spans("1" * 32, 2)
        # Every span the receiver got is of the sampled trace.
        wait_until(lambda: metric_sum(gw, "sluice_tracing_spans_total", result="exported") >= 2,
                   timeout=10)
        self.assertEqual({s["traceId"] for s in self.receiver.spans}, {"1" * 32})

    def test_at_ratio_one_a_request_without_context_starts_a_recorded_trace(self):
        gw = self.start_traced(sampling_ratio=1)
        _, _, body = request(gw.port, "GET", "/open/c")
        started = echo_header(json.loads(body), "traceparent")[0]
        _, trace, span, flags = started.split("-")
        self.assertEqual(flags, "01")
        server = [s for s in self.wait_spans(trace, 2) if s["kind"] == 2][0]
        self.assertEqual(server["spanId"], span)
        self.assertEqual(server["parent"], "")

    def test_without_parent_based_the_ratio_decides_every_trace(self):
        gw = self.start_traced(sampling_ratio=0, parent_based=False)
        for i in range(20):
            request(gw.port, "GET", "/open/a",
                    headers={"traceparent": traceparent(f"{i + 1:032x}")})
        # The ratio is 0: nothing is recorded (a recorded trace would give 2 spans).
        request(gw.port, "GET", "/open/a")
        self.assertEqual(metric_sum(gw, "sluice_tracing_spans_total"), 0)
        self.assertEqual(self.receiver.posts, 0)


class CollectorTest(TracingCase):
    """What a bad collector does to the requests (nothing) and to the spans."""

    def run_requests(self, gw, n):
        for i in range(n):
            self.assertEqual(request(gw.port, "GET", f"/open/{i}")[0], 200)

    def test_a_collector_that_holds_every_export_delays_no_request(self):
        self.receiver.behave("hold")
        gw = self.start_traced(max_batch_spans=10, max_queue_spans=100, timeout_ms=30000)
        # The first export is held; every request after it is answered all the
        # same, and the queue drops what it cannot hold.
        self.run_requests(gw, 300)
        wait_until(lambda: metric_sum(gw, "sluice_tracing_spans_total", result="dropped") > 0,
                   timeout=10)
        self.assertLessEqual(metric_sum(gw, "sluice_tracing_queue_spans"), 100)
        self.receiver.release.set()
        wait_until(lambda: metric_sum(gw, "sluice_tracing_spans_total", result="exported") > 0,
                   timeout=10)

    def test_a_dead_collector_counts_failures_and_the_gateway_serves(self):
        self.receiver.url = f"http://127.0.0.1:{free_port()}/v1/traces"
        gw = self.start_traced(timeout_ms=500)
        self.run_requests(gw, 20)
        wait_until(lambda: metric_sum(gw, "sluice_tracing_spans_total", result="failed") > 0,
                   timeout=20)
        self.assertIn("tracing:", gw.output_tail())

    def test_a_collector_asking_to_retry_later_gets_the_batch_again(self):
        self.receiver.behave("status", 429, retry_after="1", times=1)
        gw = self.start_traced()
        request(gw.port, "GET", "/open/x", headers={"traceparent": traceparent("3" * 32)})
        self.wait_spans("3" * 32, 2)
        self.assertGreaterEqual(self.receiver.posts, 2)
        self.assertEqual(metric_sum(gw, "sluice_tracing_spans_total", result="failed"), 0)

    def test_a_collector_that_refuses_or_closes_mid_batch(self):
        self.receiver.behave("status", 500)
        gw = self.start_traced(timeout_ms=1000)
        self.run_requests(gw, 5)
        wait_until(lambda: metric_sum(gw, "sluice_tracing_spans_total", result="failed") >= 10,
                   timeout=10)
        posts = self.receiver.posts
        self.assertGreaterEqual(posts, 1)
        self.receiver.behave("close")
        self.run_requests(gw, 5)
        wait_until(lambda: self.receiver.posts > posts, timeout=10)
        self.receiver.behave("ok")
        request(gw.port, "GET", "/open/x", headers={"traceparent": traceparent("4" * 32)})
        self.wait_spans("4" * 32, 2)
        self.assertEqual(self.receiver.errors, [])

    def test_spans_queued_at_shutdown_are_sent(self):
        gw = self.start_traced(flush_interval_ms=60000, max_batch_spans=1000)
        request(gw.port, "GET", "/open/x", headers={"traceparent": traceparent("8" * 32)})
        self.assertEqual(self.receiver.spans_of("8" * 32), [])
        gw.signal(signal.SIGTERM)
        gw.wait(timeout=20)
        self.assertEqual(len(self.receiver.spans_of("8" * 32)), 2)


if __name__ == "__main__":
    unittest.main()
