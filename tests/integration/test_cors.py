"""CORS (routes[].cors) through the real sluice binary, a real redis-server, a
Python upstream that sends CORS headers of its own, and headless Chromium
(Debian's chromium) loading a page from another origin.

- A preflight is answered by the gateway (200, the allowed origin, methods and
  headers), spends no token and never reaches the upstream, even on a route
  whose methods lack OPTIONS; one from another origin gets 403, counted.
- The response to an allowed origin carries Access-Control-Allow-Origin,
  Vary: Origin beside the upstream's own Vary, and Access-Control-Expose-Headers
  naming the rate-limit headers, also on a 429 the gateway answers itself; the
  upstream's own Access-Control-* headers are dropped. Another origin's
  request gets none, and a request without Origin is as before.
- In Chromium, a page of an allowed origin reads RateLimit from a 200 and
  Retry-After from a 429 across origins; a page of another origin is refused.
"""

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import (ProcessTestCase, PythonUpstream, free_port, gateway_config, limit,
                     metric_sum, request, route, wait_redis_ready, wait_until)
from testkit.h2client import H2Client

CHROMIUM = shutil.which("chromium")
# A preflight is needed for this header (it is not CORS-safelisted).
KEY_HEADER = "X-Api-Key"

PAGE = """<!doctype html><meta charset="utf-8"><title>cors</title><script>
const gateway = "http://127.0.0.1:GATEWAY_PORT";
async function call() {
  return fetch(gateway + "/api/data", {headers: {"X-Api-Key": "page-key"}});
}
async function run() {
  const out = {};
  try {
    const first = await call();
    out.first = {status: first.status, ratelimit: first.headers.get("RateLimit"),
                 remaining: first.headers.get("X-RateLimit-Remaining")};
    let last = first;
    for (let i = 0; i < 6 && last.status !== 429; i++) last = await call();
    out.last = {status: last.status, retry_after: last.headers.get("Retry-After"),
                ratelimit: last.headers.get("RateLimit")};
  } catch (e) {
    out.error = String(e);
  }
  await fetch("/result", {method: "POST", body: JSON.stringify(out)});
}
run();
</script>"""


class PageServer:
    """Serves `page` (set once the gateway's port is known) at / on a free
    127.0.0.1 port and keeps what the page POSTs to /result."""

    def __init__(self):
        self.page = b""
        self.results = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(owner.page)))
                self.end_headers()
                self.wfile.write(owner.page)

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                owner.results.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class CorsTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()

        self.handled = []  # the requests the upstream answered, by method and path

        def answer(handler, _query):
            self.handled.append((handler.command, handler.path))
            body = b'{"ok":true}'
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Access-Control-Allow-Origin", "*")  # the upstream's own say
            handler.send_header("Access-Control-Allow-Methods", "DELETE")
            handler.send_header("Vary", "Accept-Encoding")
            handler.send_header("Content-Length", str(len(body)))
            handler.end_headers()
            handler.wfile.write(body)

        self.upstream = PythonUpstream(answer)
        self.addCleanup(self.upstream.stop)

    def start(self, origins, capacity=3):
        routes = [route("api", "/api", ["shared"],
                        cors={"allow_origins": origins, "allow_headers": [KEY_HEADER],
                              "max_age": 600})]
        routes[0]["match"]["methods"] = ["GET"]
        gw = self.start_sluice(gateway_config(
            {"echo": [self.upstream.address]}, routes,
            server={"http2": {"enabled": True}},
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 2000},
            limits={"shared": limit("route", capacity)}))
        wait_redis_ready(gw)
        return gw

    def upstream_requests(self, gw):
        """Requests the upstream answered (a stale pooled connection's retry is
        one request, though the gateway counts two attempts)."""
        return len(self.handled)

    def test_preflight_is_answered_here_and_spends_nothing(self):
        gw = self.start(["https://app.example.com", "https://*.example.org"])
        status, headers, body = request(gw.port, "OPTIONS", "/api/data", headers={
            "Origin": "https://app.example.com", "Access-Control-Request-Method": "GET",
            "Access-Control-Request-Headers": "x-api-key"})
        self.assertEqual(status, 200, body)
        self.assertEqual(body, b"")
        self.assertEqual(headers["Access-Control-Allow-Origin"], "https://app.example.com")
        self.assertEqual(headers["Access-Control-Allow-Methods"], "GET")
        self.assertEqual(headers["Access-Control-Allow-Headers"], KEY_HEADER)
        self.assertEqual(headers["Access-Control-Max-Age"], "600")
        self.assertIn("Origin", headers["Vary"])
        self.assertNotIn("Content-Type", headers)
        self.assertNotIn("X-RateLimit-Remaining", headers)
        # Another origin's preflight: 403, counted; neither reached the upstream.
        status, headers, _ = request(gw.port, "OPTIONS", "/api/data", headers={
            "Origin": "https://evil.example.com", "Access-Control-Request-Method": "GET"})
        self.assertEqual(status, 403)
        self.assertNotIn("Access-Control-Allow-Origin", headers)
        self.assertEqual(metric_sum(gw, "sluice_access_denied_total", route="api",
                                    reason="cors_origin"), 1)
        self.assertEqual(self.upstream_requests(gw), 0)
        # The route's one bucket is whole: the first request takes the first token.
        status, headers, _ = request(gw.port, "GET", "/api/data",
                                     headers={"Origin": "https://a.example.org"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["X-RateLimit-Remaining"], "2")
        # A plain OPTIONS (no preflight) is routed as before: this route takes GET only.
        self.assertEqual(request(gw.port, "OPTIONS", "/api/data")[0], 405)

    def test_responses_carry_the_headers_a_page_needs_even_a_429(self):
        gw = self.start(["https://app.example.com"], capacity=1)
        origin = {"Origin": "https://app.example.com"}
        status, headers, _ = request(gw.port, "GET", "/api/data", headers=origin)
        self.assertEqual(status, 200)
        self.assertEqual(headers.get_all("Access-Control-Allow-Origin"),
                         ["https://app.example.com"])  # the upstream's "*" is dropped
        self.assertIsNone(headers.get("Access-Control-Allow-Methods"))
        self.assertEqual(sorted(headers.get_all("Vary")), ["Accept-Encoding", "Origin"])
        exposed = [h.strip() for h in headers["Access-Control-Expose-Headers"].split(",")]
        for name in ("RateLimit", "RateLimit-Policy", "Retry-After", "X-RateLimit-Limit",
                     "X-RateLimit-Remaining", "X-RateLimit-Reset"):
            self.assertIn(name, exposed)
        status, headers, _ = request(gw.port, "GET", "/api/data", headers=origin)
        self.assertEqual(status, 429)
        self.assertEqual(headers["Access-Control-Allow-Origin"], "https://app.example.com")
        self.assertIn("Retry-After", headers["Access-Control-Expose-Headers"])
        self.assertIn("Retry-After", headers)
        # Another origin: no CORS header at all (its browser refuses the page the answer).
        _, headers, _ = request(gw.port, "GET", "/api/data",
                                headers={"Origin": "https://evil.example.com"})
        self.assertNotIn("Access-Control-Allow-Origin", headers)
        # No Origin (a server, curl): nothing CORS.
        _, headers, _ = request(gw.port, "GET", "/api/data")
        self.assertNotIn("Access-Control-Expose-Headers", headers)

    def test_http2_preflights_and_responses_alike(self):
        gw = self.start(["https://app.example.com"], capacity=1)
        c = H2Client(gw.port)
        try:
            pre = c.request("OPTIONS", "/api/data", headers=[
                ("origin", "https://app.example.com"), ("access-control-request-method", "GET")])
            first = c.request("GET", "/api/data", headers=[("origin", "https://app.example.com")])
            limited = c.request("GET", "/api/data", headers=[("origin", "https://app.example.com")])
        finally:
            c.close()
        self.assertEqual(pre.status, 200)
        self.assertEqual(pre.header("access-control-allow-origin"), "https://app.example.com")
        self.assertIsNone(pre.header("content-type"))
        self.assertEqual(first.status, 200)  # the preflight took no token
        self.assertEqual(first.header("access-control-allow-origin"), "https://app.example.com")
        self.assertEqual(limited.status, 429)
        self.assertIn("Retry-After", limited.header("access-control-expose-headers"))

    @unittest.skipUnless(CHROMIUM, "chromium is not installed (Debian's chromium)")
    def test_a_browser_reads_the_limit_headers_across_origins(self):
        allowed, other = PageServer(), PageServer()
        self.addCleanup(allowed.stop)
        self.addCleanup(other.stop)
        gw = self.start([allowed.origin], capacity=2)
        allowed.page = other.page = PAGE.replace("GATEWAY_PORT", str(gw.port)).encode()
        seen = self.browse(allowed)
        self.assertNotIn("error", seen)
        # The preflight spent nothing: the first call finds the bucket whole.
        self.assertEqual(seen["first"], {"status": 200, "ratelimit": '"shared";r=1;t=0',
                                         "remaining": "1"})
        self.assertEqual(seen["last"]["status"], 429)
        self.assertRegex(seen["last"]["retry_after"], r"^[1-9][0-9]*$")
        self.assertRegex(seen["last"]["ratelimit"], r'^"shared";r=0;t=[1-9][0-9]*$')
        # No preflight reached the upstream (a browser may send a GET again on a
        # kept-alive connection the gateway closed: the GETs are not counted).
        self.assertNotIn("OPTIONS", [method for method, _ in self.handled], self.handled)
        self.assertGreaterEqual(self.upstream_requests(gw), 2, self.handled)
        refused = self.browse(other)
        self.assertIn("Failed to fetch", refused.get("error", ""), refused)
        self.assertEqual(metric_sum(gw, "sluice_access_denied_total", route="api",
                                    reason="cors_origin"), 1)

    def browse(self, server):
        """Loads the page in headless Chromium and returns what it posted."""
        profile = tempfile.mkdtemp(prefix="sluice-chromium-")
        self.addCleanup(shutil.rmtree, profile, True)
        proc = subprocess.Popen(
            [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking", "--disable-component-update",
             "--disable-sync", "--disable-extensions", f"--user-data-dir={profile}",
             server.origin + "/"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)
        try:
            wait_until(lambda: server.results, 60, message="the page's result")
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        return server.results[0]


if __name__ == "__main__":
    unittest.main()
