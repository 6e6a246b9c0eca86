"""scripts/bench --http2: HTTP/2 from clients, h2load against nginx's http2 and
Sluice's, side by side on the same sluice-echo upstream (HTTP/1.1, a keep-alive
pool each).

Setups, h2c (prior knowledge, cleartext) and h2 (TLS 1.3, ALPN): nginx as a
plain reverse proxy, Sluice without limits; Sluice with a Redis limit allowing
all (h2c); with --compare, Sluice without limits (h2c, h2) and with the limit
(h2c) again with that binary (a before/after in one sitting). Load: `h2load -t1 -c C -m M -D S` pinned to CPU 0,
the servers to the others (as the speed table); REPS repetitions round robin,
medians of requests per second, mean latency and the gateway's CPU per request
(utime + stime from /proc, divided by the requests h2load completed).
"""

from __future__ import annotations

import os
import re
import statistics
import subprocess

from stack import ALLOW_ALL, NGINX_TLS13_ORDER, Row, Stack
from testkit import procfs
from testkit.tls import make_ca, make_server_cert

STREAMS = 10  # h2load -m: streams in flight per connection
PATH = "/api/bench"


def h2load_command(url: str, conns: int, duration: float, pin_cpu: str | None,
                   extra=()) -> list[str]:
    cmd = ["h2load", "-t1", f"-c{conns}", f"-m{STREAMS}", f"-D{max(1, round(duration))}",
           *extra, url]
    return (["taskset", "-c", pin_cpu] if pin_cpu is not None else []) + cmd


def run_h2load(cmd: list[str], duration: float) -> dict[str, float]:
    """requests done, failed, req/s and mean request time (ms) from h2load's output."""
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    out = result.stdout
    done = re.search(r"requests: (\d+) total, \d+ started, (\d+) done, (\d+) succeeded, "
                     r"(\d+) failed, (\d+) errored", out)
    rate = re.search(r"finished in [\d.]+m?s, ([\d.]+) req/s", out)
    mean = re.search(r"time for request:\s+\S+\s+\S+\s+(\S+)", out)
    if result.returncode != 0 or not done or not rate:
        raise RuntimeError(f"h2load failed ({result.returncode}): {' '.join(cmd)}\n{out}\n"
                           f"{result.stderr}")
    unit = mean.group(1) if mean else "0ms"
    mean_ms = float(re.sub(r"[a-z]+$", "", unit)) * (0.001 if unit.endswith("us") else 1.0)
    return {"requests": float(done.group(3)), "failed": float(done.group(4)) +
            float(done.group(5)), "rps": float(rate.group(1)), "mean_ms": mean_ms}


def http2_run(stack: Stack, pin_cpu: str | None, opts, log) -> dict:
    echo = stack.echo()
    redis = stack.redis("redis")
    make_ca(stack.workdir, "bench-ca")
    cert, key = make_server_cert(stack.workdir, "bench-ca", "bench-server")
    setups = []
    nginx_c, nginx_c_port = stack.nginx("nginx-h2c", "plain.conf.in", echo.port, TLS=" http2")
    setups.append(("nginx proxy, h2c", Row(2, "nginx h2c", nginx_c_port, nginx_c), "http"))
    # nginx 1.22 takes http2 as a parameter of listen; the rest as the speed table's row 15.
    nginx_t, nginx_t_port = stack.nginx(
        "nginx-h2", "plain.conf.in", echo.port,
        TLS=f" ssl http2;\n    ssl_certificate {cert};\n    ssl_certificate_key {key};\n"
            f"    ssl_protocols TLSv1.2 TLSv1.3;\n    {NGINX_TLS13_ORDER}\n"
            "    ssl_session_cache shared:SSL:10m")
    setups.append(("nginx proxy, h2 (TLS)", Row(15, "nginx h2", nginx_t_port, nginx_t), "https"))
    plain = stack.sluice("sluice-h2c", upstream=echo.port, redis_port=redis.port, limit=None,
                         http2=True)
    setups.append(("Sluice, no limits, h2c",
                   Row(4, "sluice h2c", plain.port, plain, admin=plain.admin_port), "http"))
    tls = stack.sluice("sluice-h2", upstream=echo.port, redis_port=redis.port, limit=None,
                       http2=True, tls={"cert_file": cert, "key_file": key})
    setups.append(("Sluice, no limits, h2 (TLS)",
                   Row(16, "sluice h2", tls.port, tls, admin=tls.admin_port), "https"))
    limited = stack.sluice("sluice-h2c-limit", upstream=echo.port, redis_port=redis.port,
                           limit=ALLOW_ALL, http2=True)
    stack.wait_redis(limited)
    setups.append(("Sluice + Redis limit (allows all), h2c",
                   Row(5, "sluice h2c limit", limited.port, limited, admin=limited.admin_port,
                       redis=[redis]), "http"))
    if opts.compare:  # the same two setups with another binary, side by side
        for proto, extra in (("h2c", {}), ("h2 (TLS)", {"tls": {"cert_file": cert,
                                                                  "key_file": key}})):
            other = stack.sluice(f"sluice-compare-{len(setups)}", binary=opts.compare,
                                 upstream=echo.port, redis_port=redis.port, limit=None,
                                 http2=True, **extra)
            setups.append((f"Sluice, no limits, {proto}, --compare binary",
                           Row(104, "compare", other.port, other, admin=other.admin_port),
                           "https" if extra else "http"))
        other = stack.sluice("sluice-compare-limit", binary=opts.compare, upstream=echo.port,
                             redis_port=redis.port, limit=ALLOW_ALL, http2=True)
        stack.wait_redis(other)
        setups.append(("Sluice + Redis limit (allows all), h2c, --compare binary",
                       Row(105, "compare limit", other.port, other, admin=other.admin_port,
                           redis=[redis]), "http"))
    return {"order": [name for name, _, _ in setups],
            "medians": measure(setups, PATH, opts, pin_cpu, log)["medians"]}


def measure(setups: list, path: str, opts, pin_cpu: str | None, log, extra=()) -> dict:
    """h2load on each (name, Row, scheme) of `setups`, REPS times round robin after a
    warm-up; medians by name, in the setups' order. extra: more h2load arguments."""
    samples: dict[str, list[dict]] = {name: [] for name, _, _ in setups}
    for name, row, scheme in setups:  # warm-up: connections, pools, TLS sessions
        run_h2load(h2load_command(f"{scheme}://127.0.0.1:{row.port}{path}", opts.connections,
                                  opts.warmup, pin_cpu, extra), opts.warmup)
    for rep in range(opts.reps):
        order = setups if rep % 2 == 0 else list(reversed(setups))
        for name, row, scheme in order:
            pids = row.gateway.pids()
            redis_pids = [p for r in row.redis for p in r.pids()]
            cpu0, rcpu0 = procfs.cpu_seconds(pids), procfs.cpu_seconds(redis_pids)
            m = run_h2load(h2load_command(f"{scheme}://127.0.0.1:{row.port}{path}",
                                          opts.connections, opts.duration, pin_cpu, extra),
                           opts.duration)
            n = max(1.0, m["requests"])
            m["cpu_us"] = (procfs.cpu_seconds(pids) - cpu0) / n * 1e6
            if redis_pids:
                m["redis_cpu_us"] = (procfs.cpu_seconds(redis_pids) - rcpu0) / n * 1e6
            samples[name].append(m)
            log(f"rep {rep + 1}/{opts.reps} {name}: {m['rps']:,.0f} req/s, "
                f"mean {m['mean_ms']:.2f} ms, CPU {m['cpu_us']:.1f} µs/req, "
                f"{m['failed']:.0f} failed")
    medians = {name: {k: statistics.median(s[k] for s in runs) for k in runs[0]}
               for name, runs in samples.items()}
    return {"medians": medians}


def http2_report(result: dict, info: dict, started, opts, pin_cpu: str | None,
                 command: str) -> str:
    med = result["medians"]
    out = [f"# Sluice HTTP/2 — {started:%Y-%m-%d %H:%M} (`{command}`)", "",
           f"- Machine: {info['nproc']} CPUs, {info['cpu']}, Linux {info['kernel']}; load "
           f"average at start {' '.join(info['load'])}",
           f"- Software: {info['sluice']}; {info['nginx']}",
           f"- Load: `h2load -t1 -c{opts.connections} -m{STREAMS} -D{max(1, round(opts.duration))}`"
           + (f" pinned to CPU {pin_cpu}, the servers to the others" if pin_cpu else "")
           + f"; {opts.reps} repetition(s) round robin, medians. One sluice-echo upstream "
           "(HTTP/1.1, keep-alive pools) for all; one worker each; TLS 1.3 with one P-256 "
           "certificate.", "",
           "| setup | req/s | mean ms | CPU µs/req | Redis CPU µs/req | failed | ÷ nginx, same protocol |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    base = {"h2c": med["nginx proxy, h2c"]["rps"], "h2 (TLS)": med["nginx proxy, h2 (TLS)"]["rps"]}
    for name in result["order"]:
        m = med[name]
        proto = "h2 (TLS)" if "h2 (TLS)" in name else "h2c"
        redis = f"{m['redis_cpu_us']:.1f}" if "redis_cpu_us" in m else "—"
        out.append(f"| {name} | {m['rps']:,.0f} | {m['mean_ms']:.2f} | {m['cpu_us']:.1f} | "
                   f"{redis} | {m['failed']:.0f} | {m['rps'] / base[proto]:.2f} |")
    pairs = [("", "Sluice + Redis limit (allows all), h2c", "Sluice, no limits, h2c")]
    if opts.compare:
        pairs.append((" (--compare binary)",
                      "Sluice + Redis limit (allows all), h2c, --compare binary",
                      "Sluice, no limits, h2c, --compare binary"))
    out.append("")
    for label, limited, plain in pairs:
        if limited in med and plain in med:
            own = med[limited]["cpu_us"] - med[plain]["cpu_us"]
            out.append(f"- The limiter's own gateway CPU over h2c{label}: **{own:+.1f} µs per "
                       "request** (the limited row less the unlimited one; budget +4).")
    return "\n".join(out)
