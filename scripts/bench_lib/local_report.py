"""The local layer's parts of the scripts/bench reports: the global-key cases of
--accuracy (without and with leases) as a table and as a chart of the allowed
rate against the configured rate (gnuplot), and the --outage table.
"""

from __future__ import annotations

import shutil
import subprocess

LEASE_GOAL = (97.0, 100.0)  # allowed as a share of C + R*T, with leases


def lease_section(w, results: list[dict], chart: str | None):
    """The global-key accuracy cases (accuracy.accuracy_case with nkeys 0)."""
    if not results:
        return
    w("## One global key, without and with leases")
    w("")
    w("| case | C | R/s | lease_tokens | T s | offered req/s | allowed | ideal C+R·T "
      "| allowed ÷ ideal | method's bound | goal [97%, 100%] | script calls | script calls "
      "per allowed | leases | local decisions | 429 | fail-open |")
    w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|")
    for r in results:
        share = 100 * r["allowed"] / r["ideal"]
        bound = 100 + r["skew_pct"]
        met = LEASE_GOAL[0] <= share <= bound if r["lease_tokens"] else None
        w(f"| {r['label']} | {r['C']} | {r['R']} | {r['lease_tokens'] or '—'} | "
          f"{r['window_s']:.2f} | {r['load_rate']:,.0f} | {r['allowed']:,.0f} | "
          f"{r['ideal']:,.1f} | {share:.2f}% | ≤ {bound:.2f}% | "
          f"{'—' if met is None else 'yes' if met else '**no**'} | {r['script_calls']:,.0f} | "
          f"{r['script_calls'] / max(1, r['allowed']):.3f} | {r['leases']:,.0f} | "
          f"{r['local']:,.0f} | {r['limited']:,.0f} | {r['fail_open']:.0f} |")
    w("")
    w("T: from the last moment no bucket existed (the load had not been decided yet) to the "
      "last sample of the three instances' `sluice_ratelimit_decisions_total{decision=\"allowed\"}`"
      " taken while every wrk still ran (Redis TIME after the sample's reads). allowed: that "
      "sample. Tokens that instances held in leases at that moment count as not admitted: "
      "that is the under-admission leases cost. The method's bound: R × (the time from the "
      "start until the bucket was seen + the sample's read time), as a share of the ideal; "
      "an allowed count above it would be over-admission. script calls: EVALSHA + EVAL over "
      "the whole run (refunds after the load included).")
    w("")
    if chart:
        w(f"Chart: `{chart}` (the three instances' allowed per 100 ms, from the samples, "
          "against the configured rate).")
        w("")


def lease_chart(results: list[dict], png: str, copy_to: str | None = None) -> str | None:
    """Allowed per 100 ms over time of each global-key case, one line each, and the
    configured rate; written to `png` (and copied to `copy_to`). None without gnuplot
    or data."""
    results = [r for r in results if len(r["series"]) > 1]
    if not results or not shutil.which("gnuplot"):
        return None
    data = png[:-4] + ".dat"
    with open(data, "w") as f:
        for r in results:
            f.write(f"# {r['label']}: t_seconds allowed_per_100ms\n")
            for (t0, a0), (t1, a1) in zip(r["series"], r["series"][1:]):
                f.write(f"{t1:.3f} {0.1 * (a1 - a0) / (t1 - t0):.2f}\n")
            f.write("\n\n")
    rate = results[0]["R"]
    plots = [f'"{data}" index {i} using 1:2 with fsteps lw 2 title "{r["label"]}"'
             for i, r in enumerate(results)]
    plots.append(f'{rate / 10:g} with lines lw 2 dt 2 lc rgb "black" title '
                 f'"configured rate ({rate:g}/s = {rate / 10:g} per 100 ms)"')
    script = "\n".join([
        'set terminal pngcairo size 960,440 font "sans,10" noenhanced',
        f'set output "{png}"',
        f'set title "Three Sluice instances on one global key (capacity {results[0]["C"]:g}, '
        f'refill {rate:g}/s), load well above the limit: allowed per 100 ms"',
        'set xlabel "time since the load started (s)"',
        'set ylabel "allowed per 100 ms (all instances)"',
        "set key outside below horizontal maxrows 1",
        "set grid ytics",
        "set yrange [0:*]",
        "set xrange [0:*]",
        "plot " + ", ".join(plots), ""])
    subprocess.run(["gnuplot"], input=script, text=True, check=True, timeout=60)
    if copy_to:
        shutil.copyfile(png, copy_to)
    return png


def outage_report(results: list[dict], info: dict, started, command: str) -> str:
    """The --outage runs (outage.outage_run results), one table row per mode."""
    from outage import CAPACITY, INSTANCES, QUIET, RATE, STEADY, TAIL
    lines = []
    w = lines.append
    w(f"# Sluice through a Redis outage — {started:%Y-%m-%d %H:%M}")
    w("")
    w(f"- Machine: {info['nproc']} CPUs, {info['cpu']}; {info['sluice']}; {info['redis']}; "
      f"load average at start {' '.join(info['load'])}")
    w(f"- {INSTANCES} Sluice instances (one thread each, `local.fleet_size: {INSTANCES}`, "
      f"`timeout_ms: 50`, circuit breaker at its defaults) on one Redis; one route with one "
      f"`global` limit, capacity {CAPACITY}, refill {RATE}/s; `on_redis_failure` as in the "
      "first column.")
    w(f"- Load: {results[0]['clients']} Python clients, one keep-alive connection per "
      "instance each, requests back to back to the instances in turn; every answer recorded. "
      f"{STEADY:g} s of load, then SIGKILL of Redis; {results[0]['outage']:g} s later a new "
      "(empty) Redis on the same port; the load goes on until Redis decides again (no "
      f"instance counted a decision without Redis for {QUIET:g} s), and {TAIL:g} s more.")
    w(f"- Command: `{command}`.")
    w("")
    w("| on_redis_failure | req/s while down | admitted while down | ideal C+R·T | admitted ÷ "
      "ideal | 429 | 503 | other statuses | socket errors | max latency ms while down "
      "| /readyz ready after restart | Redis decides again after restart "
      "| admitted before the kill ÷ C+R·T "
      "| fail_open / fail_local / fail_closed |")
    w("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---|")
    for r in results:
        d, b, c = r["down"], r["before"], r["counters"]
        others = {k: v for k, v in d["statuses"].items() if k not in (200, 429, 503)}
        w(f"| {r['mode']} | {d['requests'] / d['seconds']:,.0f} | {d['admitted']:,} | "
          f"{d['ideal']:,.0f} | {d['admitted'] / d['ideal']:.2f} | "
          f"{d['statuses'].get(429, 0):,} | {d['statuses'].get(503, 0):,} | "
          f"{others or 'none'} | {len(r['errors'])} | {d['max_ms']:,.1f} | "
          f"{r['ready_s']:.2f} s | {r['reconnect']['seconds']:.2f} s | "
          f"{b['admitted'] / b['ideal']:.2f} | "
          f"{c['fail_open']:,.0f} / {c['fail_local']:,.0f} / {c['fail_closed']:,.0f} |")
    w("")
    for r in results:
        rc, a = r["reconnect"], r["after"]
        w(f"- {r['mode']}: while down T = {r['down']['seconds']:.2f} s, "
          f"{r['down']['undecided']:,} answers without X-RateLimit-* headers; between the "
          f"restart and Redis deciding again {rc['admitted']:,} of {rc['requests']:,} "
          f"admitted; after that {a['admitted']:,} of {a['requests']:,} in {a['seconds']:.1f} s "
          f"(ideal C + R·T {a['ideal']:,.0f}: the new Redis started with full buckets)"
          + (f"; **socket errors**: {r['errors'][:3]}" if r["errors"] else "") + ".")
    w("")
    w("While down: the requests sent from the SIGKILL to the moment the new Redis answered "
      "PING; ideal C + R·T with T that long (what one exact limiter would admit; a fleet "
      "whose instances each start from a full share may admit up to one capacity more). "
      "open admits every request, closed none (503), local about the ideal. "
      "'before the kill': exact limiting through Redis, from the first request. The fail "
      "counters are the growth over the run, every instance summed.")
    w("")
    return "\n".join(lines)
