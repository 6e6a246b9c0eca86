"""Proxying through the real sluice binary to sluice-echo.

Every test starts its own gateway (and upstreams) on ephemeral ports; the
gateway must still be alive at the end of each test (see harness.ProcessTestCase).
"""

import hashlib
import json
import os
import re
import shutil
import signal
import socket
import struct
import threading
import time
import unittest

from harness import (SANITIZED, Client, ProcessTestCase, RawConnection, closed_port, echo_header,
                     echo_header_names, gateway_config, metric_sum, pattern_sha256, raw_exchange,
                     request, rss_kib, wait_until)

MIB = 1024 * 1024

# Hop-by-hop headers, which must never cross Sluice, lower case.
HOP_BY_HOP = {"keep-alive", "proxy-connection", "te", "trailer", "upgrade", "proxy-authorization",
              "proxy-authenticate"}


def default_routes():
    return [
        {"name": "getonly", "match": {"path_prefix": "/getonly", "methods": ["GET"]},
         "upstream": "echo"},
        {"name": "strip", "match": {"path_prefix": "/strip"}, "upstream": "echo",
         "strip_prefix": True},
        {"name": "hosted", "match": {"path_prefix": "/hosted", "host": "api.example.test"},
         "upstream": "echo"},
        {"name": "api", "match": {"path_prefix": "/api"}, "upstream": "echo"},
        {"name": "internal", "match": {"path_prefix": "/__"}, "upstream": "echo"},
    ]


class GatewayTestCase(ProcessTestCase):
    """Starts one sluice-echo and a gateway routing /api, /__, /strip, /getonly, /hosted to it."""

    server_options: dict = {}

    def setUp(self):
        super().setUp()
        self.echo = self.start_echo()
        self.addCleanup(self.assert_upstream_saw_valid_http, self.echo)

    def assert_upstream_saw_valid_http(self, echo):
        """Whatever the client sent, Sluice must only ever send well-formed HTTP upstream."""
        bad = echo.counts()["bad_requests"]
        if bad:
            raise AssertionError(f"{echo.name} got {bad} malformed request(s) from sluice "
                                 "(bytes that do not parse as HTTP on an upstream connection)")

    def start_echo(self, name="echo"):
        echo = super().start_echo(name)
        if name != "echo":
            self.addCleanup(self.assert_upstream_saw_valid_http, echo)
        return echo

    def start_gateway(self, upstreams=None, routes=None, server=None, **sections):
        config = gateway_config(
            upstreams or {"echo": [self.echo.address]},
            routes if routes is not None else default_routes(),
            server={**self.server_options, **(server or {})}, **sections)
        self.gateway = self.start_sluice(config)
        return self.gateway

    def get_json(self, target, **kwargs):
        status, headers, body = request(self.gateway.port, "GET", target, **kwargs)
        self.assertEqual(status, 200, body[:500])
        return json.loads(body), headers

    def assert_local_reply(self, res, status):
        """A reply Sluice made itself: the status, an X-Request-Id and a small JSON body."""
        self.assertEqual(res.status, status, res)
        self.assertTrue(res.header("X-Request-Id"), f"no X-Request-Id on {res}")
        self.assertIn("json", (res.header("Content-Type") or "").lower(), res)
        try:
            json.loads(res.body)
        except ValueError:
            self.fail(f"local {status} reply body is not JSON: {res.body[:300]!r}")


class ForwardingTest(GatewayTestCase):
    server_options = {"max_body_bytes": 256 * MIB}  # room for the streaming upload test

    def setUp(self):
        super().setUp()
        self.start_gateway()

    def test_method_target_headers_and_body_reach_upstream_unchanged(self):
        target = "/api/a%20b/c;v=1/d.json?x=1&x=2&y=%2F&empty=&flag"
        for method, body in (("GET", b""), ("DELETE", b""), ("OPTIONS", b""),
                             ("POST", b'{"a":1}'), ("PUT", b"\x00\x01binary\xff"),
                             ("PATCH", b"patch")):
            with self.subTest(method=method):
                head = (f"{method} {target} HTTP/1.1\r\n"
                        "Host: Shop.Example.test:8080\r\n"
                        "X-Custom: Some  Value; with=params\r\n"
                        "X-Multi: first\r\n"
                        "Accept: application/json\r\n"
                        "X-Multi: second\r\n"
                        "Cookie: a=1; b=2\r\n"
                        "Authorization: Bearer t0ken\r\n")
                if body:
                    head += f"Content-Type: application/octet-stream\r\nContent-Length: {len(body)}\r\n"
                res = raw_exchange(self.gateway.port, head.encode() + b"\r\n" + body)
                self.assertEqual(res.status, 200, res)
                doc = res.json()
                self.assertEqual(doc["method"], method)
                self.assertEqual(doc["target"], target)
                self.assertEqual(echo_header(doc, "Host"), ["Shop.Example.test:8080"])
                self.assertEqual(echo_header(doc, "X-Custom"), ["Some  Value; with=params"])
                self.assertIn(", ".join(echo_header(doc, "X-Multi")), ("first, second", "first,second"))
                self.assertEqual(echo_header(doc, "Accept"), ["application/json"])
                self.assertEqual(echo_header(doc, "Cookie"), ["a=1; b=2"])
                self.assertEqual(echo_header(doc, "Authorization"), ["Bearer t0ken"])
                self.assertEqual(doc["body_length"], len(body))
                self.assertEqual(doc["body_sha256"], hashlib.sha256(body).hexdigest())

    def test_one_mib_post_arrives_byte_exact(self):
        body = os.urandom(MIB)
        status, _, data = request(self.gateway.port, "POST", "/api/upload", body=body,
                                  headers={"Content-Type": "application/octet-stream"})
        self.assertEqual(status, 200, data[:300])
        doc = json.loads(data)
        self.assertEqual(doc["body_length"], MIB)
        self.assertEqual(doc["body_sha256"], hashlib.sha256(body).hexdigest())

    def test_chunked_upload_arrives_byte_exact(self):
        pieces = [os.urandom(n) for n in (1, 4095, 65536, 100000, 7, 300000, 1)]
        with Client(self.gateway.port) as client:
            status, _, data = client.request("PUT", "/api/chunked", body=iter(pieces),
                                             chunked=True)
            self.assertEqual(status, 200, data[:300])
            doc = json.loads(data)
            self.assertEqual(doc["body_length"], sum(map(len, pieces)))
            self.assertEqual(doc["body_sha256"], hashlib.sha256(b"".join(pieces)).hexdigest())
            # The upstream connection goes back to the pool: it must carry no stray bytes
            # (checked after every test by assert_upstream_saw_valid_http).
            for i in range(3):
                self.assertEqual(client.request("GET", f"/api/after-upload/{i}")[0], 200)

    def test_256_mib_download_streams_with_bounded_memory(self):
        size = 256 * MIB
        # Warm up buffers and pools so the baseline is a serving process.
        self.assertEqual(request(self.gateway.port, "GET", "/__download/1048576")[0], 200)
        baseline = rss_kib(self.gateway.pid)
        peak = baseline
        sha = hashlib.sha256()
        received = 0
        next_sample = 0
        paused = False
        with Client(self.gateway.port, timeout=60) as client:
            res = client.stream("GET", f"/__download/{size}")
            self.assertEqual(res.status, 200)
            while True:
                piece = res.read(256 * 1024)
                if not piece:
                    break
                sha.update(piece)
                received += len(piece)
                if received >= next_sample:
                    peak = max(peak, rss_kib(self.gateway.pid))
                    next_sample += 8 * MIB
                if not paused and received >= 32 * MIB:
                    # A client that stops reading must not make Sluice buffer the upstream.
                    paused = True
                    time.sleep(0.5)
                    peak = max(peak, rss_kib(self.gateway.pid))
        peak = max(peak, rss_kib(self.gateway.pid))
        self.assertEqual(received, size)
        self.assertEqual(sha.hexdigest(), pattern_sha256(size))
        growth_mib = (peak - baseline) / 1024
        self.assertLess(growth_mib, 32, f"sluice RSS grew by {growth_mib:.1f} MiB "
                                        f"(baseline {baseline} KiB, peak {peak} KiB)")

    def test_96_mib_upload_streams_with_bounded_memory(self):
        block = os.urandom(MIB)
        count = 96
        self.assertEqual(request(self.gateway.port, "POST", "/api/warm", body=block)[0], 200)
        baseline = rss_kib(self.gateway.pid)
        peak = baseline
        sha = hashlib.sha256()

        def body():
            nonlocal peak
            for i in range(count):
                if i % 8 == 0:
                    peak = max(peak, rss_kib(self.gateway.pid))
                sha.update(block)
                yield block
        status, _, data = request(self.gateway.port, "POST", "/api/big", body=body(),
                                  chunked=True, timeout=60)
        peak = max(peak, rss_kib(self.gateway.pid))
        self.assertEqual(status, 200, data[:300])
        doc = json.loads(data)
        self.assertEqual(doc["body_length"], count * MIB)
        self.assertEqual(doc["body_sha256"], sha.hexdigest())
        growth_mib = (peak - baseline) / 1024
        self.assertLess(growth_mib, 32, f"sluice RSS grew by {growth_mib:.1f} MiB "
                                        f"(baseline {baseline} KiB, peak {peak} KiB)")

    def test_chunked_download_arrives_byte_exact(self):
        size = 5 * MIB + 3
        with RawConnection(self.gateway.port, timeout=30) as conn:
            conn.send(f"GET /__download/{size}?chunked=1 HTTP/1.1\r\nHost: g\r\n\r\n".encode())
            res = conn.read_response()
            self.assertEqual(res.status, 200)
            self.assertEqual(len(res.body), size)
            self.assertEqual(hashlib.sha256(res.body).hexdigest(), pattern_sha256(size))
            # Framing was redone correctly: the connection is still usable.
            conn.send(b"GET /api/after HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assertEqual(conn.read_response().json()["target"], "/api/after")

    def test_close_delimited_upstream_body_is_reframed(self):
        size = 3 * MIB + 7
        with RawConnection(self.gateway.port, timeout=30) as conn:
            conn.send(f"GET /__download/{size}?eof=1 HTTP/1.1\r\nHost: g\r\n\r\n".encode())
            res = conn.read_response()
            self.assertEqual(res.status, 200)
            self.assertEqual(len(res.body), size)
            self.assertEqual(hashlib.sha256(res.body).hexdigest(), pattern_sha256(size))
            if res.header("Content-Length") or "chunked" in (res.header("Transfer-Encoding") or ""):
                # Framed for the client: the connection is still usable.
                conn.send(b"GET /api/after-eof HTTP/1.1\r\nHost: g\r\n\r\n")
                self.assertEqual(conn.read_response().json()["target"], "/api/after-eof")

    def test_expect_100_continue(self):
        body = os.urandom(100000)
        with RawConnection(self.gateway.port, timeout=10) as conn:
            conn.send(b"PUT /api/expect HTTP/1.1\r\nHost: g\r\nExpect: 100-continue\r\n"
                      b"Content-Length: %d\r\n\r\n" % len(body))
            # Like curl: wait a moment for "100 Continue", then send the body anyway.
            early = conn.peek(timeout=1.0)
            if early and not early.startswith(b"HTTP/1.1 100"):
                self.fail(f"final response before the body was sent: {early[:300]!r}")
            conn.send(body)
            res = conn.read_response()  # skips an interim 100
            self.assertEqual(res.status, 200, res)
            doc = res.json()
            self.assertEqual(doc["body_sha256"], hashlib.sha256(body).hexdigest())
            conn.send(b"GET /api/after-expect HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assertEqual(conn.read_response().json()["target"], "/api/after-expect")

    def test_connection_close_from_client(self):
        with RawConnection(self.gateway.port) as conn:
            conn.send(b"GET /api/bye HTTP/1.1\r\nHost: g\r\nConnection: close\r\n\r\n")
            res = conn.read_response()
            self.assertEqual(res.status, 200)
            self.assertIn("close", (res.header("Connection") or "").lower())
            self.assertTrue(conn.is_closed(), "connection kept open after Connection: close")

    def test_upstream_connections_are_reused(self):
        before = self.echo.counts()
        with Client(self.gateway.port) as client:
            for i in range(150):
                status, _, _ = client.request("GET", f"/api/ka/{i}")
                self.assertEqual(status, 200)
        for _ in range(5):
            with Client(self.gateway.port) as client:
                for i in range(10):
                    self.assertEqual(client.request("GET", f"/api/ka2/{i}")[0], 200)
        after = self.echo.counts()
        requests = after["requests"] - before["requests"]
        connections = after["connections"] - before["connections"]
        self.assertGreaterEqual(requests, 200)
        self.assertLessEqual(connections, 10, f"{connections} upstream connections for "
                                              f"{requests} requests")

    def test_pipelined_requests_are_answered_in_order(self):
        with RawConnection(self.gateway.port) as conn:
            conn.send(b"GET /api/p1 HTTP/1.1\r\nHost: g\r\n\r\n"
                      b"POST /api/p2 HTTP/1.1\r\nHost: g\r\nContent-Length: 3\r\n\r\nxyz"
                      b"GET /api/p3 HTTP/1.1\r\nHost: g\r\n\r\n")
            docs = [conn.read_response().json() for _ in range(3)]
            self.assertEqual([d["target"] for d in docs], ["/api/p1", "/api/p2", "/api/p3"])
            self.assertEqual(docs[1]["body_sha256"], hashlib.sha256(b"xyz").hexdigest())
            conn.send(b"GET /api/p4 HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assertEqual(conn.read_response().json()["target"], "/api/p4")

    def test_pipelined_slow_request_and_local_reply_keep_order(self):
        with RawConnection(self.gateway.port) as conn:
            conn.send(b"GET /__slow/300 HTTP/1.1\r\nHost: g\r\n\r\n"
                      b"GET /nowhere HTTP/1.1\r\nHost: g\r\n\r\n"
                      b"GET /api/fast HTTP/1.1\r\nHost: g\r\n\r\n")
            first, second, third = (conn.read_response() for _ in range(3))
            self.assertEqual((first.status, first.json()["target"]), (200, "/__slow/300"))
            self.assertEqual(second.status, 404)
            self.assertEqual((third.status, third.json()["target"]), (200, "/api/fast"))

    def test_http10_client_gets_response_then_close(self):
        with RawConnection(self.gateway.port) as conn:
            conn.send(b"GET /api/old HTTP/1.0\r\nHost: g\r\n\r\n")
            res = conn.read_response()
            self.assertEqual(res.status, 200)
            self.assertEqual(res.json()["target"], "/api/old")
            self.assertNotEqual((res.header("Transfer-Encoding") or "").lower(), "chunked",
                                "chunked framing sent to an HTTP/1.0 client")
            self.assertTrue(conn.is_closed(), "connection kept open after an HTTP/1.0 response")

    def test_head_response_has_no_body(self):
        with RawConnection(self.gateway.port) as conn:
            for target in ("/api/head", "/__download/1000000"):
                conn.send(f"HEAD {target} HTTP/1.1\r\nHost: g\r\n\r\n".encode())
                res = conn.read_response(head_request=True)
                self.assertEqual(res.status, 200, res)
            # A stray body would be read as the next response.
            conn.send(b"GET /api/next HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assertEqual(conn.read_response().json()["target"], "/api/next")

    def test_upstream_status_codes_pass_through(self):
        with RawConnection(self.gateway.port) as conn:
            for code in (201, 204, 304, 404, 418, 500, 503):
                conn.send(f"GET /__status/{code} HTTP/1.1\r\nHost: g\r\n\r\n".encode())
                res = conn.read_response()
                self.assertEqual(res.status, code)
                if code in (204, 304):
                    self.assertEqual(res.body, b"")
                else:
                    self.assertEqual(res.json(), {"status": code})

    def test_request_hop_by_hop_headers_are_removed(self):
        res = raw_exchange(self.gateway.port, (
            b"POST /api/hop HTTP/1.1\r\n"
            b"Host: g\r\n"
            b"Connection: X-Foo, keep-alive\r\n"
            b"X-Foo: 1\r\n"
            b"Keep-Alive: timeout=5\r\n"
            b"Proxy-Connection: keep-alive\r\n"
            b"TE: trailers\r\n"
            b"Trailer: X-T\r\n"
            b"Upgrade: foo\r\n"
            b"Proxy-Authorization: Basic Zm9vOmJhcg==\r\n"
            b"X-Keep: yes\r\n"
            b"Transfer-Encoding: chunked\r\n"
            b"\r\n"
            b"5\r\nhello\r\n0\r\n\r\n"))
        self.assertEqual(res.status, 200, res)
        doc = res.json()
        names = echo_header_names(doc)
        for name in HOP_BY_HOP | {"x-foo"}:
            self.assertNotIn(name, names, f"{name} reached the upstream: {doc['headers']}")
        for value in echo_header(doc, "Connection"):
            self.assertNotIn("x-foo", value.lower())
        self.assertEqual(echo_header(doc, "X-Keep"), ["yes"])
        self.assertEqual(doc["body_length"], 5)
        self.assertEqual(doc["body_sha256"], hashlib.sha256(b"hello").hexdigest())

    def test_connection_header_cannot_strip_forwarding_headers(self):
        res = raw_exchange(self.gateway.port, (
            b"GET /api/strip-attempt HTTP/1.1\r\n"
            b"Host: g.example\r\n"
            b"Connection: X-Forwarded-For, X-Request-Id, Via, X-Forwarded-Proto, X-Forwarded-Host\r\n"
            b"X-Forwarded-For: 198.51.100.9\r\n"
            b"X-Request-Id: listed-in-connection\r\n"
            b"\r\n"))
        self.assertEqual(res.status, 200, res)
        doc = res.json()
        xff = ", ".join(echo_header(doc, "X-Forwarded-For"))
        self.assertTrue(xff, f"X-Forwarded-For missing upstream: {doc['headers']}")
        self.assertEqual(xff.split(",")[-1].strip(), "127.0.0.1")
        self.assertNotIn("198.51.100.9", xff, "a header listed in Connection was forwarded")
        request_ids = echo_header(doc, "X-Request-Id")
        self.assertEqual(len(request_ids), 1, doc["headers"])
        self.assertNotEqual(request_ids[0], "listed-in-connection")
        self.assertEqual(res.header("X-Request-Id"), request_ids[0])
        self.assertTrue(any("1.1 sluice" in v for v in echo_header(doc, "Via")), doc["headers"])
        self.assertEqual(echo_header(doc, "X-Forwarded-Proto"), ["http"])
        self.assertTrue(echo_header(doc, "X-Forwarded-Host"))

    def test_connection_cannot_hide_the_request_framing(self):
        # A body whose Content-Length is "hop-by-hop" would be read upstream as a
        # second request on a pooled connection: request smuggling.
        smuggled = b"GET /api/SMUGGLED HTTP/1.1\r\nHost: g\r\n\r\n"
        res = raw_exchange(self.gateway.port, (
            b"POST /api/upload HTTP/1.1\r\nHost: g\r\n"
            b"Connection: Content-Length, Host\r\n"
            b"Content-Length: " + str(len(smuggled)).encode() + b"\r\n\r\n" + smuggled))
        self.assertEqual(res.status, 200, res)
        doc = res.json()
        self.assertEqual(doc["body_length"], len(smuggled))
        self.assertEqual(echo_header(doc, "Content-Length"), [str(len(smuggled))])
        self.assertEqual(echo_header(doc, "Host"), ["g"])
        for i in range(3):
            follow = raw_exchange(self.gateway.port, b"GET /api/next HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assertEqual(follow.json()["target"], "/api/next", "a smuggled response leaked")

    def test_request_line_tricks_are_refused_or_normalized(self):
        for raw, status in (
                (b"GET /api/a/../admin HTTP/1.1\r\nHost: g\r\n\r\n", 400),
                (b"GET /api/%2e%2E/admin HTTP/1.1\r\nHost: g\r\n\r\n", 400),
                (b"GET /api/a HTTP/1.1\r\nHost: g\r\nHost: h\r\n\r\n", 400),
                (b"POST /api/a HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"
                 b"0\r\n\r\n", 501)):
            res = raw_exchange(self.gateway.port, raw)
            self.assertEqual(res.status, status, raw)
            self.assertTrue(res.header("X-Request-Id"))
        res = raw_exchange(self.gateway.port,
                           b"GET http://other.example/api/abs?q=1 HTTP/1.1\r\nHost: g\r\n\r\n")
        self.assertEqual(res.status, 200, res)
        doc = res.json()
        self.assertEqual(doc["target"], "/api/abs?q=1")
        self.assertEqual(echo_header(doc, "Host"), ["other.example"])

    def test_response_hop_by_hop_headers_are_removed(self):
        res = raw_exchange(self.gateway.port, b"GET /__hop HTTP/1.1\r\nHost: g\r\n\r\n")
        self.assertEqual(res.status, 200, res)
        names = {n.lower() for n, _ in res.headers}
        for name in HOP_BY_HOP | {"x-secret"}:
            self.assertNotIn(name, names, f"{name} reached the client: {res.headers}")
        for value in res.all("Connection"):
            self.assertNotIn("x-secret", value.lower())
        self.assertEqual(res.json()["target"], "/__hop")

    def test_forwarded_headers_are_added(self):
        status, headers, body = request(
            self.gateway.port, "GET", "/api/fwd",
            headers={"Host": "shop.example.test:8080", "X-Forwarded-For": "203.0.113.7"})
        self.assertEqual(status, 200, body[:300])
        doc = json.loads(body)
        # 127.0.0.1 is a trusted proxy by default: its X-Forwarded-For is kept, the peer appended.
        xff = [e.strip() for e in ",".join(echo_header(doc, "X-Forwarded-For")).split(",")]
        self.assertEqual(xff, ["203.0.113.7", "127.0.0.1"])
        self.assertEqual(echo_header(doc, "X-Forwarded-Proto"), ["http"])
        self.assertIn(echo_header(doc, "X-Forwarded-Host"),
                      (["shop.example.test:8080"], ["shop.example.test"]))
        self.assertEqual(echo_header(doc, "Host"), ["shop.example.test:8080"])
        self.assertTrue(any(v.strip().endswith("1.1 sluice") for v in echo_header(doc, "Via")),
                        echo_header(doc, "Via"))
        generated = echo_header(doc, "X-Request-Id")
        self.assertEqual(len(generated), 1, doc["headers"])
        self.assertTrue(generated[0])
        self.assertEqual(headers["X-Request-Id"], generated[0])

        # Without an incoming X-Forwarded-For the peer is the whole list.
        doc, _ = self.get_json("/api/fwd2")
        self.assertEqual(echo_header(doc, "X-Forwarded-For"), ["127.0.0.1"])
        # Every request gets its own id.
        doc2, _ = self.get_json("/api/fwd3")
        self.assertNotEqual(echo_header(doc, "X-Request-Id"), echo_header(doc2, "X-Request-Id"))

    def test_incoming_request_id_is_kept_and_echoed(self):
        doc, headers = self.get_json("/api/rid", headers={"X-Request-Id": "req-12345-abc"})
        self.assertEqual(echo_header(doc, "X-Request-Id"), ["req-12345-abc"])
        self.assertEqual(headers["X-Request-Id"], "req-12345-abc")

    def test_strip_prefix(self):
        for sent, expected in (("/strip/a/b?q=1", "/a/b?q=1"), ("/strip/", "/"), ("/strip", "/"),
                               ("/strip?x=1", "/?x=1")):
            with self.subTest(sent=sent):
                doc, _ = self.get_json(sent)
                self.assertEqual(doc["target"], expected)

    def test_host_match(self):
        doc, _ = self.get_json("/hosted/x", headers={"Host": "api.example.test"})
        self.assertEqual(doc["target"], "/hosted/x")
        doc, _ = self.get_json("/hosted/y", headers={"Host": "API.Example.Test:8080"})
        self.assertEqual(doc["target"], "/hosted/y")
        res = raw_exchange(self.gateway.port, b"GET /hosted/z HTTP/1.1\r\nHost: other.test\r\n\r\n")
        self.assertEqual(res.status, 404)



class TargetHygieneTest(GatewayTestCase):
    """The request-target is normalized once; routing, path keys and the upstream agree on
    it. Malformed targets and Host values are refused with 400 (gateway/request_target.hpp)."""

    def setUp(self):
        super().setUp()
        self.start_gateway(routes=default_routes() + [
            {"name": "exact", "match": {"path_exact": "/exact"}, "upstream": "echo"},
            {"name": "items", "match": {"path_prefix": "/v1/items"}, "upstream": "echo"},
        ])

    def send(self, target: bytes, host: bytes | None = b"g", extra: bytes = b""):
        head = b"GET " + target + b" HTTP/1.1\r\n"
        if host is not None:
            head += b"Host: " + host + b"\r\n"
        return raw_exchange(self.gateway.port, head + extra + b"\r\n")

    def assert_forwarded(self, target: bytes, expected: str):
        res = self.send(target)
        self.assertEqual(res.status, 200, f"{target!r}: {res}")
        self.assertEqual(res.json()["target"], expected, target)

    def assert_refused(self, target: bytes, host: bytes | None = b"g", extra: bytes = b""):
        res = self.send(target, host, extra)
        self.assert_local_reply(res, 400)
        return res

    def test_path_variants_route_and_forward_normalized(self):
        for sent, expected in (
                (b"//api/x", "/api/x"),
                (b"/%61pi/x", "/api/x"),
                (b"/a%70i/x", "/api/x"),
                (b"/api//a///b/", "/api/a/b/"),
                (b"/api/%7euser/%2d%5f%2E%30", "/api/~user/-_.0"),
                (b"/api/%3a%2a%c3%a9%20", "/api/%3A%2A%C3%A9%20"),  # reserved stay encoded
                (b"/api/%2541", "/api/%2541"),  # an encoded '%' is not decoded twice
                (b"/%61pi/x?q=%61%2f&r=//", "/api/x?q=%61%2f&r=//"),  # query as sent
                (b"/v1//items/3", "/v1/items/3")):
            with self.subTest(sent=sent):
                self.assert_forwarded(sent, expected)
        # Routes stay case-sensitive: /API is not /api.
        self.assert_local_reply(self.send(b"/API/x"), 404)
        self.assert_local_reply(self.send(b"/%41PI/x"), 404)

    def test_path_parameters_route_like_the_bare_path_and_are_forwarded(self):
        for sent in (b"/exact;jsessionid=1", b"/v1;x/items/3", b"/v1/items;a=b;c/3",
                     b"/v1/;p/items/3", b"/api;x/y"):
            with self.subTest(sent=sent):
                self.assert_forwarded(sent, sent.decode())
        # strip_prefix removes the prefix together with the parameters of its last segment.
        for sent, expected in ((b"/strip;x/a", "/a"), (b"/strip/a;v=1/b", "/a;v=1/b"),
                               (b"//strip//a?q", "/a?q")):
            with self.subTest(sent=sent):
                self.assert_forwarded(sent, expected)

    def test_fragment_is_refused(self):
        for target in (b"/exact#", b"/api/x#frag", b"/api/x?q=1#f", b"/api/#/x"):
            with self.subTest(target=target):
                self.assert_refused(target)

    def test_encoded_separators_nul_backslash_and_bad_escapes_are_refused(self):
        for target in (b"/api/a%2Fb", b"/api/a%2fb", b"/a%2Fb", b"/api/a%5Cb", b"/api/a%5cb",
                       b"/api/a\\b", b"/api/a%00b", b"/api/%", b"/api/a%2", b"/api/%zz",
                       b"/api/%g0", b"/api/%2e%2e/x", b"/api/%2E./x", b"/api/..;/admin",
                       b"/api/.;x/admin", b"/api/%2e%2e;x/admin"):
            with self.subTest(target=target):
                self.assert_refused(target)
        # Still served afterwards.
        self.assert_forwarded(b"/api/ok", "/api/ok")

    def test_bad_host_values_are_refused(self):
        for host in (b"a b", b"a/b", b"", b"user@h", b"user:pw@h", b"h:99999", b"h:123456",
                     b"h:8o", b"h:", b":80", b"[::1", b"[::1]x", b"[zz::1]", b"h%zz", b"h?x",
                     b"h#x", b"h\\x"):
            with self.subTest(host=host):
                self.assert_refused(b"/api/x", host)
        # A folded Host line is joined with a space: refused.
        self.assert_refused(b"/api/x", b"a", b" b\r\n")
        # What an authority may be stays accepted.
        for host in ("example.com", "Example.COM.:8080", "127.0.0.1:65535", "[::1]", "[::1]:80",
                     "[v1.x]", "a-b_c~d.e!$&'()*+,;=%41", "localhost:0"):
            with self.subTest(host=host):
                res = self.send(b"/api/x", host.encode())
                self.assertEqual(res.status, 200, res)
                self.assertEqual(echo_header(res.json(), "Host"), [host])

    def test_absolute_form_needs_http_and_a_valid_authority(self):
        for target in (b"gopher://x/", b"http:///", b"http:///api/x", b"ftp://g/api/x",
                       b"http:/api/x", b"http://user@g/api/x", b"http://g:99999/api/x",
                       b"http://a b/api/x", b"http://g/api/x#f", b"http://g/api/%2f"):
            with self.subTest(target=target):
                self.assert_refused(target)
        # http and https in any case; the authority replaces Host; the path is normalized.
        for target, host, path in ((b"HTTPS://Other.Example/api/a", "Other.Example", "/api/a"),
                                   (b"Http://o.example:8080//%61pi/b?q=%61",
                                    "o.example:8080", "/api/b?q=%61"),
                                   (b"http://[::1]:81/api/c", "[::1]:81", "/api/c")):
            with self.subTest(target=target):
                res = self.send(target)
                self.assertEqual(res.status, 200, res)
                doc = res.json()
                self.assertEqual(doc["target"], path)
                self.assertEqual(echo_header(doc, "Host"), [host])
        # The Host rules still hold with absolute-form: HTTP/1.1 needs one, valid, Host.
        self.assert_refused(b"http://g/api/x", None)
        self.assert_refused(b"http://g/api/x", b"g", b"Host: h\r\n")
        self.assert_refused(b"http://g/api/x", b"a b")

class LocalReplyTest(GatewayTestCase):
    server_options = {"max_body_bytes": 65536, "max_header_bytes": 8192, "header_timeout_ms": 300}

    def setUp(self):
        super().setUp()
        self.dead_port = closed_port()
        self.dead_port2 = closed_port()
        self.start_gateway(
            upstreams={
                "echo": [self.echo.address],
                "dead": [f"127.0.0.1:{self.dead_port}"],
                "dead2": [f"127.0.0.1:{self.dead_port}", f"127.0.0.1:{self.dead_port2}"],
                "short": {"servers": [self.echo.address], "response_timeout_ms": 300},
            },
            routes=default_routes() + [
                {"name": "dead", "match": {"path_prefix": "/dead"}, "upstream": "dead"},
                {"name": "dead2", "match": {"path_prefix": "/both-dead"}, "upstream": "dead2"},
                {"name": "short", "match": {"path_prefix": "/short"}, "upstream": "short",
                 "strip_prefix": True},
            ],
            server={"threads": 1})

    def exchange(self, data: bytes, timeout=5.0):
        return raw_exchange(self.gateway.port, data, timeout=timeout)

    def test_404_when_no_route_matches(self):
        res = self.exchange(b"GET /nowhere HTTP/1.1\r\nHost: g\r\n\r\n")
        self.assert_local_reply(res, 404)

    def test_405_with_allow(self):
        res = self.exchange(b"POST /getonly/x HTTP/1.1\r\nHost: g\r\nContent-Length: 0\r\n\r\n")
        self.assert_local_reply(res, 405)
        allow = [m.strip() for m in (res.header("Allow") or "").split(",")]
        self.assertIn("GET", allow, res)
        self.assertNotIn("POST", allow)
        status, _, _ = request(self.gateway.port, "GET", "/getonly/x")
        self.assertEqual(status, 200)

    def test_408_when_head_is_incomplete(self):
        with RawConnection(self.gateway.port, timeout=5) as conn:
            conn.send(b"GET /api/slowloris HTTP/1.1\r\nHost: g\r\nX-Partial: ")
            res = conn.read_response()
            self.assert_local_reply(res, 408)
            self.assertTrue(conn.is_closed(), "connection not closed after 408")

    def test_413_content_length_over_limit(self):
        with RawConnection(self.gateway.port, timeout=5) as conn:
            conn.send(b"POST /api/big HTTP/1.1\r\nHost: g\r\nContent-Length: 65537\r\n\r\n")
            self.assert_local_reply(conn.read_response(), 413)

    def test_413_chunked_body_over_limit(self):
        with RawConnection(self.gateway.port, timeout=5) as conn:
            piece = b"%x\r\n%s\r\n" % (40000, b"a" * 40000)
            try:
                conn.send(b"POST /api/big HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n\r\n"
                          + piece + piece)
            except OSError:
                pass  # the gateway may stop reading once the limit is passed
            self.assert_local_reply(conn.read_response(), 413)

    def test_body_at_limit_is_accepted(self):
        body = os.urandom(65536)
        status, _, data = request(self.gateway.port, "POST", "/api/edge", body=body)
        self.assertEqual(status, 200, data[:300])
        self.assertEqual(json.loads(data)["body_sha256"], hashlib.sha256(body).hexdigest())
        status, _, data = request(self.gateway.port, "POST", "/api/edge", body=iter([body]),
                                  chunked=True)
        self.assertEqual(status, 200, data[:300])
        self.assertEqual(json.loads(data)["body_length"], 65536)

    def test_431_when_head_too_large(self):
        res = self.exchange(b"GET /api/h HTTP/1.1\r\nHost: g\r\nX-Big: " + b"a" * 10000 + b"\r\n\r\n")
        self.assert_local_reply(res, 431)
        res = self.exchange(b"GET /api/h HTTP/1.1\r\nHost: g\r\nX-Big: " + b"a" * 4000 + b"\r\n\r\n")
        self.assertEqual(res.status, 200)
        self.assertEqual(echo_header(res.json(), "X-Big"), ["a" * 4000])

    def assert_400_then_close(self, data: bytes):
        with RawConnection(self.gateway.port, timeout=5) as conn:
            conn.send(data)
            self.assert_local_reply(conn.read_response(), 400)
            self.assertTrue(conn.is_closed(), "connection not closed after 400")

    def test_400_content_length_with_transfer_encoding(self):
        self.assert_400_then_close(b"POST /api/x HTTP/1.1\r\nHost: g\r\nContent-Length: 5\r\n"
                                   b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n")

    def test_400_garbage_request_line(self):
        self.assert_400_then_close(b"NONSENSE\r\n\r\n")

    def test_400_malformed_header(self):
        self.assert_400_then_close(b"GET /api/x HTTP/1.1\r\nHost: g\r\nNo colon here\r\n\r\n")

    def test_400_bad_chunking(self):
        self.assert_400_then_close(b"POST /api/x HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked"
                                   b"\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")

    def test_502_when_upstream_refuses(self):
        res = self.exchange(b"GET /dead/x HTTP/1.1\r\nHost: g\r\n\r\n")
        self.assert_local_reply(res, 502)

    def test_502_when_upstream_closes_before_head(self):
        res = self.exchange(b"GET /__close HTTP/1.1\r\nHost: g\r\n\r\n")
        self.assert_local_reply(res, 502)
        res = self.exchange(b"POST /__close HTTP/1.1\r\nHost: g\r\nContent-Length: 4\r\n\r\nbody")
        self.assert_local_reply(res, 502)
        # The upstream itself is fine: the next request works.
        self.assertEqual(request(self.gateway.port, "GET", "/api/ok")[0], 200)

    def test_504_when_upstream_is_slow(self):
        res = self.exchange(b"GET /short/__slow/3000 HTTP/1.1\r\nHost: g\r\n\r\n", timeout=10)
        self.assert_local_reply(res, 504)
        status, _, body = request(self.gateway.port, "GET", "/short/__slow/10")
        self.assertEqual(status, 200, body[:300])

    def test_503_when_every_server_is_cooling_down(self):
        # Both servers refuse: the first request tries them (502) and puts them in cool-down;
        # the next one finds no server to try (503).
        first = self.exchange(b"GET /both-dead/1 HTTP/1.1\r\nHost: g\r\n\r\n")
        self.assert_local_reply(first, 502)
        second = self.exchange(b"GET /both-dead/2 HTTP/1.1\r\nHost: g\r\n\r\n")
        self.assert_local_reply(second, 503)

    def test_gateway_survives_bad_input(self):
        port = self.gateway.port
        bad_inputs = [
            b"NONSENSE\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + os.urandom(512),  # a TLS hello
            os.urandom(4096),
            b"GET /api/x HTTP/9.9\r\nHost: g\r\n\r\n",
            b"GET " + b"/a" * 20000 + b" HTTP/1.1\r\nHost: g\r\n\r\n",
            b"G\x00T /api HTTP/1.1\r\n\r\n",
            b"GET /api/x HTTP/1.1\r\nHost: g\r\nContent-Length: -1\r\n\r\n",
            b"GET /api/x HTTP/1.1\r\nHost: g\r\nContent-Length: 99999999999999999999999\r\n\r\n",
            b"POST /api/x HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: gzip, chunked, identity\r\n\r\n",
            b"POST /api/x HTTP/1.1\r\nHost: g\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
            b"GET /api/x HTTP/1.1\r\n" + b"X-H: v\r\n" * 5000 + b"\r\n",
            b"POST /api/x HTTP/1.1\r\nHost: g\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"ffffffffffffffffffff\r\n",
            b"\r\n" * 1000,
        ]
        for data in bad_inputs:
            with RawConnection(port, timeout=5) as conn:
                try:
                    conn.send(data)
                    conn.read_response()  # any answer (or a close) will do
                except (OSError, ValueError):
                    pass
        # Clients that go away at awkward moments.
        for data in (b"GET /api/x HTTP/1.1\r\nHost: g\r\n",  # mid-head
                     b"POST /api/x HTTP/1.1\r\nHost: g\r\nContent-Length: 60000\r\n\r\nabc",  # mid-body
                     b"GET /__slow/200 HTTP/1.1\r\nHost: g\r\n\r\n",  # while upstream works
                     b"GET /__download/50000000 HTTP/1.1\r\nHost: g\r\n\r\n"):  # mid-download
            conn = RawConnection(port)
            conn.send(data)
            if b"download" in data:
                conn.sock.recv(65536)
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # reset
        for _ in range(20):  # connect and leave
            socket.create_connection(("127.0.0.1", port)).close()
        # Still serving, on both sides.
        self.assertEqual(request(port, "GET", "/api/final")[0], 200)
        status, _, body = request(port, "GET", "/__download/1000000")
        self.assertEqual((status, hashlib.sha256(body).hexdigest()), (200, pattern_sha256(1000000)))
        self.assertEqual(request(self.gateway.admin_port, "GET", "/healthz")[0], 200)
        self.assertTrue(self.gateway.alive())


class UpstreamPoolTest(GatewayTestCase):
    def burst(self, n):
        """n requests at once, each held 300 ms by the upstream: n connections."""
        statuses = []
        threads = [threading.Thread(target=lambda: statuses.append(
            request(self.gateway.port, "GET", "/__slow/300")[0])) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.assertEqual(statuses, [200] * n)

    def test_a_bursts_connections_serve_the_next_burst_then_the_pool_shrinks(self):
        self.start_gateway(upstreams={"echo": {"servers": [self.echo.address],
                                               "max_idle_connections": 2}},
                           server={"threads": 1})
        gw = self.gateway
        self.burst(8)
        opened = metric_sum(gw, "sluice_upstream_connections_total")
        self.assertEqual(opened, 8)
        # Beyond max_idle_connections, a burst's connections stay a moment:
        # the next burst takes them instead of opening new ones.
        self.burst(8)
        self.assertEqual(metric_sum(gw, "sluice_upstream_connections_total"), opened)
        # Then the pool comes back to its size.
        wait_until(lambda: metric_sum(gw, "sluice_upstream_connections_open") <= 2, 10,
                   message="the surplus idle connections closed")
        self.assertEqual(self.echo.counts()["bad_requests"], 0)


class ClientTimeoutTest(GatewayTestCase):
    server_options = {"header_timeout_ms": 300, "idle_timeout_ms": 300}

    def setUp(self):
        super().setUp()
        self.start_gateway()

    def test_idle_keepalive_connection_is_closed(self):
        with RawConnection(self.gateway.port) as conn:
            conn.send(b"GET /api/idle HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assertEqual(conn.read_response().status, 200)
            self.assertTrue(conn.is_closed(timeout=5), "idle connection still open")

    def assert_408_for_a_trickled_head(self, conn: RawConnection):
        head = b"GET /api/trickle HTTP/1.1\r\nHost: g\r\nX-Slow: " + b"a" * 40
        try:
            for i in range(0, len(head), 4):
                conn.send(head[i:i + 4])
                time.sleep(0.05)  # pacing the client, not waiting for a condition
        except OSError:
            pass  # closed by the gateway mid-head
        res = conn.read_response()
        self.assert_local_reply(res, 408)
        self.assertTrue(conn.is_closed())

    def test_408_for_a_trickled_head(self):
        # The deadline covers the whole head, not each byte.
        with RawConnection(self.gateway.port, timeout=5) as conn:
            self.assert_408_for_a_trickled_head(conn)

    def test_408_for_a_trickled_head_after_a_kept_alive_request(self):
        # The head's deadline moves with each request without re-arming its
        # timer: a wait armed for the first request, fired early, is armed
        # again for the second head, which times out all the same.
        with RawConnection(self.gateway.port, timeout=5) as conn:
            conn.send(b"GET /api/first HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assertEqual(conn.read_response().status, 200)
            self.assert_408_for_a_trickled_head(conn)

    def test_slow_upstream_is_not_an_idle_client(self):
        # Waiting for the upstream is not idle time on the client connection.
        status, _, body = request(self.gateway.port, "GET", "/__slow/800")
        self.assertEqual(status, 200, body[:300])


class StalledUpstreamWriteTest(ProcessTestCase):
    """An upstream that takes the connection and the request head but never reads
    the body: the write to it is bounded by response_timeout_ms (the upstream's
    deadline, not the client's), and the client gets a 504."""

    def test_a_request_body_the_upstream_stops_reading_ends_in_a_504(self):
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        self.addCleanup(listener.close)
        held = []

        def accept():
            while True:
                try:
                    held.append(listener.accept()[0])  # never read
                except OSError:
                    return
        threading.Thread(target=accept, daemon=True).start()
        self.addCleanup(lambda: [c.close() for c in held])
        config = gateway_config(
            {"stalled": {"servers": [f"127.0.0.1:{listener.getsockname()[1]}"],
                         "response_timeout_ms": 500}},
            [{"name": "up", "match": {"path_prefix": "/"}, "upstream": "stalled"}],
            server={"body_timeout_ms": 30000, "send_timeout_ms": 30000,
                    "max_body_bytes": 128 * MIB})
        gw = self.start_sluice(config)
        size = 64 * MIB
        with socket.create_connection(("127.0.0.1", gw.port), timeout=20) as sock:
            sock.sendall(f"POST /upload HTTP/1.1\r\nHost: g\r\nContent-Length: {size}\r\n\r\n"
                         .encode())

            def send_body():
                block = b"x" * MIB
                try:
                    for _ in range(size // MIB):
                        sock.sendall(block)
                except OSError:
                    pass  # the gateway answered and closed
            sender = threading.Thread(target=send_body, daemon=True)
            sender.start()
            head = b""
            while b"\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                head += chunk
        self.assertTrue(head.startswith(b"HTTP/1.1 504 "), head[:200])
        self.assertEqual(gw.metric("sluice_upstream_requests_total", upstream="stalled",
                                   outcome="timeout"), 1)


class UpstreamSelectionTest(GatewayTestCase):
    server_options = {"threads": 1}  # one worker: one round-robin cursor, one cool-down table

    def test_round_robin_across_two_servers(self):
        other = self.start_echo("echo2")
        self.start_gateway(upstreams={"echo": [self.echo.address, other.address]})
        with Client(self.gateway.port) as client:
            for i in range(20):
                self.assertEqual(client.request("GET", f"/api/rr/{i}")[0], 200)
        counts = [self.echo.counts()["requests"], other.counts()["requests"]]
        self.assertEqual(sum(counts), 20)
        self.assertGreaterEqual(min(counts), 8, f"requests per server: {counts}")

    def test_idempotent_request_is_retried_on_next_server(self):
        self.start_gateway(upstreams={"echo": [f"127.0.0.1:{closed_port()}", self.echo.address]})
        for method in ("GET", "HEAD", "GET", "DELETE", "PUT", "GET"):
            status, _, _ = request(self.gateway.port, method, "/api/retry")
            self.assertEqual(status, 200, method)
        self.assertEqual(self.echo.counts()["requests"], 6)

    def test_non_idempotent_request_is_not_retried(self):
        self.start_gateway(upstreams={"echo": [f"127.0.0.1:{closed_port()}", self.echo.address]})
        statuses = []
        for i in range(4):
            status, _, _ = request(self.gateway.port, "POST", f"/api/post/{i}", body=b"data")
            statuses.append(status)
        # Exactly the POST that drew the refusing server fails; the others reach the echo.
        self.assertEqual(sorted(statuses), [200, 200, 200, 502], statuses)
        self.assertEqual(self.echo.counts()["requests"], 3)


class AdminTest(GatewayTestCase):
    def setUp(self):
        super().setUp()
        self.start_gateway()

    def test_healthz_and_readyz(self):
        for path in ("/healthz", "/readyz"):
            status, _, body = request(self.gateway.admin_port, "GET", path)
            self.assertEqual(status, 200, f"{path}: {body[:300]!r}")

    def test_admin_is_not_on_data_plane(self):
        status, _, _ = request(self.gateway.port, "GET", "/healthz")
        self.assertEqual(status, 404)

    def test_metrics_count_requests(self):
        for _ in range(3):
            self.assertEqual(request(self.gateway.port, "GET", "/api/m")[0], 200)
        self.assertEqual(request(self.gateway.port, "GET", "/nowhere")[0], 404)
        status, headers, body = request(self.gateway.admin_port, "GET", "/metrics")
        self.assertEqual(status, 200)
        self.assertIn("text/plain", headers["Content-Type"])
        self.assertIn("# TYPE sluice_http_requests_total counter", body.decode())
        self.assertEqual(self.gateway.metric("sluice_http_requests_total", route="api", code="200"), 3)
        self.assertGreaterEqual(
            self.gateway.metric("sluice_upstream_requests_total", upstream="echo", outcome="ok"), 3)


    def test_admin_head_has_no_body_and_keeps_the_connection(self):
        with RawConnection(self.gateway.admin_port) as conn:
            conn.send(b"HEAD /metrics HTTP/1.1\r\nHost: a\r\n\r\n"
                      b"GET /healthz HTTP/1.1\r\nHost: a\r\n\r\n")
            head = conn.read_response(head_request=True)
            self.assertEqual(head.status, 200)
            self.assertGreater(int(head.header("Content-Length")), 0)
            self.assertEqual(head.body, b"")
            follow = conn.read_response()
            self.assertEqual((follow.status, follow.json()["status"]), (200, "ok"))

    def test_abandoned_upload_is_counted_as_499(self):
        with RawConnection(self.gateway.port) as conn:
            conn.send(b"POST /api/upload HTTP/1.1\r\nHost: g\r\nContent-Length: 100\r\n\r\n"
                      b"0123456789")
        wait_until(lambda: self.gateway.metric("sluice_http_requests_total", route="api",
                                               code="499") == 1, 10,
                   message='sluice_http_requests_total{route="api",code="499"} == 1')


def stop_pid(pid: int, marker: str):
    """SIGKILL for a process the harness does not own, if it is still there
    (its command line holds `marker`, so a reused PID is left alone)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            if marker.encode() in f.read():
                os.kill(pid, signal.SIGKILL)
    except (FileNotFoundError, ProcessLookupError):
        pass


@unittest.skipUnless(shutil.which("strace"), "strace not installed")
@unittest.skipIf(SANITIZED, "LeakSanitizer does not run under strace")
class RelayReadSizeTest(ProcessTestCase):
    """Bodies are relayed in large reads: a read asks the kernel for no more
    than its buffer's free room, and 512-byte reads cost a system call and a
    packet per half kilobyte."""

    def test_large_bodies_are_read_in_large_pieces(self):
        echo = self.start_echo()
        trace = os.path.join(self.workdir, "trace.txt")
        gateway = self.start_sluice(
            gateway_config({"echo": [echo.address]},
                           [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}],
                           server={"threads": 1}),
            wrapper=["strace", "-f", "-qq", "-e", "trace=recvmsg", "-o", trace])
        # strace detaches (and leaves sluice running) when it is stopped itself:
        # the gateway is stopped by its own PID, and strace exits after it.
        with open(f"/proc/{gateway.pid}/task/{gateway.pid}/children") as f:
            sluice_pid = int(f.read().split()[0])
        self.addCleanup(stop_pid, sluice_pid, gateway.config_path)
        size = 8 * MIB
        with Client(gateway.port, timeout=60) as client:
            res = client.stream("GET", f"/__download/{size}")
            self.assertEqual(res.status, 200)
            sha = hashlib.sha256()
            while piece := res.read(256 * 1024):
                sha.update(piece)
            self.assertEqual(sha.hexdigest(), pattern_sha256(size))
            status, _, body = client.request("POST", "/upload", body=b"u" * size)
            self.assertEqual(status, 200, body[:300])
            self.assertEqual(json.loads(body)["body_length"], size)
        os.kill(sluice_pid, signal.SIGTERM)
        self.assertEqual(gateway.wait(30), 0, gateway.output_tail())
        with open(trace) as f:
            reads = [int(m.group(1)) for m in re.finditer(r"recvmsg\(.*= (\d+)$", f.read(), re.M)]
        moved = sum(reads)
        self.assertGreaterEqual(moved, 2 * size)
        # Both bodies through both sides of the gateway in reads averaging at
        # least 8 KiB (the client side is bounded by max_header_bytes, 16 KiB).
        self.assertLessEqual(len(reads), moved // (8 * 1024),
                             f"{len(reads)} reads for {moved} bytes")


class ReloadTest(GatewayTestCase):
    def test_a_connection_idle_across_a_reload_gets_the_new_config(self):
        config = gateway_config({"echo": [self.echo.address]}, default_routes())
        self.gateway = self.start_sluice(config)
        with RawConnection(self.gateway.port) as conn:
            conn.send(b"GET /api/before HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assertEqual(conn.read_response().status, 200)
            # The api route goes away while the connection is idle.
            config["routes"] = [r for r in config["routes"] if r["name"] != "api"]
            self.gateway.reload(config)
            wait_until(lambda: request(self.gateway.port, "GET", "/api/probe")[0] == 404,
                       message="the reload removed the api route")
            conn.send(b"GET /api/after HTTP/1.1\r\nHost: g\r\n\r\n")
            self.assert_local_reply(conn.read_response(), 404)


    def test_settings_that_need_a_restart_are_named_on_reload(self):
        config = gateway_config({"echo": [self.echo.address]}, default_routes(),
                                server={"max_connections": 500})
        self.gateway = self.start_sluice(config)
        config["server"]["max_connections"] = 600
        self.gateway.reload(config)
        wait_until(lambda: "server.max_connections changed" in self.gateway.stderr(),
                   message="a warning that max_connections needs a restart")
        self.assertEqual(self.gateway.metric("sluice_connections_max"), 500)


if __name__ == "__main__":
    unittest.main()
