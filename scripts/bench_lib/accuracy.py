"""scripts/bench --accuracy: three Sluice instances on one Redis, wrk against all
three at once on one key, then on 1000 keys, then on one `global` key without and
with lease_tokens; the allowed requests against the ideal C + R*T, with Redis's
clock at both ends of the window. Last, a minute quota on one key, the load inside
one minute: exactly C admitted; a settled cost (the quota counts the real costs
to the unit) and a concurrency limit (the echo never holds more than C).

The per-key cases end the window at each key's last debit (the timestamp in its
bucket). The global cases cannot: a lease's refund after the load moves that
timestamp. Their window ends at the last sample of the instances' allowed counters
taken while every wrk still ran (samples every SAMPLE_PERIOD, also the data of the
allowed-rate chart), so tokens still held in leases then count as not admitted.
"""

from __future__ import annotations

import concurrent.futures
import json
import random
import socket
import struct
import subprocess
import time

from measure import (KEYS_LUA, metric_sum, metrics_text, parse_bench_lines, script_stats,
                     sluice_counters, wrk_command)
from stack import Stack
from testkit.http import request
from testkit.model_server import ModelServer
from testkit.processes import faketime_env
from testkit.resp import BUSY_SCRIPT, Connection

SAMPLE_PERIOD = 0.1  # seconds between two samples of the global cases
SAMPLE_MARGIN = 0.3  # seconds before wrk's end the samples stop (every wrk still runs)
LEASE_TOKENS = 50
BUCKETS = "{}bench:*"  # the buckets of limit "bench" under a key prefix


def start_wrks(commands: list[list[str]]) -> list[subprocess.Popen]:
    """wrk runs started at once, their output piped."""
    return [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for cmd in commands]


def wrk_outputs(wrks: list[subprocess.Popen], duration: float) -> list[dict]:
    """Each wrk's BENCH figures once it has ended; RuntimeError for a failed one."""
    outputs = []
    for p in wrks:
        out, err = p.communicate(timeout=duration + 60)
        outputs.append(parse_bench_lines(out))
        if p.returncode != 0 or "requests" not in outputs[-1]:
            raise RuntimeError(f"wrk failed: {out}\n{err}")
    return outputs


def bucket_stamps(redis: Connection, pattern: str) -> dict[bytes, tuple[float, float]]:
    """key -> (tokens, timestamp_us) of every bucket matching `pattern`."""
    out, cursor = {}, b"0"
    for _ in range(100_000):
        cursor, keys = redis("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
        for k in keys:
            v = redis("GET", k)
            if v and len(v) == 16:
                out[k] = struct.unpack("<dd", v)
        if cursor == b"0":
            break
    return out


def allowed_sample(redis: Connection, gateways, pool) -> tuple[int, int, float]:
    """(Redis TIME before, after, allowed decisions summed over the gateways), the
    gateways read at once (`pool`: a thread pool) to keep the sample short."""
    t0 = redis.time_us()
    counters = pool.map(lambda g: sluice_counters(g.admin_port)["allowed"], gateways)
    allowed = sum(counters)
    return t0, redis.time_us(), allowed


def accuracy_case(stack: Stack, redis: Connection, up: int, redis_port: int, label: str,
                  capacity: float, rate: float, nkeys: int, duration: float, conns: int,
                  pin_cpu: str | None, lease_tokens: int | None = None) -> dict:
    """nkeys = 0: one limit with `key: global` (the X-API-Key is then ignored)."""
    run = f"{int(time.time() * 1000) % 10**9}"
    prefix = f"acc{run}:"
    windowed = nkeys == 0
    gateways = [stack.sluice(f"sluice-acc{run}-{i}", upstream=up, redis_port=redis_port,
                             limit=(capacity, rate), key="global" if windowed else "api_key",
                             key_prefix=prefix, lease_tokens=lease_tokens)
                for i in range(3)]
    nkeys = max(1, nkeys)
    try:
        for gateway in gateways:
            stack.wait_redis(gateway)
        before = [sluice_counters(g.admin_port) for g in gateways]
        redis("FLUSHALL")  # this Redis is ours: no bucket marks "no request decided yet"
        redis("CONFIG", "RESETSTAT")
        start_us = all_keys_us = redis.time_us()
        launched = time.monotonic()
        wrks = start_wrks([wrk_command(g.port, conns, duration, pin_cpu, script=KEYS_LUA,
                                       args=[run, str(nkeys), str(i * nkeys // 3)])
                           for i, g in enumerate(gateways)])
        # The window starts at the last moment (Redis TIME) no bucket existed yet: the
        # first decision comes after it. Polled, as wrk takes a while to start.
        # Polling goes on until every key has its bucket: that bounds when each key's
        # first request came, hence how far the ideal below may overestimate.
        # Only the limit's buckets count (an instance may keep other keys there).
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            found, now = redis.pipeline(("KEYS", BUCKETS.format(prefix)), ("TIME",))
            size = len(found)
            now_us = int(now[0]) * 1_000_000 + int(now[1])
            if not size:
                start_us = now_us
            if size >= nkeys:
                all_keys_us = now_us
                break
        samples = []
        with concurrent.futures.ThreadPoolExecutor(len(gateways)) as pool:
            while windowed and time.monotonic() < launched + round(duration) - SAMPLE_MARGIN:
                samples.append(allowed_sample(redis, gateways, pool))
                time.sleep(max(0.0, SAMPLE_PERIOD - (samples[-1][1] - samples[-1][0]) / 1e6))
        outputs = wrk_outputs(wrks, duration)
        end_us = redis.time_us()
        script_calls = script_stats(redis.commandstats())[0]
        buckets = bucket_stamps(redis, BUCKETS.format(prefix))
        after = [sluice_counters(g.admin_port) for g in gateways]
    finally:
        for gateway in gateways:
            stack.stop(gateway)
    allowed = sum(a["allowed"] - b["allowed"] for a, b in zip(after, before))
    limited = sum(a["limited"] - b["limited"] for a, b in zip(after, before))
    fail_open = sum(a["fail_open"] - b["fail_open"] for a, b in zip(after, before))
    requests = sum(o["requests"] for o in outputs)
    ok_responses = sum(o["requests"] - o["non2xx"] - o["errors_socket"] for o in outputs)
    # Ideal per key: C + R*T, T from the load start to the key's last debit
    # (Redis TIME both); a key never seen counts the whole window.
    windows = [(ts - start_us) / 1e6 for _, ts in buckets.values()]
    windows += [(end_us - start_us) / 1e6] * max(0, nkeys - len(buckets))
    ideal = sum(capacity + rate * max(0.0, t) for t in windows)
    load_rate = requests / duration
    # Each key's first request came between start_us and all_keys_us: the ideal may count
    # up to R * that spread per key too many.
    spread = max(0, all_keys_us - start_us) / 1e6
    # ... and the fractions of a token left in each bucket after its last debit were
    # refilled but never asked for.
    leftover = sum(tokens for tokens, _ in buckets.values())
    skew = rate * spread * nkeys + leftover
    window = None
    if windowed:
        # The window ends at the last sample: its count read between its two TIMEs.
        allowed = samples[-1][2] - sum(b["allowed"] for b in before)
        read_s = (samples[-1][1] - samples[-1][0]) / 1e6
        ideal = capacity + rate * (samples[-1][1] - start_us) / 1e6
        skew = rate * (spread + read_s)
        window = (samples[-1][1] - start_us) / 1e6
    return {
        "label": label, "C": capacity, "R": rate, "keys": nkeys, "T": duration,
        "requests": requests, "allowed": allowed, "limited": limited, "ok": ok_responses,
        "fail_open": fail_open, "ideal": ideal, "buckets": len(buckets),
        "error_pct": 100 * (allowed - ideal) / ideal, "skew_pct": 100 * skew / ideal,
        "load_rate": load_rate, "spread_ms": spread * 1000, "leftover": leftover,
        "lease_tokens": lease_tokens, "windowed": windowed, "window_s": window,
        "script_calls": script_calls, "leases": sum(a["leases"] - b["leases"]
                                                    for a, b in zip(after, before)),
        "local": sum(a["lease"] + a["deny_cache"] - b["lease"] - b["deny_cache"]
                     for a, b in zip(after, before)),
        # Allowed so far against seconds since the start, from 0 at the start.
        "series": [(0.0, 0.0)] + [((t0 + t1) / 2e6 - start_us / 1e6,
                                   allowed - sum(b["allowed"] for b in before))
                                  for t0, t1, allowed in samples],
    }


def exact_case(label: str, capacity: float, duration: float, outputs: list[dict],
               measured: float, ideal: float, limited: float, fail_open: float,
               buckets: int) -> dict:
    """A case whose figure must equal its ideal exactly, in the per-key table's shape."""
    requests = sum(o["requests"] for o in outputs)
    return {
        "label": label, "C": capacity, "R": 0, "keys": 1, "T": duration, "requests": requests,
        "allowed": measured, "ideal": float(ideal), "limited": limited,
        "ok": sum(o["requests"] - o["non2xx"] - o["errors_socket"] for o in outputs),
        "fail_open": fail_open, "buckets": buckets,
        "error_pct": 100 * (measured - ideal) / ideal if ideal else 0.0, "skew_pct": 0.0,
        "load_rate": requests / duration, "spread_ms": 0.0, "leftover": 0.0,
        "lease_tokens": None, "windowed": False, "window_s": None, "script_calls": 0,
        "leases": 0, "local": 0, "series": [],
    }


def quota_case(stack: Stack, redis: Connection, up: int, redis_port: int, capacity: int,
               duration: float, conns: int, pin_cpu: str | None,
               clocks: tuple = (None, None, None)) -> dict:
    """A minute quota of `capacity` on one key, three instances hammering it within
    one minute of Redis's clock: exactly `capacity` may be admitted, never more.
    `clocks`: each instance's faketime offset (None: the right time)."""
    run = f"{int(time.time() * 1000) % 10**9}"
    prefix = f"accq{run}:"
    gateways = [stack.sluice(f"sluice-accq{run}-{i}", upstream=up, redis_port=redis_port,
                             limit=(capacity, 1), key="api_key", key_prefix=prefix,
                             quota_period="minute", clock=clock)
                for i, clock in enumerate(clocks)]
    try:
        for gateway in gateways:
            stack.wait_redis(gateway)
        before = [sluice_counters(g.admin_port) for g in gateways]
        # The whole load inside one minute: wait (polling Redis's clock) for the next
        # minute when this one has too little left.
        deadline = time.monotonic() + 70
        while time.monotonic() < deadline:
            left = 60 - (redis.time_us() / 1e6) % 60
            if left > duration + 3 and left < 59.5:
                break
            time.sleep(0.1)
        wrks = start_wrks([wrk_command(g.port, conns, duration, pin_cpu, script=KEYS_LUA,
                                       args=[run, "1", "0"]) for g in gateways])
        outputs = wrk_outputs(wrks, duration)
        stored = [redis("GET", k) for k in redis("KEYS", BUCKETS.format(prefix))]
        after = [sluice_counters(g.admin_port) for g in gateways]
    finally:
        for gateway in gateways:
            stack.stop(gateway)
    used = [struct.unpack("<dd", v)[1] for v in stored if v and len(v) == 16]
    allowed = sum(a["allowed"] - b["allowed"] for a, b in zip(after, before))
    skewed = [c for c in clocks if c]
    label = ("minute quota, one key, 64 connections per instance" if not skewed else
             f"fault: clocks {', '.join(c or '0' for c in clocks)} on one minute quota")
    return exact_case(
        f"{label} (Redis counted {used[0] if used else 0:,.0f})", capacity, duration,
        outputs, allowed, capacity,
        sum(a["limited"] - b["limited"] for a, b in zip(after, before)),
        sum(a["fail_open"] - b["fail_open"] for a, b in zip(after, before)), len(used))


def stall_redis(redis_port: int, duration: float, stalls: int = 3, stall_s: float = 0.4):
    """While a load of `duration` seconds runs: Redis busy (one script) for
    `stall_s` seconds, `stalls` times, evenly spread; the decisions queued
    behind each stall time out and Redis runs them late."""
    conn = Connection(redis_port, timeout=stall_s + 5)
    gap = duration / (stalls + 1)
    for _ in range(stalls):
        time.sleep(gap - stall_s)
        conn("EVAL", BUSY_SCRIPT, "0", str(int(stall_s * 1e6)))


def settled_and_concurrency_cases(stack: Stack, redis: Connection, echo, redis_port: int,
                                  duration: float, conns: int, pin_cpu: str | None,
                                  stalled: bool = False) -> list[dict]:
    """Two cases on three instances at once, one after the other:
    - settled: a monthly quota on one key, each request's cost (500) settled from
      the response, sluice-echo reporting 120: once every settlement is in, the
      quota's count must be 120 per admitted request, to the unit;
    - concurrency: a concurrency limit of C slots on one key, every request held
      20 ms by the echo (/__slow/20): the echo must never hold more than C at once,
      and no slot may be left once the load has ended.
    stalled: Redis stalls three times during the load (stall_redis); the requests
    whose decision times out go unlimited (fail open), and Redis running their
    calls late must change nothing."""
    results = []
    prefix_label = "fault: Redis stalls 3 x 0.4 s, " if stalled else ""
    for label, kind in ((f"{prefix_label}settled cost, one key", "settled"),
                        (f"{prefix_label}concurrency C=8, one key, held 20 ms", "concurrency")):
        run = f"{int(time.time() * 1000) % 10**9}"
        prefix = f"acc{kind[0]}{run}:"
        capacity = 8 if kind == "concurrency" else 1_000_000_000
        gateways = [stack.sluice(f"sluice-acc{kind[0]}{run}-{i}", upstream=echo.port,
                                 redis_port=redis_port, limit=(capacity, 1), key="api_key",
                                 key_prefix=prefix, settled=kind == "settled",
                                 quota_period="month" if kind == "settled" else None,
                                 concurrency=kind == "concurrency")
                    for i in range(3)]
        try:
            for gateway in gateways:
                stack.wait_redis(gateway)
            before = [sluice_counters(g.admin_port) for g in gateways]
            path = "/__slow/20" if kind == "concurrency" else "/"
            wrks = start_wrks([wrk_command(g.port, conns, duration, pin_cpu, script=KEYS_LUA,
                                           path=path, args=[run, "1", "0"]) for g in gateways])
            started = time.monotonic()
            if stalled:
                stall_redis(redis_port, duration)
            # The echo's peak while every load still runs: once one wrk stops, its
            # requests in flight are cut, their slots come back at once, and the
            # echo (which never hears of it) counts them until their 20 ms end.
            time.sleep(max(0.0, duration - 0.5 - (time.monotonic() - started)))
            running_peak = echo.stats().get("slow_peak", 0)
            outputs = wrk_outputs(wrks, duration)

            def delta(name):
                now = [sluice_counters(g.admin_port) for g in gateways]
                return sum(a[name] - b[name] for a, b in zip(now, before))

            allowed = delta("allowed")
            limited = delta("limited")
            aborted = delta("aborted")
            deadline = time.monotonic() + 15
            while kind == "settled" and delta("settled") < allowed and time.monotonic() < deadline:
                time.sleep(0.1)
            keys = redis("KEYS", BUCKETS.format(prefix))
            stored = [redis("GET", k) for k in keys] if kind == "settled" else []
            used = sum(struct.unpack("<dd", v)[1] for v in stored if v and len(v) == 16)
            peak = running_peak
            # Slots still held once every exchange has ended (the releases are in
            # within a turn of each worker's loop; a phantom slot would stay).
            deadline = time.monotonic() + 5
            left = sum(redis("ZCARD", k) for k in keys) if kind == "concurrency" else 0
            while left and time.monotonic() < deadline:
                time.sleep(0.1)
                left = sum(redis("ZCARD", k) for k in keys)
            fail_open = delta("fail_open")
        finally:
            for gateway in gateways:
                stack.stop(gateway)
        if kind == "settled":
            # A request whose client left before its response (wrk's last
            # ones, cut when it stops) has no usage report: it settles at its
            # estimate, 500.
            ideal, measured = (allowed - aborted) * 120 + aborted * 500, used
            text = (f"{label}: quota counted {used:,.0f}, 120 x {allowed - aborted:,.0f} "
                    f"admitted and answered + 500 x {aborted:,.0f} whose client left first")
        elif stalled:
            # Fail-open requests are not limited, so the echo may hold more than C
            # during a stall; what must hold is that no slot outlives the load.
            ideal, measured = 0, left
            text = (f"{label}: slots left after the load {left} (expected 0); the echo held "
                    f"at most {peak} at once, {fail_open:,.0f} requests unlimited (fail open)")
        else:
            ideal, measured = capacity, peak
            text = f"{label}: the echo held at most {peak} at once, {left} slots left after"
        results.append(exact_case(text, capacity if kind == "concurrency" else 0, duration,
                                  outputs, measured, ideal, limited, fail_open, len(keys)))
    return results


def abort_storm_case(stack: Stack, redis: Connection, echo, redis_port: int, rounds: int = 5,
                     capacity: int = 8) -> dict:
    """A concurrency limit of C slots on one key, three instances, an upstream that
    holds each request 3 s (/__slow/3000). Each round, 3 x C clients send a request
    and leave 100 ms later (an abort storm); then C well-behaved clients ask at
    once (/__slow/20). Every slot an aborted request took must be back by then:
    all C are admitted, C per round expected, and no slot is left after the run."""
    run = f"{int(time.time() * 1000) % 10**9}"
    prefix = f"acca{run}:"
    gateways = [stack.sluice(f"sluice-acca{run}-{i}", upstream=echo.port, redis_port=redis_port,
                             limit=(capacity, 1), key="api_key", key_prefix=prefix,
                             concurrency=True)
                for i in range(3)]
    key = f"acc-{run}-0"

    def leave_early(port: int):
        with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
            sock.sendall(f"GET /__slow/3000 HTTP/1.1\r\nHost: bench\r\nX-API-Key: {key}"
                         "\r\n\r\n".encode())
            time.sleep(0.1)

    def well_behaved(port: int) -> int:
        return request(port, "GET", "/__slow/20", headers={"X-API-Key": key}, timeout=10)[0]

    admitted, aborted, started, slowest_ms = 0, 0, time.monotonic(), 0.0
    try:
        for gateway in gateways:
            stack.wait_redis(gateway)
        before = [sluice_counters(g.admin_port) for g in gateways]
        with concurrent.futures.ThreadPoolExecutor(max_workers=4 * capacity) as pool:
            for _ in range(rounds):
                list(pool.map(leave_early, [g.port for g in gateways] * capacity))
                aborted += 3 * capacity
                # The slots come back as the gateways notice the closes: polled,
                # at most a second (the upstream still holds the requests 3 s).
                t0 = time.monotonic()
                while (time.monotonic() - t0 < 1.0 and
                       sum(redis("ZCOUNT", k, f"({redis.time_us()}", "+inf")
                           for k in redis("KEYS", BUCKETS.format(prefix)))):
                    time.sleep(0.005)
                slowest_ms = max(slowest_ms, (time.monotonic() - t0) * 1000)
                statuses = list(pool.map(well_behaved,
                                         [gateways[i % 3].port for i in range(capacity)]))
                admitted += statuses.count(200)
        keys = redis("KEYS", BUCKETS.format(prefix))
        deadline = time.monotonic() + 5
        left = sum(redis("ZCARD", k) for k in keys)
        while left and time.monotonic() < deadline:
            time.sleep(0.1)
            left = sum(redis("ZCARD", k) for k in keys)
        after = [sluice_counters(g.admin_port) for g in gateways]
    finally:
        for gateway in gateways:
            stack.stop(gateway)
    limited = sum(a["limited"] - b["limited"] for a, b in zip(after, before))
    duration = time.monotonic() - started
    requests = aborted + rounds * capacity
    outputs = [{"requests": requests, "non2xx": rounds * capacity - admitted,
                "errors_socket": aborted}]
    return exact_case(
        f"fault: abort storm, concurrency C={capacity}: {rounds} rounds of {aborted // rounds} "
        f"clients leaving after 100 ms (upstream holds 3 s), then C asking: {admitted} of "
        f"{rounds * capacity} admitted, {left} slots left after; the slots were back "
        f"{slowest_ms:.0f} ms after the closes at most", capacity, duration, outputs,
        admitted, rounds * capacity, limited, 0, len(keys))


def streamed_usage_case(stack: Stack, redis: Connection, redis_port: int,
                        completions: int = 2000, workers: int = 24) -> dict:
    """Three instances on one Redis in front of the test kit's model server:
    `completions` streamed chat completions (stream_options.include_usage) with
    random usage (1-400 completion tokens), spread over the three, each admitted at
    500 and settled from the usage in its stream's last event. Once every
    settlement is in, the monthly quota's count must be the sum of the usage the
    model server reported, to the unit."""
    model = ModelServer(seed=46, keep_requests=False)
    run = f"{int(time.time() * 1000) % 10**9}"
    prefix = f"accu{run}:"
    route = {"cost": 500, "cost_from_response": {"body": "usage.total_tokens",
                                                 "statuses": ["200-299"]}}
    gateways = [stack.sluice(f"sluice-accu{run}-{i}", upstream=model.port,
                             redis_port=redis_port, limit=(1_000_000_000, 1), key="api_key",
                             key_prefix=prefix, quota_period="month", route=route)
                for i in range(3)]
    body = json.dumps({"model": "bench", "stream": True,
                       "stream_options": {"include_usage": True},
                       "messages": [{"role": "user", "content": "Hello"}]}).encode()
    tokens = random.Random(46)
    plan = [(gateways[i % 3].port, tokens.randint(1, 400)) for i in range(completions)]

    def one(item):
        port, n = item
        status, _, payload = request(port, "POST", "/v1/chat/completions", body=body,
                                     headers={"X-API-Key": "accuracy", "X-Model-Tokens": str(n),
                                              "X-Model-Events": "4",
                                              "Content-Type": "application/json"})
        return status, len(payload)

    try:
        for gateway in gateways:
            stack.wait_redis(gateway)
        started = time.monotonic()
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            answers = list(pool.map(one, plan))
        elapsed = time.monotonic() - started

        def settled():
            return sum(sluice_counters(g.admin_port)["settled"] for g in gateways)

        deadline = time.monotonic() + 15
        while settled() < completions and time.monotonic() < deadline:
            time.sleep(0.1)
        keys = redis("KEYS", BUCKETS.format(prefix))
        stored = [redis("GET", k) for k in keys]
        used = sum(struct.unpack("<dd", v)[1] for v in stored if v and len(v) == 16)
        reported = model.reported_sum()
        found = sum(metric_sum(metrics_text(g.admin_port), "sluice_ratelimit_body_usage_total",
                               result="found") for g in gateways)
    finally:
        for gateway in gateways:
            stack.stop(gateway)
        model.stop()
    ok = sum(1 for status, _ in answers if status == 200)
    others = sorted({status for status, _ in answers if status != 200})
    text = (f"streamed completions, usage read from the stream: quota counted {used:,.0f}, "
            f"the model server reported {reported:,.0f} over {ok:,} streams "
            f"({found:,.0f} usages found)" +
            (f"; {completions - ok} answered {others}, not counted" if others else ""))
    result = exact_case(text, 0, elapsed, [{"requests": completions, "non2xx": completions - ok,
                                            "errors_socket": 0}], used, reported, 0, 0,
                        len(keys))
    return result


def accuracy(opts, stack: Stack, pin_cpu: str | None, log) -> list[dict]:
    """Both cases' results (see accuracy_case), one after the other on one Redis."""
    echo = stack.echo()
    up = echo.port
    redis_port = stack.redis("redis").port
    redis = Connection(redis_port, timeout=5.0)
    duration = 3.0 if opts.quick else opts.accuracy_duration
    cases = [
        ("one key", 500, 200, 1, None),
        ("1000 keys", 20, 1, 1000, None),
        ("one global key", 500, 1000, 0, None),
        (f"one global key, lease_tokens {LEASE_TOKENS}", 500, 1000, 0, LEASE_TOKENS),
    ]
    results = []
    for label, c, r, k, lease in cases:
        log(f"accuracy: {label}, C={c}, R={r}/s, {duration:g} s, 3 instances")
        results.append(accuracy_case(stack, redis, up, redis_port, label, c, r, k, duration,
                                     opts.accuracy_connections, pin_cpu, lease))
    log(f"accuracy: a minute quota, C=2000, {duration:g} s within one minute, "
        "3 instances x 64 connections")
    results.append(quota_case(stack, redis, up, redis_port, 2000, duration, 64, pin_cpu))
    log("accuracy: cost settled from the response, and a concurrency limit of 8, "
        "3 instances x 64 connections")
    results += settled_and_concurrency_cases(stack, redis, echo, redis_port, duration, 64,
                                             pin_cpu)
    # Faults: one instance's clock wrong (two minutes ahead, a day behind), and Redis
    # stalling under load. Each must still admit exactly what Redis counts.
    log("accuracy: 2,000 streamed completions, usage read from the stream, 3 instances")
    results.append(streamed_usage_case(stack, redis, redis_port,
                                       completions=300 if opts.quick else 2000))
    log("accuracy: fault rows: skewed clocks, Redis stalls")
    if faketime_env("+0"):
        results.append(quota_case(stack, redis, up, redis_port, 2000, duration, 64, pin_cpu,
                                  clocks=(None, "+2m", "-1d")))
    else:
        log("accuracy: libfaketime not installed (Debian's faketime): no skewed-clock row")
    results += settled_and_concurrency_cases(stack, redis, echo, redis_port,
                                             max(duration, 2.0), 64, pin_cpu, stalled=True)
    log("accuracy: fault row: an abort storm on a concurrency limit")
    results.append(abort_storm_case(stack, redis, echo, redis_port))
    return results
