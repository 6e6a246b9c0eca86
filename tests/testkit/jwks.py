"""A JWKS server for the JWT tests: serves the key set it is given over HTTP on
a free 127.0.0.1 port, counts the fetches, and can be told to misbehave (answer
slowly, send more than the gateway takes, send garbage, answer 500)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from testkit.ports import free_port


class JwksServer:
    def __init__(self, jwks: dict | None = None, tls: tuple[str, str] | None = None):
        """tls: (certificate, key) files: served over HTTPS."""
        self.jwks = jwks or {"keys": []}
        self.mode = "ok"  # ok | slow | huge | garbage | error
        self.delay = 0.0
        self.fetches = 0
        self._lock = threading.Lock()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                with owner._lock:
                    owner.fetches += 1
                mode = owner.mode
                if mode == "slow":
                    time.sleep(owner.delay)
                if mode == "error":
                    body, status = b'{"error":"down"}', 500
                elif mode == "huge":
                    body, status = b'{"keys":[' + b" " * (2 << 20) + b"]}", 200
                elif mode == "garbage":
                    body, status = b"\x00not json at all\xff", 200
                else:
                    body, status = json.dumps(owner.jwks).encode(), 200
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(body)))
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    pass  # the gateway gave up first

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        scheme = "http"
        if tls:
            import ssl
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
            scheme = "https"
        self.url = f"{scheme}://127.0.0.1:{self.server.server_address[1]}/.well-known/jwks.json"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def count(self) -> int:
        with self._lock:
            return self.fetches

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
