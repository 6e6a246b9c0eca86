"""sluice-echo (the test upstream) and the harness itself, without Sluice.

If these fail, the proxy tests cannot be trusted either.
"""

import hashlib
import json
import unittest

from harness import (ProcessTestCase, RawConnection, Client, echo_header, pattern_bytes,
                     pattern_sha256, redis_command, request, rss_kib)


class EchoServerTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.echo = self.start_echo()

    def test_echo_reports_request(self):
        status, headers, body = request(self.echo.port, "PATCH", "/a%20b/c?x=1&y=%2F", body=b"hello",
                                        headers={"X-One": "1", "X-Two": "caf\u00e9"})
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "application/json")
        doc = json.loads(body)
        self.assertEqual(doc["method"], "PATCH")
        self.assertEqual(doc["target"], "/a%20b/c?x=1&y=%2F")
        self.assertEqual(doc["version"], "1.1")
        self.assertEqual(echo_header(doc, "x-one"), ["1"])
        self.assertEqual(echo_header(doc, "X-Two"), ["caf\u00e9"])  # latin-1 round trip
        names = [n for n, _ in doc["headers"]]
        self.assertLess(names.index("X-One"), names.index("X-Two"))
        self.assertEqual(doc["body_length"], 5)
        self.assertEqual(doc["body_sha256"], hashlib.sha256(b"hello").hexdigest())

    def test_chunked_upload_is_hashed(self):
        pieces = [b"a" * 1000, b"b" * 70000, b"c"]
        status, _, body = request(self.echo.port, "POST", "/up", body=iter(pieces), chunked=True)
        self.assertEqual(status, 200)
        doc = json.loads(body)
        self.assertEqual(echo_header(doc, "Transfer-Encoding"), ["chunked"])
        self.assertEqual(doc["body_length"], 71001)
        self.assertEqual(doc["body_sha256"], hashlib.sha256(b"".join(pieces)).hexdigest())

    def test_head_has_no_body(self):
        with RawConnection(self.echo.port) as conn:
            conn.send(b"HEAD /x HTTP/1.1\r\nHost: e\r\n\r\nGET /y HTTP/1.1\r\nHost: e\r\n\r\n")
            head = conn.read_response(head_request=True)
            self.assertEqual(head.status, 200)
            self.assertGreater(int(head.header("Content-Length")), 0)
            self.assertEqual(conn.read_response().json()["target"], "/y")

    def test_download_content_length_and_chunked(self):
        with RawConnection(self.echo.port) as conn:
            for size in (0, 10, 200000):
                for query, chunked in (("", False), ("?chunked=1", True)):
                    conn.send(f"GET /__download/{size}{query} HTTP/1.1\r\nHost: e\r\n\r\n".encode())
                    res = conn.read_response()
                    self.assertEqual(res.status, 200)
                    self.assertEqual(res.header("Transfer-Encoding") == "chunked", chunked)
                    self.assertEqual(res.body, pattern_bytes(size))
            # Exact framing: nothing stray before the next response.
            conn.send(b"GET /next HTTP/1.1\r\nHost: e\r\n\r\n")
            self.assertEqual(conn.read_response().json()["target"], "/next")
        self.assertEqual(hashlib.sha256(pattern_bytes(1000003)).hexdigest(), pattern_sha256(1000003))
        with RawConnection(self.echo.port) as conn:
            conn.send(b"GET /__download/100000?eof=1 HTTP/1.1\r\nHost: e\r\n\r\n")
            res = conn.read_response()  # no length: read until close
            self.assertIsNone(res.header("Content-Length"))
            self.assertIsNone(res.header("Transfer-Encoding"))
            self.assertEqual(res.header("Connection"), "close")
            self.assertEqual(res.body, pattern_bytes(100000))

    def test_status_slow_close_hop(self):
        status, _, body = request(self.echo.port, "GET", "/__status/418")
        self.assertEqual((status, json.loads(body)), (418, {"status": 418}))
        with RawConnection(self.echo.port) as conn:
            conn.send(b"GET /__status/204 HTTP/1.1\r\nHost: e\r\n\r\n")
            res = conn.read_response()
            self.assertEqual(res.status, 204)
            self.assertIsNone(res.header("Content-Length"))
        status, _, body = request(self.echo.port, "GET", "/__slow/50")
        self.assertEqual((status, json.loads(body)["target"]), (200, "/__slow/50"))
        with RawConnection(self.echo.port) as conn:
            conn.send(b"GET /__close HTTP/1.1\r\nHost: e\r\n\r\n")
            self.assertEqual(conn.read_until_close(), b"")
        with RawConnection(self.echo.port) as conn:
            conn.send(b"GET /__hop HTTP/1.1\r\nHost: e\r\n\r\n")
            res = conn.read_response()
            self.assertEqual(res.header("X-Secret"), "1")
            self.assertEqual(res.header("Connection"), "X-Secret, keep-alive")
            for name in ("Keep-Alive", "Proxy-Authenticate", "Trailer", "Upgrade"):
                self.assertIsNotNone(res.header(name), name)

    def test_pipelining_and_stats(self):
        with RawConnection(self.echo.port) as conn:
            conn.send(b"GET /1 HTTP/1.1\r\nHost: e\r\n\r\n"
                      b"POST /2 HTTP/1.1\r\nHost: e\r\nContent-Length: 3\r\n\r\nabc"
                      b"GET /3 HTTP/1.1\r\nHost: e\r\nConnection: close\r\n\r\n")
            self.assertEqual([conn.read_response().json()["target"] for _ in range(3)],
                             ["/1", "/2", "/3"])
            self.assertTrue(conn.is_closed())
        with Client(self.echo.port) as client:
            for _ in range(5):
                self.assertEqual(client.request("GET", "/k")[0], 200)
        stats = self.echo.stats()
        self.assertEqual(stats, {"connections": 3, "requests": 9, "bad_requests": 0,
                                 "slow_peak": 0})

    def test_bad_requests_are_counted(self):
        for data in (b"0\r\n\r\nGET / HTTP/1.1\r\n\r\n", b"GET / HTTP/1.1\r\nBad\r\n\r\n"):
            with RawConnection(self.echo.port) as conn:
                conn.send(data)
                self.assertEqual(conn.read_until_close(), b"")
        with RawConnection(self.echo.port) as conn:  # a peer leaving is not an error
            conn.send(b"GET / HTTP/1.1\r\nHost: e\r\n")
        self.assertEqual(self.echo.counts()["bad_requests"], 2)

    def test_http10_closes(self):
        with RawConnection(self.echo.port) as conn:
            conn.send(b"GET /old HTTP/1.0\r\n\r\n")
            res = conn.read_response()
            self.assertEqual((res.version, res.status), ("1.0", 200))
            self.assertTrue(conn.is_closed())

    def test_rss_readable(self):
        self.assertGreater(rss_kib(self.echo.pid), 0)


class RedisHarnessTest(ProcessTestCase):
    def test_redis_starts_and_answers(self):
        redis = self.start_redis()
        self.assertEqual(redis_command(redis.port, "SET", "k", "v"), b"+OK\r\n")
        self.assertEqual(redis_command(redis.port, "GET", "k"), b"$1\r\nv\r\n")


if __name__ == "__main__":
    unittest.main()
