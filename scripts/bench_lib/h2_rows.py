"""Rows 37-43 of the speed table: HTTP/2 clients, measured with h2load instead of wrk
(h2load -t1 -c C -m 10, as scripts/bench --http2 and --grpc), so that --budget holds
them to their budgets beside the HTTP/1.1 rows.

- 37, 38: Sluice over h2c without limits and with row 5's Redis limit (allows all);
  38 less 37 is the limiter's own cost over HTTP/2.
- 39, 40: nginx and Sluice (no limits) over h2 with TLS 1.3 (the certificate of rows 15
  and 16).
- 41, 42, 43: gRPC unary calls (a 100-byte message) to testkit/grpc_upstream.py through
  nginx's grpc_pass and through Sluice (an h2c upstream) without and with the limit.
  The Python server bounds their rate: what the rows compare is each proxy's CPU per
  call and the rate it keeps of the server's.
"""

from __future__ import annotations

import os

from stack import ALLOW_ALL, NGINX_TLS13_ORDER, Row, Stack

H2_PATH = "/api/bench"
GRPC_PATH = "/test.Echo/Unary"
GRPC_MESSAGE = b"m" * 100


def start_h2_rows(stack: Stack, upstream: int, redis, cert: str, key: str) -> list[Row]:
    grpc = stack.grpc_upstream()
    body = os.path.join(stack.workdir, "grpc-call.bin")
    with open(body, "wb") as f:
        f.write(b"\x00" + len(GRPC_MESSAGE).to_bytes(4, "big") + GRPC_MESSAGE)
    grpc_args = ["-d", body, "-H", "content-type: application/grpc", "-H", "te: trailers"]
    tls = {"cert_file": cert, "key_file": key}
    n39 = stack.nginx("nginx-h2-tls", "plain.conf.in", upstream,
                      TLS=f" ssl http2;\n    ssl_certificate {cert};\n    ssl_certificate_key "
                          f"{key};\n    ssl_protocols TLSv1.2 TLSv1.3;\n    {NGINX_TLS13_ORDER}\n"
                          "    ssl_session_cache shared:SSL:10m")
    n41 = stack.nginx("nginx-grpc", "grpc.conf.in", grpc.port)
    s37 = stack.sluice("sluice-h2c", upstream=upstream, redis_port=redis.port, limit=None,
                       http2=True)
    s38 = stack.sluice("sluice-h2c-limit", upstream=upstream, redis_port=redis.port,
                       limit=ALLOW_ALL, http2=True)
    s40 = stack.sluice("sluice-h2-tls", upstream=upstream, redis_port=redis.port, limit=None,
                       http2=True, tls=tls)
    s42 = stack.sluice("sluice-grpc", upstream=grpc.port, redis_port=redis.port, limit=None,
                       http2=True, upstream_protocol="h2c")
    s43 = stack.sluice("sluice-grpc-limit", upstream=grpc.port, redis_port=redis.port,
                       limit=ALLOW_ALL, http2=True, upstream_protocol="h2c")
    for gateway in (s38, s43):
        stack.wait_redis(gateway)

    def row(num, name, gateway, port=None, redis_list=(), scheme="http", grpc_call=False,
            admin=True):
        return Row(num, name, port or gateway.port, gateway,
                   admin=gateway.admin_port if admin else None, redis=redis_list,
                   wrk_args=grpc_args if grpc_call else [], scheme=scheme,
                   path=GRPC_PATH if grpc_call else H2_PATH, h2=True)

    return [
        row(37, "Sluice, no limits, HTTP/2 clients (h2c)", s37),
        row(38, "row 37 + Redis limit (allows all)", s38, redis_list=[redis]),
        row(39, "nginx reverse proxy, HTTP/2 clients over TLS", n39[0], port=n39[1],
            scheme="https", admin=False),
        row(40, "Sluice, no limits, HTTP/2 clients over TLS", s40, scheme="https"),
        row(41, "nginx grpc_pass, gRPC unary calls", n41[0], port=n41[1], grpc_call=True,
            admin=False),
        row(42, "Sluice, no limits, gRPC unary calls (h2c upstream)", s42, grpc_call=True),
        row(43, "row 42 + Redis limit (allows all)", s43, redis_list=[redis], grpc_call=True),
    ]
