"""scripts/bench --grpc: gRPC unary calls with h2load (a 100-byte message, POST with
content-type application/grpc and te: trailers) to a gRPC server directly, through
nginx's grpc_pass and through Sluice (an upstream with protocol h2c), without and with
a Redis limit allowing all; with --compare, Sluice again with that binary.

The server is testkit/grpc_upstream.py (python3-grpcio), which bounds every setup's
requests per second: what the table shows of a proxy is what it takes from the
direct call's rate and latency, and the CPU it spends per call (utime + stime from
/proc, divided by the calls h2load completed). Pinning and repetitions as --http2.
"""

from __future__ import annotations

import os

from http2 import STREAMS, measure
from stack import ALLOW_ALL, Row, Stack

PATH = "/test.Echo/Unary"
MESSAGE = b"m" * 100


def grpc_run(stack: Stack, pin_cpu: str | None, opts, log) -> dict:
    server = stack.grpc_upstream()
    redis = stack.redis("redis")
    body = os.path.join(stack.workdir, "grpc-call.bin")
    with open(body, "wb") as f:
        f.write(b"\x00" + len(MESSAGE).to_bytes(4, "big") + MESSAGE)
    setups = [("gRPC server directly", Row(1, "direct", server.port, server), "http")]
    nginx, nginx_port = stack.nginx("nginx-grpc", "grpc.conf.in", server.port)
    setups.append(("nginx grpc_pass", Row(2, "nginx grpc", nginx_port, nginx), "http"))
    plain = stack.sluice("sluice-grpc", upstream=server.port, redis_port=redis.port, limit=None,
                         http2=True, upstream_protocol="h2c")
    setups.append(("Sluice, no limits",
                   Row(4, "sluice grpc", plain.port, plain, admin=plain.admin_port), "http"))
    limited = stack.sluice("sluice-grpc-limit", upstream=server.port, redis_port=redis.port,
                           limit=ALLOW_ALL, http2=True, upstream_protocol="h2c")
    stack.wait_redis(limited)
    setups.append(("Sluice + Redis limit (allows all)",
                   Row(5, "sluice grpc limit", limited.port, limited, admin=limited.admin_port,
                       redis=[redis]), "http"))
    if opts.compare:
        other = stack.sluice("sluice-grpc-compare", binary=opts.compare, upstream=server.port,
                             redis_port=redis.port, limit=None, http2=True,
                             upstream_protocol="h2c")
        setups.append(("Sluice, no limits, --compare binary",
                       Row(104, "compare", other.port, other, admin=other.admin_port), "http"))
    extra = ["-d", body, "-H", "content-type: application/grpc", "-H", "te: trailers"]
    return {"order": [name for name, _, _ in setups],
            "medians": measure(setups, PATH, opts, pin_cpu, log, extra)["medians"]}


def grpc_report(result: dict, info: dict, started, opts, pin_cpu: str | None,
                command: str) -> str:
    med = result["medians"]
    direct = med["gRPC server directly"]
    out = [f"# Sluice gRPC — {started:%Y-%m-%d %H:%M} (`{command}`)", "",
           f"- Machine: {info['nproc']} CPUs, {info['cpu']}, Linux {info['kernel']}; load "
           f"average at start {' '.join(info['load'])}",
           f"- Software: {info['sluice']}; {info['nginx']}; python3-grpcio server",
           f"- Load: `h2load -t1 -c{opts.connections} -m{STREAMS} -D{max(1, round(opts.duration))}"
           " -d <one 100-byte message>`, unary calls to /test.Echo/Unary"
           + (f", pinned to CPU {pin_cpu}, the servers to the others" if pin_cpu else "")
           + f"; {opts.reps} repetition(s) round robin, medians. One worker each; the proxies "
           "speak h2c both ways.", "",
           "| setup | calls/s | mean ms | proxy CPU µs/call | Redis CPU µs/call | failed | "
           "÷ direct |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name in result["order"]:
        m = med[name]
        cpu = "—" if name == "gRPC server directly" else f"{m['cpu_us']:.1f}"
        redis = f"{m['redis_cpu_us']:.1f}" if "redis_cpu_us" in m else "—"
        out.append(f"| {name} | {m['rps']:,.0f} | {m['mean_ms']:.2f} | {cpu} | {redis} | "
                   f"{m['failed']:.0f} | {m['rps'] / direct['rps']:.2f} |")
    return "\n".join(out)
