"""scripts/bench --profile: where the CPU of the Redis-limited path goes.

Starts one sluice-echo, one redis-server and two Sluice instances like rows 4
and 5 of the speed table (no limit; one allow-all token bucket per client IP),
all pinned to the servers' CPU, wrk pinned apart. For each Sluice: wrk -c32
for the duration while `perf record` samples the gateway (and, for the limited
one, redis-server) and `perf stat` counts their system calls, then the shares
of the hottest symbols and of the
parts of the path (grouped by symbol name: kernel networking, OpenSSL, the
limiter, the HTTP parser, allocation...). The difference of the two gateways'
CPU µs per request is the limiter's own cost.

Needs perf (linux-perf); prints Markdown. Nothing here runs in the tests.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time

from measure import run_wrk, wrk_command
from stack import ALLOW_ALL, Stack
from testkit import procfs

# Parts of the path: kernel symbols ([k]) by their own patterns, user-space
# symbols ([.]) by these (first match wins); the rest is "other".
USER_PARTS = [
    ("Redis reply / command codec", r"redis::|redisReader|hiredis|sdscat|CommandEncoder"),
    ("limiter: keys, descriptors, outcome, headers",
     r"sluice::(RateLimit|RedisRateLimiter|LocalLayer|LeaseTable|DenyCache|select_outcome|"
     r"client_view|rate_limit_headers|build_(route|limit)_descriptors|key_hash|redis_key|"
     r"LimitsCodec|decode_script_reply|CircuitBreaker|append_int|append_sf_string)|"
     r"EVP_|HMAC|sha256|SHA256"),
    ("metrics", r"sluice::Metrics|metrics::"),
    ("HTTP parsing and serialising (Beast)", r"beast::http|basic_parser|http::detail|"
     r"serializer|append_field|serialize_"),
    ("allocation", r"^(malloc|free|cfree|_int_malloc|_int_free|__libc_malloc|__libc_free|"
     r"operator new|operator delete|malloc_consolidate|tcache|realloc|__libc_calloc|"
     r"_int_realloc|unlink_chunk)"),
    ("memory copies, string work", r"^__mem|^mem(cpy|move|set|cmp)|^__str|^str(len|cmp)|"
     r"basic_string|char_traits"),
    ("Asio scheduling", r"asio::detail::(scheduler|epoll_reactor|executor_op|"
     r"handler_work|timer_queue|reactive_|socket_ops)|pthread_mutex|epoll_wait|clock_gettime"),
]
KERNEL_PARTS = [
    ("kernel: TCP/IP and socket calls", r"^(tcp_|__tcp|ip_|__ip|inet_|__inet|sock_|__sock|"
     r"sk_|__sk|skb_|__skb|kfree_skb|net_|__net|netif_|__netif|napi|loopback|dev_|__dev|"
     r"__sys_(send|recv)|___sys_|____sys_|__x64_sys_(send|recv|epoll)|ep_|do_epoll|"
     r"epoll|_copy_(to|from)_iter|copy_user|__check_object_size|__virt_addr_valid|"
     r"fdget|__fget|fput|sockfd)"),
    ("kernel: other (scheduling, interrupts, virtualisation)", r"."),
]
PARTS = USER_PARTS + KERNEL_PARTS


def have_perf() -> bool:
    return shutil.which("perf") is not None


def perf_record(pids: list[int], seconds: float, out: str) -> subprocess.Popen:
    return subprocess.Popen(
        ["perf", "record", "-q", "-F", "499", "-o", out, "-p",
         ",".join(map(str, pids)), "--", "sleep", str(seconds)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def perf_syscalls(pids: list[int], seconds: float) -> subprocess.Popen:
    """perf stat counting the system calls of `pids` (every thread) for `seconds`."""
    return subprocess.Popen(
        ["perf", "stat", "-x", ",", "-e", "raw_syscalls:sys_enter", "-p",
         ",".join(map(str, pids)), "--", "sleep", str(seconds)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def syscall_count(stat: subprocess.Popen, seconds: float) -> float:
    _, err = stat.communicate(timeout=seconds + 60)
    for line in err.splitlines():
        fields = line.split(",")
        if len(fields) > 2 and "raw_syscalls:sys_enter" in fields[2]:
            try:
                return float(fields[0])
            except ValueError:
                return float("nan")
    return float("nan")


def perf_symbols(data: str) -> list[tuple[float, str]]:
    """(self share %, symbol) of every symbol in the record, hottest first."""
    cmd = ["perf", "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio",
           "--percent-limit", "0.05"]
    text = subprocess.run(cmd, capture_output=True, text=True, timeout=300).stdout
    rows = []
    for line in text.splitlines():
        m = re.match(r"\s*([\d.]+)%\s+(\[[k.]\])\s+(.*)$", line)
        if m:
            kind = m.group(2)
            symbol = re.sub(r"(\s+-)+\s*$", "", m.group(3)).strip()
            rows.append((float(m.group(1)), f"{kind} {symbol}"))
    return rows


def classify(symbol: str) -> str:
    """symbol: "[k] name" or "[.] name" as perf_symbols() gives them."""
    kind, _, name = symbol.partition(" ")
    for part, pattern in KERNEL_PARTS if kind == "[k]" else USER_PARTS:
        if re.search(pattern, name):
            return part
    return "other"


def parts(rows: list[tuple[float, str]]) -> dict[str, float]:
    shares: dict[str, float] = {}
    for share, symbol in rows:
        part = classify(symbol)
        shares[part] = shares.get(part, 0.0) + share
    return shares


def short(symbol: str, width: int = 90) -> str:
    symbol = re.sub(r"boost::(asio|beast)::", r"\1::", symbol)
    symbol = re.sub(r"std::__cxx11::", "std::", symbol)
    return symbol if len(symbol) <= width else symbol[:width - 1] + "…"


def load_with(http2: bool):
    """(port, seconds, cpu_pin) -> figures with "requests": wrk over HTTP/1.1, or
    h2load over h2c (32 connections, 10 streams each) with --http2."""
    if not http2:
        return lambda port, seconds, pin: run_wrk(wrk_command(port, 32, seconds, pin), seconds)
    from http2 import PATH, h2load_command, run_h2load
    return lambda port, seconds, pin: run_h2load(
        h2load_command(f"http://127.0.0.1:{port}{PATH}", 32, seconds, pin), seconds)


def profile_gateway(stack_processes, gateway, redis, cpu_pin: str, duration: float,
                    workdir: str, log, http2: bool = False) -> dict:
    """wrk (h2load with http2) against `gateway` with perf on it (and on redis
    when given)."""
    load = load_with(http2)
    load(gateway.port, 1, cpu_pin)
    data = os.path.join(workdir, f"perf-{gateway.name}.data")
    rdata = os.path.join(workdir, f"perf-{gateway.name}-redis.data")
    before = {p: procfs.cpu_seconds(p.pids()) for p in stack_processes}
    recorders = [perf_record(gateway.pids(), duration, data)]
    if redis is not None:
        recorders.append(perf_record(redis.pids(), duration, rdata))
    stats = {p.name: perf_syscalls(p.pids(), duration)
             for p in (gateway, *([redis] if redis is not None else []))}
    time.sleep(0.2)
    figures = load(gateway.port, duration, cpu_pin)
    syscalls = {name: syscall_count(stat, duration) for name, stat in stats.items()}
    for r in recorders:
        _, err = r.communicate(timeout=duration + 60)
        if r.returncode not in (0, None):
            raise RuntimeError(f"perf record failed: {err}")
    after = {p: procfs.cpu_seconds(p.pids()) for p in stack_processes}
    requests = figures["requests"]
    if requests <= 0:
        raise RuntimeError(f"the load completed no request against {gateway.name}")
    cpu = {p.name: (after[p] - before[p]) * 1e6 / requests for p in stack_processes}
    log(f"{gateway.name}: {figures['requests'] / duration:,.0f} req/s, "
        f"{cpu[gateway.name]:.1f} CPU µs/req")
    # perf's sampling window is the duration; wrk's requests cover about the same.
    result = {"name": gateway.name, "rate": requests / duration, "cpu": cpu,
              "syscalls": {k: v / requests for k, v in syscalls.items()},
              "symbols": perf_symbols(data)}
    if redis is not None:
        result["redis_symbols"] = perf_symbols(rdata)
    return result


def profile_run(stack: Stack, pin_cpu: str, duration: float, log,
                http2: bool = False) -> list[dict]:
    """With http2: both gateways serve h2c clients (h2load) instead of HTTP/1.1 (wrk)."""
    if not have_perf():
        raise RuntimeError("perf not found (apt-get install linux-perf)")
    echo = stack.echo()
    redis = stack.redis("redis")
    plain = stack.sluice("sluice-nolimit", upstream=echo.port, redis_port=redis.port,
                         limit=None, http2=http2)
    limited = stack.sluice("sluice-allow", upstream=echo.port, redis_port=redis.port,
                           limit=ALLOW_ALL, http2=http2)
    stack.wait_redis(limited)
    processes = [echo, redis, plain, limited]
    return [profile_gateway(processes, gw, r, pin_cpu, duration, stack.workdir, log, http2)
            for gw, r in ((plain, None), (limited, redis))]


def profile_report(results: list[dict], info: dict, started, command: str,
                   top: int = 30, http2: bool = False) -> str:
    plain, limited = results
    out = [f"# Sluice profile — {started:%Y-%m-%d %H:%M} (`{command}`)", "",
           f"- Machine: {info['nproc']} CPUs, {info['cpu']}, Linux {info['kernel']}; load "
           f"average at start {' '.join(info['load'])}",
           f"- Software: {info['sluice']}; {info['redis']}; {info['wrk']}",
           f"- Load: `{'h2load -t1 -c32 -m10 (h2c)' if http2 else 'wrk -t1 -c32'}` pinned to "
           "CPU 0, every server on the other CPUs; `perf record "
           "-F 499` on the gateway (and on redis-server for the limited one) and `perf stat` "
           "of their system calls meanwhile (perf costs CPU too: the µs here run higher than "
           "in the speed table).",
           "- Self time per symbol (where the CPU is spent, not who called it).", ""]
    out += ["## CPU per request", "",
            "| gateway | req/s | gateway CPU µs/req | gateway syscalls/req | redis-server µs/req "
            "| redis-server syscalls/req | echo µs/req |",
            "|---|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        cpu, calls = r["cpu"], r["syscalls"]
        redis_calls = f"{calls['redis']:.2f}" if "redis" in calls else "—"
        out.append(f"| {r['name']} | {r['rate']:,.0f} | {cpu[r['name']]:.1f} | "
                   f"{calls[r['name']]:.2f} | {cpu.get('redis', 0):.1f} | {redis_calls} | "
                   f"{cpu.get('echo', 0):.1f} |")
    own = limited["cpu"][limited["name"]] - plain["cpu"][plain["name"]]
    out += ["", f"The limiter's own gateway CPU: **{own:.1f} µs per request**.", ""]
    out += ["## Parts of the path (share of the gateway's samples)", "",
            "| part | no limit | Redis limit | Redis limit µs/req |", "|---|---:|---:|---:|"]
    pa, pb = parts(plain["symbols"]), parts(limited["symbols"])
    cpu_b = limited["cpu"][limited["name"]]
    for name in [n for n, _ in PARTS] + ["other"]:
        out.append(f"| {name} | {pa.get(name, 0):.1f}% | {pb.get(name, 0):.1f}% | "
                   f"{pb.get(name, 0) * cpu_b / 100:.1f} |")
    for r in results:
        out += ["", f"## Hottest symbols: {r['name']}", "", "| self % | symbol |", "|---:|---|"]
        out += [f"| {s:.2f} | `{short(sym)}` |" for s, sym in r["symbols"][:top]]
    if "redis_symbols" in limited:
        out += ["", "## Hottest symbols: redis-server under the limited gateway", "",
                "| self % | symbol |", "|---:|---|"]
        out += [f"| {s:.2f} | `{short(sym)}` |" for s, sym in limited["redis_symbols"][:top]]
    return "\n".join(out)
