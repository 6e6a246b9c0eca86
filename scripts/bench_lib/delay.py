"""scripts/bench --delay: what a delayed request costs beyond its wait.

One Sluice on one Redis and the echo upstream, two routes: /paced has one global
token bucket of 1 token refilling RATE/s with on_limit: delay (max_delay_ms
MAX_DELAY_MS), the catch-all route a limit that allows everything (the same
decision path without a wait). BURSTS times, BURST requests are sent at once on
connections opened beforehand, each on its own thread; the bucket lets the
k-th request (in the order the responses come back) go k / RATE after the
first, so how far its answer lands from that schedule is what the delay
path adds to the wait. Those figures (p50, p99) are set beside the latency of
single undelayed requests on the catch-all route, and the
gateway's own sluice_ratelimit_delay_seconds histogram is read to check the waits.
Servers are started here on free 127.0.0.1 ports and stopped by PID.
"""

from __future__ import annotations

import socket
import statistics
import threading
import time

from stack import Stack
from testkit.http import request
from testkit.metrics import metric_sum

RATE = 100.0  # tokens per second of the paced bucket: waits step by 10 ms
BURST = 40  # concurrent requests per burst: waits up to 0.39 s
BURSTS = 10
MAX_DELAY_MS = 2000
SINGLES = 400  # undelayed requests measured one at a time


def paced_config() -> dict:
    """sluice_config's extra limit and route for /paced."""
    return {
        "more_limits": {"paced": {"key": "global", "capacity": 1, "refill_per_second": RATE}},
        "more_routes": [{"name": "paced", "match": {"path_prefix": "/paced"}, "upstream": "echo",
                         "limits": ["paced"], "on_limit": "delay",
                         "max_delay_ms": MAX_DELAY_MS}],
    }


def exchange(sock: socket.socket, path: str) -> float:
    """One keep-alive GET on `sock`: seconds until the whole response was read
    (the moment it was, on time.perf_counter's clock, is exchange.done)."""
    raw = f"GET {path} HTTP/1.1\r\nHost: bench\r\n\r\n".encode()
    start = time.perf_counter()
    sock.sendall(raw)
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed before the response head")
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(f"{path}: {head.splitlines()[0].decode(errors='replace')}")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            raise RuntimeError("connection closed in the response body")
        body += chunk
    end = time.perf_counter()
    exchange.done = end
    return end - start


def burst(port: int, sockets: list[socket.socket]) -> list[tuple[float, float]]:
    """BURST requests to /paced released together; for each, the moment its
    response was complete (perf_counter) and its latency, sorted by the first."""
    gate = threading.Barrier(len(sockets))
    latencies: list[float] = []
    errors: list[Exception] = []
    lock = threading.Lock()

    def one(sock):
        gate.wait(timeout=10)
        try:
            took = exchange(sock, "/paced")
            latency = (time.perf_counter(), took)
        except Exception as e:  # noqa: BLE001 (reported after the burst)
            with lock:
                errors.append(e)
            return
        with lock:
            latencies.append(latency)

    threads = [threading.Thread(target=one, args=(s,)) for s in sockets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=MAX_DELAY_MS / 1000 + 10)
    if errors:
        raise RuntimeError(f"paced burst on port {port}: {errors[0]}")
    return sorted(latencies)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def delay_run(stack: Stack, log) -> dict:
    echo = stack.echo()
    redis = stack.redis("redis-delay")
    gateway = stack.sluice("sluice-delay", upstream=echo.port, redis_port=redis.port,
                           limit=(1_000_000_000, 1_000_000_000), key="global",
                           **paced_config())
    stack.wait_redis(gateway)
    port = gateway.port

    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for _ in range(50):  # warm-up
            exchange(sock, "/")
        singles = [exchange(sock, "/") for _ in range(SINGLES)]

    deviations, delayed_latencies, firsts = [], [], []
    for n in range(BURSTS):
        sockets = [socket.create_connection(("127.0.0.1", port), timeout=10)
                   for _ in range(BURST)]
        try:
            for s in sockets:
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            # The bucket is full again 1 / RATE after the previous burst's last wait.
            time.sleep(2 / RATE)  # a refill period, not a condition
            answers = burst(port, sockets)
        finally:
            for s in sockets:
                s.close()
        # The bucket lets one request go every 1 / RATE: the k-th answer is due
        # k / RATE after the schedule's origin, fitted as the median over the
        # burst (the first answer alone is late: the gateway decides the rest
        # of the burst while it forwards it).
        origin = statistics.median(done - k / RATE for k, (done, _) in enumerate(answers))
        deviations += [done - k / RATE - origin for k, (done, _) in enumerate(answers) if k]
        delayed_latencies += [took for _, took in answers[1:]]
        firsts.append(answers[0][1])  # the burst's undelayed request, in the same crowd
        log(f"delay burst {n + 1}/{BURSTS}: last answer "
            f"{(answers[-1][0] - answers[0][0]) * 1000:.0f} ms after the first")

    status, _, body = request(gateway.admin_port, "GET", "/metrics", timeout=5.0)
    text = body.decode(errors="replace") if status == 200 else ""
    delayed = metric_sum(text, "sluice_ratelimit_decisions_total", route="paced",
                         decision="delayed")
    hist_count = metric_sum(text, "sluice_ratelimit_delay_seconds_count")
    hist_sum = metric_sum(text, "sluice_ratelimit_delay_seconds_sum")
    limited = metric_sum(text, "sluice_ratelimit_decisions_total", route="paced",
                         decision="limited")
    hist_mean = hist_sum / hist_count if hist_count else 0.0
    return {
        "singles_p50": statistics.median(singles), "singles_p99": percentile(singles, 0.99),
        "singles_mean": statistics.mean(singles), "firsts_mean": statistics.mean(firsts),
        "dev_p50": statistics.median(deviations), "dev_p99": percentile(deviations, 0.99),
        "dev_p1": percentile(deviations, 0.01),
        "delayed_mean": statistics.mean(delayed_latencies),
        "requests": len(deviations), "delayed": delayed, "limited": limited,
        "hist_count": hist_count, "hist_mean": hist_mean,
        "beyond_wait": statistics.mean(delayed_latencies) - hist_mean,
    }


def delay_report(result: dict, info: str, started, command: str) -> str:
    ms = lambda v: f"{v * 1000:.2f} ms"  # noqa: E731
    lines = [
        f"# Sluice delay path: {started:%Y-%m-%d %H:%M}", "",
        f"- Machine: {info['nproc']} CPUs, {info['cpu']}; {info['sluice']}; {info['redis']}; "
        f"load average at start {' '.join(info['load'])}", "",
        f"`{command}`: a global token bucket of 1 token refilling {RATE:g}/s with "
        f"`on_limit: delay` (`max_delay_ms: {MAX_DELAY_MS}`); {BURSTS} bursts of {BURST} "
        "requests released together, each on its own kept-alive connection. The bucket "
        f"lets the k-th request of a burst go k / {RATE:g} s after the first; how far its "
        "answer lands from that schedule is what the delay path adds to the wait. Beside "
        "it, single requests through the same decision path without a wait (a limit that "
        "allows all).", "",
        "| | p1 | p50 | p99 |", "|---|---|---|---|",
        f"| undelayed request, latency (one at a time) | — | {ms(result['singles_p50'])} | "
        f"{ms(result['singles_p99'])} |",
        f"| delayed request: answer − its slot on the bucket's schedule | "
        f"{ms(result['dev_p1'])} | {ms(result['dev_p50'])} | {ms(result['dev_p99'])} |", "",
        f"Means: a delayed request's latency {ms(result['delayed_mean'])}, less its wait as "
        f"Sluice measured it (`sluice_ratelimit_delay_seconds`, mean "
        f"{ms(result['hist_mean'])} over {result['hist_count']:.0f} waits) = "
        f"**{ms(result['beyond_wait'])}** beyond the wait, against "
        f"**{ms(result['firsts_mean'])}** for the undelayed first request of a burst (decided "
        f"in the same crowd of {BURST}) and {ms(result['singles_mean'])} for a request alone.",
        "",
        f"{result['requests']} delayed requests measured; Sluice counted "
        f"{result['delayed']:.0f} `decision=\"delayed\"` and {result['limited']:.0f} "
        "`limited`. The schedule's origin is fitted per burst (the median of answer − "
        "k / rate): the first answer of a burst is itself late, because the gateway decides "
        "the rest of the burst while it forwards it.",
    ]
    return "\n".join(lines)
