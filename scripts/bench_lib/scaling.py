"""scripts/bench --scaling: throughput from one worker to as many as there are CPUs.

Three setups, each with one worker and with N (the CPU count): nginx as a plain
reverse proxy (worker_processes), Sluice without limits and Sluice with a Redis
limit allowing all (server.threads), and nginx + Lua + Redis (row 8's). One
sluice-echo and one redis-server serve them all. Nothing is pinned but wrk,
which stays on CPU 0 (on a 2-CPU machine the second worker shares that CPU with
it: the load generator cannot be pinned apart). Each measurement records the
CPU of the gateway, of Redis, of the upstream and of wrk itself per request, so
the report can say which of them runs out first. REPS repetitions round robin,
medians reported.
"""

from __future__ import annotations

import hashlib
import os
import resource
import statistics

from measure import measure
from stack import ALLOW_ALL, Row, Stack, load_script
from testkit import procfs


def wrk_cpu() -> float:
    """CPU seconds of every finished child (wrk) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def scaling_run(stack: Stack, pin_cpu: str | None, opts, log) -> dict:
    workers = os.cpu_count() or 1
    if workers < 2:
        raise RuntimeError("--scaling needs at least 2 CPUs")
    script = load_script()
    script_file = os.path.join(stack.workdir, "ratelimit.lua")
    with open(script_file, "w") as f:
        f.write(script)
    sha = hashlib.sha1(script.encode()).hexdigest()
    echo = stack.echo()
    redis = stack.redis("redis")
    rows = []
    for n in (1, workers):
        nginx, nginx_port = stack.nginx(f"nginx-plain-{n}", "plain.conf.in", echo.port,
                                        WORKERS=n)
        rows.append(("nginx proxy", n, Row(2, f"nginx {n}w", nginx_port, nginx)))
        plain = stack.sluice(f"sluice-nolimit-{n}", upstream=echo.port, redis_port=redis.port,
                             limit=None, threads=n)
        rows.append(("Sluice, no limits", n,
                     Row(4, f"sluice {n}w", plain.port, plain, admin=plain.admin_port)))
        limited = stack.sluice(f"sluice-allow-{n}", upstream=echo.port, redis_port=redis.port,
                               limit=ALLOW_ALL, threads=n)
        stack.wait_redis(limited)
        rows.append(("Sluice + Redis limit", n,
                     Row(5, f"sluice limit {n}w", limited.port, limited,
                         admin=limited.admin_port, redis=[redis])))
        lua, lua_port = stack.nginx(f"nginx-lua-{n}", "lua_redis.conf.in", echo.port,
                                    WORKERS=n, REDIS_PORT=redis.port, SCRIPT_FILE=script_file,
                                    SCRIPT_SHA=sha, CAPACITY=ALLOW_ALL[0], RATE=ALLOW_ALL[1])
        rows.append(("nginx + Lua + Redis", n,
                     Row(8, f"nginx lua {n}w", lua_port, lua, redis=[redis])))
    all_cpus = set(range(os.cpu_count() or 1))
    procfs.set_affinity([pid for p in stack.started for pid in p.pids()], all_cpus)
    samples: dict[tuple[str, int], list[dict]] = {(name, n): [] for name, n, _ in rows}
    for _, _, row in rows:
        measure(row, opts.connections, opts.warmup, pin_cpu)  # warm-up
    for rep in range(opts.reps):
        for name, n, row in rows:
            echo_cpu0, wrk0 = procfs.cpu_seconds(echo.pids()), wrk_cpu()
            m = measure(row, opts.connections, opts.duration, pin_cpu)
            requests = max(1.0, m["requests"])
            m["echo_cpu_us"] = (procfs.cpu_seconds(echo.pids()) - echo_cpu0) * 1e6 / requests
            m["wrk_cpu_us"] = (wrk_cpu() - wrk0) * 1e6 / requests
            samples[(name, n)].append(m)
            log(f"scaling rep {rep + 1}/{opts.reps} {name}, {n} worker(s): "
                f"{m['rps']:,.0f} req/s, CPU {m['cpu_us']:.1f} µs/req")
    medians = {key: {k: statistics.median(s[k] for s in values) for k in values[0]}
               for key, values in samples.items()}
    return {"workers": workers, "medians": medians,
            "order": list(dict.fromkeys(name for name, _, _ in rows))}


def scaling_report(result: dict, info: dict, started, opts, pin_cpu: str | None,
                   command: str) -> str:
    workers, med = result["workers"], result["medians"]
    out = [f"# Sluice scaling — {started:%Y-%m-%d %H:%M} (`{command}`)", "",
           f"- Machine: {info['nproc']} CPUs, {info['cpu']}, Linux {info['kernel']}; load "
           f"average at start {' '.join(info['load'])}",
           f"- Software: {info['sluice']}; {info['nginx']}; {info['redis']}; {info['wrk']}",
           f"- Load: `wrk -t1 -c{opts.connections} -d{opts.duration:g}s`"
           + (f" pinned to CPU {pin_cpu}" if pin_cpu is not None else "")
           + f"; the servers unpinned (every CPU); {opts.reps} repetition(s), medians. "
           "nginx: `worker_processes`; Sluice: `server.threads`. One sluice-echo upstream "
           "and one redis-server for all.", "",
           f"| setup | req/s, 1 worker | req/s, {workers} workers | × | gateway CPU µs/req "
           f"(1 / {workers}) | Redis CPU µs/req | upstream CPU µs/req | wrk CPU µs/req "
           f"| CPU of all per req ({workers} workers) |",
           "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for name in result["order"]:
        one, many = med[(name, 1)], med[(name, workers)]
        redis = f"{many['redis_cpu_us']:.1f}" if "redis_cpu_us" in many else "—"
        total = (many["cpu_us"] + many.get("redis_cpu_us", 0) + many["echo_cpu_us"]
                 + many["wrk_cpu_us"])
        out.append(f"| {name} | {one['rps']:,.0f} | {many['rps']:,.0f} | "
                   f"{many['rps'] / one['rps']:.2f} | {one['cpu_us']:.1f} / {many['cpu_us']:.1f} "
                   f"| {redis} | {many['echo_cpu_us']:.1f} | {many['wrk_cpu_us']:.1f} | "
                   f"{total:.1f} |")
    base = med[("nginx proxy", workers)]["rps"]
    out += ["", f"With {workers} workers, ÷ nginx proxy ({workers} workers): " + "; ".join(
        f"{name} {med[(name, workers)]['rps'] / base:.2f}" for name in result["order"]) + ".",
        "", f"CPU of all per req: what the gateway, Redis, the upstream and wrk spent per "
        f"request together; {workers} CPUs give {workers * 1e6:,.0f} CPU µs per second, so "
        f"req/s cannot pass {workers * 1e6:,.0f} ÷ that figure."]
    return "\n".join(out)
