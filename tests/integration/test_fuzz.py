"""Mutated requests through the real binary (a bounded, seeded run).

Whatever a client sends, the gateway keeps serving, counts no internal error,
and sends its upstream only well-formed HTTP (sluice-echo counts anything it
cannot parse). SLUICE_FUZZ_REQUESTS and SLUICE_FUZZ_SEED override the defaults.
"""

import os
import random
import select
import socket
import unittest

from harness import request
from test_proxy import GatewayTestCase

SEEDS = [
    b"GET /api/x?a=1 HTTP/1.1\r\nHost: example.test\r\nX-API-Key: k\r\n\r\n",
    b"POST /api/upload HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
    b"POST /api/c HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;ext=1\r\nhello\r\n3\r\nabc\r\n0\r\nX-Trailer: t\r\n\r\n",
    b"GET /api HTTP/1.0\r\n\r\n",
    b"PUT /api/p HTTP/1.1\r\nHost: h\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc"
    b"GET /api/next HTTP/1.1\r\nHost: h\r\n\r\n",
    b"GET http://h/api/abs HTTP/1.1\r\nHost: h\r\nConnection: close, X-Request-Id\r\n\r\n",
]
TOKENS = [b"\r\n", b"\n", b"\r", b";", b":", b" ", b"\t", b"0", b"ffffffffffffffffff", b"-1",
          b"Transfer-Encoding: chunked\r\n", b"Content-Length: 7\r\n", b"\r\n\r\n", b"%00",
          b"\x00", b"\x7f", b"chunked, gzip", b"HTTP/1.1", b"\xff", b"_", b"//", b"%2F", b"#"]


def mutate(data: bytes, rng: random.Random) -> bytes:
    data = bytearray(data)
    for _ in range(rng.randint(1, 5)):
        at = rng.randint(0, len(data))
        kind = rng.randint(0, 5)
        if kind == 0 and data:
            data[min(at, len(data) - 1)] ^= rng.randint(1, 255)
        elif kind == 1:
            data[at:at] = rng.choice(TOKENS)
        elif kind == 2:
            del data[at:at + rng.randint(1, 16)]
        elif kind == 3:
            data[at:at] = bytes([rng.choice(b"aA;:\r ")]) * rng.choice((10, 500, 5000, 70000))
        elif kind == 4 and data:
            start = rng.randint(0, len(data) - 1)
            data[at:at] = data[start:start + rng.randint(1, 64)]
        else:
            del data[at:]
    return bytes(data)


class FuzzTest(GatewayTestCase):
    def test_mutated_requests(self):
        count = int(os.environ.get("SLUICE_FUZZ_REQUESTS", "1500"))
        rng = random.Random(int(os.environ.get("SLUICE_FUZZ_SEED", "20261122")))
        self.start_gateway(server={"header_timeout_ms": 200, "body_timeout_ms": 200})
        statuses = {}
        for _ in range(count):
            data = mutate(rng.choice(SEEDS), rng)
            with socket.create_connection(("127.0.0.1", self.gateway.port), timeout=5) as s:
                try:
                    s.sendall(data)
                    # A request still incomplete is ended by a half-close (the
                    # gateway answers it at once); a complete one is answered
                    # first: a half-close while it is upstream is a client gone.
                    if not select.select([s], [], [], 0.1)[0]:
                        s.shutdown(socket.SHUT_WR)
                    reply = s.recv(64)
                except OSError:
                    reply = b""
            status = reply[9:12].decode("latin-1") if reply.startswith(b"HTTP/1.") else "none"
            statuses[status] = statuses.get(status, 0) + 1
        print(statuses)
        # Both outcomes happen: the mutations neither all pass nor all fail.
        self.assertGreater(statuses.get("200", 0), count // 50, statuses)
        self.assertGreater(statuses.get("400", 0), count // 50, statuses)
        self.assertEqual(request(self.gateway.port, "GET", "/api/after")[0], 200)
        self.assertEqual(self.gateway.metric("sluice_internal_errors_total"), 0)


if __name__ == "__main__":
    unittest.main()
