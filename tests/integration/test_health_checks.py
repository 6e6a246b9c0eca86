"""Active upstream health checks through the real sluice binary.

Each upstream server is a small HTTP server in this process (HealthServer): it
answers /health with a status the test sets, and any other path with 200 and its
own name, counting both. Waits poll a condition, bounded a little beyond
interval_ms * threshold (plus the check timeout): the time the state machine
needs by design.
"""

import http.server
import json
import signal
import threading
import time
import unittest

from harness import ProcessTestCase, closed_port, gateway_config, request, wait_until

INTERVAL_MS = 300
TIMEOUT_MS = 200
HEALTHY_THRESHOLD = 2
UNHEALTHY_THRESHOLD = 2
# Beyond interval * threshold + timeout: the main thread's scheduling, a loaded machine.
SLACK_S = 1.5


def bound(threshold: int) -> float:
    return (INTERVAL_MS * threshold + TIMEOUT_MS) / 1000 + SLACK_S


class HealthServer:
    """An upstream server whose /health status can be flipped."""

    def __init__(self, name: str):
        self.name = name
        self.lock = threading.Lock()
        self.health_status = 200
        self.flipped_at = 0     # index in checks of the first check after set_health()
        self.checks = []        # (time, status answered, headers) of each /health request
        self.requests = 0       # other requests
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_GET(self):
                if self.path == "/health":
                    with server.lock:
                        status = server.health_status
                        server.checks.append((time.monotonic(), status, dict(self.headers)))
                    body = b"checked\n"
                else:
                    with server.lock:
                        server.requests += 1
                    status, body = 200, server.name.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.address = f"127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def set_health(self, status: int):
        with self.lock:
            self.health_status = status
            self.flipped_at = len(self.checks)

    def good_checks_since_flip(self) -> int:
        with self.lock:
            return sum(1 for _, status, _ in self.checks[self.flipped_at:] if status == 200)

    def check_count(self) -> int:
        with self.lock:
            return len(self.checks)

    def request_count(self) -> int:
        with self.lock:
            return self.requests

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(5)


class HealthCheckTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.a = self.start_server("a")
        self.b = self.start_server("b")

    def start_server(self, name):
        server = HealthServer(name)
        self.addCleanup(server.close)
        return server

    def config(self, servers, health_check=True, **check):
        upstream = {"servers": servers}
        if health_check:
            upstream["health_check"] = {
                "path": "/health", "interval_ms": INTERVAL_MS, "timeout_ms": TIMEOUT_MS,
                "healthy_threshold": HEALTHY_THRESHOLD,
                "unhealthy_threshold": UNHEALTHY_THRESHOLD, **check}
        return gateway_config({"app": upstream},
                              [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "app"}],
                              port=getattr(self, "port", None),
                              admin_port=getattr(self, "admin_port", None),
                              log={"level": "info", "access_log": False})  # transitions: info

    def start_gateway(self, servers=None):
        self.gw = self.start_sluice(self.config(servers or [self.a.address, self.b.address]))
        self.port, self.admin_port = self.gw.port, self.gw.admin_port
        return self.gw

    def bodies(self, n=8):
        """The server names of n requests; a status other than 200 as the status."""
        out = []
        for i in range(n):
            status, _, body = request(self.gw.port, "GET", f"/item/{i}")
            out.append(body.decode() if status == 200 else status)
        return out

    def healthy_gauge(self, server):
        return self.gw.metric("sluice_upstream_healthy", upstream="app", server=server.address)

    def readyz_servers(self):
        status, doc = self.gw.readyz()
        self.assertEqual(status, 200, doc)  # upstream health never makes the gateway unready
        return {s["server"]: s["healthy"] for s in doc["upstreams"]["app"]["servers"]}, doc

    def wait_only(self, names, timeout, message):
        return wait_until(lambda: set(self.bodies()) == set(names), timeout, interval=0.02,
                          message=message)

    def test_check_request_and_one_checker_per_server(self):
        self.start_gateway()
        wait_until(lambda: self.a.check_count() >= 4, 4 * bound(1), message="4 checks of a")
        with self.a.lock:
            checks = list(self.a.checks)
        headers = {k.lower(): v for k, v in checks[0][2].items()}
        self.assertEqual(headers.get("host"), self.a.address)
        self.assertEqual(headers.get("user-agent"), "sluice-health-check")
        self.assertEqual(headers.get("connection"), "close")
        # Two workers, but one checker per server per process: never more checks
        # than intervals elapsed (one checker per worker would double them).
        elapsed = checks[-1][0] - checks[0][0]
        self.assertLessEqual(len(checks) - 1, elapsed / (INTERVAL_MS / 1000) + 1, checks)
        self.assertEqual(self.healthy_gauge(self.a), 1)
        self.assertGreaterEqual(self.gw.metric("sluice_upstream_health_checks_total",
                                               upstream="app", server=self.a.address,
                                               result="ok"), 1)
        servers, _ = self.readyz_servers()
        self.assertEqual(servers, {self.a.address: True, self.b.address: True})

    def test_failing_server_is_skipped_then_comes_back(self):
        self.start_gateway()
        self.assertEqual(set(self.bodies()), {"a", "b"})

        self.a.set_health(503)
        self.wait_only({"b"}, bound(UNHEALTHY_THRESHOLD), "a to stop receiving requests")
        before = self.a.request_count()
        self.assertEqual(set(self.bodies(10)), {"b"})
        self.assertEqual(self.a.request_count(), before)
        self.assertEqual(self.healthy_gauge(self.a), 0)
        self.assertEqual(self.healthy_gauge(self.b), 1)
        self.assertGreaterEqual(self.gw.metric("sluice_upstream_health_checks_total",
                                               upstream="app", server=self.a.address,
                                               result="fail"), UNHEALTHY_THRESHOLD)
        servers, doc = self.readyz_servers()
        self.assertEqual(servers, {self.a.address: False, self.b.address: True})
        self.assertEqual(doc["upstreams"]["app"]["healthy_servers"], 1)
        self.assertEqual(doc["status"], "ready")

        self.a.set_health(200)
        self.wait_only({"a", "b"}, bound(HEALTHY_THRESHOLD), "a to receive requests again")
        self.assertGreaterEqual(self.a.good_checks_since_flip(), HEALTHY_THRESHOLD)
        self.assertEqual(self.healthy_gauge(self.a), 1)
        self.assertIn(f"upstream app server {self.a.address} is unhealthy", self.gw.stderr())
        self.assertIn(f"upstream app server {self.a.address} is healthy again", self.gw.stderr())

    def test_every_server_unhealthy_gives_503(self):
        self.start_gateway()
        self.a.set_health(500)
        self.b.set_health(500)
        wait_until(lambda: set(self.bodies()) == {503}, bound(UNHEALTHY_THRESHOLD),
                   interval=0.02, message="503 with every server unhealthy")
        status, _, body = request(self.gw.port, "GET", "/item")
        self.assertEqual(status, 503)
        self.assertIn("no healthy upstream server", json.loads(body)["message"])
        self.assertGreaterEqual(self.gw.metric("sluice_upstream_requests_total", upstream="app",
                                               outcome="unhealthy"), 1)
        servers, doc = self.readyz_servers()
        self.assertEqual(servers, {self.a.address: False, self.b.address: False})
        self.assertEqual(doc["upstreams"]["app"]["healthy_servers"], 0)

        self.b.set_health(200)
        self.wait_only({"b"}, bound(HEALTHY_THRESHOLD), "b to serve again")

    def test_unreachable_server_is_marked_unhealthy(self):
        dead = f"127.0.0.1:{closed_port()}"
        self.start_gateway([dead, self.b.address])
        wait_until(lambda: self.gw.metric("sluice_upstream_healthy", upstream="app",
                                          server=dead) == 0,
                   bound(UNHEALTHY_THRESHOLD), message="the refusing server to be unhealthy")
        self.assertEqual(set(self.bodies()), {"b"})
        servers, _ = self.readyz_servers()
        self.assertEqual(servers, {dead: False, self.b.address: True})

    def test_reload_keeps_state_and_follows_the_config(self):
        self.start_gateway()
        self.a.set_health(503)
        self.wait_only({"b"}, bound(UNHEALTHY_THRESHOLD), "a to stop receiving requests")

        # A changed check: the state of a server checked before and after is kept.
        c = self.start_server("c")
        self.gw.reload(self.config([self.a.address, self.b.address, c.address],
                                   expected_status=[200, 204]))
        wait_until(lambda: self.gw.metric("sluice_config_reloads_total", result="ok") == 1,
                   message="the reload")
        self.assertEqual(self.healthy_gauge(self.a), 0)
        self.assertEqual(set(self.bodies(12)), {"b", "c"})
        servers, _ = self.readyz_servers()
        self.assertEqual(servers, {self.a.address: False, self.b.address: True,
                                   c.address: True})
        wait_until(lambda: c.check_count() >= 1, bound(1), message="c to be checked")

        # No more checks: every server is picked again, and the checkers stop.
        self.gw.reload(self.config([self.a.address, self.b.address], health_check=False))
        wait_until(lambda: self.gw.metric("sluice_config_reloads_total", result="ok") == 2,
                   message="the second reload")
        self.wait_only({"a", "b"}, bound(0), "a to receive requests without checks")
        self.assertIsNone(self.healthy_gauge(self.a))
        _, doc = self.gw.readyz()
        self.assertNotIn("upstreams", doc)
        checks = self.a.check_count()
        time.sleep(3 * INTERVAL_MS / 1000)  # an absence cannot be polled for
        self.assertEqual(self.a.check_count(), checks, "a checker still runs after the reload")

    def test_drain_stops_the_checkers(self):
        self.start_gateway()
        wait_until(lambda: self.a.check_count() >= 1, bound(1), message="a first check")
        self.gw.signal(signal.SIGTERM)
        self.assertEqual(self.gw.wait(10), 0)
        checks = self.a.check_count()
        time.sleep(2 * INTERVAL_MS / 1000)  # an absence cannot be polled for
        self.assertEqual(self.a.check_count(), checks)


if __name__ == "__main__":
    unittest.main()
