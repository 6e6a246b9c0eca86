"""The Markdown reports of scripts/bench: the speed table with its ratios, goals and
checks, and the accuracy table. The rows' expectations and the goals are data
(goals.json), read here; this module only formats.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import subprocess

from local_report import lease_section
from measure import PATH, Row, median_of
from stack import DENY_ALL, LEASE_TOKENS, WS_PATH
from testkit.processes import SLUICE_BIN

GOALS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "goals.json")


def load_goals(path: str = GOALS_FILE) -> dict:
    with open(path) as f:
        return json.load(f)


def evaluate_goal(goal: dict, med: dict[int, dict]) -> tuple[str, object, bool]:
    """(text, figure, met) of one goal of goals.json over the rows' medians."""
    value = med[goal["row"]].get(goal["metric"])
    if "at_most_row" in goal:
        other = med[goal["at_most_row"]][goal["metric"]]
        return (goal["goal"], f"{value:.2f} vs {other:.2f} {goal['unit']}", value <= other)
    if "over" in goal:
        value = value / med[goal["over"]][goal["metric"]]
    if "minus" in goal:
        value = value - med[goal["minus"]][goal["metric"]]
    met = value is not None and (value >= goal["at_least"] if "at_least" in goal
                                 else value <= goal["at_most"])
    return goal["goal"], value, met


def budget_rows(goals: dict) -> set[int]:
    """Every row a budget names, as its row or its base."""
    return {n for b in goals.get("budgets", []) for n in (b["row"], b.get("base")) if n}


def evaluate_budget(budget: dict, med: dict[int, dict]) -> tuple[object, str, bool | None]:
    """(figure, bound, within) of one budget of goals.json over the rows' medians;
    within is None for an entry shown for comparison only."""
    value = med[budget["row"]].get(budget["metric"])
    base = med[budget["base"]].get(budget["metric"]) if "base" in budget else None
    bounded = any(k in budget for k in ("at_most", "at_least", "at_most_base"))
    if value is None or ("base" in budget and (base is None or (base == 0 and budget.get("over")))):
        return None, "", False if bounded else None  # a figure missing (or a base of 0)
    if budget.get("at_most_base"):
        return f"{value:.1f} vs {base:.1f}", "≤ base", value <= base
    if budget.get("minus"):
        value -= base
    elif budget.get("over"):
        value /= base
    if "at_most" in budget:
        return value, f"≤ {budget['at_most']:g}", value <= budget["at_most"]
    if "at_least" in budget:
        return value, f"≥ {budget['at_least']:g}", value >= budget["at_least"]
    return value, "", None


def budgets_over(med: dict[int, dict], goals: dict) -> list[str]:
    """The budgets whose rows were measured and that are over."""
    return [f"row {b['row']}: {b['what']}" for b in goals.get("budgets", [])
            if b["row"] in med and b.get("base", b["row"]) in med
            and evaluate_budget(b, med)[2] is False]


def budget_section(w, med: dict[int, dict], goals: dict):
    """The budget table: each measured row against its base row and its bound."""
    shown = [b for b in goals.get("budgets", [])
             if b["row"] in med and b.get("base", b["row"]) in med]
    if not shown:
        return
    w("## Budgets")
    w("")
    w("CPU figures are the gateway's µs per request; a difference is the row's less its "
      "base row's, a ratio the row's divided by its base row's.")
    w("")
    w("| row | base row | what | metric | measured | budget | within |")
    w("|---|---|---|---|---:|---:|---|")
    for b in shown:
        figure, bound, within = evaluate_budget(b, med)
        kind = ("difference" if b.get("minus") else "ratio" if b.get("over") else "")
        metric = f"{b['metric']} {kind}".strip()
        fig = f"{figure:+.2f}" if b.get("minus") and isinstance(figure, float) else \
            f"{figure:.2f}" if isinstance(figure, float) else str(figure)
        mark = "—" if within is None else "yes" if within else "**no**"
        w(f"| {b['row']} | {b.get('base', '—')} | {b['what']} | {metric} | {fig} | "
          f"{bound or '—'} | {mark} |")
    w("")


def med_has(med: dict[int, dict], goal: dict, key: str) -> bool:
    """False when the goal names a row (under `key`) that was not measured (--rows)."""
    return key not in goal or goal[key] in med


def fmt(v, digits=2, unit=""):
    if v is None or (isinstance(v, float) and v != v):
        return "—"
    if isinstance(v, float) and abs(v) >= 1000:
        return f"{v:,.0f}{unit}"
    return f"{v:.{digits}f}{unit}"


def machine_info() -> dict:
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass

    def version(cmd):
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            return (r.stdout + r.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return "?"

    mem = "?"
    try:
        with open("/proc/meminfo") as f:
            mem = f"{int(f.readline().split()[1]) // 1024} MiB"
    except (OSError, ValueError, IndexError):
        pass
    return {
        "nproc": os.cpu_count(), "cpu": model, "kernel": platform.release(), "mem": mem,
        "nginx": version(["nginx", "-v"]), "wrk": version(["wrk", "--version"]),
        "redis": version(["redis-server", "--version"]),
        "sluice": version([SLUICE_BIN, "--version"]),
        "load": open("/proc/loadavg").read().split()[:3],
    }


def report(rows: list[Row], opts, info: dict, started: datetime.datetime, elapsed: float,
           pin_cpu: str | None, server_cpus: str | None, goals: dict) -> str:
    by = {r.num: r for r in rows}
    med = {r.num: median_of(r.pinned) for r in rows}
    notes = sanity_notes(med, {k: v if k == "all_met" else prune(v, med)
                               for k, v in goals["checks"].items()}, opts.ws_connections)
    ws_rows = [r for r in rows if r.ws_size is not None]
    rows = [r for r in rows if r.ws_size is None]  # the HTTP rows: every table but one
    if opts.rows:
        notes.append("only the rows of the table were measured (--rows): the checks of the "
                     "others were skipped.")
    warmup = by.get(22) and by[22].cache_warmup
    if warmup:
        took = (f"in {warmup['seconds']:.2f} s" if warmup["seconds"] is not None else
                "not within the time limit")
        notes.append(f"row 22's consumer cache, empty at start, held every one of the "
                     f"{warmup['keys']:,} keys {took} of its load "
                     f"({warmup['lookups']:,.0f} requests answered by a store lookup, "
                     f"{warmup['hits']:,.0f} by the cache meanwhile), before its warm-up and "
                     "measurements.")
    tls_rows = [r for r in rows if r.tls]
    if len({r.tls for r in tls_rows}) > 1:
        notes.append("the TLS rows negotiated different protocols or suites: "
                     + ", ".join(f"row {r.num} {r.tls}" for r in tls_rows))
    b1, b2, b8 = (goals["baselines"][k] for k in ("upstream", "proxy", "redis_proxy"))
    lines = []
    w = lines.append
    w(f"# Sluice benchmark — {started:%Y-%m-%d %H:%M} ({'quick' if opts.quick else 'full'} run)")
    w("")
    w(f"- Machine: {info['nproc']} CPUs, {info['cpu']}, {info['mem']} RAM, Linux {info['kernel']}; "
      f"load average at start {' '.join(info['load'])}")
    w(f"- Software: {info['sluice']}; {info['nginx']}; {info['redis']}; {info['wrk']}")
    if tls_rows:
        w("- TLS: " + "; ".join(f"row {r.num} {r.tls}" for r in tls_rows)
          + " (a default OpenSSL client, as wrk is; one P-256 certificate)")
    w(f"- Load: `wrk -t1 -c{opts.connections} -d{opts.duration:g}s` on `http://127.0.0.1:PORT{PATH}`, "
      f"{opts.reps} repetition(s) per row, round robin over the rows (every other "
      "repetition in reverse), medians shown; "
      + (f"wrk pinned to CPU {pin_cpu}, every server to CPU(s) {server_cpus} (taskset)."
         if pin_cpu is not None else "no pinning (one CPU)."))
    w("- Upstream: one `sluice-echo` (a small JSON echo) for every row; each gateway is one "
      "thread/worker; Sluice `access_log: false`; limits keyed by client IP (one bucket), "
      "except rows 9-11: keyed by `X-API-Key`, wrk sending 10,000 keys in turn, so in rows 9 "
      "and 10 the buckets spread over the slots of a 3-primary Redis Cluster (no replicas, "
      "`redis.topology: cluster`); row 10 adds a global limit, whose bucket is in another "
      "slot than almost every key's; row 11 is the same load on row 5's one Redis. Row 6 turns the denial cache off "
      "(`local.deny_cache: false`: every 429 asks Redis); row 12 has one bucket of capacity "
      f"{DENY_ALL[0]} refilling {DENY_ALL[1]:g}/s (every request of the run denied, the denial "
      "cache on); row 13 one `global` limit allowing all with `lease_tokens: "
      f"{LEASE_TOKENS}`; rows 12 and 13 each on a Redis of their own. Redis 7 on loopback, "
      "`CONFIG RESETSTAT` (every primary) before every measurement.")
    w(f"- Whole run: {elapsed:.0f} s. Command: `scripts/bench{' --quick' if opts.quick else ''}"
      f"{' --rows ' + ','.join(map(str, opts.rows)) if opts.rows else ''}"
      f"{' --compare ' + opts.compare if opts.compare else ''}`.")
    w("")
    w("## Throughput and cost (pinned)")
    w("")
    w("| # | setup | req/s | p50 ms | p99 ms | p99.9 ms | non-2xx | errors | peak RSS MiB "
      "| CPU µs/req | Redis CPU µs/req | EVALSHA µs/call | script µs/req | Redis calls/req "
      f"| writes/req | ×row {b2} | ×row {b8} |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    r2, r8 = med[b2]["rps"], med[b8]["rps"]
    for r in rows:
        m = med[r.num]
        non2xx = f"{100 * m['non2xx'] / max(1, m['requests']):.1f}%" if m["non2xx"] else "0"
        w(f"| {r.num} | {r.name} | {m['rps']:,.0f} | {fmt(m['p50'])} | {fmt(m['p99'])} | "
          f"{fmt(m['p999'])} | {non2xx} | {m['errors']:.0f} | {m['rss_mib']:.1f} | "
          f"{fmt(m['cpu_us'], 1)} | {fmt(m.get('redis_cpu_us'), 1)} | "
          f"{fmt(m.get('usec_per_call'))} | {fmt(m.get('script_us_per_req'))} | "
          f"{fmt(m.get('calls_per_req'))} | "
          f"{fmt(m.get('writes_per_req'), 3)} | {m['rps'] / r2:.2f} | {m['rps'] / r8:.2f} |")
    w("")
    w("CPU µs/req: utime+stime of the gateway's processes (nginx: master and worker) from "
      "/proc, divided by the requests wrk completed; Redis CPU the same for redis-server. "
      "EVALSHA µs/call: Redis `INFO commandstats` usec_per_call of the rate-limit script; "
      "script µs/req: its usec summed over the Redis servers the row reaches (a cluster's "
      "three primaries) per request, i.e. Redis time per decision. "
      "writes/req: Sluice's `sluice_redis_writes_total` per request (below 1 = pipelining). "
      "Row 6's non-2xx are its intended 429s. Row 7's Redis was killed before measuring.")
    w("")
    w("## Ratios")
    w("")
    w(f"| # | setup | req/s ÷ row {b2} | req/s ÷ row {b8} | CPU/req ÷ row {b2} "
      f"| CPU+Redis/req ÷ row {b8} |")
    w("|---|---|---:|---:|---:|---:|")
    c2 = med[b2]["cpu_us"]
    c8 = med[b8]["cpu_us"] + med[b8].get("redis_cpu_us", 0)
    for r in rows:
        m = med[r.num]
        total = m["cpu_us"] + m.get("redis_cpu_us", 0)
        w(f"| {r.num} | {r.name} | {m['rps'] / r2:.2f} | {m['rps'] / r8:.2f} | "
          f"{m['cpu_us'] / c2:.2f} | {total / c8:.2f} |")
    w("")
    cluster_section(w, rows, med, goals["baselines"].get("one_redis", []))
    local_section(w, rows, med, goals["baselines"].get("local"))
    websocket_section(w, ws_rows, med, goals["baselines"].get("websocket", []), opts)
    budget_section(w, med, goals)
    w("## Goals")
    w("")
    w("| goal | figure | met |")
    w("|---|---|---|")
    for text, figure, ok in (evaluate_goal(g, med) for g in goals["goals"]
                             if all(med_has(med, g, k)
                                    for k in ("row", "over", "minus", "at_most_row"))):
        fig = f"{figure:.3g}" if isinstance(figure, float) else str(figure)
        w(f"| {text} | {fig} | {'yes' if ok else '**no**'} |")
    w("")
    if any(r.single for r in rows):
        w(f"## One connection (`wrk -c1`, {opts.single_duration:g} s, pinned): latency each layer adds")
        w("")
        w(f"| # | setup | req/s | p50 ms | p99 ms | p99.9 ms | p50 added to row {b1} "
          f"| p50 added to row {b2} |")
        w("|---|---|---:|---:|---:|---:|---:|---:|")
        base1, base2 = by[b1].single["p50"], by[b2].single["p50"]
        for r in rows:
            s = r.single
            w(f"| {r.num} | {r.name} | {s['rps']:,.0f} | {s['p50']:.3f} | {s['p99']:.3f} | "
              f"{s['p999']:.3f} | {(s['p50'] - base1) * 1000:+.0f} µs | "
              f"{(s['p50'] - base2) * 1000:+.0f} µs |")
        w("")
    if any(r.unpinned for r in rows):
        w(f"## Unpinned (every process free to use every CPU, 1 repetition, "
          f"-c{opts.connections}, {opts.duration:g} s)")
        w("")
        w("| # | setup | req/s | p50 ms | p99 ms | p99.9 ms | CPU µs/req | Redis CPU µs/req "
          f"| ×row {b2} | ×row {b8} |")
        w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        u2, u8 = by[b2].unpinned["rps"], by[b8].unpinned["rps"]
        for r in rows:
            u = r.unpinned
            w(f"| {r.num} | {r.name} | {u['rps']:,.0f} | {fmt(u['p50'])} | {fmt(u['p99'])} | "
              f"{fmt(u['p999'])} | {fmt(u['cpu_us'], 1)} | {fmt(u.get('redis_cpu_us'), 1)} | "
              f"{u['rps'] / u2:.2f} | {u['rps'] / u8:.2f} |")
        w("")
    if len(rows[0].pinned) > 1:
        w("## Spread of the pinned repetitions (req/s, WebSocket rows msgs/s: min / median / "
          "max)")
        w("")
        w("| # | setup | min | median | max |")
        w("|---|---|---:|---:|---:|")
        for r in rows + ws_rows:
            v = sorted(s["rps" if r.ws_size is None else "msgs_per_s"] for s in r.pinned)
            w(f"| {r.num} | {r.name} | {v[0]:,.0f} | {statistics.median(v):,.0f} | {v[-1]:,.0f} |")
        w("")
    if notes:
        w("## Checks")
        w("")
        for n in notes:
            w(f"- {n}")
        w("")
    return "\n".join(lines)


def ratio_table(w, shown: list[Row], med: dict[int, dict], refs: list[int],
                columns: list[str], cells):
    """Rows `shown`: req/s, its ratio to each row of `refs`, then `columns`, whose
    cells cells(median) gives; an empty line after the table."""
    w("| # | setup | req/s | " + "".join(f"÷ row {n} | " for n in refs) +
      " | ".join(columns) + " |")
    w("|---|---|---:|" + "---:|" * (len(refs) + len(columns)))
    for r in shown:
        m = med[r.num]
        ratios = "".join(f"{m['rps'] / med[n]['rps']:.2f} | " for n in refs)
        w(f"| {r.num} | {r.name} | {m['rps']:,.0f} | {ratios}" + " | ".join(cells(m)) + " |")
    w("")


def cluster_section(w, rows: list[Row], med: dict[int, dict], refs: list[int]):
    """Rows on a Redis Cluster (those reaching more than one Redis) beside the rows
    `refs` (limits on one Redis)."""
    cluster = [r for r in rows if len(r.redis) > 1]
    refs = [r for r in refs if r in med]
    if not cluster or not refs:
        return
    w(f"## Redis Cluster against one Redis (rows {', '.join(map(str, refs))})")
    w("")
    ratio_table(w, [r for r in rows if r.num in refs] + cluster, med, refs,
                ["CPU µs/req", "Redis CPU µs/req", "script calls/req", "EVALSHA µs/call",
                 "Redis µs per decision"],
                lambda m: [fmt(m["cpu_us"], 1), fmt(m.get("redis_cpu_us"), 1),
                           fmt(m.get("calls_per_req")), fmt(m.get("usec_per_call")),
                           fmt(m.get("script_us_per_req"))])
    w("Redis µs per decision: the script's `usec` from `INFO commandstats`, summed over "
      "the primaries, divided by the requests (one decision each). Redis CPU µs/req is "
      "the whole redis-server CPU (all primaries), event loop and networking included.")
    w("")


def local_section(w, rows: list[Row], med: dict[int, dict], local: dict | None):
    """The rows of the local layer (denial cache, leases) beside the rows `local["beside"]`."""
    if not local or not all(n in med for n in local["rows"] + local["beside"]):
        return
    shown = [r for r in rows if r.num in local["beside"] + local["rows"]]
    refs = [n for n in local["beside"] if "calls_per_req" not in med[n]]  # rows without Redis
    w(f"## The local layer (rows {', '.join(map(str, local['rows']))})")
    w("")
    ratio_table(w, shown, med, refs,
                ["CPU µs/req", "Redis CPU µs/req", "script calls/req", "script calls per 429",
                 "local decisions/req", "leases/req"],
                lambda m: [fmt(m["cpu_us"], 1), fmt(m.get("redis_cpu_us"), 1),
                           fmt(m.get("calls_per_req"), 4),
                           fmt(m.get("calls_per_denied") if m["non2xx"] else None, 4),
                           fmt(m.get("local_per_req"), 3), fmt(m.get("leases_per_req"), 4)])
    w("script calls: EVALSHA + EVAL on the row's Redis over the measurement (decisions, "
      "lease refunds included) from `INFO commandstats`, per request and per 429 answer. "
      "local decisions/req: `sluice_ratelimit_local_decisions_total` (denial cache and "
      "lease) per request; leases/req: `sluice_ratelimit_leases_total` per request.")
    w("")


def websocket_section(w, ws_rows: list[Row], med: dict[int, dict], pairs: list[list[int]],
                      opts):
    """The WebSocket echo rows, each tunnelled row beside its direct one (`pairs`:
    [direct, through Sluice]): pinned medians, then -c1 and unpinned figures."""
    if not ws_rows:
        return
    direct_of = {via: direct for direct, via in pairs}
    by = {r.num: r for r in ws_rows}
    nums = [r.num for r in ws_rows]
    w(f"## WebSocket echo (rows {', '.join(map(str, nums))}): messages through a Sluice tunnel")
    w("")
    w(f"Load: `sluice-wsbench client --connections {opts.ws_connections} --seconds "
      f"{opts.duration:g}` (one thread, pinned like wrk) on `ws://127.0.0.1:PORT{WS_PATH}`: "
      "each connection sends one binary message, waits for its echo and checks it, then the "
      "next; medians of the pinned repetitions. Upstream: `sluice-wsbench echo` (one thread, "
      "async Beast, every message echoed as one frame); Sluice: one thread, one route to it, "
      "no limits, `access_log: false`.")
    w("")
    w("| # | setup | msgs/s | MiB/s | p50 ms | p99 ms | p99.9 ms | errors | peak RSS MiB "
      "| CPU µs/msg | msgs/s ÷ direct | p50 added to direct | relayed B/msg |")
    w("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in ws_rows:
        m, d = med[r.num], med.get(direct_of.get(r.num))
        added = f"{(m['p50'] - d['p50']) * 1000:+.0f} µs" if d else "—"
        w(f"| {r.num} | {r.name} | {m['msgs_per_s']:,.0f} | {fmt(m['mib_per_s'], 1)} | "
          f"{fmt(m['p50'], 3)} | {fmt(m['p99'], 3)} | {fmt(m['p999'], 3)} | "
          f"{m['errors']:.0f} | {m['rss_mib']:.1f} | {fmt(m['cpu_us'], 1)} | "
          f"{fmt(m['msgs_per_s'] / d['msgs_per_s'] if d else None)} | "
          f"{added} | "
          f"{fmt(m.get('relayed_per_msg'), 0)} |")
    w("")
    if any(r.single or r.unpinned for r in ws_rows):
        w("| # | setup | -c1 msgs/s | -c1 p50 ms | -c1 p99 ms | -c1 p50 added to direct "
          f"| unpinned msgs/s (-c{opts.ws_connections}) | unpinned ÷ direct |")
        w("|---|---|---:|---:|---:|---:|---:|---:|")
        for r in ws_rows:
            s, u = r.single, r.unpinned
            direct = by.get(direct_of.get(r.num))
            ds, du = (direct.single, direct.unpinned) if direct else (None, None)
            w(f"| {r.num} | {r.name} | "
              + (f"{s['msgs_per_s']:,.0f} | {s['p50']:.3f} | {s['p99']:.3f} | " if s
                 else "— | — | — | ")
              + (f"{(s['p50'] - ds['p50']) * 1000:+.0f} µs | " if s and ds else "— | ")
              + (f"{u['msgs_per_s']:,.0f} | " if u else "— | ")
              + (f"{u['msgs_per_s'] / du['msgs_per_s']:.2f} |" if u and du else "— |"))
        w("")
    w("msgs/s: echoes received per second over every connection; MiB/s: the payload both "
      "ways (2 × message size × msgs/s); p50/p99/p99.9: the round trip of one message (its "
      "write started → its echo read). CPU µs/msg: utime+stime of the row's server per echoed "
      "message, from /proc: the echo server in the direct rows, Sluice alone in the rows "
      "through it (the echo server behind it not counted, as in rows 1 and 4). relayed B/msg: "
      "Sluice's `sluice_websocket_bytes_total` (both directions) per message: twice the "
      "payload plus the frame headers (a client frame carries a 4-byte mask): the load went "
      "through the tunnel. The tunnelled rows cross two more loopback hops "
      "per message each way and share the server CPUs with the echo server.")
    w("")


def prune(check, med: dict[int, dict]):
    """A check's row list (or lists by expected value) without the rows not measured."""
    if isinstance(check, dict):
        return {k: prune(v, med) for k, v in check.items()}
    return [n for n in check if n in med]


def sanity_notes(med: dict[int, dict], checks: dict,
                 ws_connections: int | None = None) -> list[str]:
    """What in the median runs contradicts what each row should answer (goals.json).
    ws_connections: the WebSocket rows' connections (one tunnel each per measurement)."""
    notes = []
    for num in checks.get("ws_no_errors", []):
        if med[num]["errors"]:
            notes.append(f"row {num}: {med[num]['errors']:.0f} WebSocket client errors (failed "
                         "handshakes, bad echoes, failed closes) in the median run (expected "
                         "none)")
    for num in checks.get("ws_tunnels", []):
        m = med[num]
        if ws_connections is not None and m.get("tunnels") != ws_connections:
            notes.append(f"row {num}: sluice_websocket_tunnels_total rose by "
                         f"{m.get('tunnels', 0):.0f} per measurement (expected "
                         f"{ws_connections}, one per connection)")
        if m.get("relayed_per_msg", 0) < 2 * m["size"]:
            notes.append(f"row {num}: sluice_websocket_bytes_total rose by "
                         f"{m.get('relayed_per_msg', 0):.0f} bytes per message (expected at "
                         f"least {2 * m['size']:.0f}, the payload both ways)")
    for num in checks["all_2xx"]:
        if med[num]["non2xx"] or med[num]["errors"]:
            notes.append(f"row {num}: {med[num]['non2xx']:.0f} non-2xx and "
                         f"{med[num]['errors']:.0f} socket errors in the median run (expected none)")
    for num in checks["mostly_429"]:
        if med[num]["non2xx"] < 0.5 * med[num]["requests"]:
            notes.append(f"row {num}: fewer than half the requests were denied; the 429 path "
                         "was not measured")
    for expected, nums in checks["script_calls"].items():
        for num in nums:
            c, want = med[num].get("calls_per_req", 0), float(expected)
            if not 0.98 * want <= c <= 1.02 * want:
                notes.append(f"row {num}: {c:.3f} Redis script calls per request (expected "
                             f"{expected}): the row did not limit every request as intended")
    for num, m in med.items():
        if m.get("failed_calls", 0):
            notes.append(f"row {num}: {m['failed_calls']:.0f} script calls failed in Redis in "
                         "the median run: the row did not decide as intended")
    for expected, nums in checks.get("decisions", {}).items():
        for num in nums:
            c, want = med[num].get("decisions_per_req", 0), float(expected)
            calls = med[num].get("calls_per_req", 0)
            local = med[num].get("local_per_req", 0)
            if not 0.98 * want <= c <= 1.02 * want or not 0 < calls <= 1.02 or local:
                notes.append(f"row {num}: {c:.3f} limit decisions, {local:.3f} of them local, "
                             f"and {calls:.3f} script calls per request (expected {expected} "
                             "decision(s), all from Redis, in at most one call): the row did "
                             "not limit every request as intended")
    for num in checks["no_fail_open"]:
        if med[num].get("fail_open", 0):
            notes.append(f"row {num}: {med[num]['fail_open']:.0f} fail-open decisions (Redis too slow?)")
    if not notes:
        notes.append(checks["all_met"])
    return notes


def accuracy_report(results: list[dict], opts, info: dict, started: datetime.datetime,
                    duration: float, chart: str | None = None) -> str:
    """The per-key cases in one table, the global-key cases (local_report) after it."""
    windowed = [r for r in results if r["windowed"]]
    results = [r for r in results if not r["windowed"]]
    lines = []
    w = lines.append
    w(f"# Sluice limit accuracy — {started:%Y-%m-%d %H:%M}")
    w("")
    w(f"- Machine: {info['nproc']} CPUs, {info['cpu']}; {info['sluice']}; {info['redis']}")
    w(f"- Three Sluice instances (one thread each) on one Redis; one `wrk -t1 "
      f"-c{opts.accuracy_connections}` per instance, all three at once, {duration:g} s; "
      "every request carries `X-API-Key` (limit `key: api_key`, no consumers listed, so every "
      "key is its own bucket; the global-key cases: `key: global`, one bucket for every "
      "request). Command: `scripts/bench --accuracy`.")
    w("- allowed = Sluice's `sluice_ratelimit_decisions_total{decision=\"allowed\"}` summed over "
      "the instances; ideal = Σ over keys of C + R·T, T from the start of the load (the last "
      "moment Redis's DB was still empty, polled with DBSIZE + TIME) to the key's last debit "
      "(the timestamp stored in its bucket): Redis's clock at both ends.")
    w("")
    w("| case | C | R/s | keys | T s | requests | offered req/s | allowed | ideal C+R·T "
      "| error | first hits spread | tokens left | method's bound | 2xx seen by wrk | 429 "
      "| fail-open |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        w(f"| {r['label']} | {r['C']} | {r['R']} | {r['keys']} | {r['T']:g} | "
          f"{r['requests']:,.0f} | {r['load_rate']:,.0f} | {r['allowed']:,.0f} | "
          f"{r['ideal']:,.1f} | {r['error_pct']:+.2f}% | {r['spread_ms']:.1f} ms | "
          f"{r['leftover']:.1f} | "
          f"−{r['skew_pct']:.2f}% .. 0 | "
          f"{r['ok']:,.0f} | {r['limited']:,.0f} | {r['fail_open']:.0f} |")
    w("")
    for r in results:
        # (A case with no capacity counts units, not admissions: nothing to deny.)
        if r["C"] and r["limited"] < 0.2 * r["requests"]:
            w(f"**{r['label']}: only {r['limited']:,.0f} of {r['requests']:,.0f} requests were "
              "denied: the load did not keep every bucket empty, so allowed < ideal says "
              "nothing about accuracy. Run longer or on a faster machine.**")
            w("")
    w("The ideal counts every key's window from the moment the load starts; with many keys a "
      "key's first request comes a little later, at most 'first hits spread' later (polled: the "
      "time until every key had its bucket), and the fractions of a token left in the buckets "
      "at the end ('tokens left', read from Redis) were refilled but never asked for. So the "
      "ideal is an upper bound, and an error between the 'method's bound' ((R × spread × keys "
      "+ tokens left) as a share of the ideal) and 0 is the measuring method, not the limiter. A positive error would be over-admission. '2xx seen "
      "by wrk' can be a little below 'allowed': requests in flight when wrk stops were "
      "allowed but not counted by wrk.")
    w("")
    lease_section(w, windowed, chart)
    return "\n".join(lines)
