"""One measurement of scripts/bench: wrk against a row, with the CPU the row's
processes and Redis spent meanwhile (from /proc) and the counters of Sluice and
Redis read before and after.

wrk runs report.lua (or keys.lua), whose done() prints "BENCH name value" lines;
parse_bench_lines() reads them. The WebSocket rows (Row.ws_size) are measured by
sluice-wsbench's client instead (measure_ws), which prints one JSON line.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess

from testkit import procfs
from testkit.http import request
from stack import WS_PATH, WSBENCH_BIN, Row
from testkit.metrics import metric_sum
from testkit.processes import Process
from testkit.resp import Connection

HERE = os.path.dirname(os.path.abspath(__file__))
REPORT_LUA = os.path.join(HERE, "report.lua")
KEYS_LUA = os.path.join(HERE, "keys.lua")
PATH = "/api/bench"


def wrk_command(port: int, conns: int, duration: float, pin_cpu: str | None,
                script: str = REPORT_LUA, path: str = PATH, args: list[str] = (),
                scheme: str = "http") -> list[str]:
    cmd = ["wrk", "-t1", f"-c{conns}", f"-d{max(1, round(duration))}s", "--latency",
           "-s", script, f"{scheme}://127.0.0.1:{port}{path}"]
    if args:
        cmd += ["--", *args]
    return (["taskset", "-c", pin_cpu] if pin_cpu is not None else []) + cmd


def parse_bench_lines(text: str) -> dict[str, float]:
    return {m.group(1): float(m.group(2))
            for m in re.finditer(r"^BENCH (\w+) (\S+)$", text, re.M)}


def run_wrk(cmd: list[str], duration: float) -> dict[str, float]:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    figures = parse_bench_lines(result.stdout)
    if result.returncode != 0 or "requests" not in figures:
        raise RuntimeError(f"wrk failed ({result.returncode}): {' '.join(cmd)}\n"
                           f"{result.stdout}\n{result.stderr}")
    return figures


def metrics_text(admin: int) -> str:
    """The gateway's exposition, from its admin port."""
    status, _, body = request(admin, "GET", "/metrics", timeout=5.0)
    if status != 200:
        raise RuntimeError(f"/metrics answered {status}")
    return body.decode(errors="replace")


def sluice_counters(admin: int) -> dict[str, float]:
    text = metrics_text(admin)
    return {
        "commands": metric_sum(text, "sluice_redis_commands_total"),
        "writes": metric_sum(text, "sluice_redis_writes_total"),
        "fail_open": metric_sum(text, "sluice_ratelimit_fail_open_total"),
        "allowed": metric_sum(text, "sluice_ratelimit_decisions_total", decision="allowed"),
        "limited": metric_sum(text, "sluice_ratelimit_decisions_total", decision="limited"),
        "fail_local": metric_sum(text, "sluice_ratelimit_fail_local_total"),
        "fail_closed": metric_sum(text, "sluice_ratelimit_fail_closed_total"),
        "deny_cache": metric_sum(text, "sluice_ratelimit_local_decisions_total",
                                 kind="deny_cache"),
        "lease": metric_sum(text, "sluice_ratelimit_local_decisions_total", kind="lease"),
        "leases": metric_sum(text, "sluice_ratelimit_leases_total"),
        "settled": metric_sum(text, "sluice_ratelimit_settlements_total"),
        # Exchanges whose client left before the response (logged 499): a
        # settled-cost request among them settles at its estimate.
        "aborted": metric_sum(text, "sluice_http_requests_total", code="499"),
    }


_connections: dict[int, Connection] = {}


def redis_connection(port: int) -> Connection:
    """One connection per Redis port, kept for every measurement."""
    if port not in _connections:
        _connections[port] = Connection(port, timeout=5.0)
    return _connections[port]


def script_stats(stats: dict[str, dict[str, float]]) -> tuple[float, float, float]:
    """(calls, usec, failed calls) of the scripts (EVALSHA and EVAL) in one INFO
    commandstats."""
    return tuple(sum(stats.get(c, {}).get(field, 0) for c in ("evalsha", "eval"))
                 for field in ("calls", "usec", "failed_calls"))


def script_totals(redis: list[Process]) -> tuple[float, float, float]:
    """script_stats() summed over `redis`."""
    figures = [script_stats(redis_connection(server.port).commandstats()) for server in redis]
    return tuple(sum(f[i] for f in figures) for i in range(3))


def wsbench_command(port: int, conns: int, size: int, duration: float,
                    pin_cpu: str | None) -> list[str]:
    cmd = [WSBENCH_BIN, "client", "--url", f"ws://127.0.0.1:{port}{WS_PATH}",
           "--connections", str(conns), "--size", str(size), "--seconds", f"{duration:g}"]
    return (["taskset", "-c", pin_cpu] if pin_cpu is not None else []) + cmd


def run_wsbench(cmd: list[str], duration: float) -> dict[str, float]:
    """The client's JSON figures. Errors (exit status 1) are returned in "errors" as
    long as some messages were echoed, for the report's checks; none echoed raises."""
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=duration + 60)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    figures = json.loads(lines[-1]) if lines else {}
    if result.returncode not in (0, 1) or not figures.get("messages"):
        raise RuntimeError(f"sluice-wsbench client failed ({result.returncode}): "
                           f"{' '.join(cmd)}\n{result.stdout}\n{result.stderr}")
    return figures


def websocket_counters(admin: int) -> dict[str, float]:
    text = metrics_text(admin)
    return {"tunnels": metric_sum(text, "sluice_websocket_tunnels_total"),
            "relayed": metric_sum(text, "sluice_websocket_bytes_total")}


def measure_ws(row: Row, conns: int, duration: float, pin_cpu: str | None) -> dict:
    """sluice-wsbench's client against a WebSocket row: `conns` connections each echoing
    one message of row.ws_size bytes at a time; the gateway's CPU per message and, for
    Sluice, its tunnel counters."""
    gw_pids = row.gateway.pids()
    before = websocket_counters(row.admin) if row.admin else None
    cpu0 = procfs.cpu_seconds(gw_pids)
    figures = run_wsbench(wsbench_command(row.port, conns, row.ws_size, duration, pin_cpu),
                          duration)
    cpu1 = procfs.cpu_seconds(gw_pids)
    n = max(1.0, figures["messages"])
    out = {
        "size": row.ws_size,
        "msgs_per_s": figures["msgs_per_s"], "mib_per_s": figures["mib_per_s"],
        "messages": figures["messages"],
        "p50": figures["p50_us"] / 1000, "p99": figures["p99_us"] / 1000,
        "p999": figures["p999_us"] / 1000, "errors": figures["errors"],
        "cpu_us": (cpu1 - cpu0) * 1e6 / n,
        "rss_mib": procfs.peak_rss_kib(gw_pids) / 1024,
    }
    if row.admin:
        d = {k: v - before[k] for k, v in websocket_counters(row.admin).items()}
        out["tunnels"] = d["tunnels"]
        out["relayed_per_msg"] = d["relayed"] / n
    return out


def h2load_row(row: Row, conns: int, duration: float, pin_cpu: str | None) -> dict:
    """h2load against an HTTP/2 row (h2_rows.py): requests, failures, rate, mean ms."""
    from http2 import h2load_command, run_h2load
    url = f"{row.scheme}://127.0.0.1:{row.port}{row.path}"
    return run_h2load(h2load_command(url, conns, duration, pin_cpu, row.wrk_args), duration)


def measure_h2(row: Row, conns: int, duration: float, pin_cpu: str | None) -> dict:
    """h2load against an HTTP/2 row: the same figures as wrk's rows but for the
    latency, of which h2load gives the mean only (p50 holds it; p99 and p99.9 none)."""
    gw_pids = row.gateway.pids()
    redis_pids = [pid for server in row.redis for pid in server.pids()]
    cpu0, rcpu0 = procfs.cpu_seconds(gw_pids), procfs.cpu_seconds(redis_pids)
    figures = h2load_row(row, conns, duration, pin_cpu)
    cpu1, rcpu1 = procfs.cpu_seconds(gw_pids), procfs.cpu_seconds(redis_pids)
    n = max(1.0, figures["requests"])
    out = {"rps": figures["rps"], "requests": figures["requests"], "p50": figures["mean_ms"],
           "p99": float("nan"), "p999": float("nan"), "non2xx": figures["failed"],
           "errors": 0.0, "cpu_us": (cpu1 - cpu0) * 1e6 / n,
           "rss_mib": procfs.peak_rss_kib(gw_pids) / 1024}
    if row.redis:
        out["redis_cpu_us"] = (rcpu1 - rcpu0) * 1e6 / n
    return out


def measure(row: Row, conns: int, duration: float, pin_cpu: str | None) -> dict:
    """wrk against the row; the gateway's and its Redis servers' CPU and counters.
    A WebSocket row: measure_ws(); an HTTP/2 row: measure_h2()."""
    if row.ws_size is not None:
        return measure_ws(row, conns, duration, pin_cpu)
    if row.h2:
        return measure_h2(row, conns, duration, pin_cpu)
    gw_pids = row.gateway.pids()
    redis_pids = [pid for server in row.redis for pid in server.pids()]
    for server in row.redis:
        redis_connection(server.port)("CONFIG", "RESETSTAT")
    before_metrics = sluice_counters(row.admin) if row.admin else None
    cpu0, rcpu0 = procfs.cpu_seconds(gw_pids), procfs.cpu_seconds(redis_pids)
    figures = run_wrk(wrk_command(row.port, conns, duration, pin_cpu, args=row.wrk_args,
                                  scheme=row.scheme, path=row.path or PATH), duration)
    cpu1, rcpu1 = procfs.cpu_seconds(gw_pids), procfs.cpu_seconds(redis_pids)
    n = max(1.0, figures["requests"])
    out = {
        "rps": figures["requests"] / (figures["duration_us"] / 1e6),
        "requests": figures["requests"],
        "p50": figures["p50_us"] / 1000, "p99": figures["p99_us"] / 1000,
        "p999": figures["p999_us"] / 1000,
        "non2xx": figures["non2xx"], "errors": figures["errors_socket"],
        "cpu_us": (cpu1 - cpu0) * 1e6 / n,
        "rss_mib": procfs.peak_rss_kib(gw_pids) / 1024,
    }
    if row.redis:
        calls, usec, failed = script_totals(row.redis)
        out.update({
            "redis_cpu_us": (rcpu1 - rcpu0) * 1e6 / n,
            "usec_per_call": usec / calls if calls else float("nan"),
            "script_us_per_req": usec / n,
            "calls_per_req": calls / n,
            "calls_per_denied": calls / max(1.0, figures["non2xx"]),
            "failed_calls": failed,
        })
    if row.admin:
        after = sluice_counters(row.admin)
        d = {k: after[k] - before_metrics[k] for k in after}
        out["writes_per_req"] = d["writes"] / n
        # Limit decisions (one per limit of each request), however many script calls
        # carried them: Sluice batches one-bucket decisions of a loop turn into one call.
        out["decisions_per_req"] = (d["allowed"] + d["limited"]) / n
        out["commands_per_req"] = d["commands"] / n
        out["fail_open"] = d["fail_open"]
        out["local_per_req"] = (d["deny_cache"] + d["lease"]) / n
        out["leases_per_req"] = d["leases"] / n
    return out


def median_of(samples: list[dict]) -> dict:
    keys = samples[0].keys()
    return {k: statistics.median(s[k] for s in samples) for k in keys}
