"""TLS termination on the data listener, through the real sluice binary.

A test CA and server certificates are made with the openssl CLI in each test's work
directory; clients are Python's ssl module trusting that CA only.
"""

import hashlib
import http.client
import json
import os
import resource
import shutil
import signal
import socket
import ssl
import subprocess
import time
import unittest

from harness import (SANITIZED, ProcessTestCase, client_context, echo_header, free_port,
                     gateway_config, make_ca, make_server_cert, metric_sum, pattern_sha256,
                     request, rss_kib, run_cli, to_yaml, wait_redis_ready, wait_until)

MIB = 1024 * 1024


class TlsConnection:
    """One TLS connection to 127.0.0.1:`port` with SNI `name`, carrying HTTP/1.1
    requests one after another."""

    def __init__(self, port: int, context: ssl.SSLContext, name: str | None = "default.test",
                 session: ssl.SSLSession | None = None, timeout: float = 10.0):
        raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        try:
            self.sock = context.wrap_socket(raw, server_hostname=name, session=session,
                                            suppress_ragged_eofs=False)
        except BaseException:
            raw.close()
            raise

    def request(self, method: str, path: str, headers: dict | None = None,
                body: bytes = b"") -> http.client.HTTPResponse:
        lines = [f"{method} {path} HTTP/1.1", "Host: default.test",
                 f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        response = http.client.HTTPResponse(self.sock, method=method)
        response.begin()
        return response

    def get(self, path: str, **kwargs) -> tuple[int, dict, bytes]:
        response = self.request("GET", path, **kwargs)
        return response.status, dict(response.getheaders()), response.read()

    def serial(self) -> int:
        return int(self.sock.getpeercert()["serialNumber"], 16)

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class TlsCase(ProcessTestCase):
    """Starts a sluice-echo and makes a CA with two server certificates: `default`
    (default.test and 127.0.0.1) and `api` (api.test and *.wild.test)."""

    def setUp(self):
        super().setUp()
        self.echo = self.start_echo()
        self.ca = make_ca(self.workdir, "ca")
        self.cert, self.key = make_server_cert(self.workdir, "ca", "default",
                                               dns=("default.test",))
        self.api_cert, self.api_key = make_server_cert(self.workdir, "ca", "api",
                                                       dns=("api.test", "*.wild.test"), ips=())
        self.context = client_context(self.ca)

    def config(self, tls: dict | None = None, server: dict | None = None, **sections) -> dict:
        settings = {"cert_file": self.cert, "key_file": self.key, **(tls or {})}
        routes = [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "echo",
                   **sections.pop("route", {})}]
        return gateway_config({"echo": [self.echo.address]}, routes,
                              server={"tls": settings, **(server or {})}, **sections)

    def start(self, tls: dict | None = None, server: dict | None = None, **sections):
        return self.start_sluice(self.config(tls, server, **sections))

    def connect(self, gateway, **kwargs) -> TlsConnection:
        return TlsConnection(gateway.port, kwargs.pop("context", self.context), **kwargs)

    def handshakes(self, gateway, result: str) -> float:
        return metric_sum(gateway, "sluice_tls_handshakes_total", result=result)


class TlsHandshakeTest(TlsCase):
    def test_a_request_over_tls_reaches_the_upstream_as_https(self):
        gw = self.start()
        with self.connect(gw) as conn:
            self.assertEqual(conn.sock.selected_alpn_protocol(), "http/1.1")
            for i in range(3):  # keep-alive over one TLS connection
                status, _, body = conn.get(f"/x/{i}")
                self.assertEqual(status, 200)
                doc = json.loads(body)
                self.assertEqual(doc["target"], f"/x/{i}")
                self.assertEqual(echo_header(doc, "X-Forwarded-Proto"), ["https"])
        self.assertEqual(self.handshakes(gw, "ok"), 1)

    def test_plain_http_on_the_tls_listener_gets_no_answer_and_is_counted(self):
        gw = self.start()
        with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
            reply = b""
            while chunk := sock.recv(4096):
                reply += chunk
        self.assertNotIn(b"HTTP/1.1", reply)
        wait_until(lambda: self.handshakes(gw, "error") == 1, 5, message="the failed handshake")
        with self.connect(gw) as conn:
            self.assertEqual(conn.get("/after")[0], 200)

    def test_tls_1_0_and_1_1_are_refused(self):
        gw = self.start()
        for version in (ssl.TLSVersion.TLSv1, ssl.TLSVersion.TLSv1_1):
            old = client_context(self.ca)
            old.set_ciphers("DEFAULT:@SECLEVEL=0")
            old.minimum_version = ssl.TLSVersion.TLSv1
            old.maximum_version = version
            with self.assertRaises((ssl.SSLError, ConnectionError), msg=str(version)):
                self.connect(gw, context=old).close()
        self.assertEqual(self.handshakes(gw, "ok"), 0)

    def test_min_version_1_3_refuses_tls_1_2(self):
        gw = self.start({"min_version": "1.3"})
        tls12 = client_context(self.ca)
        tls12.maximum_version = ssl.TLSVersion.TLSv1_2
        with self.assertRaises(ssl.SSLError):
            self.connect(gw, context=tls12).close()
        wait_until(lambda: self.handshakes(gw, "error") == 1, 5, message="the refusal counted")
        with self.connect(gw) as conn:
            self.assertEqual(conn.sock.version(), "TLSv1.3")
            self.assertEqual(conn.get("/x")[0], 200)
        # The same TLS 1.2 client is served by the default minimum.
        gw.stop()
        gw = self.start()
        with self.connect(gw, context=tls12) as conn:
            self.assertEqual(conn.sock.version(), "TLSv1.2")
            self.assertEqual(conn.get("/x")[0], 200)

    def test_a_client_that_never_finishes_the_handshake_is_closed_by_header_timeout(self):
        gw = self.start(server={"header_timeout_ms": 300})
        # One says nothing; the other sends the start of a TLS record and stops.
        for opening in (b"", b"\x16\x03\x01\x02\x00\x01"):
            with socket.create_connection(("127.0.0.1", gw.port), timeout=10) as sock:
                sock.sendall(opening)
                started = time.monotonic()
                self.assertEqual(sock.recv(4096), b"", "the gateway closes the connection")
                self.assertLess(time.monotonic() - started, 9, "closed by the header timeout")
        wait_until(lambda: self.handshakes(gw, "error") == 2, 5, message="both counted")

    def test_sni_picks_the_certificate(self):
        gw = self.start({"certificates": [{"cert_file": self.api_cert,
                                           "key_file": self.api_key}]})
        with open(self.api_cert, "rb") as f:
            api_serial = ssl.PEM_cert_to_DER_cert(f.read().decode())
        choices = {"api.test": True, "API.Test": True, "x.wild.test": True,
                   "default.test": False, "other.test": False, "a.b.wild.test": False,
                   None: False}
        lax = client_context(self.ca)
        lax.check_hostname = False  # a name no certificate holds gets the default one
        for name, api in choices.items():
            with self.connect(gw, context=lax, name=name) as conn:
                served = conn.sock.getpeercert(binary_form=True)
                self.assertEqual(served == api_serial, api, f"SNI {name!r}")
                self.assertEqual(conn.get("/x")[0], 200)

    def test_sessions_are_resumed(self):
        gw = self.start()
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            context = client_context(self.ca)
            context.minimum_version = context.maximum_version = version
            with self.connect(gw, context=context) as first:
                self.assertEqual(first.get("/x")[0], 200)  # TLS 1.3 tickets follow the handshake
                session = first.sock.session
                self.assertFalse(first.sock.session_reused)
            with self.connect(gw, context=context, session=session) as second:
                self.assertTrue(second.sock.session_reused, str(version))
                self.assertEqual(second.get("/x")[0], 200)

    def test_a_session_is_not_resumed_under_another_sni_name(self):
        # A session belongs to the name it was made under: offered under another
        # name it gets a full handshake (and that name's certificate), never the
        # first name's certificate by resumption.
        gw = self.start({"certificates": [{"cert_file": self.api_cert,
                                           "key_file": self.api_key}]})
        with open(self.api_cert, "rb") as f:
            api_der = ssl.PEM_cert_to_DER_cert(f.read().decode())
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            context = client_context(self.ca)
            context.check_hostname = False
            context.minimum_version = context.maximum_version = version
            with self.connect(gw, context=context, name="default.test") as first:
                self.assertEqual(first.get("/x")[0], 200)  # TLS 1.3 tickets follow the handshake
                session = first.sock.session
            with self.connect(gw, context=context, name="api.test", session=session) as other:
                self.assertFalse(other.sock.session_reused, f"{version}: resumed under api.test")
                self.assertEqual(other.sock.getpeercert(binary_form=True), api_der, str(version))
                self.assertEqual(other.get("/x")[0], 200)
            # The same name (in another case) still resumes it.
            with self.connect(gw, context=context, name="DEFAULT.test", session=session) as same:
                self.assertTrue(same.sock.session_reused, f"{version}: same name")
                self.assertNotEqual(same.sock.getpeercert(binary_form=True), api_der)

    def test_a_connection_closed_by_sluice_ends_with_close_notify(self):
        gw = self.start()
        with self.connect(gw) as conn:
            response = conn.request("GET", "/x", headers={"Connection": "close"})
            self.assertEqual(response.status, 200)
            response.read()
            # suppress_ragged_eofs=False: a close without close_notify raises SSLEOFError.
            self.assertEqual(conn.sock.recv(1), b"")


    def test_an_oversized_upload_reads_its_413_not_a_reset(self):
        gw = self.start(server={"max_body_bytes": 1024})
        with self.connect(gw) as conn:
            head = ("POST /up HTTP/1.1\r\nHost: default.test\r\n"
                    f"Content-Length: {4 * MIB}\r\n\r\n").encode()
            conn.sock.sendall(head + b"x" * (256 * 1024))  # still sending after the answer
            response = http.client.HTTPResponse(conn.sock, method="POST")
            response.begin()
            self.assertEqual(response.status, 413)
            self.assertIn(b"too large", response.read())


class TlsCipherTest(TlsCase):
    """The default cipher lists allow forward-secret AEAD suites only; server.tls.ciphers
    and ciphersuites change them."""

    def s_client(self, gateway, *options) -> bool:
        """Whether `openssl s_client` with `options` completes a handshake and a request."""
        done = subprocess.run(
            ["openssl", "s_client", "-connect", f"127.0.0.1:{gateway.port}", "-servername",
             "default.test", "-CAfile", self.ca, "-verify_return_error", "-ign_eof", *options],
            input=b"GET /x HTTP/1.1\r\nHost: default.test\r\nConnection: close\r\n\r\n",
            capture_output=True, timeout=30, cwd=self.workdir)
        return b"HTTP/1.1 200" in done.stdout

    def test_static_rsa_and_cbc_suites_are_refused_by_default(self):
        self.cert, self.key = make_server_cert(self.workdir, "ca", "rsa", dns=("default.test",),
                                               rsa=True)
        gw = self.start()
        for cipher in ("AES128-SHA", "AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA",
                       "ECDHE-RSA-AES256-SHA384", "DHE-RSA-AES128-GCM-SHA256"):
            self.assertFalse(self.s_client(gw, "-tls1_2", "-cipher", cipher), cipher)
        for cipher in ("ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305"):
            self.assertTrue(self.s_client(gw, "-tls1_2", "-cipher", cipher), cipher)
        self.assertTrue(self.s_client(gw, "-tls1_3"))
        # An ECDSA certificate: its CBC suites are refused too.
        gw.stop()
        self.cert, self.key = make_server_cert(self.workdir, "ca", "ec", dns=("default.test",))
        gw = self.start()
        self.assertFalse(self.s_client(gw, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-SHA"))
        self.assertTrue(self.s_client(gw, "-tls1_2", "-cipher", "ECDHE-ECDSA-AES128-GCM-SHA256"))

    def test_the_lists_can_be_changed(self):
        self.cert, self.key = make_server_cert(self.workdir, "ca", "rsa", dns=("default.test",),
                                               rsa=True)
        gw = self.start({"ciphers": "AES128-SHA", "ciphersuites": "TLS_AES_256_GCM_SHA384"})
        self.assertTrue(self.s_client(gw, "-tls1_2", "-cipher", "AES128-SHA"))
        self.assertFalse(self.s_client(gw, "-tls1_2", "-cipher", "ECDHE-RSA-AES128-GCM-SHA256"))
        self.assertFalse(self.s_client(gw, "-tls1_3", "-ciphersuites", "TLS_AES_128_GCM_SHA256"))
        self.assertTrue(self.s_client(gw, "-tls1_3", "-ciphersuites", "TLS_AES_256_GCM_SHA384"))


class TlsListenersTest(TlsCase):
    def test_plain_and_tls_listeners_side_by_side(self):
        tls_port = free_port()
        gw = self.start({"listen": f"127.0.0.1:{tls_port}"})
        status, _, body = request(gw.port, "GET", "/plain")
        self.assertEqual(status, 200)
        self.assertEqual(echo_header(json.loads(body), "X-Forwarded-Proto"), ["http"])
        with TlsConnection(tls_port, self.context) as conn:
            status, _, body = conn.get("/tls")
            self.assertEqual(status, 200)
            self.assertEqual(echo_header(json.loads(body), "X-Forwarded-Proto"), ["https"])
        self.assertEqual(metric_sum(gw, "sluice_accept_errors_total", listener="tls"), 0)
        self.assertEqual(self.handshakes(gw, "ok"), 1)

    def test_a_tls_listen_on_the_plain_address_is_refused(self):
        path = os.path.join(self.workdir, "clash.yaml")
        config = self.config()
        config["server"]["tls"]["listen"] = config["server"]["listen"]
        with open(path, "w") as f:
            f.write(to_yaml(config) + "\n")
        checked = run_cli(["--config", path, "--check"])
        self.assertEqual(checked.returncode, 1, checked.stderr)
        self.assertIn("server.tls.listen: conflicts with server.listen", checked.stderr)

    def test_check_refuses_a_key_that_does_not_match_its_certificate(self):
        path = os.path.join(self.workdir, "mismatch.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(self.config({"key_file": self.api_key})) + "\n")
        checked = run_cli(["--config", path, "--check"])
        self.assertEqual(checked.returncode, 1, checked.stderr)
        self.assertIn(f"server.tls: private key {self.api_key} does not match certificate "
                      f"{self.cert}", checked.stderr)
        os.remove(self.api_key)
        with open(path, "w") as f:
            f.write(to_yaml(self.config({"key_file": self.api_key})) + "\n")
        checked = run_cli(["--config", path, "--check"])
        self.assertEqual(checked.returncode, 1, checked.stderr)
        self.assertIn(f"cannot load private key {self.api_key}", checked.stderr)


class TlsReloadTest(TlsCase):
    def test_sighup_serves_new_certificates_to_new_connections_only(self):
        gw = self.start()
        old = self.connect(gw)
        self.addCleanup(old.close)
        self.assertEqual(old.get("/before")[0], 200)
        old_serial = old.serial()
        # New files at the same paths (a certificate renewed in place).
        renewed = os.path.join(self.workdir, "renewed")
        os.mkdir(renewed)
        shutil.copy(os.path.join(self.workdir, "ca.crt"), renewed)
        shutil.copy(os.path.join(self.workdir, "ca.key"), renewed)
        cert, key = make_server_cert(renewed, "ca", "default", dns=("default.test",))
        shutil.copy(cert, self.cert)
        shutil.copy(key, self.key)
        gw.signal(signal.SIGHUP)

        def new_serial():
            with self.connect(gw) as conn:
                return conn.serial()
        wait_until(lambda: new_serial() != old_serial, 10, message="the renewed certificate")
        new = new_serial()
        self.assertEqual(metric_sum(gw, "sluice_config_reloads_total", result="ok"), 1)
        # The connection opened before goes on with its certificate.
        self.assertEqual(old.get("/after")[0], 200)
        self.assertEqual(old.serial(), old_serial)

        # A key that does not match: the reload fails and the running pair stays.
        shutil.copy(self.api_key, self.key)
        gw.signal(signal.SIGHUP)
        wait_until(lambda: metric_sum(gw, "sluice_config_reloads_total", result="error") == 1,
                   10, message="the failed reload")
        self.assertEqual(new_serial(), new)
        self.assertIn("does not match certificate", gw.output_tail())

    def test_sessions_from_before_a_reload_are_resumed_after_it(self):
        gw = self.start()
        sessions = {}
        for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
            context = client_context(self.ca)
            context.minimum_version = context.maximum_version = version
            with self.connect(gw, context=context) as first:
                self.assertEqual(first.get("/x")[0], 200)  # TLS 1.3 tickets follow the handshake
                sessions[version] = (context, first.sock.session)
        gw.signal(signal.SIGHUP)
        wait_until(lambda: metric_sum(gw, "sluice_config_reloads_total", result="ok") == 1, 10,
                   message="the reload")
        for version, (context, session) in sessions.items():
            with self.connect(gw, context=context, session=session) as second:
                self.assertTrue(second.sock.session_reused, str(version))
                self.assertEqual(second.get("/x")[0], 200)

    def test_a_reload_cannot_move_tls_and_the_running_listener_keeps_serving(self):
        gw = self.start()

        def config(tls: bool) -> dict:
            config = self.config()
            config["server"]["listen"] = f"127.0.0.1:{gw.port}"
            config["admin"]["listen"] = f"127.0.0.1:{gw.admin_port}"
            if not tls:
                del config["server"]["tls"]
            return config
        gw.reload(config(tls=False))
        wait_until(lambda: metric_sum(gw, "sluice_config_reloads_total", result="ok") == 1, 10,
                   message="the reload")
        self.assertIn("server.tls added, removed or moved; takes effect on restart",
                      gw.output_tail())
        with self.connect(gw) as conn:
            self.assertEqual(conn.get("/still-tls")[0], 200)
        # A later reload back to the same place renews certificates again.
        gw.reload(config(tls=True))
        wait_until(lambda: metric_sum(gw, "sluice_config_reloads_total", result="ok") == 2, 10,
                   message="the second reload")
        with self.connect(gw) as conn:
            self.assertEqual(conn.get("/again")[0], 200)


class TlsSessionTicketTest(TlsCase):
    def s_client(self, gateway, version: str, session_out: str,
                 session_in: str | None = None) -> str:
        """One request over a new connection made by `openssl s_client` (TLS `version`:
        "1.2" or "1.3"), offering the session in `session_in` if given; the session it
        ends with (its ticket included) is written to `session_out`. Returns
        s_client's output."""
        args = ["openssl", "s_client", "-connect", f"127.0.0.1:{gateway.port}",
                "-servername", "default.test", "-CAfile", self.ca, "-verify_return_error",
                "-ign_eof", f"-tls{version.replace('.', '_')}", "-sess_out", session_out]
        if session_in:
            args += ["-sess_in", session_in]
        done = subprocess.run(args, input=b"GET /x HTTP/1.1\r\nHost: default.test\r\n"
                              b"Connection: close\r\n\r\n", capture_output=True, timeout=30,
                              cwd=self.workdir)
        out = done.stdout.decode(errors="replace")
        self.assertIn("HTTP/1.1 200", out, done.stderr.decode(errors="replace"))
        return out

    def ticket_key_name(self, session_file: str, s_client_output: str = "") -> str:
        """The name of the key that sealed the ticket in `session_file` (or, where
        s_client wrote none, in the session its output shows: a TLS 1.2 resumption
        whose ticket was renewed): the ticket's first 16 bytes, in hex."""
        if os.path.exists(session_file):
            text = subprocess.run(["openssl", "sess_id", "-in", session_file, "-noout", "-text"],
                                  capture_output=True, timeout=30, check=True).stdout.decode()
        else:
            text = s_client_output
        self.assertIn("TLS session ticket:", text)
        dump = text.split("TLS session ticket:", 1)[1]
        octets = []
        for line in dump.strip().splitlines():
            if " - " not in line:
                break
            octets += line.split(" - ", 1)[1].replace("-", " ").split()[:16]
        self.assertGreaterEqual(len(octets), 16, text)
        return "".join(octets[:16])

    def test_ticket_keys_rotate_and_tickets_of_the_replaced_key_still_resume(self):
        gw = self.start(tls={"ticket_key_rotation_ms": 300, "session_timeout_ms": 60000})
        for version in ("1.2", "1.3"):
            first = os.path.join(self.workdir, f"first-{version}.pem")
            later = os.path.join(self.workdir, f"later-{version}.pem")
            self.s_client(gw, version, first)
            sealed_by = self.ticket_key_name(first)
            # A new key seals from the first ticket 300 ms after the key before it.
            wait_until(lambda: (self.s_client(gw, version, later) and
                                self.ticket_key_name(later) != sealed_by), 15,
                       message=f"a ticket sealed with a new key (TLS {version})")
            newest = self.ticket_key_name(later)
            # The first ticket still opens; the one it is given instead carries a key
            # sealing now, not the replaced one.
            renewed = os.path.join(self.workdir, f"renewed-{version}.pem")
            out = self.s_client(gw, version, renewed, session_in=first)
            self.assertIn("Reused,", out, f"TLS {version}")
            self.assertNotEqual(self.ticket_key_name(renewed, out), sealed_by, f"TLS {version}")
            self.assertNotEqual(newest, sealed_by)


class TlsTrafficTest(TlsCase):
    def test_rate_limiting_over_tls(self):
        redis = self.start_redis()
        gw = self.start(redis={"url": f"redis://127.0.0.1:{redis.port}/0", "timeout_ms": 1000},
                        limits={"per_ip": {"key": "ip", "capacity": 2,
                                           "refill_per_second": 0.001}},
                        route={"limits": ["per_ip"]})
        wait_redis_ready(gw)  # before that, decisions fail open
        with self.connect(gw) as conn:
            statuses = [conn.get(f"/x/{i}")[0] for i in range(2)]
            status, headers, _ = conn.get("/x/3")
        self.assertEqual(statuses, [200, 200])
        self.assertEqual(status, 429)
        self.assertIn("Retry-After", headers)
        self.assertEqual(headers.get("X-RateLimit-Remaining"), "0")

    def test_256_mib_download_over_tls_streams_with_bounded_memory(self):
        gw = self.start()
        size = 256 * MIB
        with self.connect(gw, timeout=60) as conn:
            self.assertEqual(conn.get("/__download/1048576")[0], 200)  # warm up
            baseline = rss_kib(gw.pid)
            peak = baseline
            response = conn.request("GET", f"/__download/{size}")
            self.assertEqual(response.status, 200)
            sha = hashlib.sha256()
            received = next_sample = 0
            while piece := response.read(256 * 1024):
                sha.update(piece)
                received += len(piece)
                if received >= next_sample:
                    peak = max(peak, rss_kib(gw.pid))
                    next_sample += 8 * MIB
        self.assertEqual(received, size)
        self.assertEqual(sha.hexdigest(), pattern_sha256(size))
        if SANITIZED:
            return  # the sanitizers' own memory makes RSS meaningless
        growth_mib = (peak - baseline) / 1024
        self.assertLess(growth_mib, 32, f"sluice RSS grew by {growth_mib:.1f} MiB "
                                        f"(baseline {baseline} KiB, peak {peak} KiB)")


@unittest.skipIf(SANITIZED, "the sanitizers' own memory makes RSS meaningless")
class TlsIdleMemoryTest(TlsCase):
    CONNECTIONS = 500

    def warm_gateway(self):
        """A gateway that served one request, and its RSS then."""
        gw = self.start()
        with self.connect(gw) as warm:
            warm.get("/warm")
        return gw, rss_kib(gw.pid)

    def test_an_idle_tls_connection_keeps_no_record_buffers(self):
        gw, baseline = self.warm_gateway()
        conns = []
        self.addCleanup(lambda: [c.close() for c in conns])
        for i in range(self.CONNECTIONS):
            conn = self.connect(gw)
            conns.append(conn)
            self.assertEqual(conn.get(f"/idle/{i}")[0], 200)

        # OpenSSL's 16 KiB read and write buffers go back once a connection is
        # idle; a stream that copied records through buffers of its own (Asio's
        # TLS stream: about 72 KiB a connection) would stay far above this.
        def per_connection() -> float:
            return (rss_kib(gw.pid) - baseline) / self.CONNECTIONS
        wait_until(lambda: per_connection() < 32, 10, interval=0.2,
                   message="RSS per idle TLS connection under 32 KiB")
        print(f"RSS per idle keep-alive TLS connection: {per_connection():.1f} KiB")
        # Every connection still works after idling.
        for conn in conns[::50]:
            self.assertEqual(conn.get("/again")[0], 200)

    def test_a_connection_that_sends_nothing_holds_no_tls_state(self):
        # OpenSSL's state for a connection is some 40 KiB once a handshake starts;
        # it is made only when the client's first byte arrives, so silent
        # connections (free to open, renewable) cost what plain ones do.
        silent_count = 2000
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft < silent_count + 256:
            if hard < silent_count + 256:
                self.skipTest("descriptor limit too low")
            resource.setrlimit(resource.RLIMIT_NOFILE, (silent_count + 256, hard))
            self.addCleanup(resource.setrlimit, resource.RLIMIT_NOFILE, (soft, hard))
        gw, baseline = self.warm_gateway()
        silent = []
        self.addCleanup(lambda: [s.close() for s in silent])
        for _ in range(silent_count):
            silent.append(socket.create_connection(("127.0.0.1", gw.port), timeout=10))
        wait_until(lambda: gw.metric("sluice_connections_active") == silent_count, 10,
                   message="every silent connection accepted")
        per_connection = (rss_kib(gw.pid) - baseline) * 1024 / silent_count
        print(f"RSS per silent TLS connection: {per_connection:.0f} bytes")
        self.assertLess(per_connection, 8 * 1024)
        # They still shake hands once they speak.
        for sock in silent[::400]:
            with self.context.wrap_socket(sock, server_hostname="default.test") as conn:
                conn.sendall(b"GET /late HTTP/1.1\r\nHost: default.test\r\n\r\n")
                response = http.client.HTTPResponse(conn, method="GET")
                response.begin()
                self.assertEqual(response.status, 200)
                response.read()


if __name__ == "__main__":
    unittest.main()
