"""The operator kit in deploy/: the Prometheus alerting rules pass `promtool check
rules` and their unit tests (`promtool test rules`), every metric the rules
and the Grafana dashboard query is described in docs/metrics.md and exposed by
a freshly started binary, and every family docs/metrics.md describes or the
binary exposes has a dashboard panel (NOT_ON_THE_DASHBOARD lists the
exceptions, each with its reason).
"""

import json
import os
import re
import subprocess
import unittest

from exposition import (documented_families, family_of_name, metric_names_in,
                        parse_exposition, promtool)
from harness import SOURCE_DIR, ProcessTestCase, gateway_config

RULES_DIR = os.path.join(SOURCE_DIR, "deploy", "prometheus")
RULES = os.path.join(RULES_DIR, "sluice-alerts.yml")
RULE_TESTS = os.path.join(RULES_DIR, "sluice-alerts.test.yml")
DASHBOARD = os.path.join(SOURCE_DIR, "deploy", "grafana", "sluice-dashboard.json")

# Alerts the brief of the kit asks for, each with the metric it must watch.
REQUIRED_ALERTS = {
    "SluiceRedisDown": "sluice_redis_up",
    "SluiceRedisCircuitOpen": "sluice_redis_circuit_open",
    "SluiceRateLimitFailOpen": "sluice_ratelimit_fail_open_total",
    "SluiceRouteHighLimitedRate": "sluice_http_requests_total",
    "SluiceUpstreamErrors": "sluice_upstream_requests_total",
    "SluiceUpstreamConnectFailures": "sluice_upstream_requests_total",
    "SluiceNearConnectionCap": "sluice_connections_max",
    "SluiceInternalErrors": "sluice_internal_errors_total",
    "SluiceHTTP2Goaways": "sluice_http2_goaways_total",
}

# Families that have no dashboard panel, each with the reason. Every other family
# (documented in docs/metrics.md or exposed by the binary) must be in a panel's query.
NOT_ON_THE_DASHBOARD: dict[str, str] = {}


def rule_blocks(text):
    """{alert name: the text of its rule} from the rules file (no YAML library needed)."""
    blocks = {}
    for m in re.finditer(r"^      - alert: (\w+)\n(.*?)(?=^      - alert: |^  - name: |\Z)",
                         text, re.M | re.S):
        blocks[m.group(1)] = m.group(2)
    return blocks


def dashboard_families(dashboard) -> set[str]:
    """The metric families the dashboard's queries read (a histogram's _bucket,
    _count and _sum count as its family)."""
    shown = set()
    for _, expr in dashboard_queries(dashboard):
        for name in metric_names_in(expr):
            shown.add(name)
            for suffix in ("_bucket", "_count", "_sum"):
                if name.endswith(suffix):
                    shown.add(name[:-len(suffix)])
    return shown


def dashboard_queries(dashboard):
    """(panel title, PromQL) for every target of every panel, rows' nested panels
    included, and every query variable."""
    queries = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                queries.append((panel.get("title", "?"), target.get("expr", "")))
            walk(panel.get("panels", []))
    walk(dashboard.get("panels", []))
    for variable in dashboard.get("templating", {}).get("list", []):
        if variable.get("type") == "query":
            query = variable["query"]
            queries.append((f"${variable['name']}",
                            query["query"] if isinstance(query, dict) else query))
    return queries


class RulesTest(unittest.TestCase):
    def test_promtool_check_rules(self):
        tool = promtool(self)
        result = subprocess.run([tool, "check", "rules", RULES], capture_output=True, text=True,
                                timeout=60)
        self.assertEqual(result.returncode, 0, f"{result.stdout}\n{result.stderr}")
        self.assertIn("SUCCESS", result.stdout)

    def test_promtool_rule_unit_tests(self):
        tool = promtool(self)
        result = subprocess.run([tool, "test", "rules", os.path.basename(RULE_TESTS)],
                                cwd=RULES_DIR, capture_output=True, text=True, timeout=120)
        self.assertEqual(result.returncode, 0, f"{result.stdout}\n{result.stderr}")
        with open(RULE_TESTS) as f:
            tested = set(re.findall(r"alertname: (\w+)", f.read()))
        self.assertGreaterEqual(len(tested), 3, tested)

    def test_required_alerts_exist_and_watch_their_metric(self):
        with open(RULES) as f:
            blocks = rule_blocks(f.read())
        for alert, metric in REQUIRED_ALERTS.items():
            self.assertIn(alert, blocks)
            expr = re.search(r"expr: (\|\n(?:\s{10}.*\n)+|.*)", blocks[alert]).group(1)
            self.assertIn(metric, metric_names_in(expr), f"{alert}: {expr}")
            self.assertRegex(blocks[alert], r"severity: (warning|critical)", alert)
            self.assertIn("summary:", blocks[alert], alert)


class DashboardTest(unittest.TestCase):
    def test_dashboard_is_well_formed(self):
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        self.assertTrue(dashboard.get("title"))
        self.assertTrue(dashboard.get("uid"))
        ids = []

        def walk(panels):
            for panel in panels:
                ids.append(panel["id"])
                self.assertIn("gridPos", panel, panel.get("title"))
                if panel.get("type") != "row":
                    self.assertTrue(panel.get("targets"), f"panel without a query: {panel}")
                walk(panel.get("panels", []))
        walk(dashboard["panels"])
        self.assertEqual(len(ids), len(set(ids)), "panel ids are not unique")
        for title, expr in dashboard_queries(dashboard):
            self.assertTrue(metric_names_in(expr), f"{title}: no Sluice metric in {expr!r}")
        # What an operator looks for first.
        exprs = " ".join(expr for _, expr in dashboard_queries(dashboard))
        for needle in ("histogram_quantile", 'code="429"', "sluice_ratelimit_check_duration_seconds",
                       "sluice_connections_active", "process_resident_memory_bytes",
                       "sluice_ratelimit_fail_open_total", "sluice_upstream_requests_total",
                       'sluice_consumer_lookups_total{job=~"$job",instance=~"$instance",result="hit"}'):
            self.assertIn(needle, exprs)


    def test_every_documented_family_has_a_panel(self):
        with open(DASHBOARD) as f:
            shown = dashboard_families(json.load(f))
        missing = sorted(documented_families() - shown - set(NOT_ON_THE_DASHBOARD))
        self.assertEqual(missing, [], "documented families without a dashboard panel")
        # The exceptions are real families and really not shown.
        self.assertEqual(sorted(set(NOT_ON_THE_DASHBOARD) - documented_families()), [])
        self.assertEqual(sorted(set(NOT_ON_THE_DASHBOARD) & shown), [])


class MetricsInUseTest(ProcessTestCase):
    """Every metric the rules and the dashboard query is documented and exposed."""

    def test_rule_and_dashboard_metrics_are_documented_and_exposed(self):
        redis = self.start_redis()
        echo = self.start_echo()
        gw = self.start_sluice(gateway_config(
            {"main": [echo.address]},
            [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "main",
              "limits": ["per_ip"]}],
            redis={"url": f"redis://127.0.0.1:{redis.port}/0"},
            limits={"per_ip": {"key": "ip", "capacity": 10, "refill_per_second": 1}}))
        families = parse_exposition(gw.metrics())
        documented = documented_families()
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        with open(RULES) as f:
            rules_text = f.read()
        # Every family the binary exposes has a panel.
        missing = sorted(set(families) - dashboard_families(dashboard) -
                         set(NOT_ON_THE_DASHBOARD))
        self.assertEqual(missing, [], "exposed families without a dashboard panel")
        used = {f"dashboard panel {title!r}": metric_names_in(expr)
                for title, expr in dashboard_queries(dashboard)}
        used["alerting rules"] = metric_names_in(rules_text)
        self.assertIn("sluice_http_request_duration_seconds_bucket",
                      set().union(*used.values()))
        for where, names in used.items():
            for name in sorted(names):
                family = family_of_name(name, families)
                self.assertIn(family, families, f"{where}: {name} is not exposed by sluice")
                self.assertIn(family, documented,
                              f"{where}: {name} is not described in docs/metrics.md")


if __name__ == "__main__":
    unittest.main()
