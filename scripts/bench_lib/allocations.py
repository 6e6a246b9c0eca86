"""scripts/bench --allocations: heap allocations and instructions per request,
counted, not timed, for the Sluice rows of the speed table.

Each row's gateway (the speed table's configuration, one worker) runs under
Valgrind's Callgrind with instrumentation off; after warm-up requests it is
switched on for a fixed number of keep-alive requests on 4 connections (the
keyed rows send X-API-Key bench-0 .. bench-9999 in turn, as wrk does in the
speed table), then off again. From Callgrind's call counts: calls to malloc,
calloc, realloc and the aligned allocators (operator new and the C libraries
all end there) per request, and the gateway's instructions per
request. Exact and independent of the machine's load; slow (Valgrind runs the
gateway about 50 times slower), so requests are few.

Needs valgrind (Debian's valgrind). Nothing here runs in the tests.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess

from measure import PATH, sluice_counters
from stack import ALLOW_ALL, DENY_ALL, LEASE_TOKENS, SLIDING_WINDOW_MS, Stack

KEYS = 10_000  # as the speed table's keyed rows
CONNECTIONS = 4
WARMUP = 200
VALGRIND_TIMEOUT_MS = 2000  # the gateways' redis.timeout_ms here (see allocations_run)
# Where every allocation ends (operator new and the C libraries' wrappers
# call these; aligned allocation, which Asio uses for its handlers, goes to
# memalign or aligned_alloc, which do not call malloc); a call between them
# (realloc of nothing calling malloc) is not counted twice.
ALLOCATORS = {"malloc", "calloc", "realloc", "memalign", "aligned_alloc", "posix_memalign"}

# Row number, what, sluice_config() keywords, whether requests carry API keys.
ROWS = [
    (4, "no limits", {"limit": None}, False),
    (5, "Redis token bucket per client IP (allowing all)", {"limit": ALLOW_ALL}, False),
    (11, "Redis token bucket per API key (allowing all)", {"limit": ALLOW_ALL, "key": "api_key"},
     True),
    (12, "429 from the denial cache (denying all)", {"limit": DENY_ALL}, False),
    (21, "YAML consumers (10,000), token bucket per API key",
     {"limit": ALLOW_ALL, "key": "api_key", "yaml_consumers": KEYS}, True),
    (13, "hot global key with leasing", {"limit": ALLOW_ALL, "key": "global",
                                          "lease_tokens": LEASE_TOKENS}, False),
    (14, "sliding window per API key", {"limit": ALLOW_ALL, "key": "api_key",
                                        "window_ms": SLIDING_WINDOW_MS}, True),
    (24, "day quota per API key", {"limit": ALLOW_ALL, "key": "api_key", "quota_period": "day"},
     True),
    (25, "concurrency limit per API key", {"limit": ALLOW_ALL, "key": "api_key",
                                           "concurrency": True}, True),
    (26, "cost settled from the response", {"limit": ALLOW_ALL, "key": "api_key",
                                            "settled": True}, True),
    (27, "access log on (gathered, 1000 ms)", {"limit": None, "access_log": True,
                                               "access_log_flush_ms": 1000}, False),
]


# The budget table's feature rows and their base rows.
FEATURES = [
    (5, 4, "the limiter's own work"),
    (13, 4, "a leased hot key, decided in the worker"),
    (21, 11, "YAML consumers"),
    (24, 11, "day quota"),
    (25, 11, "concurrency limit"),
    (26, 11, "settled cost"),
    (27, 4, "access log on"),
]


def send_requests(port: int, count: int, keyed: bool, first: int) -> int:
    """`count` GETs over CONNECTIONS keep-alive connections, one request in flight
    on each; the number answered with a status. Keys continue from `first`."""
    conns = [socket.create_connection(("127.0.0.1", port), timeout=60)
             for _ in range(CONNECTIONS)]
    answered, n = 0, first
    try:
        for _ in range(count // CONNECTIONS):
            for c in conns:
                key = f"X-API-Key: bench-{n % KEYS}\r\n" if keyed else ""
                n += 1
                c.sendall(f"GET {PATH} HTTP/1.1\r\nHost: bench\r\n{key}\r\n".encode())
            for c in conns:
                answered += read_response(c)
    finally:
        for c in conns:
            c.close()
    return answered


def read_response(c: socket.socket) -> int:
    buffer = b""
    while True:
        end = buffer.find(b"\r\n\r\n")
        if end >= 0:
            head = buffer[:end].decode("latin-1").split("\r\n")
            length = next((int(line.split(":", 1)[1]) for line in head[1:]
                           if line.lower().startswith("content-length:")), 0)
            while len(buffer) < end + 4 + length:
                buffer += c.recv(65536)
            return 1
        data = c.recv(65536)
        if not data:
            raise RuntimeError("the gateway closed a connection")
        buffer += data


def key_secret(workdir: str) -> str:
    """A key secret file for the consumers' rows (its path)."""
    path = os.path.join(workdir, "allocations-key-secret")
    with open(path, "w") as f:
        f.write("bench-consumer-store-secret-0123456789\n")
    os.chmod(path, 0o600)
    return path


def call_counts(path: str) -> tuple[int, int]:
    """(calls to the allocators, instructions) from a Callgrind output file."""
    names: dict[str, str] = {}
    calls = 0
    caller = target = None
    total = 0
    with open(path) as f:
        for line in f:
            m = re.match(r"(c?)fn=\((\d+)\)(?: (.*))?", line.strip())
            if m:
                if m.group(3):
                    names[m.group(2)] = m.group(3)
                if m.group(1):
                    target = names.get(m.group(2), "")
                else:
                    caller = names.get(m.group(2), "")
            elif line.startswith("calls=") and target is not None:
                if target in ALLOCATORS and caller not in ALLOCATORS:
                    calls += int(line.split("=", 1)[1].split()[0])
                target = None
            elif line.startswith("totals:") or line.startswith("summary:"):
                total = max(total, int(line.split()[1]))
    return calls, total


def allocations_run(stack: Stack, requests: int, wanted: list[int] | None, log) -> list[dict]:
    echo = stack.echo()
    redis = stack.redis("redis")
    deny_redis = stack.redis("redis-deny")
    results = []
    for num, what, config, keyed in ROWS:
        if wanted and num not in wanted:
            continue
        out = os.path.join(stack.workdir, f"callgrind.row{num}")
        options = dict(stack.options)
        stack.options["wrapper"] = ("valgrind", "--tool=callgrind", "--instr-atstart=no",
                                    f"--callgrind-out-file={out}")
        # Valgrind slows the gateway some fifty times: a Redis answer would
        # often miss the usual 50 ms, fail open and open the breaker, and the
        # row would count a path it does not take at speed. The timeout's
        # length changes no instruction counted.
        slow = {**config, "redis": {"timeout_ms": VALGRIND_TIMEOUT_MS, **config.get("redis", {})}}
        if "yaml_consumers" in slow:  # row 21, as the speed table configures it
            slow["api_keys"] = {"consumers": [{"key": f"bench-{i}", "plan": "free", "id": f"c{i}"}
                                              for i in range(slow.pop("yaml_consumers"))]}
            slow["redis"]["key_secret_file"] = key_secret(stack.workdir)
        try:
            gw = stack.sluice(f"sluice-row{num}", upstream=echo.port,
                              redis_port=(deny_redis if num == 12 else redis).port, **slow)
        finally:
            stack.options = options
        if config.get("limit"):
            stack.wait_redis(gw)
        send_requests(gw.port, WARMUP, keyed, 0)
        before = sluice_counters(gw.admin_port)
        subprocess.run(["callgrind_control", "-i", "on", str(gw.pid)], check=True,
                       capture_output=True)
        answered = send_requests(gw.port, requests, keyed, WARMUP)
        subprocess.run(["callgrind_control", "-i", "off", str(gw.pid)], check=True,
                       capture_output=True)
        # Should a Redis answer still miss the gateway's timeout: a request that
        # failed open never took the limiter's path, and is not counted as if it
        # had.
        failed_open = sluice_counters(gw.admin_port)["fail_open"] - before["fail_open"]
        gw.stop()  # Callgrind writes its file at exit
        allocs, instructions = call_counts(out)
        results.append({"row": num, "what": what, "requests": answered,
                        "allocs": allocs / answered, "instructions": instructions / answered,
                        "failed_open": failed_open})
        log(f"row {num}: {allocs / answered:.1f} allocations, "
            f"{instructions / answered:,.0f} instructions per request"
            + (f" ({failed_open:,.0f} requests failed open: run it again)" if failed_open else ""))
    return results


def allocations_report(results: list[dict], info: dict, started, command: str) -> str:
    lines = [f"# Sluice allocations and instructions per request ({started:%Y-%m-%d %H:%M})", "",
             f"- Machine: {info.get('cpu', '?')}; counted under Valgrind's Callgrind, one worker, "
             f"{CONNECTIONS} keep-alive connections, {WARMUP} warm-up requests first.",
             f"- Command: `{command}`.", "",
             "| row | setup | requests | allocations per request | instructions per request |",
             "|---|---|---:|---:|---:|"]
    base = {r["row"]: r for r in results}
    for r in results:
        lines.append(f"| {r['row']} | {r['what']} | {r['requests']:,} | {r['allocs']:.1f} | "
                     f"{r['instructions']:,.0f} |")
    deltas = [(row, of, what) for row, of, what in FEATURES if row in base and of in base]
    if deltas:
        lines += ["", "Each feature's own cost, counted: its row less its base row (the rows of "
                  "the budget table).", "",
                  "| row | base | what | allocations | instructions |", "|---|---|---|---:|---:|"]
        for row, of, what in deltas:
            lines.append(f"| {row} | {of} | {what} | "
                         f"{base[row]['allocs'] - base[of]['allocs']:+.1f} | "
                         f"{base[row]['instructions'] - base[of]['instructions']:+,.0f} |")
    failed = [f"row {r['row']} ({r['failed_open']:,.0f})" for r in results if r["failed_open"]]
    if failed:
        lines += ["", "Requests that failed open while counted (Redis answered after the "
                  "gateway's timeout under Valgrind; those rows' figures are too low, run them "
                  "again): " + ", ".join(failed) + "."]
    return "\n".join(lines) + "\n"
