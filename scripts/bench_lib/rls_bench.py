"""scripts/bench --rls: Envoy rate-limit service calls (ShouldRateLimit, RLS v3) with
h2load, as Envoy makes them: one RateLimitRequest per call, POST with content-type
application/grpc over h2c, to Sluice's rls listener; with one descriptor
(remote_address) and with two (remote_address and a nested generic key and
header: two buckets decided all or nothing), every call allowed. Beside them, the
same gateway's data plane over h2c with a Redis limit allowing all (a GET through
to sluice-echo), the request the service replaces. One worker each; CPU is the
gateway's utime + stime from /proc per call, Redis' beside it. envoyproxy/ratelimit
publishes no figures of its own to set beside these (its repository has Redis
micro-benchmarks only). Pinning and repetitions as --http2.
"""

from __future__ import annotations

import os

from http2 import STREAMS, measure
from stack import ALLOW_ALL, Row, Stack

PATH = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
DOMAIN = {"domain": "bench", "descriptors": [
    {"key": "remote_address",
     "rate_limit": {"unit": "hour", "requests_per_unit": 4_000_000_000}},
    {"key": "generic_key", "value": "checkout", "descriptors": [
        {"key": "user", "rate_limit": {"unit": "hour", "requests_per_unit": 4_000_000_000}}]},
]}


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    out = bytearray([number << 3 | 2])
    n = len(payload)
    while n >= 0x80:
        out.append(n & 0x7f | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out) + payload


def call_body(stack: Stack, name: str, descriptors) -> str:
    """A file holding one gRPC frame: a RateLimitRequest (domain = 1, descriptors = 2;
    a descriptor's entries = 1; an entry's key = 1, value = 2) of `descriptors`,
    encoded here so that the bench needs no protobuf module."""
    message = _field(1, b"bench")
    for entries in descriptors:
        body = b"".join(_field(1, _field(1, k.encode()) + _field(2, v.encode()))
                        for k, v in entries)
        message += _field(2, body)
    path = os.path.join(stack.workdir, f"{name}.bin")
    with open(path, "wb") as f:
        f.write(b"\x00" + len(message).to_bytes(4, "big") + message)
    return path


def rls_run(stack: Stack, pin_cpu: str | None, opts, log) -> dict:
    from testkit.ports import free_port
    echo = stack.echo()
    redis = stack.redis("redis")
    rls_port = free_port()
    gw = stack.sluice("sluice-rls", upstream=echo.port, redis_port=redis.port,
                      limit=ALLOW_ALL, http2=True,
                      sections={"rls": {"listen": f"127.0.0.1:{rls_port}",
                                        "domains": [DOMAIN]}})
    stack.wait_redis(gw)
    one = call_body(stack, "rls-one", [[("remote_address", "10.0.0.1")]])
    two = call_body(stack, "rls-two", [[("remote_address", "10.0.0.1")],
                                       [("generic_key", "checkout"), ("user", "ann")]])
    grpc = ["-H", "content-type: application/grpc", "-H", "te: trailers"]
    rows = {
        "RLS call, one descriptor": (Row(40, "rls one", rls_port, gw, admin=gw.admin_port,
                                         redis=[redis]), ["-d", one, *grpc], PATH),
        "RLS call, two descriptors (two buckets)": (
            Row(41, "rls two", rls_port, gw, admin=gw.admin_port, redis=[redis]),
            ["-d", two, *grpc], PATH),
        "data plane over h2c, Redis limit (allows all)": (
            Row(5, "data plane", gw.port, gw, admin=gw.admin_port, redis=[redis]), [], "/"),
    }
    medians = {}
    for name, (row, extra, path) in rows.items():
        medians.update(measure([(name, row, "http")], path, opts, pin_cpu, log, extra)["medians"])
    return {"order": list(rows), "medians": medians}


def rls_report(result: dict, info: dict, started, opts, pin_cpu: str | None,
               command: str) -> str:
    med = result["medians"]
    base = med["data plane over h2c, Redis limit (allows all)"]
    out = [f"# Sluice as Envoy's rate-limit service — {started:%Y-%m-%d %H:%M} (`{command}`)",
           "",
           f"- Machine: {info['nproc']} CPUs, {info['cpu']}, Linux {info['kernel']}; load "
           f"average at start {' '.join(info['load'])}",
           f"- Software: {info['sluice']}",
           f"- Load: `h2load -t1 -c{opts.connections} -m{STREAMS} -D{max(1, round(opts.duration))}"
           " -d <one RateLimitRequest>`, unary calls to " + PATH
           + (f", pinned to CPU {pin_cpu}, the servers to the others" if pin_cpu else "")
           + f"; {opts.reps} repetition(s), medians. One worker; every call allowed.", "",
           "| setup | calls/s | mean ms | gateway CPU µs/call | Redis CPU µs/call | failed | "
           "CPU ÷ data plane |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for name in result["order"]:
        m = med[name]
        redis = f"{m['redis_cpu_us']:.1f}" if "redis_cpu_us" in m else "—"
        out.append(f"| {name} | {m['rps']:,.0f} | {m['mean_ms']:.2f} | {m['cpu_us']:.1f} | "
                   f"{redis} | {m['failed']:.0f} | {m['cpu_us'] / base['cpu_us']:.2f} |")
    return "\n".join(out)
