"""/metrics of the real binary: a valid exposition with every family and a zero
series for every label combination the config makes known, from the first
scrape (before any traffic) and after a reload; routes x status codes seen;
sluice_build_info; the process_* metrics; and docs/metrics.md describing
exactly the families the binary exposes.
"""

import math
import os
import re
import subprocess
import time
import unittest

from exposition import (documented_families, names_mentioned_in_docs, family_of_name,
                        parse_exposition, promtool, source_metric_names)
from harness import (ProcessTestCase, gateway_config, metric_sum, request, run_cli,
                     wait_redis_ready, wait_until)

TINY = 0.001


def limit(key, capacity=100, rate=TINY, **extra):
    return {"key": key, "capacity": capacity, "refill_per_second": rate, **extra}


class MetricsCase(ProcessTestCase):
    """Routes: keyed (API key + IP limits, fail open), tenant (header and query
    key, fail closed), free (no limits). Upstreams: main (sluice-echo) and spare."""

    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()

    def routes(self, extra=()):
        return [
            {"name": "keyed", "match": {"path_prefix": "/keyed"}, "upstream": "main",
             "limits": ["per_key", "per_ip"]},
            {"name": "tenant", "match": {"path_prefix": "/tenant"}, "upstream": "main",
             "limits": ["per_tenant"], "on_redis_failure": "closed"},
            {"name": "free", "match": {"path_prefix": "/free"}, "upstream": "spare"},
            *extra]

    def config(self, gateway=None, extra_routes=(), extra_limits=None):
        ports = {} if gateway is None else {"port": gateway.port,
                                            "admin_port": gateway.admin_port}
        return gateway_config(
            {"main": [self.echo.address], "spare": [self.echo.address]},
            self.routes(extra_routes), **ports,
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0"},
            api_keys={"header": "Authorization"},
            limits={"per_key": limit("api_key"), "per_ip": limit("ip"),
                    "per_tenant": limit(["header:X-Tenant", "query:tenant"]),
                    **(extra_limits or {})})

    def scrape(self, gateway):
        text = gateway.metrics()
        return text, parse_exposition(text)


class FreshScrapeTest(MetricsCase):
    def test_first_scrape_is_valid_and_has_zero_series_for_every_known_label_set(self):
        gw = self.start_sluice(self.config())  # only /healthz was asked: no traffic yet
        text, families = self.scrape(gw)
        for family in families.values():
            self.assertIsNotNone(family.help, f"{family.name}: no # HELP")
            self.assertIsNotNone(family.type, f"{family.name}: no # TYPE")
            self.assertTrue(family.help.strip(), f"{family.name}: empty HELP")

        def has(name, sample=None, **labels):
            family = families.get(name)
            self.assertIsNotNone(family, f"family {name} missing")
            series = family.series(sample)
            want = {k: str(v) for k, v in labels.items()}
            values = [value for got, value in series if got == want]
            self.assertEqual(len(values), 1, f"{sample or name}{want} not exposed once; "
                                             f"exposed: {[s for s, _ in series]}")
            return values[0]

        zero = {
            "sluice_ratelimit_decisions_total": [
                {"route": r, "limit": lim, "decision": d}
                for r, lims in (("keyed", ("per_key", "per_ip")), ("tenant", ("per_tenant",)))
                for lim in lims for d in ("allowed", "limited")],
            "sluice_ratelimit_fail_open_total": [{"route": "keyed"}],
            "sluice_ratelimit_fail_closed_total": [{"route": "tenant"}],
            "sluice_ratelimit_missing_key_total": [
                {"route": "keyed", "source": "api_key"}, {"route": "tenant", "source": "header"},
                {"route": "tenant", "source": "query"}],
            "sluice_ratelimit_rejected_total": [
                {"route": "keyed", "reason": "duplicate_identity"},
                {"route": "keyed", "reason": "malformed_authorization"},
                {"route": "tenant", "reason": "duplicate_identity"}],
            "sluice_redis_errors_total": [
                {"kind": k} for k in ("timeout", "connect", "protocol", "server", "noscript")],
            "sluice_upstream_requests_total": [
                {"upstream": u, "outcome": o} for u in ("main", "spare")
                for o in ("ok", "connect_error", "timeout", "reset", "protocol_error",
                          "connection_limit")],
            "sluice_upstream_connections_total": [{"upstream": "main"}, {"upstream": "spare"}],
            "sluice_accept_errors_total": [{"listener": "server"}, {"listener": "admin"}],
            "sluice_config_reloads_total": [{"result": "ok"}, {"result": "error"}],
            "sluice_internal_errors_total": [{}],
            "sluice_upstream_retries_total": [{}],
            "sluice_connections_rejected_total": [{}],
            "sluice_connections_shed_total": [{}],
        }
        for name, label_sets in zero.items():
            self.assertEqual(families[name].type, "counter", name)
            for labels in label_sets:
                self.assertEqual(has(name, **labels), 0, f"{name}{labels}")
        # Histograms: an empty histogram per route, and the decision latency one.
        for route in ("keyed", "tenant", "free"):
            self.assertEqual(has("sluice_http_request_duration_seconds",
                                 "sluice_http_request_duration_seconds_count", route=route), 0)
            self.assertEqual(has("sluice_http_request_duration_seconds",
                                 "sluice_http_request_duration_seconds_bucket", route=route,
                                 le="+Inf"), 0)
        self.assertEqual(has("sluice_ratelimit_check_duration_seconds",
                             "sluice_ratelimit_check_duration_seconds_count"), 0)
        # Nothing the config cannot produce: no fail-closed series for a fail-open route,
        # no rate-limit series for the unlimited route.
        self.assertNotIn({"route": "keyed"},
                         [lb for lb, _ in families["sluice_ratelimit_fail_closed_total"].series()])
        for name in zero:
            if name.startswith("sluice_ratelimit_"):
                routes = {lb.get("route") for lb, _ in families[name].series()}
                self.assertNotIn("free", routes, name)
        # Status codes are not known before the first request.
        self.assertEqual(families["sluice_http_requests_total"].type, "counter")
        self.assertEqual(families["sluice_http_requests_total"].series(), [])

    def test_process_metrics_are_plausible(self):
        started = time.time()
        gw = self.start_sluice(self.config())
        _, families = self.scrape(gw)
        types = {"process_resident_memory_bytes": "gauge", "process_open_fds": "gauge",
                 "process_max_fds": "gauge", "process_cpu_seconds_total": "counter",
                 "process_start_time_seconds": "gauge"}
        values = {}
        for name, kind in types.items():
            self.assertIn(name, families)
            self.assertEqual(families[name].type, kind, name)
            [(labels, value)] = families[name].series()
            self.assertEqual(labels, {}, name)
            values[name] = value
        self.assertGreater(values["process_resident_memory_bytes"], 1 << 20)
        self.assertLess(values["process_resident_memory_bytes"], 1 << 31)
        # At least the two listeners and a Redis connection per worker.
        self.assertGreater(values["process_open_fds"], 3)
        self.assertLess(values["process_open_fds"], values["process_max_fds"])
        fds_now = len(os.listdir(f"/proc/{gw.pid}/fd"))
        self.assertLessEqual(abs(values["process_open_fds"] - fds_now), 4,
                             f"process_open_fds {values['process_open_fds']} vs /proc: {fds_now}")
        with open(f"/proc/{gw.pid}/limits") as f:
            soft = re.search(r"^Max open files\s+(\d+)", f.read(), re.M).group(1)
        self.assertEqual(values["process_max_fds"], float(soft))
        self.assertGreaterEqual(values["process_cpu_seconds_total"], 0)
        self.assertLess(values["process_cpu_seconds_total"], 60)
        # Started after this test began (clock ticks are 10 ms) and within the last minute.
        start = values["process_start_time_seconds"]
        self.assertGreaterEqual(start, started - 1.0)
        self.assertLessEqual(start, time.time() + 1.0)
        self.assertGreater(start, time.time() - 60)

        # CPU time is a counter that moves with work.
        for _ in range(300):
            request(gw.port, "GET", "/free/x")
        _, later = self.scrape(gw)
        self.assertGreater(later["process_cpu_seconds_total"].series()[0][1],
                           values["process_cpu_seconds_total"])

    def test_build_info_carries_the_version_sluice_prints(self):
        out = run_cli(["--version"])
        self.assertEqual(out.returncode, 0, out.stderr)
        m = re.fullmatch(r"sluice (\S+)\n", out.stdout)
        self.assertIsNotNone(m, out.stdout)
        gw = self.start_sluice(self.config())
        _, families = self.scrape(gw)
        self.assertEqual(families["sluice_build_info"].type, "gauge")
        self.assertEqual(families["sluice_build_info"].series(), [({"version": m.group(1)}, 1.0)])

    def test_promtool_accepts_the_exposition(self):
        tool = promtool(self)
        gw = self.start_sluice(self.config())
        wait_redis_ready(gw)
        for target in ("/keyed/a", "/tenant/a?tenant=t", "/free/a", "/nowhere"):
            request(gw.port, "GET", target)
        text, _ = self.scrape(gw)
        result = subprocess.run([tool, "check", "metrics"], input=text, capture_output=True,
                                text=True, timeout=60)
        self.assertEqual(result.returncode, 0, f"{result.stdout}\n{result.stderr}")
        self.assertEqual(result.stdout.strip(), "", result.stdout)


class SeriesAfterTrafficTest(MetricsCase):
    def test_every_route_gets_every_status_code_seen(self):
        gw = self.start_sluice(self.config())
        wait_redis_ready(gw)
        self.assertEqual(request(gw.port, "GET", "/keyed/a")[0], 200)
        self.assertEqual(request(gw.port, "GET", "/nowhere")[0], 404)

        def requests_by_route_and_code():
            _, families = self.scrape(gw)
            return {(lb["route"], lb["code"]): v
                    for lb, v in families["sluice_http_requests_total"].series()}
        # A request is counted once its response is written, which a client can
        # see a moment before the worker records it.
        wait_until(lambda: requests_by_route_and_code().get(("", "404")) == 1,
                   message="the unmatched request counted")
        series = requests_by_route_and_code()
        self.assertEqual(series[("keyed", "200")], 1)
        self.assertEqual(series[("", "404")], 1)
        for route in ("keyed", "tenant", "free"):
            for code in ("200", "404"):
                self.assertIn((route, code), series)
        self.assertEqual(series[("free", "200")], 0)
        self.assertEqual(series[("tenant", "404")], 0)
        self.assertNotIn(("", "200"), series)  # the unmatched "route" is not a config route

    def test_reload_adds_zero_series_for_new_routes_and_drops_removed_ones(self):
        gw = self.start_sluice(self.config())
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_fail_open_total", route="keyed"), 0)
        extra = [{"name": "late", "match": {"path_prefix": "/late"}, "upstream": "main",
                  "limits": ["per_late"]}]
        config = self.config(gw, extra_routes=extra,
                             extra_limits={"per_late": limit("header:X-Late")})
        config["routes"] = [r for r in config["routes"] if r["name"] != "tenant"]
        gw.reload(config)
        wait_until(lambda: gw.metric("sluice_config_reloads_total", result="ok") == 1, 5,
                   message='sluice_config_reloads_total{result="ok"} == 1')
        _, families = self.scrape(gw)

        def labels_of(name):
            return [lb for lb, _ in families[name].series()]
        self.assertIn({"route": "late", "limit": "per_late", "decision": "limited"},
                      labels_of("sluice_ratelimit_decisions_total"))
        self.assertIn({"route": "late"}, labels_of("sluice_ratelimit_fail_open_total"))
        self.assertIn({"route": "late", "source": "header"},
                      labels_of("sluice_ratelimit_missing_key_total"))
        self.assertIn({"route": "late"}, [lb for lb, _ in families[
            "sluice_http_request_duration_seconds"].series(
                "sluice_http_request_duration_seconds_count")])
        # The removed route's zero series are gone; its counted series would stay.
        for name in ("sluice_ratelimit_fail_closed_total", "sluice_ratelimit_decisions_total"):
            self.assertNotIn("tenant", {lb.get("route") for lb in labels_of(name)}, name)


class DocsTest(MetricsCase):
    def test_docs_describe_exactly_the_families_the_binary_exposes(self):
        gw = self.start_sluice(self.config())
        wait_redis_ready(gw)
        _, families = self.scrape(gw)
        exposed = set(families)
        documented = documented_families()
        self.assertEqual(sorted(exposed - documented), [],
                         "exposed by sluice but not described in docs/metrics.md")
        self.assertEqual(sorted(documented - exposed), [],
                         "described in docs/metrics.md but not exposed by sluice")
        # Every metric name mentioned anywhere in the doc (examples included) exists.
        mentioned = {family_of_name(n, families) for n in names_mentioned_in_docs()}
        self.assertEqual(sorted(mentioned - exposed), [],
                         "docs/metrics.md mentions metrics sluice does not expose")
        # Families named in the sources (some only appear after an event) are documented
        # and, thanks to zero series, exposed from the start.
        in_source = source_metric_names()
        self.assertIn("sluice_http_requests_total", in_source)
        self.assertEqual(sorted(in_source - documented), [],
                         "families in the C++ sources missing from docs/metrics.md")
        self.assertEqual(sorted(in_source - exposed), [],
                         "families in the C++ sources not exposed by a fresh binary")


if __name__ == "__main__":
    unittest.main()
