"""The command line and signals."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import threading
import unittest
import unittest.mock

from harness import (SANITIZED, SOURCE_DIR, ProcessTestCase, RawConnection, SLUICE_BIN,
                     closed_port, free_port, gateway_config, request, run_cli, shipped_config_env,
                     to_yaml, wait_until)

# A complete, valid configuration using every section (nothing here may be contacted by --check).
GOOD_CONFIG = """\
server:
  listen: "127.0.0.1:{port}"
  threads: 2
  max_header_bytes: 16384
  max_body_bytes: 10485760
  header_timeout_ms: 10000
  idle_timeout_ms: 60000
  drain_timeout_ms: 10000
  trusted_proxies: ["127.0.0.1/32"]
admin:
  listen: "127.0.0.1:{admin_port}"
log:
  level: info
  access_log: true
redis:
  url: "redis://127.0.0.1:{redis_port}/0"
  timeout_ms: 50
  key_prefix: "sluice:"
  circuit_breaker:
    failures: 5
    open_ms: 1000
upstreams:
  orders:
    servers: ["127.0.0.1:{upstream_port}", "127.0.0.1:{upstream_port2}"]
    connect_timeout_ms: 1000
    response_timeout_ms: 30000
    max_idle_connections: 64
api_keys:
  header: "X-API-Key"
  consumers:
    - {{ key: "demo-pro-key", plan: pro }}
  default_plan: free
limits:
  per_key:
    key: api_key
    capacity: 50
    refill_per_second: 10
    plans:
      pro: {{ capacity: 500, refill_per_second: 100 }}
  per_ip:
    key: ip
    capacity: 20
    refill_per_second: 0.5
  composite:
    key: [api_key, path]
    capacity: 5
    refill_per_second: 1
routes:
  - name: orders
    match:
      path_prefix: "/api/orders"
      methods: [GET, POST]
      host: "api.example.com"
    upstream: orders
    strip_prefix: false
    limits: [per_key, per_ip]
    cost: 1
    on_redis_failure: open
  - name: exact
    match: {{ path_exact: "/exact" }}
    upstream: orders
    limits: [composite]
    on_redis_failure: closed
  - name: regex
    match: {{ path_regex: "/items/[0-9]+" }}
    upstream: orders
    limits: []
"""

# Three errors on known lines (1-based).
BAD_CONFIG = """\
server:
  listen: "127.0.0.1:{port}"
  bogus_key: 1
admin:
  listen: "127.0.0.1:{admin_port}"
upstreams:
  echo:
    servers: ["127.0.0.1:9"]
limits:
  per_ip:
    key: ip
    capacity: 20
    refill_per_second: 5
routes:
  - name: a
    match: {{ path_prefix: "/a" }}
    upstream: echo
    limits: [per_ip]
  - name: b
    match: {{ path_prefix: "/b" }}
    upstream: missing
    limits: [per_ip, nope]
"""


def good_config_text(**ports):
    values = {"port": free_port(), "admin_port": free_port(), "redis_port": closed_port(),
              "upstream_port": closed_port(), "upstream_port2": closed_port()}
    values.update(ports)
    return GOOD_CONFIG.format(**values)


class CheckTest(ProcessTestCase):
    def write(self, name, text):
        path = os.path.join(self.workdir, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def require_binary(self):
        if not os.access(SLUICE_BIN, os.X_OK):
            self.fail(f"binary not found: {SLUICE_BIN}")

    def test_check_good_config(self):
        self.require_binary()
        port, admin_port = free_port(), free_port()
        self.write("gateway.yaml", good_config_text(port=port, admin_port=admin_port))
        # Hold both listen ports: --check must not need them.
        holders = []
        for p in (port, admin_port):
            s = socket.socket()
            s.bind(("127.0.0.1", p))
            s.listen()
            holders.append(s)
        try:
            result = run_cli(["--config", "gateway.yaml", "--check"], cwd=self.workdir)
        finally:
            for s in holders:
                s.close()
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertIn("configuration OK", result.stdout + result.stderr)

    def test_check_warns_when_random_api_keys_are_never_denied(self):
        self.require_binary()
        base = ("upstreams:\n  u:\n    servers: [\"127.0.0.1:9\"]\n"
                "limits:\n  per_key: {key: api_key, capacity: 5, refill_per_second: 1}\n"
                "  per_ip: {key: ip, capacity: 50, refill_per_second: 10}\n")
        cases = {
            # every limit keyed by api_key, no consumers listed: warned, still valid
            "routes:\n  - {name: r, match: {path_prefix: /}, upstream: u, limits: [per_key]}\n":
                True,
            # an ip limit beside it bounds random keys
            "routes:\n  - {name: r, match: {path_prefix: /}, upstream: u, "
            "limits: [per_key, per_ip]}\n": False,
            # consumers listed: unknown keys count as missing
            "api_keys:\n  consumers: [{key: k1, plan: free}]\n"
            "routes:\n  - {name: r, match: {path_prefix: /}, upstream: u, limits: [per_key]}\n":
                False,
            # the consumer store decides who is known: unknown keys count as missing
            "plans: [free]\napi_keys:\n  store: redis\n  default_plan: free\n"
            "redis:\n  key_secret_file: secret.key\n"
            "routes:\n  - {name: r, match: {path_prefix: /}, upstream: u, limits: [per_key]}\n":
                False,
        }
        secret = self.write("secret.key", "0123456789abcdef0123456789abcdef\n")
        os.chmod(secret, 0o600)
        for routes, warned in cases.items():
            with self.subTest(routes=routes):
                self.write("w.yaml", base + routes)
                result = run_cli(["--config", "w.yaml", "--check"], cwd=self.workdir)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("configuration OK", result.stdout)
                if warned:
                    self.assertIn("warning: w.yaml:", result.stderr)
                    self.assertIn("routes[0].limits: every limit is keyed by api_key",
                                  result.stderr)
                else:
                    self.assertNotIn("warning", result.stderr)

    def test_check_warns_of_a_secret_file_other_users_can_read(self):
        self.require_binary()
        secret = self.write("secret.key", "0123456789abcdef0123456789abcdef\n")
        token = self.write("admin.token", "admin-token-0123456789\n")
        config = ("upstreams:\n  u:\n    servers: [\"127.0.0.1:9\"]\n"
                  "redis:\n  key_secret_file: secret.key\n"
                  "admin:\n  token_file: admin.token\n"
                  "routes:\n  - {name: r, match: {path_prefix: /}, upstream: u}\n")
        self.write("s.yaml", config)
        # Others may not read or write it, the group may not write it; the group may
        # read it (0640 with the service's group, a Kubernetes secret for fsGroup).
        for mode, warned in ((0o644, True), (0o604, True), (0o660, True), (0o600, False),
                             (0o400, False), (0o640, False), (0o440, False)):
            with self.subTest(mode=oct(mode)):
                os.chmod(secret, mode)
                os.chmod(token, 0o600)
                result = run_cli(["--config", "s.yaml", "--check"], cwd=self.workdir)
                self.assertEqual(result.returncode, 0, result.stderr)
                if warned:
                    self.assertIn(f"redis.key_secret_file: \"secret.key\" can be read or written "
                                  f"by other users (mode {mode:04o}); make it readable by the "
                                  "gateway's user only (chmod 600)", result.stderr)
                else:
                    self.assertNotIn("warning", result.stderr)
        os.chmod(secret, 0o600)
        os.chmod(token, 0o604)
        result = run_cli(["--config", "s.yaml", "--check"], cwd=self.workdir)
        self.assertIn("admin.token_file: \"admin.token\" can be read or written by other users",
                      result.stderr)

    def test_check_refuses_a_capacity_or_rate_too_small_to_mean_anything(self):
        self.require_binary()
        base = "upstreams:\n  u:\n    servers: [\"127.0.0.1:9\"]\nlimits:\n"
        route = "routes:\n  - {name: r, match: {path_prefix: /}, upstream: u, limits: [l]}\n"
        cases = {
            "  l: {key: ip, capacity: 5e-324, refill_per_second: 1}\n": "limits.l.capacity",
            "  l: {key: ip, capacity: 5, refill_per_second: 1e-9}\n":
                "limits.l.refill_per_second",
            "  l: {key: ip, capacity: 5, refill_per_second: 1,\n"
            "      plans: {free: {capacity: 1e-300}}}\n": "limits.l.plans.free.capacity",
        }
        for limit, field in cases.items():
            with self.subTest(field=field):
                self.write("c.yaml", base + limit + route)
                result = run_cli(["--config", "c.yaml", "--check"], cwd=self.workdir)
                self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
                self.assertIn(f"{field}: must be at least 0.000001", result.stderr)
        # The floor itself is accepted.
        self.write("c.yaml", base + "  l: {key: ip, capacity: 0.000001, "
                   "refill_per_second: 0.000001}\n" + route)
        result = run_cli(["--config", "c.yaml", "--check"], cwd=self.workdir)
        self.assertEqual(result.returncode, 0, result.stderr)

    @unittest.skipUnless(shutil.which("strace"), "strace not installed")
    @unittest.skipIf(SANITIZED, "LeakSanitizer does not run under strace")
    def test_check_opens_no_socket(self):
        self.require_binary()
        path = self.write("gateway.yaml", good_config_text())
        trace = os.path.join(self.workdir, "trace.txt")
        result = subprocess.run(
            ["strace", "-f", "-qq", "-e", "trace=socket,bind,listen,connect", "-o", trace,
             SLUICE_BIN, "--config", path, "--check"],
            capture_output=True, text=True, timeout=20)
        if "ptrace" in result.stderr and result.returncode != 0:
            self.skipTest(f"strace cannot trace here: {result.stderr.strip()}")
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        with open(trace) as f:
            calls = f.read()
        network = [line for line in calls.splitlines()
                   if re.search(r"socket\(AF_INET6?\b|\bbind\(|\blisten\(|connect\(\d+, \{sa_family=AF_INET",
                                line)]
        self.assertEqual(network, [], "--check touched the network")

    def test_check_bad_config_lists_every_error(self):
        self.require_binary()
        self.write("gateway.yaml", BAD_CONFIG.format(port=free_port(), admin_port=free_port()))
        result = run_cli(["--config", "gateway.yaml", "--check"], cwd=self.workdir)
        output = result.stdout + result.stderr
        self.assertEqual(result.returncode, 1, output)
        self.assertNotIn("configuration OK", output)
        file_re = r"(?:\S*/)?gateway\.yaml"
        for pattern in (rf"{file_re}:3: server\.bogus_key: \S",
                        rf"{file_re}:21: routes\[1\]\.upstream: \S",
                        rf'{file_re}:22: routes\[1\]\.limits\[1\]: unknown limit "nope"'):
            self.assertRegex(output, re.compile(pattern, re.M))
        # Every error line has the file:line: key.path: message shape.
        errors = [line for line in output.splitlines() if "gateway.yaml:" in line]
        self.assertGreaterEqual(len(errors), 3, output)

    def test_check_yaml_syntax_error_names_file_and_line(self):
        self.require_binary()
        self.write("broken.yaml", 'server:\n  listen: "127.0.0.1:1"\n  threads: [1, 2\nadmin: {}\n')
        result = run_cli(["--config", "broken.yaml", "--check"], cwd=self.workdir)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertRegex(result.stdout + result.stderr, r"(?:\S*/)?broken\.yaml:\d+:")

    def test_check_missing_file(self):
        self.require_binary()
        result = run_cli(["--config", "does-not-exist.yaml", "--check"], cwd=self.workdir)
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        self.assertIn("does-not-exist.yaml", result.stdout + result.stderr)

    def test_check_print_endpoints(self):
        self.require_binary()
        ports = {"port": free_port(), "admin_port": free_port(), "redis_port": closed_port(),
                 "upstream_port": closed_port(), "upstream_port2": closed_port()}
        # A password in the url must not reach the output.
        text = good_config_text(**ports).replace("redis://127.0.0.1:",
                                                 "redis://alice:hunter2@127.0.0.1:")
        self.write("gateway.yaml", text)
        result = run_cli(["--config", "gateway.yaml", "--check", "--print-endpoints"],
                         cwd=self.workdir)
        self.assertEqual(result.returncode, 0, result.stderr)
        # stdout is exactly one JSON document; "configuration OK" goes to stderr.
        self.assertEqual(result.stdout.count("\n"), 1, result.stdout)
        self.assertEqual(json.loads(result.stdout), {
            "listen": f"127.0.0.1:{ports['port']}",
            "admin_listen": f"127.0.0.1:{ports['admin_port']}",
            "redis": {"host": "127.0.0.1", "port": ports["redis_port"], "tls": False},
            "upstreams": {"orders": [{"host": "127.0.0.1", "port": ports["upstream_port"]},
                                     {"host": "127.0.0.1", "port": ports["upstream_port2"]}]},
        })
        self.assertIn("configuration OK", result.stderr)
        self.assertNotIn("hunter2", result.stdout + result.stderr)
        self.assertNotIn("alice", result.stdout)

    def test_print_endpoints_redis_null_without_limits(self):
        self.require_binary()
        self.write("g.yaml", 'upstreams:\n  u: { servers: ["app.internal:8000"] }\n'
                             "routes:\n  - { name: r, match: { path_prefix: / }, upstream: u }\n")
        result = run_cli(["--config", "g.yaml", "--check", "--print-endpoints"], cwd=self.workdir)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout), {
            "listen": "0.0.0.0:8080", "admin_listen": "127.0.0.1:9901", "redis": None,
            "upstreams": {"u": [{"host": "app.internal", "port": 8000}]}})

    def test_print_endpoints_needs_check_and_a_valid_config(self):
        self.require_binary()
        self.write("gateway.yaml", good_config_text())
        result = run_cli(["--config", "gateway.yaml", "--print-endpoints"], cwd=self.workdir)
        self.assertEqual(result.returncode, 2)
        self.assertIn("--print-endpoints needs --check", result.stderr)
        self.write("bad.yaml", BAD_CONFIG.format(port=free_port(), admin_port=free_port()))
        result = run_cli(["--config", "bad.yaml", "--check", "--print-endpoints"],
                         cwd=self.workdir)
        self.assertEqual(result.returncode, 1)
        self.assertEqual(result.stdout, "")

    def test_check_expands_environment_variables(self):
        self.require_binary()
        self.write("env.yaml", """\
server:
  listen: "127.0.0.1:${SLUICE_TEST_PORT:-18080}"
  threads: ${SLUICE_TEST_THREADS}
redis:
  url: "${SLUICE_TEST_REDIS_URL}"
  key_prefix: "$${not-a-variable}:"
upstreams:
  app: { servers: ["${SLUICE_TEST_UPSTREAM:-upstream:9000}"] }
limits:
  per_ip: { key: ip, capacity: 10, refill_per_second: 1 }
routes:
  - { name: r, match: { path_prefix: / }, upstream: app, limits: [per_ip] }
""")
        base = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_TEST_")}

        def check(**env):
            return subprocess.run([SLUICE_BIN, "--config", "env.yaml", "--check",
                                   "--print-endpoints"], cwd=self.workdir, env={**base, **env},
                                  capture_output=True, text=True, timeout=10)
        # Unset without a default: an error with file, line and key path, for each.
        result = check()
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertEqual(
            [line for line in result.stderr.splitlines() if "env.yaml:" in line],
            ["env.yaml:3: server.threads: environment variable SLUICE_TEST_THREADS is not set",
             "env.yaml:5: redis.url: environment variable SLUICE_TEST_REDIS_URL is not set"])
        # A value from the environment is validated like a literal one; a password is not shown.
        result = check(SLUICE_TEST_THREADS="lots",
                       SLUICE_TEST_REDIS_URL="redis://:hunter2@127.0.0.1:0")
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn('env.yaml:3: server.threads: expected an integer, got "lots"', result.stderr)
        self.assertIn('env.yaml:5: redis.url: invalid url: port must be between 1 and 65535, got '
                      '"redis://:***@127.0.0.1:0"', result.stderr)
        self.assertNotIn("hunter2", result.stderr + result.stdout)
        # Set: the values are used, defaults fill the rest.
        result = check(SLUICE_TEST_THREADS="2", SLUICE_TEST_REDIS_URL="redis://127.0.0.1:6390/1",
                       SLUICE_TEST_UPSTREAM="127.0.0.1:9100")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout), {
            "listen": "127.0.0.1:18080", "admin_listen": "127.0.0.1:9901",
            "redis": {"host": "127.0.0.1", "port": 6390, "tls": False},
            "upstreams": {"app": [{"host": "127.0.0.1", "port": 9100}]}})

    def test_container_config_checks_with_loopback_environment(self):
        self.require_binary()
        path = os.path.join(SOURCE_DIR, "conf", "container.yaml")
        base = {k: v for k, v in os.environ.items() if not k.startswith("SLUICE_")}
        env = {**base, "SLUICE_REDIS_URL": "redis://127.0.0.1:6379/0",
               "SLUICE_UPSTREAM": "127.0.0.1:9000"}
        result = subprocess.run([SLUICE_BIN, "--config", path, "--check", "--print-endpoints"],
                                env=env, capture_output=True, text=True, timeout=10)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("warning", result.stderr)
        self.assertEqual(json.loads(result.stdout), {
            "listen": "0.0.0.0:8080", "admin_listen": "0.0.0.0:9901",
            "redis": {"host": "127.0.0.1", "port": 6379, "tls": False},
            "upstreams": {"app": [{"host": "127.0.0.1", "port": 9000}]}})
        # Without the environment, the compose defaults: names, not resolved by --check.
        result = subprocess.run([SLUICE_BIN, "--config", path, "--check", "--print-endpoints"],
                                env=base, capture_output=True, text=True, timeout=10)
        self.assertEqual(result.returncode, 0, result.stderr)
        doc = json.loads(result.stdout)
        self.assertEqual(doc["redis"], {"host": "redis", "port": 6379, "tls": False})
        self.assertEqual(doc["upstreams"], {"app": [{"host": "upstream", "port": 9000}]})

    def test_demo_config_checks_without_warnings(self):
        self.require_binary()
        for name in ("sluice.yaml", "cluster.yaml", "sentinel.yaml"):
            with self.subTest(config=name):
                result = run_cli(["--config", os.path.join(SOURCE_DIR, "conf", name), "--check"],
                                 env=shipped_config_env(self.workdir))
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stdout, "configuration OK\n")
                self.assertEqual(result.stderr, "")
        # Without a key secret the consumer store is refused, naming the file.
        result = run_cli(["--config", os.path.join(SOURCE_DIR, "conf", "sluice.yaml"), "--check"],
                         env={"SLUICE_KEY_SECRET_FILE": os.path.join(self.workdir, "none")})
        self.assertEqual(result.returncode, 1)
        self.assertIn("redis.key_secret_file", result.stderr)

    def test_check_warns_when_other_methods_fall_through_to_an_unlimited_route(self):
        self.require_binary()
        base = ("upstreams:\n  u:\n    servers: [\"127.0.0.1:9\"]\n"
                "limits:\n  per_ip: {key: ip, capacity: 50, refill_per_second: 10}\n"
                "routes:\n"
                "  - name: api\n"
                "    match: {path_prefix: /api/, methods: [GET, POST]}\n"
                "    upstream: u\n"
                "    limits: [per_ip]\n")
        cases = {
            "  - {name: default, match: {path_prefix: /}, upstream: u}\n": True,
            "  - {name: default, match: {path_prefix: /}, upstream: u, limits: [per_ip]}\n": False,
            "  - {name: other, match: {path_prefix: /other/}, upstream: u}\n": False,
        }
        for tail, warned in cases.items():
            with self.subTest(tail=tail):
                self.write("m.yaml", base + tail)
                result = run_cli(["--config", "m.yaml", "--check"], cwd=self.workdir)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertIn("configuration OK", result.stdout)
                if warned:
                    self.assertIn("warning: m.yaml:8: routes[0].match.methods: requests with a "
                                  "method not listed here", result.stderr)
                    self.assertIn('fall through to routes[1] ("default")', result.stderr)
                else:
                    self.assertNotIn("warning", result.stderr)

    def test_version(self):
        self.require_binary()
        result = run_cli(["--version"])
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertRegex(result.stdout, r"\d+\.\d+\.\d+")


class SignalTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.echo = self.start_echo()

    def config(self, routes=None, upstreams=None, server=None):
        return gateway_config(
            upstreams or {"echo": [self.echo.address]},
            routes or [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "echo"},
                       {"name": "internal", "match": {"path_prefix": "/__"}, "upstream": "echo"}],
            server={"drain_timeout_ms": 5000, **(server or {})})

    def start_request(self, port, target):
        """Sends a request in a thread; returns (thread, result dict)."""
        result = {}

        def run():
            try:
                result["response"] = request(port, "GET", target, timeout=15)
            except Exception as e:  # reported by the test
                result["error"] = e
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread, result

    def wait_in_flight(self, expected_requests):
        wait_until(lambda: self.echo.counts()["requests"] >= expected_requests, 5,
                   message="the request to reach the upstream")

    def test_sigterm_drains_in_flight_request_and_exits_0(self):
        gateway = self.start_sluice(self.config())
        thread, result = self.start_request(gateway.port, "/__slow/500")
        self.wait_in_flight(1)
        gateway.signal(signal.SIGTERM)
        thread.join(15)
        self.assertNotIn("error", result, f"in-flight request failed: {result.get('error')!r}\n"
                                          f"{gateway.output_tail()}")
        status, _, body = result["response"]
        self.assertEqual(status, 200)
        self.assertEqual(json.loads(body)["target"], "/__slow/500")
        self.assertEqual(gateway.wait(10), 0, gateway.output_tail())

    def test_sigint_exits_0(self):
        gateway = self.start_sluice(self.config())
        self.assertEqual(request(gateway.port, "GET", "/api/x")[0], 200)
        gateway.signal(signal.SIGINT)
        self.assertEqual(gateway.wait(10), 0, gateway.output_tail())

    def test_sigterm_closes_idle_keepalive_connections(self):
        gateway = self.start_sluice(self.config())
        with RawConnection(gateway.port) as conn:
            conn.send(b"GET /api/idle HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assertEqual(conn.read_response().status, 200)
            gateway.signal(signal.SIGTERM)
            self.assertTrue(conn.is_closed(timeout=8), "idle connection not closed on SIGTERM")
        self.assertEqual(gateway.wait(10), 0, gateway.output_tail())

    def test_log_level_override(self):
        gateway = self.start_sluice(self.config(), extra_args=["--log-level", "error"])
        self.assertEqual(request(gateway.port, "GET", "/api/x")[0], 200)

    def test_sighup_with_bad_file_keeps_old_config(self):
        config = self.config()
        gateway = self.start_sluice(config)
        self.assertEqual(request(gateway.port, "GET", "/api/before")[0], 200)
        bad = dict(config)
        bad["routes"] = config["routes"] + [
            {"name": "added", "match": {"path_prefix": "/added"}, "upstream": "nope",
             "limits": []}]
        bad_text = to_yaml(bad) + "\n"
        bad_line = next(i for i, line in enumerate(bad_text.splitlines(), 1)
                        if 'upstream: "nope"' in line)
        gateway.reload(bad_text)
        wait_until(lambda: gateway.metric("sluice_config_reloads_total", result="error") == 1, 5,
                   message='sluice_config_reloads_total{result="error"} == 1')
        # The errors are logged in the usual file:line: key.path form.
        logs = gateway.stderr() + gateway.stdout()
        self.assertRegex(logs, rf"sluice\.yaml:{bad_line}: routes\[2\]\.upstream")
        self.assertEqual(request(gateway.port, "GET", "/api/after")[0], 200)
        self.assertEqual(request(gateway.port, "GET", "/added/x")[0], 404)
        self.assertTrue(gateway.alive())

    def test_sighup_with_good_file_swaps_routes_without_dropping_requests(self):
        other = self.start_echo("echo2")
        gateway = self.start_sluice(self.config())
        self.assertEqual(request(gateway.port, "GET", "/added/x")[0], 404)
        thread, result = self.start_request(gateway.port, "/__slow/800")
        self.wait_in_flight(1)
        # The new config drops /__ and adds /added on another upstream.
        gateway.reload(gateway_config(
            {"echo": [self.echo.address], "other": [other.address]},
            [{"name": "api", "match": {"path_prefix": "/api"}, "upstream": "echo"},
             {"name": "added", "match": {"path_prefix": "/added"}, "upstream": "other"}],
            port=gateway.port, admin_port=gateway.admin_port,
            server={"drain_timeout_ms": 5000}))
        wait_until(lambda: request(gateway.port, "GET", "/added/x")[0] == 200, 5,
                   message="the reloaded route to match")
        self.assertGreaterEqual(other.counts()["requests"], 1)
        self.assertEqual(request(gateway.port, "GET", "/__slow/1")[0], 404)
        self.assertEqual(request(gateway.port, "GET", "/api/still")[0], 200)
        thread.join(15)
        self.assertNotIn("error", result, f"in-flight request dropped: {result.get('error')!r}")
        self.assertEqual(result["response"][0], 200)
        self.assertEqual(gateway.metric("sluice_config_reloads_total", result="ok"), 1)



class ServiceNotifyTest(ProcessTestCase):
    """systemd's Type=notify protocol: READY=1 once the listeners are bound (and, with
    limited routes, Redis reached or 10 s passed), RELOADING=1 then READY=1 around a
    SIGHUP, STOPPING=1 at a drain; datagrams to the socket $NOTIFY_SOCKET names."""

    def notify_socket(self):
        path = os.path.join(self.workdir, "notify.sock")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        sock.bind(path)
        sock.settimeout(15)
        self.addCleanup(sock.close)
        return path, sock

    def states(self, sock, until):
        """Datagrams received until one holds `until`; each as a dict."""
        seen = []
        while True:
            message = dict(line.split("=", 1) for line in sock.recv(4096).decode().splitlines())
            seen.append(message)
            if until in message:
                return seen

    def start_notified(self, path, config):
        with unittest.mock.patch.dict(os.environ, {"NOTIFY_SOCKET": path}):
            return self.start_sluice(config, wait_healthy=False)

    def test_ready_reloading_and_stopping_are_told(self):
        path, sock = self.notify_socket()
        echo = self.start_echo()
        config = gateway_config({"echo": [echo.address]},
                                [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "echo"}])
        gw = self.start_notified(path, config)
        [ready] = self.states(sock, "READY")
        self.assertEqual(ready["READY"], "1")
        # Ready means serving: the listeners were bound before it was said.
        self.assertEqual(request(gw.port, "GET", "/x")[0], 200)
        gw.reload(gw.config_text)
        states = self.states(sock, "READY")
        self.assertEqual(states[0], {"RELOADING": "1"})
        self.assertEqual(states[-1]["READY"], "1")
        gw.proc.send_signal(signal.SIGTERM)
        self.assertEqual(self.states(sock, "STOPPING")[-1]["STOPPING"], "1")
        self.assertEqual(gw.wait(15), 0)

    def test_with_limits_ready_waits_for_redis(self):
        path, sock = self.notify_socket()
        echo = self.start_echo()
        redis_port = free_port()
        config = gateway_config(
            {"echo": [echo.address]},
            [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "echo", "limits": ["ip"]}],
            redis={"url": f"redis://127.0.0.1:{redis_port}/0", "connect_timeout_ms": 200},
            limits={"ip": {"key": "ip", "capacity": 5, "refill_per_second": 1}})
        gw = self.start_notified(path, config)
        # Serving (the route fails open), but not ready while Redis is down...
        gw.wait_healthy()
        self.assertEqual(request(gw.port, "GET", "/x")[0], 200)
        sock.settimeout(1.0)
        with self.assertRaises(socket.timeout):
            sock.recv(4096)
        # ...and ready once it is reached: the next request is decided by it.
        sock.settimeout(15)
        self.start_redis(port=redis_port)
        self.states(sock, "READY")
        headers = request(gw.port, "GET", "/x")[1]
        self.assertEqual(headers.get("X-RateLimit-Remaining"), "4")

    def test_without_notify_socket_nothing_is_sent(self):
        echo = self.start_echo()
        gw = self.start_sluice(gateway_config(
            {"echo": [echo.address]},
            [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "echo"}]))
        self.assertNotIn("NOTIFY_SOCKET", gw.stderr())


class UpstreamNameTest(ProcessTestCase):
    def test_unresolvable_upstream_name_warns_at_start_and_gives_502(self):
        # ".invalid" never resolves (RFC 6761). Sluice still starts: a name is
        # resolved for every new connection, so it may resolve later.
        echo = self.start_echo()
        gateway = self.start_sluice(gateway_config(
            {"ghost": ["nonexistent.invalid:9"], "echo": [echo.address]},
            [{"name": "ghost", "match": {"path_prefix": "/ghost"}, "upstream": "ghost"},
             {"name": "ok", "match": {"path_prefix": "/"}, "upstream": "echo"}]))
        self.assertIn('upstreams.ghost.servers[0]: host "nonexistent.invalid" does not resolve now',
                      gateway.stderr())
        self.assertNotIn("upstreams.echo", gateway.stderr())
        self.assertEqual(request(gateway.port, "GET", "/ghost/x")[0], 502)
        self.assertEqual(request(gateway.port, "GET", "/x")[0], 200)


if __name__ == "__main__":
    unittest.main()
