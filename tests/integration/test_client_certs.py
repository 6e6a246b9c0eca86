"""Client certificates (server.tls.client_auth) through the real sluice binary,
a real redis-server and sluice-echo, with certificates made by openssl.

- required: a client without a certificate, or with one from another CA, is
  refused at the handshake; a verified one is served over HTTP/1.1 and HTTP/2.
- The certificate's URI SAN names the consumer and keys a limit (cert:san_uri):
  two services have buckets of their own.
- forward_client_cert: xfcc sends Envoy's X-Forwarded-Client-Cert element
  upstream; a client's own X-Forwarded-Client-Cert never goes.
- optional: a client without a certificate is served, its cert: key falling
  back to the client IP.
"""

import json
import os
import shutil
import socket
import ssl
import tempfile
import unittest

from harness import (ProcessTestCase, echo_header, free_port, gateway_config, metric_sum,
                     make_ca, make_server_cert, wait_redis_ready, wait_until)
from testkit.h2client import H2Client
from testkit.tls import make_client_cert


class ClientCertTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="sluice-mtls-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.server_ca = make_ca(self.dir, "server-ca")
        self.cert, self.key = make_server_cert(self.dir, "server-ca", "server")
        self.clients_ca = make_ca(self.dir, "clients-ca")
        make_ca(self.dir, "other-ca")
        self.orders = make_client_cert(self.dir, "clients-ca", "orders",
                                       uri="spiffe://example.test/svc/orders")
        self.billing = make_client_cert(self.dir, "clients-ca", "billing",
                                        uri="spiffe://example.test/svc/billing")
        self.stranger = make_client_cert(self.dir, "other-ca", "stranger",
                                         uri="spiffe://evil.test/svc/x")
        self.redis = self.start_redis()
        self.echo = self.start_echo()
        self.port, self.admin_port = free_port(), free_port()

    def start(self, client_auth="required"):
        config = self.config_dict(client_auth)
        gw = self.start_sluice(config)
        wait_redis_ready(gw)
        return gw

    def config_dict(self, client_auth):
        config = gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "echo",
              "limits": ["per_service"]}],
            server={"threads": 1, "http2": {"enabled": True},
                    "tls": {"cert_file": self.cert, "key_file": self.key,
                            "client_auth": client_auth,
                            "client_ca_file": self.clients_ca,
                            "client_consumer": "san_uri", "forward_client_cert": "xfcc"}},
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 2000},
            api_keys={"forward_consumer": True},
            limits={"per_service": {"key": "cert:san_uri", "capacity": 2,
                                    "refill_per_second": 0.001}},
            port=self.port, admin_port=self.admin_port)
        return config

    def context(self, client=None, alpn=("http/1.1",)):
        context = ssl.create_default_context(cafile=self.server_ca)
        context.set_alpn_protocols(list(alpn))
        if client:
            context.load_cert_chain(*client)
        return context

    def get(self, gw, client=None, path="/x", headers=()):
        """(status, headers dict, body) of one HTTP/1.1 GET over TLS, or the SSL error."""
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as raw:
            with self.context(client).wrap_socket(raw, server_hostname="localhost") as tls:
                lines = [f"GET {path} HTTP/1.1", "Host: localhost", "Connection: close",
                         *[f"{n}: {v}" for n, v in headers]]
                tls.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
                data = b""
                while chunk := tls.recv(65536):
                    data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        status_line, *fields = head.decode().split("\r\n")
        return int(status_line.split()[1]), dict(f.split(": ", 1) for f in fields), body

    def refused(self, gw, client):
        try:
            self.get(gw, client)
        except (ssl.SSLError, ConnectionError, OSError):
            return True
        return False

    def test_required_verifies_names_and_keys(self):
        gw = self.start()
        self.assertTrue(self.refused(gw, None), "no certificate must be refused")
        self.assertTrue(self.refused(gw, self.stranger), "another CA's certificate must be refused")
        status, headers, body = self.get(gw, self.orders,
                                         headers=[("X-Forwarded-Client-Cert", "Hash=forged")])
        self.assertEqual(status, 200, body)
        doc = json.loads(body)
        self.assertEqual(echo_header(doc, "X-Consumer-Id"), ["spiffe://example.test/svc/orders"])
        [xfcc] = echo_header(doc, "X-Forwarded-Client-Cert")
        self.assertRegex(xfcc, r'^Hash=[0-9a-f]{64};Subject="CN=orders,O=Sluice Tests";'
                               r'URI=spiffe://example\.test/svc/orders$')
        # Each service has its own bucket of 2.
        self.assertEqual(self.get(gw, self.orders)[0], 200)
        self.assertEqual(self.get(gw, self.orders)[0], 429)
        status, headers, _ = self.get(gw, self.billing)
        self.assertEqual(status, 200)
        self.assertEqual(headers["X-RateLimit-Remaining"], "1")
        self.assertGreaterEqual(metric_sum(gw, "sluice_tls_handshakes_total", result="error"), 2)

    def test_http2_alike(self):
        gw = self.start()
        c = H2Client(gw.port, tls=self.context(self.billing, alpn=("h2",)))
        try:
            answer = c.request("GET", "/h2")
        finally:
            c.close()
        self.assertEqual(answer.status, 200)
        self.assertEqual(echo_header(json.loads(answer.body), "X-Consumer-Id"),
                         ["spiffe://example.test/svc/billing"])

    def test_a_reload_that_requires_certificates_resumes_no_earlier_session(self):
        gw = self.start("optional")
        context = self.context(None)
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost") as tls:
                tls.sendall(b"GET /a HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
                while tls.recv(65536):
                    pass
                session = tls.session
        self.assertIsNotNone(session)
        # The same session resumes while nothing changed ...
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as raw:
            with context.wrap_socket(raw, server_hostname="localhost", session=session) as tls:
                self.assertTrue(tls.session_reused)
        gw.reload(self.config_dict("required"))
        wait_until(lambda: metric_sum(gw, "sluice_config_reloads_total", result="ok") == 1, 10,
                   message="the reload")
        # ... but not once certificates are required: no certificate, no service.
        def refused_with_session():
            try:
                with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as raw:
                    with context.wrap_socket(raw, server_hostname="localhost",
                                             session=session) as tls:
                        tls.sendall(b"GET /b HTTP/1.1\r\nHost: localhost\r\n"
                                    b"Connection: close\r\n\r\n")
                        return tls.recv(65536) == b""
            except (ssl.SSLError, ConnectionError, OSError):
                return True
        self.assertTrue(refused_with_session())

    def test_optional_serves_clients_without_one(self):
        gw = self.start("optional")
        status, _, body = self.get(gw, None)
        self.assertEqual(status, 200)
        self.assertEqual(echo_header(json.loads(body), "X-Forwarded-Client-Cert"), [])
        self.assertEqual(metric_sum(gw, "sluice_ratelimit_missing_key_total", route="api",
                                    source="cert"), 1)
        self.assertTrue(self.refused(gw, self.stranger))
        self.assertEqual(self.get(gw, self.orders)[0], 200)


if __name__ == "__main__":
    unittest.main()
