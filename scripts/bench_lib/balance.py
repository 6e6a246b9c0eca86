"""scripts/bench --balance: balancing and splitting, measured.

- least_request against round robin: two sluice-echo servers, one answering after
  1 ms and one after 10 ms (ten times slower), behind a Sluice with each policy,
  under the same wrk load: requests per second, p99, and the share of requests the
  slow server got.
- A route split 95/5 between two upstreams under load: the share each got.
- Consistent hashing (sluice-balance-bench): the share of keys that move when one
  of N servers is added or removed, and the weighted shares' worst error.
- Retries during a 503 burst: three servers, one answering 503 to everything,
  without and with a route retry policy (errors the clients saw, and requests
  the servers got per client request); then all three answering 503 (an
  outage), the policy under the default retry budget and under one that never
  refuses: the extra load the budget allowed.
"""

from __future__ import annotations

import json
import os
import subprocess

from measure import run_wrk, wrk_command
from stack import Stack

FAST_MS, SLOW_MS = 1, 10
CONNECTIONS = 32


def _served(echo) -> int:
    return echo.counts()["requests"]


def balance_run(stack: Stack, pin_cpu: str | None, opts, build_dir: str, log) -> dict:
    redis = stack.redis("redis")
    fast = stack.echo("echo-fast", delay_ms=FAST_MS)
    slow = stack.echo("echo-slow", delay_ms=SLOW_MS)
    out: dict = {"policies": []}
    for policy in ("round_robin", "least_request"):
        gw = stack.sluice(f"sluice-{policy}", upstream=fast.port, redis_port=redis.port,
                          limit=None, threads=2,
                          upstream_extra={"servers": [fast.address, slow.address],
                                          "balance": policy})
        run_wrk(wrk_command(gw.port, CONNECTIONS, 1, pin_cpu), 1)  # warm-up
        before = (_served(fast), _served(slow))
        figures = run_wrk(wrk_command(gw.port, CONNECTIONS, opts.duration, pin_cpu),
                          opts.duration)
        after = (_served(fast), _served(slow))
        total = (after[0] - before[0]) + (after[1] - before[1])
        row = {"policy": policy, "rps": figures["requests"] / opts.duration,
               "p99_ms": figures["p99_us"] / 1000, "p50_ms": figures["p50_us"] / 1000,
               "slow_share": (after[1] - before[1]) / total if total else float("nan")}
        log(f"{policy}: {row['rps']:,.0f} req/s, p99 {row['p99_ms']:.1f} ms, "
            f"slow server {row['slow_share']:.1%}")
        out["policies"].append(row)
        stack.stop(gw)

    # A 95/5 split between two upstreams (each one fast server), under load.
    canary = stack.echo("echo-canary")
    stable = stack.echo("echo-stable")
    gw = stack.sluice("sluice-split", upstream=stable.port, redis_port=redis.port, limit=None,
                      threads=2, more_routes=[{
                          "name": "split", "match": {"path_prefix": "/"},
                          "upstreams": [{"name": "echo", "weight": 95},
                                        {"name": "canary", "weight": 5}]}],
                      more_upstreams={"canary": {"servers": [canary.address]}})
    before = (_served(stable), _served(canary))
    figures = run_wrk(wrk_command(gw.port, CONNECTIONS, opts.duration, pin_cpu), opts.duration)
    after = (_served(stable), _served(canary))
    got = [after[i] - before[i] for i in range(2)]
    out["split"] = {"requests": sum(got), "canary": got[1],
                    "canary_share": got[1] / sum(got) if sum(got) else float("nan"),
                    "rps": figures["requests"] / opts.duration}
    log(f"split 95/5: {got[1]} of {sum(got)} to the canary")
    stack.stop(gw)

    out["retries"] = _retry_runs(stack, redis, pin_cpu, opts, log)

    text = subprocess.run([os.path.join(build_dir, "sluice-balance-bench"), "100000"],
                          capture_output=True, text=True, check=True, timeout=300).stdout
    out["hash"] = json.loads(text)
    return out


RETRY_POLICY = {"attempts": 3, "on": [503], "backoff": {"base_ms": 10, "max_ms": 100}}
UNBOUNDED_BUDGET = {"percent": 100, "min_concurrent": 1000000}
HALF_BUDGET = {"percent": 50}
SHORT_POLICY = {**RETRY_POLICY, "backoff": {"base_ms": 1, "max_ms": 5}}


def _retry_runs(stack: Stack, redis, pin_cpu, opts, log) -> list[dict]:
    ok = [stack.echo(f"echo-ok{i}") for i in range(2)]
    failing = [stack.echo(f"echo-503-{i}", status=503) for i in range(3)]
    burst = [ok[0], ok[1], failing[0]]
    runs = [("one of three servers answers 503", burst, None, None),
            ("one of three servers answers 503", burst, RETRY_POLICY, None),
            ("one of three servers answers 503", burst, RETRY_POLICY, HALF_BUDGET),
            ("one of three servers answers 503", burst, SHORT_POLICY, HALF_BUDGET),
            ("all three answer 503 (an outage)", failing, RETRY_POLICY, None),
            ("all three answer 503 (an outage)", failing, RETRY_POLICY, UNBOUNDED_BUDGET)]
    rows = []
    for i, (case, servers, policy, budget) in enumerate(runs):
        upstream = {"servers": [s.address for s in servers]}
        if budget:
            upstream["retry_budget"] = budget
        gw = stack.sluice(f"sluice-retry-{i}", upstream=servers[0].port, redis_port=redis.port,
                          limit=None, threads=2, upstream_extra=upstream,
                          route={"retry": policy} if policy else None)
        run_wrk(wrk_command(gw.port, CONNECTIONS, 1, pin_cpu), 1)  # warm-up
        before = sum(_served(s) for s in servers)
        figures = run_wrk(wrk_command(gw.port, CONNECTIONS, opts.duration, pin_cpu),
                          opts.duration)
        served = sum(_served(s) for s in servers) - before
        requests = figures["requests"]
        backoff = policy["backoff"] if policy else None
        row = {"case": case,
               "policy": (f"attempts 3, on 503, backoff {backoff['base_ms']}-{backoff['max_ms']} ms"
                          if policy else "none"),
               "budget": ("-" if not policy else "default (20 %, min 3)" if not budget
                          else "never refuses" if budget is UNBOUNDED_BUDGET else "50 %, min 3"),
               "rps": requests / opts.duration, "p99_ms": figures["p99_us"] / 1000,
               "errors": figures["non2xx"] / requests if requests else float("nan"),
               "load": served / requests if requests else float("nan")}
        log(f"{case}, policy {row['policy']}, budget {row['budget']}: "
            f"{row['errors']:.1%} errors, {row['load']:.2f} upstream requests per request")
        rows.append(row)
        stack.stop(gw)
    return rows


def balance_report(result: dict, info: dict, started, command: str) -> str:
    lines = [f"# Sluice balancing — {started:%Y-%m-%d %H:%M} (`{command}`)", "",
             f"{info.get('nproc', '?')} CPUs ({info.get('cpu', '?')}); wrk with {CONNECTIONS} connections; "
             f"two sluice-echo servers answering after {FAST_MS} ms and {SLOW_MS} ms.", "",
             "| balance | req/s | p50 ms | p99 ms | share to the slow server |",
             "|---|---|---|---|---|"]
    for row in result["policies"]:
        lines.append(f"| {row['policy']} | {row['rps']:,.0f} | {row['p50_ms']:.2f} | "
                     f"{row['p99_ms']:.2f} | {row['slow_share']:.1%} |")
    split = result["split"]
    lines += ["", "A route split 95/5 under the same load (two workers, each exact over its "
              "own requests):", "",
              f"{split['canary']:,} of {split['requests']:,} requests to the 5 % side "
              f"({split['canary_share']:.3%}), {split['rps']:,.0f} req/s.", "",
              "Consistent hashing (Maglev, 65,537 entries), share of "
              f"{result['hash']['keys']:,} keys moved:", "",
              "| servers | one added (ideal 1/(N+1)) | one removed (ideal 1/N) |",
              "|---|---|---|"]
    for r in result["hash"]["remap"]:
        n = r["servers"]
        lines.append(f"| {n} | {r['added']:.2%} ({1 / (n + 1):.2%}) | "
                     f"{r['removed']:.2%} ({1 / n:.2%}) |")
    lines += ["", f"Weights 1, 2, 5: worst share error {result['hash']['weighted_worst_error']:.3%} "
              "of the weight's share.", ""]
    lines += ["Retries during a 503 burst (three sluice-echo servers, round robin, the same "
              "wrk load):", "",
              "| servers | retry policy | retry budget | req/s | p99 ms | errors clients saw | "
              "upstream requests per request |", "|---|---|---|---|---|---|---|"]
    for r in result.get("retries", []):
        lines.append(f"| {r['case']} | {r['policy']} | {r['budget']} | {r['rps']:,.0f} | "
                     f"{r['p99_ms']:.2f} | {r['errors']:.2%} | {r['load']:.2f} |")
    lines.append("")
    return "\n".join(lines)
