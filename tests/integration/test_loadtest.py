"""The load-test scenarios of loadtest/, checked for outcomes, not speed.

- The k6 scripts (k6 is not installable here) parse as ES modules under node,
  type-check against k6's published API types (npm @types/k6 with
  TypeScript's tsc --checkJs, where the npm registry can be reached), and
  carry thresholds and a how-to-run header.
- loadtest/burst.sh (hey) runs end to end against a real sluice + redis-server
  started here: exactly `capacity` 200s, the rest 429, a final 429 with
  Retry-After; the gateway's own counters agree.
- loadtest/burst.sh also runs self-contained (it starts and stops its own stack).
- loadtest/sustained.sh, briefly: never more than C + R*T allowed, 429s seen,
  the chart written where asked.
Skipped with a message when hey (or node, or gnuplot for the chart) is missing.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from harness import SLUICE_BIN, ECHO_BIN, SOURCE_DIR, ProcessTestCase, gateway_config
from harness import metric_sum, wait_redis_ready

LOADTEST = os.path.join(SOURCE_DIR, "loadtest")
SCRIPT_TIMEOUT = 120  # seconds for one scenario script, setup included


def scenario_env() -> dict:
    env = dict(os.environ)
    env["SLUICE_BIN"] = SLUICE_BIN
    env["SLUICE_ECHO_BIN"] = ECHO_BIN
    return env


def run_scenario(args, timeout=SCRIPT_TIMEOUT) -> subprocess.CompletedProcess:
    return subprocess.run(args, cwd=SOURCE_DIR, env=scenario_env(), stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, errors="replace", timeout=timeout)


def summary_count(output: str, label: str) -> int:
    """The number after `label` at the start of a summary line of a scenario script."""
    m = re.search(rf"^\s+{re.escape(label)}\s+(\d+)", output, re.M)
    if not m:
        raise AssertionError(f"no '{label}' line in the summary:\n{output}")
    return int(m.group(1))


class K6ScriptsTest(unittest.TestCase):
    SCRIPTS = ("burst.js", "sustained.js", "many_keys.js")

    def test_k6_scripts_parse_as_es_modules(self):
        node = shutil.which("node") or shutil.which("nodejs")
        if not node:
            self.skipTest("node is not installed: cannot syntax-check the k6 scripts "
                          "(Debian package nodejs)")
        with tempfile.TemporaryDirectory() as tmp:
            for name in self.SCRIPTS:
                with self.subTest(script=name):
                    # k6 scripts are ES modules; node treats .mjs as one and --check
                    # only parses (the k6/* imports are not resolved).
                    copy = os.path.join(tmp, name[:-3] + ".mjs")
                    shutil.copyfile(os.path.join(LOADTEST, name), copy)
                    result = subprocess.run([node, "--check", copy], capture_output=True,
                                            text=True, timeout=30)
                    self.assertEqual(result.returncode, 0, result.stderr)

    # Pinned, so that a new release of either cannot change what passes.
    TYPES = ("@types/k6@2.3.0", "typescript@7.0.2")

    def test_k6_scripts_type_check_against_the_k6_api(self):
        npm, node = shutil.which("npm"), shutil.which("node") or shutil.which("nodejs")
        if not npm or not node:
            self.skipTest("npm or node is not installed: the k6 scenarios were NOT type-checked "
                          "against @types/k6 (Debian packages npm, nodejs)")
        with tempfile.TemporaryDirectory() as tmp:
            try:
                fetched = subprocess.run(
                    [npm, "install", "--no-save", "--no-audit", "--no-fund", "--silent",
                     "--prefix", tmp, *self.TYPES], capture_output=True, text=True, timeout=180)
            except subprocess.TimeoutExpired:
                fetched = None
            if fetched is None or fetched.returncode != 0:
                self.skipTest("the npm registry cannot be reached: the k6 scenarios were NOT "
                              f"type-checked against {' and '.join(self.TYPES)}")
            for name in self.SCRIPTS:
                shutil.copyfile(os.path.join(LOADTEST, name), os.path.join(tmp, name))
            with open(os.path.join(tmp, "tsconfig.json"), "w") as f:
                f.write(json.dumps({
                    "compilerOptions": {
                        "allowJs": True, "checkJs": True, "noEmit": True, "strict": False,
                        "target": "es2020", "module": "es2022", "moduleResolution": "bundler",
                        "lib": ["es2020"], "types": ["k6"],
                        "typeRoots": [os.path.join(tmp, "node_modules", "@types")]},
                    "files": list(self.SCRIPTS)}))
            tsc = os.path.join(tmp, "node_modules", "typescript", "bin", "tsc")
            checked = subprocess.run([node, tsc, "-p", tmp], cwd=tmp, capture_output=True,
                                     text=True, timeout=120)
            self.assertEqual(checked.returncode, 0, checked.stdout + checked.stderr)
            # The check can fail: a call k6 does not have is reported.
            with open(os.path.join(tmp, "wrong.js"), "w") as f:
                f.write("import http from 'k6/http';\nexport default function () "
                        "{ http.get(42); }\n")
            with open(os.path.join(tmp, "tsconfig.json")) as f:
                config = json.load(f)
            config["files"] = ["wrong.js"]
            with open(os.path.join(tmp, "tsconfig.json"), "w") as f:
                json.dump(config, f)
            wrong = subprocess.run([node, tsc, "-p", tmp], cwd=tmp, capture_output=True,
                                   text=True, timeout=120)
            self.assertNotEqual(wrong.returncode, 0)
            self.assertIn("TS2345", wrong.stdout + wrong.stderr)

    def test_k6_scripts_encode_outcomes_and_say_how_to_run(self):
        found = sorted(os.path.basename(p) for p in glob.glob(os.path.join(LOADTEST, "*.js")))
        self.assertEqual(found, sorted(self.SCRIPTS))
        for name in self.SCRIPTS:
            with self.subTest(script=name):
                with open(os.path.join(LOADTEST, name)) as f:
                    text = f.read()
                header = text.split("import ", 1)[0]
                self.assertIn("scripts/run loadtest/conf/loadtest.yaml", header)
                self.assertIn(f"k6 run loadtest/{name}", header)
                self.assertRegex(text, r"export const options = \{")
                self.assertIn("thresholds:", text)
                self.assertRegex(text, r"from 'k6/http'")

    def test_scenario_config_is_valid(self):
        result = subprocess.run([SLUICE_BIN, "--config",
                                 os.path.join(LOADTEST, "conf", "loadtest.yaml"), "--check"],
                                capture_output=True, text=True, timeout=30)
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)


def require_tools(case: unittest.TestCase, *tools):
    for tool in tools:
        if not shutil.which(tool):
            case.skipTest(f"{tool} is not installed (Debian package "
                          f"{'gnuplot-nox' if tool == 'gnuplot' else tool}); "
                          "scripts/bench installs it")


class ScenarioTest(ProcessTestCase):
    """sluice + redis-server + sluice-echo started here, the scenario script pointed at it."""

    def start_gateway(self, limits: dict, routes: list):
        redis = self.start_redis()
        echo = self.start_echo()
        config = gateway_config(
            {"echo": [echo.address]}, routes, server={"threads": 2},
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{redis.port}/0", "timeout_ms": 1000},
            api_keys={"header": "X-API-Key"}, limits=limits)
        gateway = self.start_sluice(config)
        wait_redis_ready(gateway)
        return gateway

    def test_burst_gives_exactly_capacity_then_429(self):
        require_tools(self, "hey", "curl")
        capacity, requests = 7, 40
        gateway = self.start_gateway(
            {"burst": {"key": "api_key", "capacity": capacity, "refill_per_second": 0.001}},
            [{"name": "burst", "match": {"path_prefix": "/burst"}, "upstream": "echo",
              "limits": ["burst"]}])
        result = run_scenario([os.path.join(LOADTEST, "burst.sh"), "-n", str(requests),
                               "-c", "8", "--capacity", str(capacity), "--rate", "0.001",
                               "--url", f"http://127.0.0.1:{gateway.port}/burst"])
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 0, output)
        self.assertEqual(summary_count(result.stdout, "200"), capacity, output)
        self.assertEqual(summary_count(result.stdout, "429"), requests - capacity, output)
        self.assertEqual(summary_count(result.stdout, "other"), 0, output)
        self.assertRegex(result.stdout, r"one more\s+429, Retry-After: [1-9]\d*")
        self.assertRegex(result.stdout, r"result\s+PASS")
        # The gateway agrees: capacity allowed; the burst's rest and the one more denied.
        self.assertEqual(metric_sum(gateway, "sluice_ratelimit_decisions_total",
                                    decision="allowed"), capacity)
        self.assertEqual(metric_sum(gateway, "sluice_ratelimit_decisions_total",
                                    decision="limited"), requests - capacity + 1)

    def test_sustained_never_allows_more_than_the_bucket(self):
        require_tools(self, "hey", "gnuplot")
        capacity, rate = 5, 20
        gateway = self.start_gateway(
            {"sustained": {"key": "api_key", "capacity": capacity, "refill_per_second": rate}},
            [{"name": "sustained", "match": {"path_prefix": "/sustained"}, "upstream": "echo",
              "limits": ["sustained"]}])
        out_dir = os.path.join(self.workdir, "charts")
        result = run_scenario([os.path.join(LOADTEST, "sustained.sh"), "-z", "2", "-c", "2",
                               "-q", "30", "--capacity", str(capacity), "--rate", str(rate),
                               "--url", f"http://127.0.0.1:{gateway.port}/sustained",
                               "--out", out_dir])
        output = result.stdout + result.stderr
        allowed = summary_count(result.stdout, "200")
        denied = summary_count(result.stdout, "429")
        wall = float(re.search(r"T = ([\d.]+) s", result.stdout).group(1))
        # The invariant of a token bucket, whatever the machine's speed: at most C + R*T.
        self.assertLessEqual(allowed, capacity + rate * wall, output)
        self.assertGreaterEqual(allowed, capacity, output)
        self.assertGreater(denied, 0, output)
        self.assertEqual(summary_count(result.stdout, "other"), 0, output)
        # The gateway's count may exceed hey's by the requests in flight when hey stopped.
        counted = metric_sum(gateway, "sluice_ratelimit_decisions_total", decision="allowed")
        self.assertGreaterEqual(counted, allowed)
        self.assertLessEqual(counted, min(allowed + 2, capacity + rate * wall), output)
        charts = glob.glob(os.path.join(out_dir, "sustained-*.png"))
        self.assertEqual(len(charts), 1, output)
        with open(charts[0], "rb") as f:
            self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


class SelfContainedScenarioTest(unittest.TestCase):
    def test_burst_script_runs_its_own_stack(self):
        require_tools(self, "hey", "curl", "redis-server")
        result = run_scenario([os.path.join(LOADTEST, "burst.sh"), "-n", "25", "-c", "5",
                               "--capacity", "9"])
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 0, output)
        self.assertEqual(summary_count(result.stdout, "200"), 9, output)
        self.assertEqual(summary_count(result.stdout, "429"), 16, output)
        url = re.search(r"-> http://127\.0\.0\.1:(\d+)/burst", result.stdout)
        self.assertIsNotNone(url, output)
        # Its gateway is gone once the script has returned.
        import socket
        with self.assertRaises(OSError):
            socket.create_connection(("127.0.0.1", int(url.group(1))), timeout=1).close()


if __name__ == "__main__":
    unittest.main()
