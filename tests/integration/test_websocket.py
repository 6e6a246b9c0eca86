"""WebSocket pass-through through the real sluice binary.

The upstream is the testkit's EchoUpstream (tests/testkit/websocket.py, a Python
WebSocket echo server that records the heads it receives and can misbehave on
purpose); the client is the testkit's WebSocketClient. EchoUpstreamSelfTest checks
the two against each other without a gateway.
"""

import hashlib
import json
import os
import signal
import socket
import threading
import time
import unittest

from harness import WS_BINARY as BINARY
from harness import WS_CLOSE as CLOSE
from harness import WS_EOF as EOF
from harness import WS_PONG as PONG
from harness import WS_TEXT as TEXT
from harness import (SANITIZED, ProcessTestCase, RawConnection, WebSocketClient, WsEchoUpstream,
                     WsHandshakeError, client_context, echo_header_names, gateway_config,
                     make_ca, make_server_cert, metric_sum, rss_kib, wait_redis_ready,
                     wait_until, ws_accept_key, ws_close_code, ws_encode_frame,
                     ws_handshake_request, ws_mask_bytes)

MIB = 1024 * 1024
TINY_RATE = 0.001  # a refill that refills nothing within a test


def message(i: int, block: bytes) -> bytes:
    """Message i of a stream: its number, then a shared random block."""
    return i.to_bytes(8, "big") + block[8:]


class UpstreamCase(ProcessTestCase):
    """upstream(): a WebSocket echo upstream, stopped in cleanup."""

    def upstream(self, **options) -> WsEchoUpstream:
        return self.start_ws_upstream(**options)


class EchoUpstreamSelfTest(UpstreamCase):
    """The testkit's client against the testkit's upstream, no gateway."""

    def test_masking_matches_the_byte_by_byte_definition(self):
        mask = bytes([0x12, 0x34, 0x56, 0x78])
        data = os.urandom(1031)
        for offset in range(6):
            expected = bytes(b ^ mask[(i + offset) % 4] for i, b in enumerate(data))
            self.assertEqual(ws_mask_bytes(data, mask, offset), expected, offset)
        self.assertEqual(ws_mask_bytes(b"", mask), b"")
        # RFC 6455 5.7: a masked "Hello".
        self.assertEqual(ws_encode_frame(TEXT, b"Hello", mask=bytes([0x37, 0xfa, 0x21, 0x3d])),
                         bytes([0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51,
                                0x58]))
        # RFC 6455 1.3: the example key and accept value.
        self.assertEqual(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
                         "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")

    def test_text_binary_fragmented_ping_and_close(self):
        up = self.upstream()
        with WebSocketClient(up.port, "/chat", protocols=["chat", "superchat"]) as ws:
            self.assertEqual(ws.response.header("Sec-WebSocket-Protocol"), "chat")
            self.assertEqual(ws.exchange(TEXT, "héllo".encode()), "héllo".encode())
            self.assertEqual(ws.exchange(BINARY, bytes(range(256))), bytes(range(256)))
            for size in (0, 125, 126, 65535, 65536, 3 * MIB + 1):
                data = os.urandom(size)
                self.assertEqual(ws.exchange(BINARY, data), data, size)
            data = os.urandom(300_000)
            ws.send_binary(data, fragment_size=70_000)
            self.assertEqual(ws.recv(), (BINARY, data))
            ws.send_text("ab" * 1000, fragment_size=7)
            self.assertEqual(ws.recv(), (TEXT, b"ab" * 1000))
            ws.ping(b"are you there")
            self.assertEqual(ws.recv(), (PONG, b"are you there"))
            with self.assertRaises(TimeoutError):
                ws.recv(timeout=0.2)
            ws.close(1000, "bye")
            opcode, payload = ws.recv()
            self.assertEqual((opcode, ws_close_code(payload), payload[2:]), (CLOSE, 1000, b"bye"))
            self.assertEqual(ws.recv(), (EOF, b""))
            self.assertEqual(ws.close_kind, "fin")
        [head] = up.heads
        self.assertEqual(head.target, "/chat")
        self.assertEqual(head.header("Sec-WebSocket-Key"), ws.key)
        wait_until(lambda: up.connections[0].closed.is_set(), 5, message="upstream close")
        self.assertEqual(up.connections[0].messages, 10)
        self.assertEqual(up.connections[0].pings, 1)
        self.assertIsNone(up.connections[0].error)

    def test_64_mib_in_one_message_and_in_1_mib_messages(self):
        up = self.upstream()
        with WebSocketClient(up.port, "/big", timeout=60) as ws:
            block = os.urandom(MIB)
            sent, received = self.stream(ws, 64, block)
            self.assertEqual(received, sent)
            big = block * 64
            sender = threading.Thread(target=ws.send_binary, args=(big,), daemon=True)
            sender.start()
            opcode, payload = ws.recv(timeout=60)
            sender.join(60)
            self.assertEqual(opcode, BINARY)
            self.assertEqual(len(payload), 64 * MIB)
            self.assertTrue(payload == big, "the 64 MiB message came back different")

    def stream(self, ws, count, block):
        """Sends `count` messages from a thread and receives their echoes; returns the
        SHA-256 lists of what was sent and received."""
        sent, errors = [], []

        def send():
            try:
                for i in range(count):
                    data = message(i, block)
                    sent.append(hashlib.sha256(data).hexdigest())
                    ws.send_binary(data)
            except Exception as e:  # noqa: BLE001  reported below
                errors.append(e)
        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        received = []
        for _ in range(count):
            opcode, data = ws.recv(timeout=30)
            self.assertEqual(opcode, BINARY)
            received.append(hashlib.sha256(data).hexdigest())
        thread.join(30)
        self.assertEqual(errors, [])
        return sent, received

    def test_greeting_status_lie_close_after_and_hold(self):
        up = self.upstream(greeting="welcome")
        with WebSocketClient(up.port) as ws:
            self.assertEqual(ws.recv(), (TEXT, b"welcome"))
        refused = self.upstream(status=403)
        with self.assertRaises(WsHandshakeError) as caught:
            WebSocketClient(refused.port)
        self.assertEqual(caught.exception.response.status, 403)
        with RawConnection(refused.port) as conn:  # keep-alive after the 403
            conn.send(ws_handshake_request("/ws", "h"))
            self.assertEqual(conn.read_response().status, 403)
            conn.send(b"GET /plain HTTP/1.1\r\nHost: h\r\n\r\n")
            response = conn.read_response()
            self.assertEqual((response.status, response.json()["target"]), (200, "/plain"))
        liar = self.upstream(lie=True)
        with RawConnection(liar.port) as conn:
            conn.send(b"GET /plain HTTP/1.1\r\nHost: h\r\n\r\n")
            self.assertIn(b"HTTP/1.1 101 ", conn.peek(5))
        closer = self.upstream(close_after=2)
        with WebSocketClient(closer.port) as ws:
            self.assertEqual(ws.exchange(TEXT, b"1"), b"1")
            self.assertEqual(ws.exchange(TEXT, b"2"), b"2")
            self.assertEqual(ws.recv(timeout=5), (EOF, b""))
        slow = self.upstream(hold_reads=True)
        with WebSocketClient(slow.port) as ws:
            frame = ws_encode_frame(BINARY, os.urandom(MIB))
            total = 0
            for _ in range(256):
                n = ws.write(frame, stall=0.5)
                total += n
                if n < len(frame):
                    break
            self.assertLess(total, 256 * len(frame), "the write never stalled")
            self.assertEqual(slow.connections[0].bytes_received, 0)
            slow.resume()
            rest = frame[n:]
            ws.send_raw(rest)
            count = total // len(frame) + 1
            for i in range(count):
                opcode, data = ws.recv(timeout=30)
                self.assertEqual((opcode, len(data)), (BINARY, MIB), i)
        wait_until(lambda: slow.connections[0].messages == count, 5, message="all echoed")


class WebSocketCase(UpstreamCase):
    """An EchoUpstream (self.up) behind a gateway: route "ws" (/ws) goes to it,
    route "plain" (everything else) to a sluice-echo when one is started."""

    def setUp(self):
        super().setUp()
        self.up = self.upstream()

    def config(self, server=None, ws_route=None, upstreams=None, routes=(), **sections):
        ups = {"ws": [self.up.address], **(upstreams or {})}
        all_routes = [*routes,
                      {"name": "ws", "match": {"path_prefix": "/ws"}, "upstream": "ws",
                       **(ws_route or {})}]
        return gateway_config(ups, all_routes, server=server, **sections)

    def start(self, **kwargs):
        return self.start_sluice(self.config(**kwargs))

    def connect(self, gw, path="/ws/x", **kwargs) -> WebSocketClient:
        ws = WebSocketClient(gw.port, path, **kwargs)
        self.addCleanup(ws.close_socket)
        return ws

    def assert_closed_cleanly(self, ws, msg=""):
        """A close frame from the client is echoed, then the gateway closes TCP."""
        ws.close(1000)
        opcode, payload = ws.recv(timeout=10)
        self.assertEqual((opcode, ws_close_code(payload)), (CLOSE, 1000), msg)
        self.assertEqual(ws.recv(timeout=10), (EOF, b""), msg)

    def tunnels_active(self, gw) -> float:
        return metric_sum(gw, "sluice_websocket_tunnels_active")

    def wait_no_tunnels(self, gw):
        wait_until(lambda: self.tunnels_active(gw) == 0, 10,
                   message="sluice_websocket_tunnels_active back to 0")

    def upstream_connection(self, index=-1):
        wait_until(lambda: self.up.tunnels(), 5, message="a tunnel at the upstream")
        return self.up.tunnels()[index]


class HandshakeTest(WebSocketCase):
    def test_text_and_binary_frames_both_ways_and_the_forwarded_handshake(self):
        gw = self.start()
        ws = self.connect(gw, "/ws/chat?room=1", protocols=["chat", "superchat"],
                          headers={"Origin": "http://example.test"})
        # The client's 101.
        self.assertEqual(ws.response.status, 101)
        self.assertEqual(ws.response.header("Sec-WebSocket-Accept"), ws_accept_key(ws.key))
        self.assertEqual(ws.response.header("Sec-WebSocket-Protocol"), "chat")
        self.assertTrue(ws.response.has_token("Upgrade", "websocket"), ws.response)
        self.assertTrue(ws.response.has_token("Connection", "upgrade"), ws.response)
        request_id = ws.response.header("X-Request-Id")
        self.assertTrue(request_id, ws.response)
        # Frames both ways, small and large, fragmented or not.
        self.assertEqual(ws.exchange(TEXT, "grüße".encode()), "grüße".encode())
        for size in (1, 125, 126, 65536, 200_000):
            data = os.urandom(size)
            self.assertEqual(ws.exchange(BINARY, data), data, size)
        data = os.urandom(150_000)
        ws.send_binary(data, fragment_size=40_000)
        self.assertEqual(ws.recv(), (BINARY, data))
        ws.ping(b"p")
        self.assertEqual(ws.recv(), (PONG, b"p"))
        # The handshake the upstream saw.
        [head] = self.up.heads
        self.assertEqual((head.method, head.target), ("GET", "/ws/chat?room=1"))
        self.assertTrue(head.has_token("Upgrade", "websocket"), head)
        self.assertTrue(head.has_token("Connection", "upgrade"), head)
        self.assertEqual(head.header("Sec-WebSocket-Key"), ws.key)
        self.assertEqual(head.header("Sec-WebSocket-Version"), "13")
        self.assertEqual(head.header("Sec-WebSocket-Protocol"), "chat, superchat")
        self.assertEqual(head.header("Origin"), "http://example.test")
        self.assertEqual(head.header("X-Forwarded-For"), "127.0.0.1")
        self.assertEqual(head.header("X-Request-Id"), request_id)
        self.assertIsNone(head.header("Transfer-Encoding"), head)
        self.assert_closed_cleanly(ws)
        self.assertIsNone(self.up.tunnels()[0].error)
        wait_until(lambda: metric_sum(gw, "sluice_http_requests_total", route="ws",
                                      code="101") == 1, 5, message="the 101 counted")

    def test_a_frame_sent_with_the_101_reaches_the_client(self):
        self.up.greeting = "hello from upstream"
        gw = self.start()
        ws = self.connect(gw)
        self.assertEqual(ws.recv(timeout=5), (TEXT, b"hello from upstream"))
        self.assertEqual(ws.exchange(TEXT, b"after"), b"after")

    def test_frames_sent_with_the_handshake_reach_the_upstream(self):
        gw = self.start()
        early = ws_encode_frame(TEXT, b"early bird") + ws_encode_frame(BINARY, b"\x00\x01")
        ws = self.connect(gw, early=early)
        self.assertEqual(ws.recv(timeout=5), (TEXT, b"early bird"))
        self.assertEqual(ws.recv(timeout=5), (BINARY, b"\x00\x01"))

    def test_a_refused_handshake_is_relayed_and_the_connection_keeps_serving(self):
        self.up.status = 403
        gw = self.start()
        with RawConnection(gw.port) as conn:
            conn.send(ws_handshake_request("/ws/x", "gw"))
            response = conn.read_response()
            self.assertEqual(response.status, 403, response)
            self.assertEqual(response.json()["status"], 403)
            self.assertIsNone(response.header("Upgrade"), response)
            conn.send(b"GET /ws/plain HTTP/1.1\r\nHost: gw\r\n\r\n")
            response = conn.read_response()
            self.assertEqual(response.status, 200, response)
            self.assertEqual(response.json()["target"], "/ws/plain")
        self.assertEqual(len(self.up.websocket_heads()), 1)
        self.assertEqual(metric_sum(gw, "sluice_websocket_tunnels_total"), 0)

    def test_a_connection_that_carried_a_refused_handshake_is_never_pooled(self):
        # The upstream answers 426 or 200 with keep-alive. Had it switched
        # protocols anyway, a pooled connection would carry the next client's
        # request into its tunnel: the gateway closes it instead.
        for status in (426, 200):
            with self.subTest(status=status):
                self.up = self.upstream(status=status)
                gw = self.start(server={"threads": 1})  # one worker: one pool
                with RawConnection(gw.port) as conn:
                    conn.send(ws_handshake_request("/ws/x", "gw"))
                    self.assertEqual(conn.read_response().status, status)
                with RawConnection(gw.port) as other:
                    other.send(b"GET /ws/next HTTP/1.1\r\nHost: gw\r\n\r\n")
                    self.assertEqual(other.read_response().status, 200)
                handshake_conn = next(c for c in self.up.connections
                                      if any(h.is_websocket_handshake() for h in c.heads))
                self.assertEqual(len(handshake_conn.heads), 1, handshake_conn.heads)
                wait_until(handshake_conn.closed.is_set, 5,
                           message="the handshake's upstream connection closed")
                [next_conn] = [c for c in self.up.connections
                               if any(h.target == "/ws/next" for h in c.heads)]
                self.assertIsNot(next_conn, handshake_conn)

    def test_a_101_to_an_ordinary_request_is_a_502_and_a_protocol_error(self):
        self.up.lie = True
        gw = self.start()
        with RawConnection(gw.port) as conn:
            conn.send(b"GET /ws/plain HTTP/1.1\r\nHost: gw\r\n\r\n")
            response = conn.read_response()
        self.assertEqual(response.status, 502, response)
        wait_until(lambda: metric_sum(gw, "sluice_upstream_requests_total", upstream="ws",
                                      outcome="protocol_error") >= 1, 5,
                   message="outcome=protocol_error counted")
        # The upstream connection that answered 101 is dropped.
        wait_until(lambda: self.up.connections and all(c.closed.is_set()
                                                       for c in self.up.connections), 5,
                   message="the lying upstream's connection closed")
        self.assertEqual(metric_sum(gw, "sluice_websocket_tunnels_total"), 0)
        self.assertEqual(self.tunnels_active(gw), 0)

    def test_a_101_with_another_upgrade_to_a_websocket_handshake_is_a_502(self):
        self.up.upgrade = "h2c"
        gw = self.start()
        with RawConnection(gw.port) as conn:
            conn.send(ws_handshake_request("/ws/x", "gw"))
            response = conn.read_response()
        self.assertEqual(response.status, 502, response)
        wait_until(lambda: metric_sum(gw, "sluice_upstream_requests_total", upstream="ws",
                                      outcome="protocol_error") >= 1, 5,
                   message="outcome=protocol_error counted")
        self.assertEqual(metric_sum(gw, "sluice_websocket_tunnels_total"), 0)

    def test_upgrade_h2c_is_stripped(self):
        echo = self.start_echo()
        gw = self.start(upstreams={"echo": [echo.address]},
                        routes=[{"name": "plain", "match": {"path_prefix": "/plain"},
                                 "upstream": "echo"}])
        with RawConnection(gw.port) as conn:
            conn.send(b"GET /plain/h2c HTTP/1.1\r\nHost: gw\r\n"
                      b"Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
                      b"HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n")
            response = conn.read_response()
            self.assertEqual(response.status, 200, response)
            doc = response.json()
            names = echo_header_names(doc)
            self.assertNotIn("upgrade", names, doc["headers"])
            self.assertNotIn("http2-settings", names, doc["headers"])
            connection = [v for n, v in doc["headers"] if n.lower() == "connection"]
            self.assertFalse(any("upgrade" in v.lower() for v in connection), connection)
            # The connection is still HTTP/1.1.
            conn.send(b"GET /plain/after HTTP/1.1\r\nHost: gw\r\n\r\n")
            self.assertEqual(conn.read_response().status, 200)
        self.assertEqual(self.up.heads, [])

    def test_a_post_with_upgrade_websocket_is_not_a_handshake(self):
        echo = self.start_echo()
        gw = self.start(upstreams={"echo": [echo.address]},
                        routes=[{"name": "plain", "match": {"path_prefix": "/plain"},
                                 "upstream": "echo"}])
        with RawConnection(gw.port) as conn:
            conn.send(b"POST /plain/up HTTP/1.1\r\nHost: gw\r\nConnection: Upgrade\r\n"
                      b"Upgrade: websocket\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                      b"Sec-WebSocket-Version: 13\r\nContent-Length: 3\r\n\r\nabc")
            response = conn.read_response()
        self.assertEqual(response.status, 200, response)
        self.assertNotIn("upgrade", echo_header_names(response.json()))
        self.assertEqual(metric_sum(gw, "sluice_websocket_tunnels_total"), 0)


class RateLimitedHandshakeTest(WebSocketCase):
    def test_an_empty_bucket_answers_429_to_the_handshake_and_sends_nothing_upstream(self):
        redis = self.start_redis()
        gw = self.start(redis={"url": f"redis://127.0.0.1:{redis.port}/0", "timeout_ms": 1000},
                        limits={"per_ip": {"key": "ip", "capacity": 1,
                                           "refill_per_second": TINY_RATE}},
                        ws_route={"limits": ["per_ip"]})
        wait_redis_ready(gw)
        ws = self.connect(gw)
        self.assertEqual(ws.response.header("X-RateLimit-Remaining"), "0", ws.response)
        self.assertEqual(ws.response.header("X-RateLimit-Limit"), "1", ws.response)
        self.assertEqual(ws.exchange(TEXT, b"one"), b"one")
        second = self.connect(gw, check=False)
        self.assertEqual(second.status, 429, second.response)
        self.assertTrue(second.response.header("Retry-After"), second.response)
        self.assertEqual(second.response.header("X-RateLimit-Remaining"), "0")
        self.assertIn("quota", json.loads(second.read_body()).get("type", ""))
        self.assertEqual(len(self.up.heads), 1, self.up.heads)
        self.assertEqual(len(self.up.connections), 1)
        # The admitted tunnel is not affected by the empty bucket.
        self.assertEqual(ws.exchange(BINARY, b"two"), b"two")
        self.assertEqual(metric_sum(gw, "sluice_websocket_tunnels_total", route="ws"), 1)


class StreamingTest(WebSocketCase):
    def stream(self, ws, gw, count, block, sample_every=8):
        """Sends `count` 1 MiB messages from a thread while receiving their echoes;
        returns (sent hashes, received hashes, peak RSS of the gateway)."""
        sent, errors = [], []

        def send():
            try:
                for i in range(count):
                    data = message(i, block)
                    sent.append(hashlib.sha256(data).hexdigest())
                    ws.send_binary(data)
            except Exception as e:  # noqa: BLE001  reported by the test
                errors.append(e)
        thread = threading.Thread(target=send, daemon=True)
        thread.start()
        received, peak = [], rss_kib(gw.pid)
        try:
            for i in range(count):
                opcode, data = ws.recv(timeout=60)
                self.assertEqual(opcode, BINARY, i)
                received.append(hashlib.sha256(data).hexdigest())
                if i % sample_every == 0:
                    peak = max(peak, rss_kib(gw.pid))
        finally:
            thread.join(60)
        self.assertEqual(errors, [])
        return sent, received, max(peak, rss_kib(gw.pid))

    def test_64_mib_each_way_with_bounded_memory(self):
        gw = self.start()
        block = os.urandom(MIB)
        ws = self.connect(gw, timeout=60)
        self.stream(ws, gw, 4, block)  # warm up
        baseline = rss_kib(gw.pid)
        sent, received, peak = self.stream(ws, gw, 64, block)
        self.assertEqual(len(received), 64)
        self.assertEqual(received, sent, "the echoes differ from what was sent")
        self.assert_closed_cleanly(ws)
        conn = self.upstream_connection()
        self.assertEqual(conn.messages, 68)
        wait_until(lambda: metric_sum(gw, "sluice_websocket_bytes_total",
                                      direction="upstream_to_client") >= 68 * MIB, 5,
                   message="upstream_to_client bytes counted")
        self.assertGreaterEqual(metric_sum(gw, "sluice_websocket_bytes_total",
                                           direction="client_to_upstream"), 68 * MIB)
        if SANITIZED:
            return  # the sanitizers' own memory makes RSS meaningless
        growth_mib = (peak - baseline) / 1024
        self.assertLess(growth_mib, 32, f"sluice RSS grew by {growth_mib:.1f} MiB "
                                        f"(baseline {baseline} KiB, peak {peak} KiB)")

    def test_a_slow_upstream_slows_the_client_instead_of_filling_sluice(self):
        gw = self.start()
        block = os.urandom(MIB)
        warm = self.connect(gw, timeout=30)
        self.assertEqual(warm.exchange(BINARY, block), block)
        self.assert_closed_cleanly(warm)
        self.up.pause()  # from now on, tunnels read nothing until resume()
        baseline = peak = rss_kib(gw.pid)
        ws = self.connect(gw, timeout=60)
        conn = self.upstream_connection()
        limit = 512  # MiB the client may try to send before it must have blocked
        frames, total, stalled_at = [], 0, None
        for i in range(limit):
            data = message(i, block)
            frame = ws_encode_frame(BINARY, data)
            frames.append(hashlib.sha256(data).hexdigest())
            n = ws.write(frame, stall=1.0)
            total += n
            if i % 8 == 0:
                peak = max(peak, rss_kib(gw.pid))
            if n < len(frame):
                stalled_at, rest = i, frame[n:]
                break
        peak = max(peak, rss_kib(gw.pid))
        self.assertIsNotNone(stalled_at, f"the client sent {limit} MiB without blocking: "
                                         f"Sluice buffers what the upstream does not read")
        self.assertEqual(conn.bytes_received, 0, "the upstream was not supposed to read")
        # Still blocked a moment later: what Sluice holds does not grow.
        more = ws.write(rest, stall=1.0)
        self.assertLess(more, MIB // 2, f"{more} more bytes taken while nothing is read")
        rest = rest[more:]
        total += more
        peak = max(peak, rss_kib(gw.pid))
        growth_mib = (peak - baseline) / 1024
        # Everything arrives intact once the upstream reads again.
        self.up.resume()
        errors = []

        def finish():
            try:
                ws.send_raw(rest)
            except Exception as e:  # noqa: BLE001  reported below
                errors.append(e)
        thread = threading.Thread(target=finish, daemon=True)
        thread.start()
        received = []
        for i in range(len(frames)):
            opcode, data = ws.recv(timeout=60)
            self.assertEqual(opcode, BINARY, i)
            received.append(hashlib.sha256(data).hexdigest())
        thread.join(30)
        self.assertEqual(errors, [])
        self.assertEqual(received, frames, "the echoes differ from what was sent")
        self.assert_closed_cleanly(ws)
        if SANITIZED:
            return
        self.assertLess(growth_mib, 32, f"sluice RSS grew by {growth_mib:.1f} MiB while "
                                        f"{total / MIB:.1f} MiB were sent to a stalled upstream "
                                        f"(baseline {baseline} KiB, peak {peak} KiB)")


class TunnelEndTest(WebSocketCase):
    def test_close_from_the_client_counts_the_tunnel_and_its_bytes(self):
        gw = self.start()
        self.assertEqual(self.tunnels_active(gw), 0)
        ws = self.connect(gw)
        wait_until(lambda: self.tunnels_active(gw) == 1, 5, message="one tunnel active")
        self.assertEqual(ws.exchange(TEXT, b"x" * 1000), b"x" * 1000)
        self.assertEqual(ws.exchange(BINARY, b"y" * 70000), b"y" * 70000)
        self.assert_closed_cleanly(ws)
        self.assertEqual(ws.close_kind, "fin")
        self.wait_no_tunnels(gw)
        conn = self.upstream_connection()
        wait_until(lambda: conn.closed.is_set(), 5, message="the upstream connection closed")
        self.assertEqual(conn.close_frames, [b"\x03\xe8"])
        self.assertEqual(metric_sum(gw, "sluice_websocket_tunnels_total", route="ws"), 1)
        # Every byte after the two 101 heads, exactly.
        self.assertEqual(conn.bytes_received, ws.bytes_sent)
        self.assertEqual(conn.bytes_sent, ws.bytes_received)

        def counted():
            return (metric_sum(gw, "sluice_websocket_bytes_total", direction="client_to_upstream"),
                    metric_sum(gw, "sluice_websocket_bytes_total", direction="upstream_to_client"))
        expected = (float(ws.bytes_sent), float(ws.bytes_received))
        try:
            wait_until(lambda: counted() == expected, 5, message="the byte counters")
        except AssertionError:
            self.assertEqual(counted(), expected, "(client_to_upstream, upstream_to_client)")

    def test_the_upstream_closing_tcp_closes_the_client(self):
        self.up.close_after = 2
        gw = self.start()
        ws = self.connect(gw)
        self.assertEqual(ws.exchange(TEXT, b"one"), b"one")
        self.assertEqual(ws.exchange(TEXT, b"two"), b"two")
        self.assertEqual(ws.recv(timeout=10), (EOF, b""))
        self.assertEqual(ws.close_kind, "fin")
        self.wait_no_tunnels(gw)
        self.assertEqual(metric_sum(gw, "sluice_websocket_tunnels_total", route="ws"), 1)

    def test_the_client_closing_tcp_closes_the_upstream(self):
        gw = self.start()
        ws = self.connect(gw)
        self.assertEqual(ws.exchange(TEXT, b"bye"), b"bye")
        conn = self.upstream_connection()
        ws.close_socket()  # no close frame: a plain EOF
        wait_until(lambda: conn.closed.is_set(), 10, message="the upstream connection closed")
        self.assertTrue(conn.peer_closed, conn)
        self.wait_no_tunnels(gw)

    def test_a_silent_tunnel_is_closed_after_the_idle_timeout(self):
        gw = self.start(server={"idle_timeout_ms": 500})
        ws = self.connect(gw)
        self.assertEqual(ws.exchange(TEXT, b"hi"), b"hi")
        conn = self.upstream_connection()
        started = time.monotonic()
        self.assertEqual(ws.recv(timeout=10), (EOF, b""))
        elapsed = time.monotonic() - started
        self.assertGreaterEqual(elapsed, 0.4, "closed before the idle timeout")
        self.assertLess(elapsed, 5, "closed long after the idle timeout")
        wait_until(lambda: conn.closed.is_set(), 5, message="the upstream connection closed")
        self.assertTrue(conn.peer_closed, conn)
        self.wait_no_tunnels(gw)

    def test_a_busy_tunnel_outlives_the_idle_timeout(self):
        # A second of idle timeout: an exchange plus a 0.2 s pause stays well
        # inside it even on a slow, sanitized build.
        gw = self.start(server={"idle_timeout_ms": 1000})
        ws = self.connect(gw)
        started = time.monotonic()
        i = 0
        while time.monotonic() - started < 4.0:  # four idle timeouts
            payload = f"tick {i}".encode()
            self.assertEqual(ws.exchange(TEXT, payload), payload)
            with self.assertRaises(TimeoutError, msg="the tunnel closed while in use"):
                ws.recv(timeout=0.2)  # a pause shorter than the idle timeout
            i += 1
        self.assertGreaterEqual(i, 5)
        self.assertEqual(ws.exchange(TEXT, b"still here"), b"still here")
        self.assertEqual(self.tunnels_active(gw), 1)


class DrainTest(WebSocketCase):
    def test_sigterm_lets_an_open_tunnel_relay_until_the_drain_timeout(self):
        drain_ms = 2000
        gw = self.start(server={"drain_timeout_ms": drain_ms})
        ws = self.connect(gw)
        self.assertEqual(ws.exchange(TEXT, b"before"), b"before")
        conn = self.upstream_connection()
        gw.signal(signal.SIGTERM)
        signalled = time.monotonic()

        def refused():
            try:
                socket.create_connection(("127.0.0.1", gw.port), timeout=1).close()
            except ConnectionRefusedError:
                return True
            return False
        wait_until(refused, 5, message="new connections refused after SIGTERM")
        # The tunnel keeps relaying during the drain (for a second of it).
        i = 0
        while time.monotonic() - signalled < drain_ms / 2000:
            payload = f"draining {i}".encode()
            self.assertEqual(ws.exchange(TEXT, payload), payload)
            with self.assertRaises(TimeoutError):
                ws.recv(timeout=0.1)
            i += 1
        self.assertGreaterEqual(i, 3)
        # ... then it is closed at the drain timeout, and the process exits 0.
        self.assertEqual(ws.recv(timeout=drain_ms / 1000 + 5), (EOF, b""))
        elapsed = time.monotonic() - signalled
        self.assertGreaterEqual(elapsed, drain_ms / 1000 * 0.9, "closed before the drain timeout")
        wait_until(lambda: conn.closed.is_set(), 5, message="the upstream connection closed")
        self.assertEqual(gw.wait(10), 0, gw.output_tail())

    def test_sigterm_exits_as_soon_as_the_last_tunnel_ends(self):
        gw = self.start(server={"drain_timeout_ms": 30000})
        ws = self.connect(gw)
        self.assertEqual(ws.exchange(TEXT, b"x"), b"x")
        gw.signal(signal.SIGTERM)
        self.assertEqual(ws.exchange(TEXT, b"y"), b"y")
        started = time.monotonic()
        self.assert_closed_cleanly(ws)
        self.assertEqual(gw.wait(10), 0, gw.output_tail())
        self.assertLess(time.monotonic() - started, 10)


class TlsTest(WebSocketCase):
    def test_a_tunnel_over_tls(self):
        ca = make_ca(self.workdir, "ca")
        cert, key = make_server_cert(self.workdir, "ca", "default", dns=("default.test",))
        gw = self.start(server={"tls": {"cert_file": cert, "key_file": key}})
        ws = self.connect(gw, ssl_context=client_context(ca), server_hostname="default.test",
                          host="default.test")
        self.assertEqual(ws.sock.version()[:4], "TLSv")
        self.assertEqual(ws.response.header("Sec-WebSocket-Accept"), ws_accept_key(ws.key))
        self.assertEqual(ws.exchange(TEXT, "über TLS".encode()), "über TLS".encode())
        for size in (10, 70_000, 300_000):  # one record, several records
            data = os.urandom(size)
            self.assertEqual(ws.exchange(BINARY, data), data, size)
        ws.ping(b"tls")
        self.assertEqual(ws.recv(), (PONG, b"tls"))
        [head] = self.up.heads
        self.assertEqual(head.header("X-Forwarded-Proto"), "https")
        self.assert_closed_cleanly(ws)
        self.assertEqual(ws.close_kind, "fin", "the TLS connection ends with close_notify")
        self.wait_no_tunnels(gw)


if __name__ == "__main__":
    unittest.main()
