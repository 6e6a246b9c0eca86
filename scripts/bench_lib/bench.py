#!/usr/bin/env python3
"""The side-by-side benchmark and the accuracy run behind scripts/bench.

Started by scripts/bench (which installs packages and builds); it can also run
alone once the binaries exist:  python3 scripts/bench_lib/bench.py [--quick]

Default run: 26 rows (stack.start_rows; rows 9 and 10 on a 3-primary Redis
Cluster, row 11 their load on one Redis, row 12 the denial cache, row 13 a
leased global key, row 14 a sliding window per API key, rows 15 and 16 TLS
termination, rows 21-23 the consumer store, row 24 a calendar quota per API
key, row 25 a concurrency limit per API key, row 26 a cost settled from the
response) behind one sluice-echo upstream, and rows 17-20, WebSocket echo
(sluice-wsbench echo directly and through Sluice, 16 KiB and 128-byte messages),
all servers started here on free 127.0.0.1 ports and stopped here by PID. Load:
wrk, one thread, the same connection count for every HTTP row; the WebSocket
rows: sluice-wsbench's client, one thread, --ws-connections connections each
echoing one message at a time. Pinned pass: the load tool on CPU 0, every server
on the other CPUs (taskset), REPS repetitions taken round robin over the rows,
every other one in reverse order (so drift of a noisy machine spreads over all
rows, and no row always runs just after another), the median reported; then
a single-connection pass (latency each layer adds) and one unpinned pass.
Output: a Markdown report on stdout and in loadtest/results/<date>.md.

--failover cluster|sentinel: a Redis failover under load (failover.py), with
two Sluice instances on a 3+3 Redis Cluster or a Sentinel set; nothing pinned.

--outage [open|local|closed]: Redis down for 10 s under load (outage.py), three
Sluice instances per on_redis_failure mode; admitted requests against C + R*T.

--delay: a route with on_limit: delay under bursts (delay.py): the latency a
delayed request has beyond its wait, beside an undelayed request's.

--accuracy: three Sluice instances on one Redis, wrk against all three at once
on one key, then on 1000 keys, then on one global key without and with leases;
allowed requests against the ideal C + R*T, and a chart of the global-key runs'
allowed rate (loadtest/leases.png, copied there by a full run).

The parts: stack.py brings the servers up, measure.py runs wrk and reads CPU
and counters, report.py writes the Markdown, goals.json holds what the rows are
expected to reach, accuracy.py is the --accuracy run, failover.py (with
failover_load.py and failover_report.py) the --failover run, outage.py the
--outage run (its load is failover_load.py's); local_report.py writes the local
layer's parts of the reports (the global-key accuracy table and chart, --outage).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "tests"))  # the testkit

from accuracy import accuracy  # noqa: E402
from allocations import allocations_report, allocations_run  # noqa: E402
from balance import balance_report, balance_run  # noqa: E402
from delay import delay_report, delay_run  # noqa: E402
from failover import MODES, failover_run  # noqa: E402
from failover_report import report as failover_report  # noqa: E402
from measure import (PATH, h2load_row, measure, median_of, metrics_text,  # noqa: E402
                     run_wrk, run_wsbench, wrk_command, wsbench_command)
from cpu_profile import profile_report, profile_run  # noqa: E402
from scaling import scaling_report, scaling_run  # noqa: E402
from grpc_bench import grpc_report, grpc_run  # noqa: E402
from rls_bench import rls_report, rls_run  # noqa: E402
from http2 import http2_report, http2_run  # noqa: E402
from outage import MODES as OUTAGE_MODES, run_outages  # noqa: E402
from local_report import lease_chart, outage_report  # noqa: E402
from sittings import sittings_report  # noqa: E402
from report import (accuracy_report, budget_rows, budgets_over, load_goals,  # noqa: E402
                    machine_info, report)
from stack import ROOT, WSBENCH_BIN, Stack, load_script, start_rows  # noqa: E402
from testkit import procfs  # noqa: E402
from testkit.metrics import metric_sum  # noqa: E402
from testkit.processes import ECHO_BIN, SLUICE_BIN  # noqa: E402

# The chart of the latest full --accuracy run, beside sustained.png.
LEASES_PNG = os.path.join(ROOT, "loadtest", "leases.png")


def log(msg: str):
    print(f"\033[1m[bench]\033[0m {msg}", file=sys.stderr, flush=True)


def cpu_layout(opts) -> tuple[str | None, str | None]:
    """(wrk's CPU, the servers' CPUs) when pinning, else (None, None)."""
    n = os.cpu_count() or 1
    if opts.no_pin or n < 2:
        return None, None
    return "0", ("1" if n == 2 else f"1-{n - 1}")


def check_alive(stack: Stack, when: str):
    dead = stack.dead()
    if dead:
        raise RuntimeError(f"{dead.name} died {when}\n{dead.output_tail(2000)}")


def connections(opts, row) -> int:
    """The load's connection count for a row: WebSocket rows have their own."""
    return opts.ws_connections if row.ws_size is not None else opts.connections


def warm_up(opts, row, pin_cpu: str | None):
    if row.ws_size is not None:
        run_wsbench(wsbench_command(row.port, opts.ws_connections, row.ws_size, opts.warmup,
                                    pin_cpu), opts.warmup)
    elif row.h2:
        h2load_row(row, opts.connections, opts.warmup, pin_cpu)
    else:
        run_wrk(wrk_command(row.port, opts.connections, opts.warmup, pin_cpu, args=row.wrk_args,
                            scheme=row.scheme, path=row.path or PATH), opts.warmup)


def describe(row, m: dict) -> str:
    """One measurement in a log line."""
    if row.ws_size is not None:
        return (f"{m['msgs_per_s']:,.0f} msg/s, {m['mib_per_s']:,.0f} MiB/s, "
                f"p50 {m['p50'] * 1000:.0f} µs, CPU {m['cpu_us']:.1f} µs/msg")
    if row.h2:
        return f"{m['rps']:,.0f} req/s, mean {m['p50']:.2f} ms, CPU {m['cpu_us']:.1f} µs/req"
    return f"{m['rps']:,.0f} req/s, p99 {m['p99']:.2f} ms, CPU {m['cpu_us']:.1f} µs/req"


def wanted_rows(opts) -> set[int]:
    """--rows, the baselines 1, 2 and 8, and for a WebSocket row the other of its pair
    (direct and through Sluice)."""
    base = load_goals()["baselines"]
    wanted = set(opts.rows) | {base["upstream"], base["proxy"], base["redis_proxy"]}
    if opts.compare:
        wanted |= {4, 5, 14, 16, 104, 105, 114, 116}
        if wanted & {21, 22}:
            wanted |= {21, 22, 121, 122}
        if wanted & {25, 26}:
            wanted |= {11, 25, 26, 125, 126}
        if 27 in wanted:
            wanted |= {4, 27, 127}
        if 12 in wanted:
            wanted |= {12, 112}
        if 29 in wanted:
            wanted |= {11, 29, 129}
    for pair in base.get("websocket", []):
        if wanted & set(pair):
            wanted |= set(pair)
    return wanted


def negotiated_tls(port: int) -> str:
    """The protocol and cipher suite a default OpenSSL client (wrk's kind) gets
    from 127.0.0.1:`port`, e.g. "TLSv1.3 TLS_AES_256_GCM_SHA384"."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with context.wrap_socket(raw) as tls:
            name, version, _ = tls.cipher()
            return f"{version} {name}"


# Row 22's cache starts empty: how long the row's load takes to have every one of
# its keys looked up once (each key's first request asks Redis, every later one is
# a hit), at most this long.
CACHE_WARMUP_LIMIT = 30.0


def cache_warmup(opts, row, pin_cpu: str | None) -> dict:
    """Row 22 before anything else reached it: its keyed load from an empty cache
    until every key is cached (the gateway has one worker, so its cache holds
    each key once). {seconds, lookups, hits}."""
    keys = int(row.wrk_args[0])

    def lookups(result):
        return metric_sum(metrics_text(row.admin), "sluice_consumer_lookups_total",
                          result=result)

    def cached():
        return metric_sum(metrics_text(row.admin), "sluice_consumers_cached")
    before = lookups("miss")
    load = subprocess.Popen(wrk_command(row.port, connections(opts, row), CACHE_WARMUP_LIMIT,
                                        pin_cpu, args=row.wrk_args),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    started = time.monotonic()
    seconds = None
    try:
        while load.poll() is None:
            if cached() >= keys:
                seconds = time.monotonic() - started
                break
            time.sleep(0.01)
    finally:
        load.terminate()
        load.wait()
    return {"seconds": seconds, "lookups": lookups("miss") - before, "hits": lookups("hit"),
            "keys": keys}


def benchmark(opts, stack: Stack, pin_cpu: str | None) -> list:
    """The rows with their pinned, single-connection and unpinned measurements."""
    script = load_script()
    script_file = os.path.join(stack.workdir, "ratelimit.lua")
    with open(script_file, "w") as f:
        f.write(script)
    sha = hashlib.sha1(script.encode()).hexdigest()

    log("starting servers")
    rows = start_rows(stack, script_file, sha, opts.compare)
    if opts.rows:
        wanted = wanted_rows(opts)
        rows = [r for r in rows if r.num in wanted]
    total_runs = len(rows) * (opts.reps + (0 if opts.no_single else 1)
                              + (0 if opts.no_unpinned else 1))
    log(f"{len(rows)} rows; warm-up {opts.warmup:g} s each, then {total_runs} measurements")

    for r in rows:
        if r.scheme == "https":
            r.tls = negotiated_tls(r.port)
            log(f"row {r.num} negotiates {r.tls}")
    for r in rows:
        if r.num == 22:
            r.cache_warmup = cache_warmup(opts, r, pin_cpu)
            log(f"row 22's cache warm-up: {r.cache_warmup}")
        warm_up(opts, r, pin_cpu)
        check_alive(stack, "during warm-up")

    for rep in range(opts.reps):
        # Every other repetition in reverse order: a row measured just before or
        # after another (a --compare pair) is not always the one that goes first.
        for r in (rows if rep % 2 == 0 else list(reversed(rows))):
            m = measure(r, connections(opts, r), opts.duration, pin_cpu)
            r.pinned.append(m)
            log(f"pinned rep {rep + 1}/{opts.reps} row {r.num}: {describe(r, m)}")

    if not opts.no_single:
        for r in rows:
            r.single = measure(r, 1, opts.single_duration, pin_cpu)
            log(f"-c1 row {r.num}: p50 {r.single['p50'] * 1000:.0f} µs")

    if not opts.no_unpinned:
        all_cpus = set(range(os.cpu_count() or 1))
        procfs.set_affinity([pid for p in stack.started for pid in p.pids()], all_cpus)
        for r in rows:
            r.unpinned = measure(r, connections(opts, r), opts.duration, None)
            log(f"unpinned row {r.num}: {describe(r, r.unpinned)}")

    check_alive(stack, "during the run")
    return rows


def run_failovers(opts, stack: Stack) -> list[dict]:
    """--failover: each run on a topology and gateways of its own, stopped after it."""
    modes = {"sentinel": MODES[1:]}.get(opts.failover, (opts.failover,))
    results = []
    for mode in modes:
        log(f"failover: {mode}")
        try:
            results.append(failover_run(stack, mode, opts.failover_clients, log))
        finally:
            stack.stop_all()
    return results


def suffix(opts) -> str:
    return ("-accuracy" if opts.accuracy else
            f"-failover-{opts.failover}" if opts.failover else
            "-outage" if opts.outage else "-delay" if opts.delay else
            "-profile" if opts.profile else "-scaling" if opts.scaling else
            "-http2" if opts.http2 else "-grpc" if opts.grpc else "-rls" if opts.rls else
            "-allocations" if opts.allocations else "-balance" if opts.balance else "")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/bench", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="short smoke run: 1 s, 1 repetition")
    ap.add_argument("--accuracy", action="store_true",
                    help="limit accuracy across three instances instead of the speed table")
    ap.add_argument("--duration", type=float, default=5.0, help="seconds per measurement")
    ap.add_argument("--reps", type=int, default=3, help="pinned repetitions per row")
    ap.add_argument("--connections", type=int, default=32, help="wrk's connections (HTTP rows)")
    ap.add_argument("--ws-connections", type=int, default=8,
                    help="WebSocket rows 17-20: the client's connections, each echoing one "
                         "message at a time (16 KiB in rows 17 and 18, 128 bytes in 19 and 20)")
    ap.add_argument("--warmup", type=float, default=1.0)
    ap.add_argument("--single-duration", type=float, default=3.0, help="seconds of the -c1 run")
    ap.add_argument("--no-unpinned", action="store_true")
    ap.add_argument("--no-single", action="store_true")
    ap.add_argument("--no-pin", action="store_true", help="never pin (one pass, unpinned)")
    ap.add_argument("--rows", type=lambda v: [int(n) for n in v.split(",")],
                    help="measure only these rows (comma-separated numbers) and the "
                         "baselines 1, 2 and 8 (a WebSocket row: the other of its pair too, "
                         "17+18 or 19+20); every server is started all the same")
    ap.add_argument("--failover", choices=["cluster", "sentinel", *MODES[1:]],
                    help="a Redis failover under load instead of the speed table: cluster "
                         "(SIGKILL of a primary), sentinel (SENTINEL FAILOVER, then SIGKILL "
                         "of the primary), or one of the two sentinel runs alone")
    ap.add_argument("--failover-clients", type=int, default=8,
                    help="--failover / --outage: concurrent load clients (threads of this "
                         "process)")
    ap.add_argument("--outage", nargs="?", const="all", choices=["all", *OUTAGE_MODES],
                    help="Redis down under load instead of the speed table, for "
                         "on_redis_failure open, local and closed (all) or one of them")
    ap.add_argument("--outage-seconds", type=float, default=10.0,
                    help="--outage: how long Redis is down")
    ap.add_argument("--delay", action="store_true",
                    help="the delay path's added latency instead of the speed table")
    ap.add_argument("--balance", action="store_true",
                    help="least_request against round robin with a slow server, a 95/5 split "
                         "under load, and consistent hashing's remap share, instead of the "
                         "speed table")
    ap.add_argument("--profile", action="store_true",
                    help="where the CPU of the limited path goes (perf on rows 4 and 5's "
                         "gateways and on Redis) instead of the speed table; with --http2, "
                         "the same two gateways serving h2c (h2load)")
    ap.add_argument("--compare", metavar="SLUICE_BINARY",
                    help="also measure rows 4, 5, 14 and 16 (and 12, 21-22, 25-26, 27, 29 when one "
                         "of them is asked for) with this other sluice binary (rows 104, 105, "
                         "112, 114, 116, 121-122, 125-127, 129), side by side in the same run: a before/after in "
                         "one sitting")
    ap.add_argument("--scaling", action="store_true",
                    help="throughput with one worker and with one per CPU (nginx, Sluice "
                         "without and with a Redis limit, nginx + Lua + Redis) instead of the "
                         "speed table")
    ap.add_argument("--http2", action="store_true",
                    help="HTTP/2 from clients: h2load against nginx's and Sluice's h2c and h2 "
                         "(TLS), and Sluice h2c with a Redis limit, instead of the speed table")
    ap.add_argument("--grpc", action="store_true",
                    help="gRPC unary calls with h2load: a gRPC server directly, through "
                         "nginx's grpc_pass and through Sluice (h2c upstream), instead of the "
                         "speed table")
    ap.add_argument("--rls", action="store_true",
                    help="Envoy rate-limit service calls (ShouldRateLimit) with h2load, beside "
                         "the data plane's limited h2c request, instead of the speed table")
    ap.add_argument("--allocations", type=int, nargs="?", const=2000, metavar="REQUESTS",
                    help="heap allocations and instructions per request of the Sluice rows "
                         "(4, 5, 11, 12, 14, 24-27; --rows picks some), counted under "
                         "Valgrind's Callgrind over REQUESTS requests (default 2000) instead "
                         "of the speed table")
    ap.add_argument("--budget", action="store_true",
                    help="the rows the budgets of goals.json name (each feature's cost "
                         "against its base row), pinned repetitions only; prints the budget "
                         "table and exits 1 when a row is over its budget")
    ap.add_argument("--sittings", type=int, default=1, metavar="N",
                    help="the speed table (or --budget's rows) in N sittings one after "
                         "another, each with servers of its own; the budgets are judged on "
                         "each row's median over the sittings (default 1)")
    ap.add_argument("--accuracy-duration", type=float, default=10.0)
    ap.add_argument("--accuracy-connections", type=int, default=16)
    ap.add_argument("--out", help="report file (default loadtest/results/<date>.md)")
    opts = ap.parse_args(argv)
    if opts.quick:
        opts.duration, opts.reps, opts.warmup, opts.single_duration = 1.0, 1, 1.0, 1.0
    if opts.budget:
        opts.rows = sorted(set(opts.rows or []) | budget_rows(load_goals()))
        opts.no_single = opts.no_unpinned = True
    if opts.compare:
        opts.compare = os.path.abspath(opts.compare)  # servers start in the work directory
        if not os.access(opts.compare, os.X_OK):
            print(f"bench: --compare {opts.compare}: not an executable", file=sys.stderr)
            return 2
        if opts.accuracy or opts.failover or opts.outage or opts.delay or opts.profile \
                or opts.scaling or opts.allocations or opts.balance:
            print("bench: --compare goes with the speed table, --http2 and --grpc only",
                  file=sys.stderr)
            return 2

    for tool in ("wrk", "nginx", "redis-server", "taskset"):
        if not shutil.which(tool) and not os.path.exists(f"/usr/sbin/{tool}"):
            print(f"bench: {tool} not found (scripts/bench installs it)", file=sys.stderr)
            return 2
    speed_table = not (opts.accuracy or opts.failover or opts.outage or opts.delay
                       or opts.profile or opts.scaling or opts.http2 or opts.grpc or opts.rls
                       or opts.allocations or opts.balance)
    if opts.sittings < 1 or (opts.sittings > 1 and not speed_table):
        print("bench: --sittings goes with the speed table (and --budget) only", file=sys.stderr)
        return 2
    if opts.allocations and not shutil.which("valgrind"):
        print("bench: valgrind not found (Debian's valgrind)", file=sys.stderr)
        return 2
    if (opts.http2 or opts.grpc or opts.rls) and not shutil.which("h2load"):
        print("bench: h2load not found (Debian's nghttp2-client)", file=sys.stderr)
        return 2
    for binary in (SLUICE_BIN, ECHO_BIN, *([WSBENCH_BIN] if speed_table else [])):
        if not os.access(binary, os.X_OK):
            print(f"bench: {binary} not built (or set SLUICE_BIN, SLUICE_ECHO_BIN, "
                  "SLUICE_WSBENCH_BIN)", file=sys.stderr)
            return 2

    out = opts.out or os.path.join(
        ROOT, "loadtest", "results",
        f"{datetime.datetime.now():%Y-%m-%d-%H%M%S}{suffix(opts)}.md")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    workdir = os.environ.get("SLUICE_BENCH_WORKDIR") or tempfile.mkdtemp(prefix="sluice-bench-")
    os.chmod(workdir, 0o755)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    started, t0 = datetime.datetime.now(), time.monotonic()
    over: list[str] = []
    info = machine_info()
    pin_cpu, server_cpus = cpu_layout(opts)
    stack = Stack(workdir, None if opts.failover or opts.outage or opts.delay or opts.scaling
                  or opts.allocations else server_cpus)
    try:
        if opts.failover:
            text = failover_report(run_failovers(opts, stack), info, started,
                                   f"scripts/bench --failover {opts.failover}")
        elif opts.outage:
            text = outage_report(run_outages(opts, stack, log), info, started,
                                 f"scripts/bench --outage {opts.outage}")
        elif opts.profile:
            command = "scripts/bench --profile" + (" --http2" if opts.http2 else "")
            text = profile_report(profile_run(stack, pin_cpu, opts.duration, log, opts.http2),
                                  info, started, command, http2=opts.http2)
        elif opts.http2:
            text = http2_report(http2_run(stack, pin_cpu, opts, log), info, started, opts,
                                pin_cpu, "scripts/bench --http2")
        elif opts.grpc:
            text = grpc_report(grpc_run(stack, pin_cpu, opts, log), info, started, opts,
                               pin_cpu, "scripts/bench --grpc")
        elif opts.rls:
            text = rls_report(rls_run(stack, pin_cpu, opts, log), info, started, opts,
                              pin_cpu, "scripts/bench --rls")
        elif opts.scaling:
            text = scaling_report(scaling_run(stack, pin_cpu, opts, log), info, started, opts,
                                  pin_cpu, "scripts/bench --scaling")
        elif opts.allocations:
            text = allocations_report(allocations_run(stack, opts.allocations, opts.rows, log),
                                      info, started,
                                      f"scripts/bench --allocations {opts.allocations}")
        elif opts.delay:
            text = delay_report(delay_run(stack, log), info, started, "scripts/bench --delay")
        elif opts.balance:
            build_dir = os.environ.get("SLUICE_BUILD", os.path.join(ROOT, "build"))
            text = balance_report(balance_run(stack, pin_cpu, opts, build_dir, log), info,
                                  started, "scripts/bench --balance")
        elif opts.accuracy:
            duration = 3.0 if opts.quick else opts.accuracy_duration
            results = accuracy(opts, stack, pin_cpu, log)
            chart = lease_chart([r for r in results if r["windowed"]],
                                os.path.splitext(out)[0] + "-leases.png",
                                None if opts.quick or opts.out else LEASES_PNG)
            text = accuracy_report(results, opts, info, started, duration,
                                   chart and os.path.relpath(chart, ROOT))
        elif opts.sittings > 1:
            texts, meds = [], []
            for k in range(opts.sittings):
                if k > 0:  # servers of its own, started afresh
                    stack.stop_all()
                    sitting_dir = os.path.join(workdir, f"sitting-{k + 1}")
                    os.makedirs(sitting_dir, exist_ok=True)
                    # Its PIDs in the top list too, which scripts/bench's trap reads.
                    stack = Stack(sitting_dir, server_cpus, os.path.join(workdir, "pids"))
                log(f"sitting {k + 1} of {opts.sittings}")
                t1, sitting_started = time.monotonic(), datetime.datetime.now()
                sitting_info = info if k == 0 else machine_info()  # its own load average
                rows = benchmark(opts, stack, pin_cpu)
                texts.append(report(rows, opts, sitting_info, sitting_started,
                                    time.monotonic() - t1, pin_cpu, server_cpus, load_goals()))
                meds.append({r.num: median_of(r.pinned) for r in rows})
            text, over = sittings_report(texts, meds, load_goals(), started,
                                         "scripts/bench " + " ".join(argv or sys.argv[1:]))
            if not opts.budget:
                over = []
        else:
            rows = benchmark(opts, stack, pin_cpu)
            text = report(rows, opts, info, started, time.monotonic() - t0, pin_cpu,
                          server_cpus, load_goals())
            if opts.budget:
                over = budgets_over({r.num: median_of(r.pinned) for r in rows}, load_goals())
    except KeyboardInterrupt:
        return 130
    finally:
        stack.stop_all()
    print(text)
    with open(out, "w") as f:
        f.write(text + "\n")
    log(f"report written to {os.path.relpath(out, ROOT)}")
    if opts.budget and over:
        log("over budget: " + "; ".join(over))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
