"""scripts/run, run for real with the binaries already built.

Each test writes a config on free 127.0.0.1 ports and runs scripts/run on it
with SLUICE_SKIP_INSTALL=1, SLUICE_SKIP_BUILD=1 and SLUICE_BUILD set to the
directory of the binaries under test (nothing is installed or built). The
processes scripts/run starts are found as its descendants in /proc, and after
it ends every one of them (the same PID with the same start time) must be gone.
"""

import http.server
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

from harness import (ECHO_BIN, SLUICE_BIN, SOURCE_DIR, Holder, ProcessTestCase, free_port,
                     gateway_config, redis_call, request, to_yaml, wait_until)

RUN = os.path.join(SOURCE_DIR, "scripts", "run")
START_TIMEOUT = 30.0  # scripts/run validates the config and probes ports first
SLOW_MS = 1500


def proc_table() -> dict:
    """pid -> (ppid, start time, comm) of every process."""
    table = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        table[int(name)] = (int(fields[1]), fields[19], comm)
    return table


def descendants(pid: int) -> dict:
    """(pid, start time) -> comm of every descendant of pid, running now."""
    table = proc_table()
    found, frontier = {}, [pid]
    while frontier:
        parent = frontier.pop()
        for child, (ppid, start, comm) in table.items():
            if ppid == parent and (child, start) not in found:
                found[(child, start)] = comm
                frontier.append(child)
    return found


def still_running(processes) -> list:
    """The (pid, start time) of `processes` that still exist (zombies included)."""
    table = proc_table()
    return [(pid, start) for pid, start in processes
            if pid in table and table[pid][1] == start]


def echo_stats(port: int) -> dict:
    status, headers, body = request(port, "GET", "/__stats", timeout=2.0)
    assert status == 200 and headers["Server"] == "sluice-echo", (status, headers)
    return json.loads(body)


class NotEchoHandler(http.server.BaseHTTPRequestHandler):
    """An HTTP server that answers GET /__stats with JSON, but is not sluice-echo."""
    server_version = "other-server"

    def do_GET(self):
        body = b'{"connections": 1}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class RunScriptTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        for binary in (SLUICE_BIN, ECHO_BIN):
            if not os.access(binary, os.X_OK):
                self.fail(f"binary not found: {binary}")
        if os.path.dirname(os.path.abspath(SLUICE_BIN)) != os.path.dirname(
                os.path.abspath(ECHO_BIN)):
            self.skipTest("scripts/run takes sluice and sluice-echo from one build directory")
        if not shutil.which("redis-server"):
            self.skipTest("redis-server not installed")
        self.script = None
        self.started = {}  # (pid, start time) -> comm, what scripts/run started

    # ------------------------------------------------------------ helpers

    def write_config(self, config) -> str:
        path = os.path.join(self.workdir, "gateway.yaml")
        with open(path, "w") as f:
            f.write(config if isinstance(config, str) else to_yaml(config) + "\n")
        return path

    def run_script(self, config_path: str, pipe: bool = False, options=()) -> subprocess.Popen:
        """Starts scripts/run [options] CONFIG; its output goes to files, or with
        pipe=True to one pipe (self.script.stdout) as in `scripts/run | tee`."""
        env = {**os.environ, "SLUICE_SKIP_INSTALL": "1", "SLUICE_SKIP_BUILD": "1",
               "SLUICE_BUILD": os.path.dirname(os.path.abspath(SLUICE_BIN))}
        self.stderr_path = os.path.join(self.workdir, "run.stderr")
        if pipe:
            self.stdout, self.stderr = subprocess.PIPE, subprocess.STDOUT
        else:
            self.stdout = open(os.path.join(self.workdir, "run.stdout"), "wb")
            self.stderr = open(self.stderr_path, "wb")

        # As in a terminal, SIGINT, SIGTERM and SIGPIPE at their defaults: bash
        # cannot trap a signal that was ignored when it started, a test runner may
        # start us with SIGINT ignored, and Python ignores SIGPIPE. A launcher
        # resets them and execs the script (same PID).
        launcher = ("import os, signal, sys\n"
                    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGPIPE):\n"
                    "    signal.signal(s, signal.SIG_DFL)\n"
                    "os.execv(sys.argv[1], sys.argv[1:])\n")
        self.script = subprocess.Popen([sys.executable, "-c", launcher, RUN, *options,
                                        config_path],
                                       stdin=subprocess.DEVNULL, stdout=self.stdout,
                                       stderr=self.stderr, env=env, cwd=self.workdir)
        self.addCleanup(self.stop_everything)
        return self.script

    def script_stderr(self) -> str:
        if not os.path.exists(self.stderr_path):
            return "(the output went to a pipe)"
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stop_everything(self):
        """Cleanup: the script, then anything it started that is still running."""
        if self.script.poll() is None:
            self.script.send_signal(signal.SIGTERM)
            try:
                self.script.wait(15)
            except subprocess.TimeoutExpired:
                self.script.kill()
                self.script.wait()
        for pid, _ in still_running(self.started):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for f in (self.stdout, self.stderr, self.script.stdout):
            if hasattr(f, "close"):
                f.close()

    def wait_serving(self, admin_port: int, redis: bool = True, timeout=START_TIMEOUT):
        """Until the gateway answers /readyz with Redis ready (or /healthz without
        Redis); then records what scripts/run started."""
        def ready():
            if self.script.poll() is not None:
                raise AssertionError(f"scripts/run exited with {self.script.returncode}\n"
                                     f"{self.script_stderr()}")
            path = "/readyz" if redis else "/healthz"
            status, _, body = request(admin_port, "GET", path, timeout=1.0)
            return status == 200 and (not redis or json.loads(body)["dependencies"]
                                      .get("redis") == "ready")
        try:
            wait_until(ready, timeout, interval=0.05, message="the gateway serving")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.script_stderr()}") from None
        self.started = descendants(self.script.pid)

    def assert_all_gone(self):
        left = still_running(self.started)
        self.assertEqual(left, [], f"still running after scripts/run ended: "
                                   f"{[(pid, self.started[(pid, s)]) for pid, s in left]}")

    def limited_config(self, upstream_port: int, redis_port: int, **server) -> dict:
        return gateway_config(
            {"demo": [f"127.0.0.1:{upstream_port}"]},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "demo",
              "limits": ["per_ip"]}],
            server={"threads": 1, **server},
            redis={"url": f"redis://127.0.0.1:{redis_port}/0"},
            limits={"per_ip": {"key": "ip", "capacity": 100, "refill_per_second": 10}})

    # ------------------------------------------------------------ tests

    def start_slow_request(self, port: int, upstream_port: int) -> threading.Thread:
        """A request the demo upstream holds for SLOW_MS, returned once the upstream has
        read it; the thread's `result` holds (status, headers, body) or the error."""
        result = {}

        def slow_request():
            started = time.monotonic()
            try:
                result["response"] = request(port, "GET", f"/__slow/{SLOW_MS}", timeout=10.0)
            except OSError as e:
                result["error"] = e
            result["seconds"] = time.monotonic() - started
        thread = threading.Thread(target=slow_request)
        thread.result = result
        # Every /__stats call counts as a request too (scripts/run's readiness probes
        # among them): the slow request is in the count once it exceeds our calls.
        baseline = echo_stats(upstream_port)["requests"]
        calls = [0]

        def upstream_has_it():
            calls[0] += 1
            return echo_stats(upstream_port)["requests"] - baseline - calls[0] >= 1
        thread.start()
        wait_until(upstream_has_it, 5.0, interval=0.01, message="the slow request upstream")
        return thread

    def assert_slow_request_completed(self, thread: threading.Thread):
        thread.join(15)
        self.assertFalse(thread.is_alive())
        self.assertNotIn("error", thread.result, self.script_stderr())
        status, _, body = thread.result["response"]
        self.assertEqual(status, 200, f"{body!r}\n{self.script_stderr()}")
        self.assertEqual(json.loads(body)["target"], f"/__slow/{SLOW_MS}")
        self.assertGreaterEqual(thread.result["seconds"], SLOW_MS / 1000 * 0.9)

    def test_ctrl_c_lets_the_gateway_drain_before_the_demo_upstream_and_redis_stop(self):
        upstream_port, redis_port = free_port(), free_port()
        config = self.limited_config(upstream_port, redis_port, drain_timeout_ms=10000)
        self.run_script(self.write_config(config))
        port = int(config["server"]["listen"].rsplit(":", 1)[1])
        self.wait_serving(int(config["admin"]["listen"].rsplit(":", 1)[1]))
        self.assertEqual(sorted(self.started.values()), ["redis-server", "sluice", "sluice-echo"],
                         self.script_stderr())

        slow = self.start_slow_request(port, upstream_port)
        self.script.send_signal(signal.SIGINT)
        self.assert_slow_request_completed(slow)

        self.assertEqual(self.script.wait(20), 130, self.script_stderr())
        self.assert_all_gone()
        stderr = self.script_stderr()
        self.assertLess(stderr.index("the gateway drained and exited"),
                        stderr.index("stopped the demo upstream and Redis"), stderr)

    def test_ctrl_c_drains_when_the_reader_of_the_output_is_gone(self):
        # scripts/run | tee log: Ctrl-C ends tee too, and every later log line of the
        # script or the gateway (info: "draining", the access log) meets a closed pipe.
        upstream_port, redis_port = free_port(), free_port()
        config = self.limited_config(upstream_port, redis_port, drain_timeout_ms=10000)
        config["log"] = {"level": "info", "access_log": True}
        self.run_script(self.write_config(config), pipe=True)
        port = int(config["server"]["listen"].rsplit(":", 1)[1])
        self.wait_serving(int(config["admin"]["listen"].rsplit(":", 1)[1]))

        slow = self.start_slow_request(port, upstream_port)
        self.script.stdout.close()
        self.script.send_signal(signal.SIGINT)
        self.assert_slow_request_completed(slow)
        self.assertEqual(self.script.wait(20), 130)
        self.assert_all_gone()

    def test_upstream_servers_in_a_block_list_each_get_a_demo_upstream(self):
        port, admin_port = free_port(), free_port()
        first, second = free_port(), free_port()
        path = self.write_config(f"""\
server:
  listen: "127.0.0.1:{port}"
  threads: 1
admin:
  listen: "127.0.0.1:{admin_port}"
upstreams:
  demo:
    servers:
      - "127.0.0.1:{first}"
      - 127.0.0.1:{second}
routes:
  - name: all
    match:
      path_prefix: /
    upstream: demo
    limits: []
""")
        self.run_script(path)
        self.wait_serving(admin_port, redis=False)
        # No route has limits: no Redis.
        self.assertEqual(sorted(self.started.values()), ["sluice", "sluice-echo", "sluice-echo"],
                         self.script_stderr())
        before = {p: echo_stats(p)["requests"] for p in (first, second)}
        # Round robin: both demo upstreams answer through the gateway.
        for _ in range(4):
            status, _, body = request(port, "GET", "/through")
            self.assertEqual(status, 200, body)
        # Requests each got (the /__stats calls themselves count once each).
        got = {p: echo_stats(p)["requests"] - before[p] - 1 for p in (first, second)}
        self.assertEqual(sum(got.values()), 4, got)
        self.assertGreaterEqual(min(got.values()), 1, got)

        self.script.send_signal(signal.SIGTERM)
        self.assertEqual(self.script.wait(20), 143, self.script_stderr())
        self.assert_all_gone()

    def test_servers_already_running_are_used_and_left_running(self):
        echo = self.start_echo()
        redis = self.start_redis()
        config = self.limited_config(echo.port, redis.port)
        self.run_script(self.write_config(config))
        port = int(config["server"]["listen"].rsplit(":", 1)[1])
        self.wait_serving(int(config["admin"]["listen"].rsplit(":", 1)[1]))
        self.assertEqual(list(self.started.values()), ["sluice"], self.script_stderr())
        status, headers, _ = request(port, "GET", "/x")
        self.assertEqual(status, 200)
        self.assertEqual(headers["X-RateLimit-Limit"], "100")  # decided by that Redis

        self.script.send_signal(signal.SIGINT)
        self.assertEqual(self.script.wait(20), 130, self.script_stderr())
        self.assert_all_gone()
        self.assertTrue(echo.alive() and redis.alive(), "scripts/run stopped what it did not start")
        self.assertIn("requests", echo_stats(echo.port))

    def assert_decides_then_stops(self, config, signum, code):
        """Requests are decided by Redis; the signal stops the script with `code` and
        everything it started."""
        port = int(config["server"]["listen"].rsplit(":", 1)[1])
        for expected in ("99", "98"):
            status, h, _ = request(port, "GET", "/x")
            self.assertEqual((status, h.get("X-RateLimit-Remaining")), (200, expected),
                             self.script_stderr())
        self.script.send_signal(signum)
        self.assertEqual(self.script.wait(30), code, self.script_stderr())
        self.assert_all_gone()

    def redis_processes(self) -> list:
        return sorted(c for c in self.started.values() if c.startswith("redis"))

    def test_redis_cluster_option_brings_up_a_local_cluster(self):
        if not shutil.which("redis-cli"):
            self.skipTest("redis-cli not installed")
        config = self.limited_config(free_port(), free_port())
        self.run_script(self.write_config(config), options=("--redis", "cluster"))
        self.wait_serving(int(config["admin"]["listen"].rsplit(":", 1)[1]), timeout=90)
        self.assertEqual(self.redis_processes(), ["redis-server"] * 6, self.script_stderr())
        self.assertIn("with its redis section pointed at a local cluster", self.script_stderr())
        self.assert_decides_then_stops(config, signal.SIGINT, 130)

    def test_a_sentinel_config_on_free_loopback_ports_gets_a_local_sentinel_set(self):
        if not shutil.which("redis-sentinel"):
            self.skipTest("redis-sentinel not installed")
        sentinels = [f"127.0.0.1:{free_port()}" for _ in range(3)]
        config = self.limited_config(free_port(), 6379)
        config["redis"] = {"url": f"redis://{sentinels[0]}/0", "topology": "sentinel",
                           "nodes": sentinels[1:], "sentinel_master": "local-primary"}
        self.run_script(self.write_config(config))
        self.wait_serving(int(config["admin"]["listen"].rsplit(":", 1)[1]), timeout=90)
        self.assertEqual(len(self.redis_processes()), 5, self.started)  # 2 servers, 3 sentinels
        port = int(sentinels[1].rsplit(":", 1)[1])
        master = redis_call(port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "local-primary")
        self.assertIsInstance(master, list, master)
        self.assert_decides_then_stops(config, signal.SIGTERM, 143)

    def test_topology_nodes_partly_running_are_refused(self):
        config = self.limited_config(free_port(), free_port())
        redis = self.start_redis()
        config["redis"] = {"url": f"redis://{redis.address}/0", "topology": "cluster",
                           "nodes": [f"127.0.0.1:{free_port()}"]}
        stderr = self.refused(config)
        self.assertIn("some answer and some are free", stderr)
        self.assertTrue(redis.alive())

    def refused(self, config) -> str:
        """Runs scripts/run on a config it must refuse; returns its stderr."""
        port = int(config["server"]["listen"].rsplit(":", 1)[1])
        self.run_script(self.write_config(config))
        try:
            code = self.script.wait(START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.fail(f"scripts/run is still running\n{self.script_stderr()}")
        stderr = self.script_stderr()
        self.assertEqual(code, 1, stderr)
        # Nothing was started: no gateway line, no listener, no child left.
        self.assertNotIn("sluice (pid", stderr)
        self.assertNotIn("demo upstream (sluice-echo, pid", stderr)
        self.assertNotIn("redis-server (pid", stderr)
        with self.assertRaises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
        return stderr

    def test_an_upstream_port_held_by_something_else_is_refused(self):
        upstream_port, redis_port = free_port(), free_port()
        holder = Holder(upstream_port)
        self.addCleanup(holder.close)
        stderr = self.refused(self.limited_config(upstream_port, redis_port))
        self.assertIn(f"127.0.0.1:{upstream_port} (upstream \"demo\") is in use by something "
                      "that is not the demo upstream (sluice-echo)", stderr)
        self.assertGreaterEqual(holder.connections, 1)
        with self.assertRaises(ConnectionRefusedError):  # no Redis started either
            socket.create_connection(("127.0.0.1", redis_port), timeout=1.0).close()

    def test_an_upstream_port_held_by_another_http_server_is_refused(self):
        upstream_port, redis_port = free_port(), free_port()
        server = http.server.ThreadingHTTPServer(("127.0.0.1", upstream_port), NotEchoHandler)
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        self.addCleanup(server.server_close)
        self.addCleanup(server.shutdown)
        stderr = self.refused(self.limited_config(upstream_port, redis_port))
        self.assertIn(f"127.0.0.1:{upstream_port} (upstream \"demo\") is in use by something "
                      "that is not the demo upstream (sluice-echo): GET /__stats answered "
                      "200 OK (Server: other-server", stderr)

    def test_the_gateways_own_port_in_use_is_refused(self):
        upstream_port, redis_port = free_port(), free_port()
        config = self.limited_config(upstream_port, redis_port)
        admin = config["admin"]["listen"]
        holder = Holder(int(admin.rsplit(":", 1)[1]))
        self.addCleanup(holder.close)
        stderr = self.refused(config)
        self.assertIn(f"{admin} (the gateway's admin address) is already in use", stderr)
        for port in (upstream_port, redis_port):  # nothing started
            with self.assertRaises(ConnectionRefusedError):
                socket.create_connection(("127.0.0.1", port), timeout=1.0).close()

    def test_a_redis_port_held_by_something_else_is_refused(self):
        upstream_port, redis_port = free_port(), free_port()
        holder = Holder(redis_port)
        self.addCleanup(holder.close)
        stderr = self.refused(self.limited_config(upstream_port, redis_port))
        self.assertIn(f"127.0.0.1:{redis_port} (redis.url) is in use by something that is "
                      "not a Redis: PING answered b'hello from something else'", stderr)
        with self.assertRaises(ConnectionRefusedError):  # no demo upstream started either
            socket.create_connection(("127.0.0.1", upstream_port), timeout=1.0).close()


if __name__ == "__main__":
    unittest.main()
