"""The Markdown report of scripts/bench --failover: one table row per measured
failover (failover.failover_run results), then what each figure means."""

from __future__ import annotations

import datetime

from failover import LOAD_KEYS, PROBE_CAPACITY, PROBE_PERIOD, STEADY, TAIL, TIMEOUT_MS

CHANGES = {
    "cluster": "Redis Cluster: SIGKILL of one primary (of 3, each with a replica)",
    "sentinel-failover": "Sentinel: `SENTINEL FAILOVER`",
    "sentinel-kill": "Sentinel: SIGKILL of the primary",
}


def _ms(v) -> str:
    return "—" if v is None else f"{v:,.1f}"


def _s(v) -> str:
    return "not within the run" if v is None else f"{v:.2f} s"


def max_bucket(before: dict, after: dict) -> tuple[str, float]:
    """(the smallest `le` holding every decision of the run, decisions above 50 ms)."""
    total = after["hist"].get(None, 0) - before["hist"].get(None, 0)
    bounds = sorted(k for k in after["hist"] if k is not None)
    delta = {le: after["hist"][le] - before["hist"].get(le, 0) for le in bounds}
    top = next((le for le in bounds if delta[le] >= total), float("inf"))
    over_50 = total - max((delta[le] for le in bounds if le <= 0.05), default=0)
    return ("+Inf" if top == float("inf") else f"≤ {top * 1000:g} ms"), over_50


def report(results: list[dict], info: dict, started: datetime.datetime, command: str) -> str:
    lines = []
    w = lines.append
    w(f"# Sluice through a Redis failover — {started:%Y-%m-%d %H:%M}")
    w("")
    w(f"- Machine: {info['nproc']} CPUs, {info['cpu']}; {info['sluice']}; {info['redis']}; "
      f"load average at start {' '.join(info['load'])}")
    w(f"- Two Sluice instances (one thread each, `timeout_ms: {TIMEOUT_MS}`, circuit breaker "
      "at its defaults, `on_redis_failure: open`); route `/load` limited per `X-API-Key` (allowing "
      f"all) over {LOAD_KEYS} keys, route `/probe` limited per key to {PROBE_CAPACITY} "
      "(refill 0.001/s).")
    w(f"- Load: {results[0]['clients']} Python clients, one keep-alive connection per gateway "
      "each, requests back to back to both gateways in turn; every answer recorded (time, "
      f"status, X-RateLimit-* headers). Every {PROBE_PERIOD:g} s a probe: a fresh key "
      f"(cluster: one whose bucket is in the dead primary's slots) asked {PROBE_CAPACITY + 1} "
      f"times; exact = {PROBE_CAPACITY} × 200 with X-RateLimit-Remaining "
      f"{PROBE_CAPACITY - 1}..0, then 429.")
    w(f"- {STEADY:g} s of load, then the change; the run ends {TAIL:g} s after exact limiting "
      "resumed. Cluster: 3 primaries + 3 replicas, `cluster-node-timeout 1000`, "
      "`cluster-require-full-coverage no`. Sentinel: 1 primary, 1 replica, 3 sentinels, "
      "quorum 2, `down-after-milliseconds 1000`, `failover-timeout 3000`.")
    w(f"- Command: `{command}`.")
    w("")
    w("| change | req/s | requests in the window | fail-open | of which outside the dead "
      "slots | socket errors | other statuses | max latency ms (window / before) | p99 in "
      "window ms | check duration max bucket | decisions > 50 ms | topology settled "
      "| last fail-open | exact limiting resumed | redirects moved/ask "
      "| topology refresh ok/error | inexact probes |")
    w("|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        b, a = r["metrics_before"], r["metrics_after"]
        top, over = max_bucket(b, a)
        others = {k: v for k, v in r["statuses"].items() if k != 200}
        w(f"| {CHANGES[r['mode']]} | {r['requests'] / r['seconds']:,.0f} | "
          f"{r['window_requests']:,} | {r['fail_open']:,} | "
          f"{r['fail_open_live_keys'] if r['mode'] == 'cluster' else '—'} | "
          f"{len(r['errors'])} | {others or 'none'} | "
          f"{_ms(r['window_max_ms'])} / {_ms(r['max_latency_before_ms'])} | "
          f"{_ms(r['window_p99_ms'])} | {top} | {over:,.0f} | {_s(r['settled_s'])} | "
          f"{_s(r['last_fail_open_s'])} | {_s(r['resumed_s'])} | "
          f"{a['moved'] - b['moved']:.0f}/{a['ask'] - b['ask']:.0f} | "
          f"{a['refresh_ok'] - b['refresh_ok']:.0f}/{a['refresh_error'] - b['refresh_error']:.0f}"
          f" | {r['probes_inexact_after']} of {r['probes']} |")
    w("")
    for r in results:
        notes = []
        if r["mode"] == "cluster":
            notes.append(f"{100 * r['dead_share']:.0f}% of the load keys had their bucket in "
                         f"the dead primary's slots ({r['victim']}); in the window "
                         f"{r['window_dead']:,} requests went to those keys, "
                         f"{r['window_live']:,} to the others (max latency of the others "
                         f"{r['live_window_max_ms']:.1f} ms)")
        if r["fail_open_live_keys"]:
            notes.append(f"**fail-open answers for keys outside the dead slots**, their "
                         f"latencies ms: {r['fail_open_live_keys_ms']}")
        if r["fail_open_slow"]:
            notes.append(f"{r['fail_open_slow']} fail-open answers took ≥ {TIMEOUT_MS} ms "
                         "(the decision deadline ran out, rather than a refused connection)")
        if r["fail_open_before"] or r["probes_inexact_before"]:
            notes.append(f"**before the change: {r['fail_open_before']} fail-open answers, "
                         f"{r['probes_inexact_before']} inexact probes** (fail-open "
                         f"answers as (s after the start, latency ms): "
                         f"{r['fail_open_before_at']})")
        if r["errors"]:
            notes.append(f"**socket errors**: {r['errors'][:3]}")
        if r["undecided_not_200"]:
            notes.append(f"**{r['undecided_not_200']} answers neither 200 nor decided**")
        if r["probe_examples"]:
            notes.append("inexact probes after the change, e.g. (status, remaining): "
                         + "; ".join(str(p) for p in r["probe_examples"]))
        notes.append(f"sluice_redis_up at the end: {r['metrics_after']['up']}; "
                     f"sluice_ratelimit_fail_open_total grew by "
                     f"{r['metrics_after']['fail_open'] - r['metrics_before']['fail_open']:.0f}")
        w(f"- {CHANGES[r['mode']]}: " + "; ".join(notes) + ".")
    w("")
    w("The window holds the requests answered after the change (the SIGKILL, or SENTINEL "
      "FAILOVER sent; requests in flight then included) and sent before the moment "
      "exact limiting resumed: the later of the last fail-open answer and the start of the "
      f"run of exact probes that lasted to the end (so its resolution is {PROBE_PERIOD:g} s). "
      "A fail-open answer is a 200 without X-RateLimit-* headers. 'Topology settled': every "
      "live cluster node agrees that every slot has a live primary, or every sentinel names "
      "the new primary and it says it is one. Latencies are seen by Python clients (their "
      "own scheduling included); 'check duration max bucket' is the smallest bucket of "
      "`sluice_ratelimit_check_duration_seconds` holding every decision of the run, both "
      "instances. The metrics are the growth over the run, both instances summed.")
    w("")
    return "\n".join(lines)
