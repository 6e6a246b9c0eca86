"""scripts/bench --outage: Redis down for OUTAGE seconds under load, once per
on_redis_failure mode (open, local, closed). Three Sluice instances (local.fleet_size
3) on one Redis, one route with one `global` limit of CAPACITY tokens refilling RATE/s,
under steady load from failover_load.Driver (well above the limit). After STEADY
seconds the Redis is SIGKILLed; OUTAGE seconds later a new one starts on the same
port (empty: the buckets are gone); the load goes on for TAIL seconds after Redis
decides again (no instance counted a fail-open, -local or -closed decision for
QUIET seconds). The requests admitted while Redis was down are
set against C + R*T. Every server is stopped by PID.
"""

from __future__ import annotations

import collections
import signal
import time

from failover_load import Driver
from measure import sluice_counters
from stack import START_TIMEOUT, Stack, redis_state
from testkit.processes import wait_until

MODES = ("open", "local", "closed")
CAPACITY, RATE = 200, 200  # the global limit: well below what the load offers
INSTANCES = 3
STEADY = 3.0  # seconds of load before the kill
OUTAGE = 10.0  # seconds Redis is down
TAIL = 3.0  # seconds of load after Redis decides again
QUIET = 0.2  # seconds without a decision made without Redis: Redis decides again
COUNTERS = ("allowed", "limited", "fail_open", "fail_closed", "fail_local")


def outage_run(stack: Stack, mode: str, clients: int, log, outage: float = OUTAGE) -> dict:
    """One measured outage with on_redis_failure `mode`; returns analyse()'s figures."""
    echo = stack.echo()
    redis = stack.redis(f"redis-{mode}")
    port = redis.port
    gateways = [stack.sluice(f"sluice-outage-{mode}-{i}", upstream=echo.port, redis_port=port,
                             limit=(CAPACITY, RATE), key="global", key_prefix="outage:",
                             local={"fleet_size": INSTANCES}, on_redis_failure=mode)
                for i in range(INSTANCES)]
    for gateway in gateways:
        stack.wait_redis(gateway)
    before = [sluice_counters(g.admin_port) for g in gateways]
    keys = [f"outage-{i}" for i in range(clients)]  # one per client; the limit is global
    driver = Driver([g.port for g in gateways], keys, [], 0, clients=clients).start()
    try:
        time.sleep(STEADY)  # steady load before the kill (a duration, not a wait)
        log(f"outage {mode}: {len(driver.answers)} answers so far; SIGKILL of Redis")
        t_down = time.monotonic()
        redis.signal(signal.SIGKILL)
        stack.stop(redis)
        time.sleep(outage)  # the outage itself (a duration)
        stack.redis(f"redis-{mode}-back", port=port)
        t_up = time.monotonic()
        wait_until(lambda: all(redis_state(g.admin_port) == "ready" for g in gateways),
                   START_TIMEOUT, interval=0.02, message=f"outage {mode}: every Sluice ready")
        t_ready = time.monotonic()
        t_exact = wait_decided(gateways)
        log(f"outage {mode}: every instance ready {t_ready - t_up:.2f} s, deciding through "
            f"Redis {t_exact - t_up:.2f} s after the restart")
        time.sleep(TAIL)  # load after the recovery (a duration)
    finally:
        driver.stop()
    after = [sluice_counters(g.admin_port) for g in gateways]
    result = analyse(driver, t_down, t_up, t_exact)
    result.update(mode=mode, clients=clients, outage=outage, ready_s=t_ready - t_up, counters={
        k: sum(a[k] - b[k] for a, b in zip(after, before)) for k in COUNTERS})
    return result


def failed_decisions(gateways) -> float:
    counters = [sluice_counters(g.admin_port) for g in gateways]
    return sum(c["fail_open"] + c["fail_local"] + c["fail_closed"] for c in counters)


def wait_decided(gateways) -> float:
    """The moment from which no instance counted a decision without Redis for
    QUIET seconds (under load, so Redis decides every request again)."""
    deadline = time.monotonic() + 2 * START_TIMEOUT
    since, count = time.monotonic(), failed_decisions(gateways)
    while time.monotonic() < deadline:
        time.sleep(QUIET)  # the quiet period itself, polled again after it
        now = failed_decisions(gateways)
        if now == count:
            return since
        since, count = time.monotonic(), now
    raise RuntimeError(f"Sluice still decided without Redis {2 * START_TIMEOUT} s after "
                       "the restart")


def phase(answers, start: float, end: float) -> dict:
    """The answers sent in [start, end): how many, by status, admitted (200)."""
    sent = [a for a in answers if start <= a.sent < end]
    statuses = collections.Counter(a.status for a in sent)
    return {"seconds": end - start, "requests": len(sent), "admitted": statuses.get(200, 0),
            "statuses": dict(statuses), "ideal": CAPACITY + RATE * (end - start),
            "undecided": sum(a.fail_open for a in sent),
            "max_ms": 1000 * max((a.latency for a in sent), default=0)}


def analyse(driver: Driver, t_down: float, t_up: float, t_exact: float) -> dict:
    """Before the kill (exact limiting from the load's start), while Redis was down
    (kill to restart), the reconnect (restart until Redis decides again) and after."""
    answers = driver.answers
    start, end = answers[0].sent, answers[-1].sent + 1e-9
    return {"before": phase(answers, start, t_down), "down": phase(answers, t_down, t_up),
            "reconnect": phase(answers, t_up, t_exact), "after": phase(answers, t_exact, end),
            "errors": driver.errors}


def run_outages(opts, stack: Stack, log) -> list[dict]:
    """--outage: each mode on servers of its own, stopped after it."""
    modes = MODES if opts.outage == "all" else (opts.outage,)
    results = []
    for mode in modes:
        log(f"outage: on_redis_failure {mode}, Redis down {opts.outage_seconds:g} s")
        try:
            results.append(outage_run(stack, mode, opts.failover_clients, log,
                                      opts.outage_seconds))
        finally:
            stack.stop_all()
    return results
