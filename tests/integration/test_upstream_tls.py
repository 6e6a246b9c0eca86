"""TLS to upstreams (upstreams.NAME.tls), through the real sluice binary.

The upstream is a Python HTTPS server on 127.0.0.1 with certificates made by the
openssl CLI; it answers each request with what it saw of the connection: the SNI
name, whether the TLS session was resumed, the client certificate's subject, and
which connection carried the request.
"""

import json
import os
import shutil
import socket
import ssl
import threading
import unittest
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from harness import (ProcessTestCase, free_port, gateway_config, make_ca, make_server_cert,
                     metric_sum, request, run_cli, to_yaml, wait_until)
from testkit.tls import openssl
from testkit.websocket import BINARY, CLOSE, TEXT, WebSocketClient


def make_client_cert(workdir: str, ca: str, name: str) -> tuple[str, str]:
    """A client certificate (clientAuth) `name`.crt / `name`.key signed by CA `ca`."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=workdir)
    with open(os.path.join(workdir, f"{name}.ext"), "w") as f:
        f.write("basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
            cwd=workdir)
    return os.path.join(workdir, f"{name}.crt"), os.path.join(workdir, f"{name}.key")


class TlsUpstream:
    """A threaded HTTPS/1.1 server on a free port. GET answers 200 with a JSON
    document of the connection: sni, reused (session resumption), client (the
    client certificate's CN or None) and conn (a number per TLS connection)."""

    def __init__(self, cert: str, key: str, client_ca: str | None = None):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        if client_ca:
            context.verify_mode = ssl.CERT_REQUIRED
            context.load_verify_locations(client_ca)
        self.names = []

        def remember_sni(sock, name, _context):
            sock.sni = name
        context.sni_callback = remember_sni
        upstream = self
        self.connections = 0
        self.lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def setup(self):
                super().setup()
                with upstream.lock:
                    upstream.connections += 1
                    self.conn_id = upstream.connections

            def do_GET(self):
                peer = self.connection.getpeercert()
                client = None
                if peer:
                    client = dict(x[0] for x in peer["subject"]).get("commonName")
                body = json.dumps({"sni": getattr(self.connection, "sni", None),
                                   "reused": self.connection.session_reused,
                                   "client": client, "conn": self.conn_id}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        class Server(ThreadingHTTPServer):
            daemon_threads = True

            def get_request(self):
                sock, address = self.socket.accept()
                return context.wrap_socket(sock, server_side=True), address

            def handle_error(self, request, client_address):
                pass  # a refused handshake is part of the tests

        self.server = Server(("127.0.0.1", free_port()), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


class UpstreamTlsTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        make_ca(self.workdir, "ca")
        make_ca(self.workdir, "other")
        self.ca = os.path.join(self.workdir, "ca.crt")
        self.cert, self.key = make_server_cert(self.workdir, "ca", "upstream",
                                               dns=("upstream.test",))

    def upstream(self, **options) -> TlsUpstream:
        server = TlsUpstream(self.cert, self.key, **options)
        self.addCleanup(server.stop)
        return server

    def gateway(self, server: TlsUpstream, tls: dict, **upstream):
        config = gateway_config({"app": {"servers": [server.address], "tls": tls, **upstream}},
                                [{"name": "all", "match": {"path_prefix": "/"},
                                  "upstream": "app"}])
        return self.start_sluice(config)

    def get(self, gw) -> dict:
        status, _, body = request(gw.port, "GET", "/x")
        self.assertEqual(status, 200, body)
        return json.loads(body)

    def test_requests_go_over_verified_tls_on_a_pooled_connection(self):
        server = self.upstream()
        gw = self.gateway(server, {"ca_file": self.ca, "server_name": "upstream.test"},
                          max_idle_connections=4)
        first = self.get(gw)
        self.assertEqual(first["sni"], "upstream.test")
        self.assertIsNone(first["client"])
        # Requests one after another reuse the pooled TLS connection.
        seen = {self.get(gw)["conn"] for _ in range(5)}
        self.assertLessEqual(len(seen), 2, seen)  # one per worker at most
        self.assertEqual(metric_sum(gw, "sluice_upstream_requests_total", upstream="app",
                                    outcome="ok"), 6)
        self.assertEqual(metric_sum(gw, "sluice_upstream_requests_total", outcome="tls_error"), 0)

    def test_a_reload_keeps_pooled_connections_until_the_tls_files_change(self):
        server = self.upstream()
        config = gateway_config(
            {"app": {"servers": [server.address], "max_idle_connections": 4,
                     "tls": {"ca_file": self.ca, "server_name": "upstream.test"}}},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "app"}])
        gw = self.start_sluice(config)

        def reload():
            done = gw.metric("sluice_config_reloads_total", result="ok") or 0
            gw.reload(config)
            wait_until(lambda: (gw.metric("sluice_config_reloads_total", result="ok") or 0)
                       > done, 10, message="the reload")

        before = {self.get(gw)["conn"] for _ in range(6)}
        reload()  # nothing changed: the pooled connections serve on
        after = {self.get(gw)["conn"] for _ in range(6)}
        self.assertLessEqual(after, before)
        # The CA file replaced by a new file (the same certificate): new connections.
        shutil.copy(self.ca, self.ca + ".new")
        os.replace(self.ca + ".new", self.ca)
        reload()
        fresh = {self.get(gw)["conn"] for _ in range(6)}
        self.assertFalse(fresh & before, (before, fresh))

    def test_a_new_connection_resumes_the_last_session(self):
        server = self.upstream()
        gw = self.gateway(server, {"ca_file": self.ca, "server_name": "upstream.test"},
                          max_idle_connections=0)
        answers = [self.get(gw) for _ in range(6)]
        self.assertEqual(len({a["conn"] for a in answers}), 6)  # no pooling: six connections
        # Each worker's first connection is a full handshake; later ones resume.
        self.assertGreaterEqual(sum(a["reused"] for a in answers), 3, answers)

    def test_an_unverified_server_is_a_502_with_the_reason_logged(self):
        server = self.upstream()
        cases = {
            "untrusted CA": {"ca_file": os.path.join(self.workdir, "other.crt"),
                             "server_name": "upstream.test"},
            "wrong name": {"ca_file": self.ca, "server_name": "someone-else.test"},
        }
        for what, tls in cases.items():
            with self.subTest(what):
                gw = self.gateway(server, tls)
                status, _, body = request(gw.port, "GET", "/x")
                self.assertEqual(status, 502, body)
                self.assertIn(b"upstream TLS handshake failed", body)
                self.assertGreaterEqual(metric_sum(gw, "sluice_upstream_requests_total",
                                                   upstream="app", outcome="tls_error"), 1)
                wait_until(lambda: "certificate verify failed" in gw.stdout() + gw.stderr(), 5,
                           message="the log to give the verification's reason")
                # The server is in cool-down now, and Sluice keeps serving.
                self.assertEqual(request(gw.port, "GET", "/x")[0], 502)
                gw.stop()

    def test_mutual_tls_presents_the_client_certificate(self):
        make_ca(self.workdir, "clients")
        client_cert, client_key = make_client_cert(self.workdir, "clients", "sluice-gw")
        server = self.upstream(client_ca=os.path.join(self.workdir, "clients.crt"))
        with_cert = self.gateway(server, {"ca_file": self.ca, "server_name": "upstream.test",
                                          "certificate_file": client_cert,
                                          "key_file": client_key})
        self.assertEqual(self.get(with_cert)["client"], "sluice-gw")
        without = self.gateway(server, {"ca_file": self.ca, "server_name": "upstream.test"})
        status, _, body = request(without.port, "GET", "/x")
        self.assertEqual(status, 502, body)
        # Under TLS 1.3 the refusal is an alert after the handshake: a TLS
        # failure when Sluice reads the alert, a reset when the server's close
        # reaches it first (the server sends both at once).
        outcomes = {o: metric_sum(without, "sluice_upstream_requests_total", upstream="app",
                                  outcome=o) for o in ("tls_error", "reset")}
        self.assertEqual(sum(outcomes.values()), 1, outcomes)
        if outcomes["tls_error"]:
            wait_until(lambda: "certificate required" in without.stderr() + without.stdout(),
                       5, message="the alert logged")

    def test_health_checks_speak_tls_too(self):
        server = self.upstream()
        check = {"path": "/healthz", "interval_ms": 200, "timeout_ms": 150,
                 "healthy_threshold": 1, "unhealthy_threshold": 1}
        good = self.gateway(server, {"ca_file": self.ca, "server_name": "upstream.test"},
                            health_check=check)
        bad = self.gateway(server, {"ca_file": os.path.join(self.workdir, "other.crt"),
                                    "server_name": "upstream.test"}, health_check=check)
        wait_until(lambda: (good.metric("sluice_upstream_health_checks_total", upstream="app",
                                        server=server.address, result="ok") or 0) >= 2, 10,
                   message="two good checks over TLS")
        self.assertEqual(good.metric("sluice_upstream_healthy", upstream="app",
                                     server=server.address), 1)
        wait_until(lambda: bad.metric("sluice_upstream_healthy", upstream="app",
                                      server=server.address) == 0, 10,
                   message="a server whose certificate does not verify to be unhealthy")

    def test_a_websocket_tunnel_runs_over_a_tls_upstream(self):
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.cert, self.key)
        up = self.start_ws_upstream(tls=context)
        config = gateway_config({"ws": {"servers": [up.address],
                                        "tls": {"ca_file": self.ca,
                                                "server_name": "upstream.test"}}},
                                [{"name": "ws", "match": {"path_prefix": "/"}, "upstream": "ws"}])
        gw = self.start_sluice(config)
        with WebSocketClient(gw.port, "/chat") as ws:
            self.assertEqual(ws.exchange(TEXT, b"over tls"), b"over tls")
            data = os.urandom(300_000)
            self.assertEqual(ws.exchange(BINARY, data), data)
            ws.close()
            self.assertEqual(ws.recv()[0], CLOSE)  # the upstream's close frame, relayed
        # A client that ends its sending side first: the server reads a clean end
        # (close_notify) and closes, and the end reaches the client.
        with WebSocketClient(gw.port, "/chat") as ws:
            self.assertEqual(ws.exchange(TEXT, b"half"), b"half")
            ws.sock.shutdown(socket.SHUT_WR)
            ws.sock.settimeout(10)
            self.assertEqual(ws.sock.recv(1), b"")
        wait_until(lambda: len(up.open_connections()) == 0, 10,
                   message="the upstream to see the tunnel's end")
        wait_until(lambda: gw.metric("sluice_websocket_tunnels_total", route="ws") == 2, 5)


    def test_check_refuses_an_encrypted_key_and_a_name_it_cannot_verify(self):
        make_ca(self.workdir, "clients")
        cert, key = make_client_cert(self.workdir, "clients", "gw")
        openssl("pkey", "-in", key, "-aes256", "-passout", "pass:secret", "-out", "locked.key",
                cwd=self.workdir)
        cases = {
            "an encrypted key_file": ({"certificate_file": cert,
                                       "key_file": os.path.join(self.workdir, "locked.key")},
                                      "cannot load key_file"),
            "a server_name OpenSSL cannot check": ({"server_name": "fe80::1%eth0"},
                                                   "is neither a DNS name nor an IP address"),
        }
        for what, (tls, message) in cases.items():
            with self.subTest(what):
                config = gateway_config({"app": {"servers": ["127.0.0.1:9443"],
                                                 "tls": {"ca_file": self.ca, **tls}}},
                                        [{"name": "all", "match": {"path_prefix": "/"},
                                          "upstream": "app"}])
                path = os.path.join(self.workdir, "check.yaml")
                with open(path, "w") as f:
                    f.write(to_yaml(config))
                checked = run_cli(["--config", path, "--check"])
                self.assertNotEqual(checked.returncode, 0, checked.stdout)
                self.assertIn(message, checked.stderr + checked.stdout)
                self.assertIn("upstreams.app.tls", checked.stderr + checked.stdout)


if __name__ == "__main__":
    unittest.main()
