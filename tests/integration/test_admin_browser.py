"""The protected admin endpoints refuse what a web browser on the admin's host could
be made to send, and check the token and those rules on the request's head, before
any byte of its body is read (real binary, real redis-server, the consumer store on).

- A cross-site "simple" request cannot mint a consumer: an import or PUT as
  text/plain or as a form gets 415 and writes nothing (one with no Content-Type
  carries Origin from a browser: 403).
- Origin of another site, Sec-Fetch-Site cross-site or same-site: 403; the admin's
  own origin and Sec-Fetch-Site same-origin or none pass.
- A Host that is neither a loopback address, localhost nor a name of admin.hosts
  (DNS rebinding) gets 403 on GET /consumers; /healthz and /metrics do not look.
- A request without the token (or refused as a browser's) is answered from its
  head: a 1 MiB Content-Length with no body sent gets its 401/403 at once, and 64
  such connections that do send their bodies leave the gateway's memory flat.
- A refused request's connection is closed after the answer (Connection: close),
  even a keep-alive GET with no body left unread.
"""

import json
import os
import socket
import time
import unittest

from harness import SANITIZED, redis_call, request, rss_kib, wait_until
from test_consumers import PREFIX, ConsumerCase

NDJSON = "application/x-ndjson"
ONE_LINE = (json.dumps({"id": "minted", "keys": ["minted-key"], "plan": "pro"}) + "\n").encode()


def read_head(sock, timeout):
    """The status of the response that `sock` receives within `timeout` s."""
    sock.settimeout(timeout)
    answer = b""
    while b"\r\n" not in answer:
        chunk = sock.recv(4096)
        if not chunk:
            break
        answer += chunk
    return int(answer.split(b" ")[1]) if answer.startswith(b"HTTP/1.1 ") else None


class AdminBrowserTest(ConsumerCase):
    def minted(self):
        return redis_call(self.redis.port, "EXISTS", f"{PREFIX}{{consumers}}:c:minted")

    def test_a_cross_site_simple_request_mints_no_consumer(self):
        gw = self.gateway()
        for content_type in ("text/plain", "application/x-www-form-urlencoded",
                             "multipart/form-data; boundary=x"):
            headers = {"Content-Type": content_type}
            with self.subTest(content_type=content_type):
                status, h, body = request(gw.admin_port, "POST", "/consumers/import",
                                          body=ONE_LINE, headers=headers)
                self.assertEqual(status, 415, body)
                self.assertEqual(h["Content-Type"], "application/problem+json")
                self.assertIn(NDJSON, json.loads(body)["detail"])
                status, _, body = request(gw.admin_port, "PUT", "/consumers/minted",
                                          body=ONE_LINE.strip(), headers=headers)
                self.assertEqual(status, 415, body)
        self.assertEqual(self.minted(), 0)
        # A browser's request without a type carries Origin: refused for it.
        status, _, body = request(gw.admin_port, "PUT", "/consumers/minted",
                                  body=ONE_LINE.strip(),
                                  headers={"Origin": "http://evil.example"})
        self.assertEqual(status, 403, body)
        self.assertEqual(self.minted(), 0)
        # A script's request without a type is taken as the endpoint's own.
        status, _, body = request(
            gw.admin_port, "PUT", "/consumers/untyped",
            body=json.dumps({"keys": ["untyped-key"], "plan": "pro"}).encode())
        self.assertIn(status, (200, 201), body)
        # The endpoints' own types, with a parameter, pass.
        status, _, body = request(gw.admin_port, "POST", "/consumers/import", body=ONE_LINE,
                                  headers={"Content-Type": NDJSON + "; charset=utf-8"})
        self.assertEqual(status, 200, body)
        self.assertEqual(self.minted(), 1)

    def test_another_origin_is_refused_the_admins_own_is_not(self):
        gw = self.gateway()
        own = f"http://127.0.0.1:{gw.admin_port}"
        refused = [{"Origin": "http://evil.example"}, {"Origin": "null"},
                   {"Origin": f"http://127.0.0.1:{gw.port}"},  # another port of the host
                   {"Sec-Fetch-Site": "cross-site"}, {"Sec-Fetch-Site": "same-site"},
                   {"Origin": own, "Sec-Fetch-Site": "cross-site"}]
        for headers in refused:
            with self.subTest(headers=headers):
                status, h, body = request(gw.admin_port, "POST", "/consumers/import",
                                          body=ONE_LINE, headers={"Content-Type": NDJSON,
                                                                  **headers})
                self.assertEqual(status, 403, body)
                self.assertEqual(h["Content-Type"], "application/problem+json")
                self.assertEqual(json.loads(body)["status"], 403)
                status, _, _ = request(gw.admin_port, "GET", "/consumers", headers=headers)
                self.assertEqual(status, 403)
        self.assertEqual(self.minted(), 0)
        for headers in ({"Origin": own}, {"Sec-Fetch-Site": "same-origin"},
                        {"Sec-Fetch-Site": "none"}):
            with self.subTest(headers=headers):
                status, _, body = request(gw.admin_port, "GET", "/consumers", headers=headers)
                self.assertEqual(status, 200, body)

    def test_a_host_the_admin_does_not_answer_to_is_refused(self):
        gw = self.gateway(admin={"hosts": ["gw-1.internal"]})
        port = gw.admin_port
        for host in ("evil.example", f"evil.example:{port}", "gw-2.internal", "127.0.0.1.evil",
                     "", "[::1", "localhost:x"):
            with self.subTest(host=host):
                status, _, body = self.raw_get(port, "/consumers", host)
                self.assertEqual(status, 403, body)
        for host in (f"127.0.0.1:{port}", "127.0.0.1", "127.8.9.10", f"[::1]:{port}",
                     "localhost", f"LOCALHOST:{port}", f"gw-1.internal:{port}", "GW-1.internal"):
            with self.subTest(host=host):
                status, _, body = self.raw_get(port, "/consumers", host)
                self.assertEqual(status, 200, body)
        # The open endpoints do not look at Host (scrapers call them by name).
        for path in ("/healthz", "/metrics"):
            self.assertEqual(self.raw_get(port, path, "evil.example")[0], 200)

    def raw_get(self, port, path, host):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                         .encode())
            data = b""
            while True:
                chunk = sock.recv(65536)
                if not chunk:
                    break
                data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        return int(head.split(b" ")[1]), head, body

    def token_gateway(self):
        token = os.path.join(self.workdir, "admin-token")
        with open(token, "w") as f:
            f.write("admin-token-0123456789abcdef\n")
        os.chmod(token, 0o600)
        return self.gateway(admin={"token_file": token})

    def test_a_request_without_the_token_is_answered_before_its_body(self):
        gw = self.token_gateway()
        heads = {
            401: b"PUT /consumers/a HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n",
            403: b"PUT /consumers/a HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://evil.example\r\n"
                 b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n",
            415: b"POST /consumers/import HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                 b"Content-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n",
        }
        for expected, head in heads.items():
            with self.subTest(expected=expected):
                with socket.create_connection(("127.0.0.1", gw.admin_port), timeout=5) as sock:
                    sock.sendall(head)  # and never a byte of the body
                    # Answered at once; the body would have been waited for 30 s.
                    self.assertEqual(read_head(sock, timeout=5), expected)

    def test_a_refused_request_without_a_body_closes_its_connection(self):
        # A keep-alive GET has no body left unread, yet its refusal still ends
        # the connection (docs/security.md), whatever rule refused it.
        gw = self.token_gateway()
        heads = {
            401: b"GET /consumers HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            403: b"GET /consumers HTTP/1.1\r\nHost: evil.example\r\n"
                 b"Authorization: Bearer admin-token-0123456789abcdef\r\n\r\n",
        }
        for expected, head in heads.items():
            with self.subTest(expected=expected):
                with socket.create_connection(("127.0.0.1", gw.admin_port), timeout=5) as sock:
                    sock.sendall(head)
                    sock.settimeout(5)
                    data = b""
                    while True:  # until the gateway closes (or the timeout fails the test)
                        chunk = sock.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                head_out = data.partition(b"\r\n\r\n")[0].lower()
                self.assertTrue(data.startswith(f"HTTP/1.1 {expected} ".encode()), data)
                self.assertIn(b"\r\nconnection: close", head_out)

    @unittest.skipIf(SANITIZED, "memory figures mean nothing under sanitizers")
    def test_unauthenticated_bodies_are_not_held(self):
        gw = self.token_gateway()
        body = b"{" + b" " * (1024 * 1024 - 2) + b"}"
        head = (b"PUT /consumers/a HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 1048576\r\n\r\n")
        before = rss_kib(gw.pid)
        socks = []
        for _ in range(64):
            sock = socket.create_connection(("127.0.0.1", gw.admin_port), timeout=10)
            self.addCleanup(sock.close)
            try:
                sock.sendall(head + body)
            except OSError:
                pass  # refused and closed before the body was all sent
            socks.append(sock)
        for sock in socks:
            try:
                self.assertEqual(read_head(sock, timeout=10), 401)
            except ConnectionResetError:
                pass  # the answer was lost to the reset of the unread body
        growth = rss_kib(gw.pid) - before
        print(f"\n  64 unauthenticated 1 MiB bodies: sluice RSS +{growth} KiB", end="")
        self.assertLess(growth, 16 * 1024)


if __name__ == "__main__":
    unittest.main()
