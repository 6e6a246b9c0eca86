"""scripts/bench --failover cluster|sentinel: how Sluice rides through a Redis
failover. Two Sluice instances (one route per API key allowing all, one probe
route of capacity PROBE_CAPACITY; on_redis_failure: open; the default
timeout_ms 50) in front of a real Redis Cluster (3 primaries + 3 replicas,
cluster-node-timeout 1000) or Sentinel set (1 primary, 1 replica, 3 sentinels,
down-after-milliseconds 1000), under steady load from failover_load.Driver. After
STEADY seconds: cluster: SIGKILL of one primary; sentinel-failover: SENTINEL
FAILOVER; sentinel-kill: SIGKILL of the primary. Then measured until exact
limiting has resumed (see resumed_at) for TAIL seconds. Every server is stopped by
PID; the report is failover_report.report().
"""

from __future__ import annotations

import collections
import hashlib
import time

from failover_load import Driver
from measure import sluice_counters
from stack import ALLOW_ALL, Stack, cluster_redis
from testkit.http import request
from testkit.metrics import metric_sum, samples
from testkit.resp import redis_call, redis_pipeline

PREFIX = "fo:"
LOAD_KEYS = 200
PROBE_CAPACITY = 5
PROBE_PERIOD = 0.1  # seconds between two probes (the resolution of "resumed")
STEADY = 3.0  # seconds of load before the change
TAIL = 3.0  # seconds of exact limiting after it resumed, then the load stops
MAX_WAIT = 40.0  # seconds after the change at most
TIMEOUT_MS = 50  # the gateways' redis.timeout_ms (the default)
MODES = ("cluster", "sentinel-failover", "sentinel-kill")
HISTOGRAM = "sluice_ratelimit_check_duration_seconds"


def bucket_tag(api_key: str) -> str:
    """The hash tag of an API key's bucket: the first 16 bytes of SHA-256 over the
    key's hash input ("k", length, ":", key), in hex."""
    data = api_key.encode()
    return hashlib.sha256(b"k%d:%s" % (len(data), data)).hexdigest()[:32]


def gateway_config(redis: dict) -> dict:
    probe = {"key": "api_key", "capacity": PROBE_CAPACITY, "refill_per_second": 0.001}
    return {"upstream": None, "redis_port": None, "limit": ALLOW_ALL, "key": "api_key",
            "key_prefix": PREFIX, "redis": {**redis, "timeout_ms": TIMEOUT_MS},
            "more_limits": {"probe": probe},
            "more_routes": [{"name": "probe", "match": {"path_prefix": "/probe"},
                             "upstream": "echo", "limits": ["probe"],
                             "on_redis_failure": "open"}]}


class Topology:
    """The Redis side of one run: the gateways' redis section, which keys the change
    affects, the change itself and when the topology has settled after it."""

    def __init__(self, stack: Stack, mode: str):
        self.mode = mode
        if mode == "cluster":
            self.group = stack.cluster("cluster", replicas=1)
            seeds = self.group.seeds()
            self.redis = cluster_redis(seeds)
            self.victim, ranges = self.group.primaries()[1]
            self.dead = {s for first, last in ranges for s in range(first, last + 1)}
        else:
            self.group = stack.sentinel_set(mode)
            sentinels = self.group.sentinels()
            self.redis = {"url": f"redis://{sentinels[0]}/0", "topology": "sentinel",
                          "nodes": sentinels[1:], "sentinel_master": self.group.master_name}
            self.victim = self.group.primary()
            self.dead = None  # every key

    def slots(self, keys: list[str]) -> list[int]:
        if self.dead is None:
            return [0] * len(keys)
        port = next(n for n in self.group.live_nodes() if n is not self.victim).port
        return [int(s) for s in redis_pipeline(
            port, [("CLUSTER", "KEYSLOT", "{%s}" % bucket_tag(k)) for k in keys])]

    def affected(self, slot: int) -> bool:
        return self.dead is None or slot in self.dead

    def holder_port(self, slot: int) -> int:
        return self.group.node_for_slot(slot).port if self.dead else self.victim.port

    def bucket(self, limit: str, api_key: str) -> str:
        """The bucket's Redis key: in a cluster its hash part is a hash tag."""
        tag = bucket_tag(api_key)
        return f"{PREFIX}{limit}:" + ("{%s}" % tag if self.dead else tag)

    def change(self):
        if self.mode == "sentinel-failover":
            self.group.failover()
        elif self.mode == "sentinel-kill":
            self.group.kill_primary()
        else:
            self.group.kill(self.victim)

    def wait_settled(self) -> float:
        """Until the replica has taken over (as the cluster's live nodes or every
        sentinel say); returns that moment."""
        if self.dead is None:
            self.group.wait_for_new_primary(self.victim, timeout=MAX_WAIT)
        else:
            self.group.wait_until_ok(MAX_WAIT)  # every slot on a live primary again
        return time.monotonic()


def resumed_at(driver: Driver, t_change: float) -> tuple[float | None, int]:
    """(the moment exact limiting resumed after t_change, the probes since): the last
    fail-open answer's end or the start of the final run of exact probes, whichever
    is later; t_change itself when nothing was inexact after it; None while the last
    probe is inexact."""
    last_open = max((a.done for a in driver.answers if a.fail_open and a.done >= t_change),
                    default=None)
    probes = [p for p in driver.probes if p["end"] >= t_change]
    streak = 0
    while streak < len(probes) and probes[len(probes) - 1 - streak]["exact"]:
        streak += 1
    if not probes or streak == 0:
        return None, 0
    if streak == len(probes) and last_open is None:
        return t_change, streak
    first_exact = probes[len(probes) - streak]["start"]
    return max(first_exact, last_open or first_exact), streak


def histogram(texts: list[str]) -> dict[float, float]:
    """le -> cumulative count of the decision-time histogram, summed over gateways;
    the key None holds the total count."""
    out: dict = collections.defaultdict(float)
    for text in texts:
        for name, labels, value in samples(text):
            if name == HISTOGRAM + "_bucket":
                out[float(labels["le"])] += value
            elif name == HISTOGRAM + "_count":
                out[None] += value
    return out


def snapshot(gateways) -> dict:
    texts = [g.metrics() for g in gateways]
    return {
        "hist": histogram(texts),
        "moved": sum(metric_sum(t, "sluice_redis_redirects_total", kind="moved") for t in texts),
        "ask": sum(metric_sum(t, "sluice_redis_redirects_total", kind="ask") for t in texts),
        "refresh_ok": sum(metric_sum(t, "sluice_redis_topology_refresh_total", result="ok")
                          for t in texts),
        "refresh_error": sum(metric_sum(t, "sluice_redis_topology_refresh_total",
                                        result="error") for t in texts),
        "fail_open": sum(sluice_counters(g.admin_port)["fail_open"] for g in gateways),
        "up": [metric_sum(t, "sluice_redis_up") for t in texts],
    }


def failover_run(stack: Stack, mode: str, clients: int, log) -> dict:
    """One measured failover (mode in MODES); returns what analyse() makes of it."""
    echo = stack.echo()
    topo = Topology(stack, mode)
    config = {**gateway_config(topo.redis), "upstream": echo.port}
    gateways = [stack.sluice(f"sluice-{mode}-{i}", **config) for i in range(2)]
    for gateway in gateways:
        stack.wait_redis(gateway)

    # The bucket of a key is where bucket_tag() says: checked once, or the slot
    # attribution below would be wrong.
    load_keys = [f"load-{i}" for i in range(LOAD_KEYS)]
    slot_of = dict(zip(load_keys, topo.slots(load_keys)))
    status, headers, _ = request(gateways[0].port, "GET", "/load",
                                 headers={"X-API-Key": load_keys[0]})
    bucket = topo.bucket("bench", load_keys[0])
    if status != 200 or redis_call(topo.holder_port(slot_of[load_keys[0]]), "EXISTS",
                                   bucket) != 1:
        raise RuntimeError(f"bucket {bucket} not found where expected ({status})")
    candidates = [f"probe-{n}" for n in range(3000 if topo.dead else 600)]
    probe_keys = [k for k, s in zip(candidates, topo.slots(candidates)) if topo.affected(s)]

    before = snapshot(gateways)
    driver = Driver([g.port for g in gateways], load_keys, probe_keys, PROBE_CAPACITY,
                    clients=clients, probe_period=PROBE_PERIOD).start()
    try:
        time.sleep(STEADY)  # steady load before the change (a duration, not a wait)
        log(f"{mode}: {len(driver.answers)} answers so far; the change now")
        t_change = time.monotonic()
        topo.change()
        t_settled = topo.wait_settled()
        log(f"{mode}: settled after {t_settled - t_change:.2f} s")
        while time.monotonic() - t_change < MAX_WAIT:
            resumed, streak = resumed_at(driver, t_change)
            if resumed is not None and time.monotonic() - resumed >= TAIL and streak >= 10:
                break
            time.sleep(PROBE_PERIOD)
    finally:
        driver.stop()
    after = snapshot(gateways)
    result = analyse(driver, t_change, t_settled, slot_of, topo)
    result.update(mode=mode, clients=clients, metrics_before=before, metrics_after=after,
                  victim=topo.victim.address)
    return result


def analyse(driver: Driver, t_change: float, t_settled: float, slot_of: dict,
            topo: Topology) -> dict:
    answers = sorted(driver.answers, key=lambda a: a.sent)
    resumed, _ = resumed_at(driver, t_change)
    end = resumed if resumed is not None else answers[-1].done
    window = [a for a in answers if a.done >= t_change and a.sent <= end]
    opened = [a for a in answers if a.fail_open]
    dead_window = [a for a in window if topo.affected(slot_of[a.key])]
    live_window = [a for a in window if not topo.affected(slot_of[a.key])]
    latencies = sorted(a.latency for a in window)
    before = [a for a in answers if a.sent < t_change]
    probes_after = [p for p in driver.probes if p["end"] >= t_change]
    return {
        "seconds": answers[-1].done - answers[0].sent, "requests": len(answers),
        "statuses": dict(collections.Counter(a.status for a in answers)),
        "errors": driver.errors,
        "settled_s": t_settled - t_change,
        "resumed_s": None if resumed is None else resumed - t_change,
        "window_requests": len(window), "window_dead": len(dead_window),
        "window_live": len(live_window),
        "fail_open": len(opened),
        "fail_open_before": sum(a.done < t_change for a in opened),
        "fail_open_before_at": [(round(a.sent - answers[0].sent, 3), round(1000 * a.latency, 1))
                                for a in opened if a.done < t_change][:5],
        "fail_open_live_keys": sum(not topo.affected(slot_of[a.key]) for a in opened),
        "fail_open_live_keys_ms": [round(1000 * a.latency, 1) for a in opened
                                   if not topo.affected(slot_of[a.key])][:8],
        "fail_open_slow": sum(a.latency >= TIMEOUT_MS / 1000 for a in opened),
        "last_fail_open_s": max((a.done - t_change for a in opened), default=None),
        "undecided_not_200": sum(not a.decided and a.status != 200 for a in answers),
        "max_latency_ms": 1000 * max(a.latency for a in answers),
        "max_latency_before_ms": 1000 * max((a.latency for a in before), default=0),
        "window_max_ms": 1000 * (latencies[-1] if latencies else 0),
        "window_p99_ms": 1000 * (latencies[int(0.99 * (len(latencies) - 1))] if latencies else 0),
        "live_window_max_ms": 1000 * max((a.latency for a in live_window), default=0),
        "probes": len(driver.probes),
        "probes_inexact_before": sum(not p["exact"] for p in driver.probes
                                     if p["end"] < t_change),
        "probes_inexact_after": sum(not p["exact"] for p in probes_after),
        "probe_examples": [p["got"] for p in probes_after if not p["exact"]][:3],
        "dead_share": (sum(topo.affected(s) for s in slot_of.values()) / len(slot_of)),
    }
