"""A route's retry policy (routes[].retry) and its upstream's retry budget
(upstreams.NAME.retry_budget), through the real sluice binary, real Python
HTTP/1.1 upstreams that answer as scripted and record what they got, and
python3-h2 upstreams (testkit/h2server.py):

- a 503 goes to another server, and the client sees only the good answer; the
  access log names the attempts and the servers tried, in order; without the
  policy the 503s reach the client;
- the attempts are bounded, each to a server not tried yet while one is up
  (one server alone is tried again), and the last answer is relayed;
- a POST is not retried without retry_non_idempotent; with it its body is sent
  again whole, and a body beyond max_replay_bytes is not retried;
- per_try_timeout_ms gives up on a server that hangs and tries the next;
- the retry budget refuses retries beyond its share, counted in
  sluice_upstream_retry_budget_exhausted_total;
- the limiter decides a retried request once;
- over HTTP/2 (client and upstream): a 503 and a gRPC UNAVAILABLE are retried.
"""

import json
import threading
import time
import unittest
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import (Client, ProcessTestCase, free_port, gateway_config, limit, request,
                     wait_redis_ready, wait_until)
from test_audit import last_line
from testkit.h2client import H2Client
from testkit.h2server import H2Upstream


class ScriptedUpstream:
    """A threaded HTTP/1.1 upstream: each request (any method, a Content-Length
    or chunked body) is recorded as (method, path, body) in `got`, then answered with the
    next status of `script` (then `status`), after `delay` seconds."""

    def __init__(self, status=200, script=(), delay=0.0):
        self.status = status
        self.script = list(script)
        self.delay = delay
        self.got = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def read_body(self):
                if self.headers.get("Transfer-Encoding", "").lower() != "chunked":
                    n = int(self.headers.get("Content-Length") or 0)
                    return self.rfile.read(n) if n else b""
                body = b""
                while True:
                    size = int(self.rfile.readline().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b""):
                            pass  # trailers
                        return body
                    body += self.rfile.read(size)
                    self.rfile.readline()

            def answer(self):
                body = self.read_body()
                with upstream.lock:
                    upstream.got.append((self.command, self.path, body))
                    status = upstream.script.pop(0) if upstream.script else upstream.status
                if upstream.delay:
                    time.sleep(upstream.delay)
                reply = json.dumps({"server": upstream.address, "body_bytes": len(body)}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = answer

        class Server(ThreadingHTTPServer):
            request_queue_size = 128  # (5 by default: a burst of connections is refused)

        self.server = Server(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self):
        with self.lock:
            return len(self.got)

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


FAST_BACKOFF = {"base_ms": 1, "max_ms": 5}


class RetriesTest(ProcessTestCase):
    def upstream(self, **options) -> ScriptedUpstream:
        server = ScriptedUpstream(**options)
        self.addCleanup(server.stop)
        return server

    def start(self, servers, retry=None, threads=1, upstream_extra=None, methods=None,
              access_log=False, **sections):
        route = {"name": "app", "match": {"path_prefix": "/"}, "upstream": "app"}
        if methods:
            route["match"]["methods"] = methods
        if retry is not None:
            route["retry"] = retry
        route.update(sections.pop("route_extra", {}))
        config = gateway_config(
            {"app": {"servers": [s.address if hasattr(s, "address") else s for s in servers],
                     **(upstream_extra or {})}},
            [route], server={"threads": threads, "http2": {"enabled": True}},
            log={"level": "warn", "access_log": access_log}, **sections)
        return self.start_sluice(config)

    def test_503_goes_to_another_server_and_the_log_says_so(self):
        bad, good = self.upstream(status=503), self.upstream()
        gw = self.start([bad, good], retry={"attempts": 2, "on": [503], "backoff": FAST_BACKOFF},
                        access_log=True, methods=["GET"])
        with Client(gw.port) as client:
            for i in range(20):
                status, _, body = client.request("GET", f"/r/{i}")
                self.assertEqual(status, 200, body)
                self.assertEqual(json.loads(body)["server"], good.address)
            # Sluice's own reply next on the same connection tried no server.
            self.assertEqual(client.request("DELETE", "/local")[0], 405)
        local = last_line(gw, "/local")
        self.assertEqual((local["attempts"], local["servers_tried"]), (0, []))
        # Round robin sent every other request to the bad server first; each
        # went to the good one after.
        self.assertEqual(bad.count(), 10)
        self.assertEqual(good.count(), 20)
        retried = [p for _, p, _ in bad.got]
        line = last_line(gw, retried[-1])
        self.assertEqual((line["status"], line["attempts"]), (200, 2))
        self.assertEqual(line["servers_tried"], [bad.address, good.address])
        self.assertEqual(line["upstream"], good.address)
        self.assertEqual(gw.metric("sluice_upstream_retries_total"), 10)

    def test_without_a_policy_the_503s_reach_the_client(self):
        bad, good = self.upstream(status=503), self.upstream()
        gw = self.start([bad, good])
        with Client(gw.port) as client:
            statuses = [client.request("GET", f"/n/{i}")[0] for i in range(20)]
        self.assertEqual(statuses.count(503), 10)
        self.assertEqual(bad.count() + good.count(), 20)

    def test_attempts_are_bounded_and_go_to_servers_not_tried(self):
        servers = [self.upstream(status=503) for _ in range(4)]
        gw = self.start(servers, retry={"attempts": 3, "on": ["gateway_error"],
                                        "backoff": FAST_BACKOFF}, access_log=True)
        for i in range(8):
            status, _, body = request(gw.port, "GET", f"/b/{i}")
            self.assertEqual(status, 503)  # the last answer, relayed
            line = last_line(gw, f"/b/{i}")
            self.assertEqual(line["attempts"], 3)
            self.assertEqual(len(set(line["servers_tried"])), 3, line["servers_tried"])
        self.assertEqual(sum(s.count() for s in servers), 24)

    def test_one_server_alone_is_tried_again(self):
        flaky = self.upstream(script=[503, 503])
        gw = self.start([flaky], retry={"attempts": 3, "on": [503], "backoff": FAST_BACKOFF})
        status, _, body = request(gw.port, "GET", "/again")
        self.assertEqual(status, 200, body)
        self.assertEqual(flaky.count(), 3)

    def test_post_is_retried_only_with_the_opt_in_and_its_body_goes_whole(self):
        flaky = self.upstream(script=[503])
        gw = self.start([flaky], retry={"attempts": 2, "on": [503], "backoff": FAST_BACKOFF})
        status, _, _ = request(gw.port, "POST", "/p", body=b"x" * 100)
        self.assertEqual(status, 503)  # not idempotent: relayed as it came
        self.assertEqual(flaky.count(), 1)

        flaky2 = self.upstream(script=[503])
        gw2 = self.start([flaky2], retry={"attempts": 2, "on": [503], "backoff": FAST_BACKOFF,
                                          "retry_non_idempotent": True})
        body = bytes(range(256)) * 40  # 10 KiB, in several reads
        status, _, reply = request(gw2.port, "POST", "/p", body=body)
        self.assertEqual(status, 200, reply)
        self.assertEqual([b for _, _, b in flaky2.got], [body, body])

    def test_chunked_bodies_go_again_whole_even_empty(self):
        flaky = self.upstream(script=[503])
        gw = self.start([flaky], retry={"attempts": 2, "on": [503], "backoff": FAST_BACKOFF})
        status, _, _ = request(gw.port, "PUT", "/empty", body=iter([]), chunked=True)
        self.assertEqual(status, 200)
        flaky.script = [503]
        pieces = [b"a" * 3000, b"b" * 5000, b"c"]
        status, _, _ = request(gw.port, "PUT", "/pieces", body=iter(pieces), chunked=True)
        self.assertEqual(status, 200)
        self.assertEqual([(p, b) for _, p, b in flaky.got],
                         [("/empty", b""), ("/empty", b""),
                          ("/pieces", b"".join(pieces)), ("/pieces", b"".join(pieces))])

    def test_a_body_beyond_max_replay_bytes_is_not_retried(self):
        flaky = self.upstream(script=[503])
        gw = self.start([flaky], retry={"attempts": 2, "on": [503], "backoff": FAST_BACKOFF,
                                        "max_replay_bytes": 1024})
        status, _, _ = request(gw.port, "PUT", "/big", body=b"y" * 4096)
        self.assertEqual(status, 503)
        self.assertEqual(flaky.count(), 1)
        status, _, _ = request(gw.port, "PUT", "/small", body=b"y" * 1000)
        self.assertEqual(status, 200)

    def test_per_try_timeout_gives_up_on_a_hanging_server(self):
        hanging, good = self.upstream(delay=3.0), self.upstream()
        gw = self.start([hanging, good], retry={"attempts": 2, "on": ["timeout"],
                                                "per_try_timeout_ms": 200,
                                                "backoff": FAST_BACKOFF})
        with Client(gw.port) as client:
            for i in range(4):
                status, _, body = client.request("GET", f"/t/{i}")
                self.assertEqual(status, 200, body)
        self.assertEqual(hanging.count(), 2)
        self.assertEqual(good.count(), 4)
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="app",
                                   outcome="timeout"), 2)

    def test_the_budget_refuses_retries_beyond_its_share(self):
        slow = [self.upstream(status=503, delay=0.4) for _ in range(2)]
        gw = self.start(slow, retry={"attempts": 2, "on": [503], "backoff": {"base_ms": 0,
                                                                             "max_ms": 0}},
                        upstream_extra={"retry_budget": {"percent": 0, "min_concurrent": 1}})
        statuses = []

        def client(i):
            statuses.append(request(gw.port, "GET", f"/budget/{i}")[0])

        threads = [threading.Thread(target=client, args=(i,)) for i in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        self.assertEqual(statuses, [503] * 6)
        # One retry in flight at a time: the first failure's took the budget
        # while the other five failed.
        self.assertEqual(gw.metric("sluice_upstream_retry_budget_exhausted_total",
                                   upstream="app"), 5)
        self.assertEqual(sum(s.count() for s in slow), 7)

    def test_the_limiter_decides_a_retried_request_once(self):
        redis = self.start_redis()
        servers = [self.upstream(status=503) for _ in range(3)]
        gw = self.start(servers, retry={"attempts": 3, "on": [503], "backoff": FAST_BACKOFF},
                        route_extra={"limits": ["per_ip"]},
                        redis={"url": f"redis://127.0.0.1:{redis.port}/0"},
                        limits={"per_ip": limit("ip", 5)})
        wait_redis_ready(gw)
        status, headers, _ = request(gw.port, "GET", "/once")
        self.assertEqual(status, 503)
        self.assertEqual(sum(s.count() for s in servers), 3)
        self.assertEqual(headers.get("x-ratelimit-remaining"), "4")

    def test_http2_client_and_upstreams(self):
        first, second = H2Upstream(), H2Upstream()
        for server in (first, second):
            self.addCleanup(server.stop)
        # Each server fails once: the third attempt goes to either again.
        first.fail_next = second.fail_next = 1
        gw = self.start([first, second], upstream_extra={"protocol": "h2c"},
                        retry={"attempts": 3, "on": [503, "unavailable"],
                               "backoff": FAST_BACKOFF, "retry_non_idempotent": True})
        client = H2Client(gw.port)
        try:
            r = client.request("PUT", "/h2", body=b"z" * 3000)
            self.assertEqual(r.status, 200, bytes(r.body))
            self.assertEqual(json.loads(bytes(r.body))["body_bytes"], 3000)
            self.assertEqual(first.failed_bodies + second.failed_bodies, [3000, 3000])
            # A gRPC call answered UNAVAILABLE (Trailers-Only) goes to the other server.
            first.fail_next = second.fail_next = 1
            first.fail_grpc = second.fail_grpc = True
            r = client.request("POST", "/pkg.Svc/Call", body=b"\0\0\0\0\0",
                               headers=[("content-type", "application/grpc"), ("te", "trailers")])
            self.assertEqual(r.status, 200)
            self.assertEqual(r.header("x-upstream-trailer"), "done")  # the other server's answer
        finally:
            client.close()
        self.assertEqual(len(first.failed_bodies) + len(second.failed_bodies), 4)


if __name__ == "__main__":
    unittest.main()
