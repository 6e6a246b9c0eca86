#!/usr/bin/env python3
"""Memory footprint of Sluice: RSS per idle client connection, Redis memory per bucket.

Standard library only. Starts build/sluice, build/sluice-echo and (for the bucket
part) a redis-server on free 127.0.0.1 ports, measures, and stops what it started
by PID. The figures quoted in docs/operations.md come from this script.

    loadtest/footprint.py [--connections 2000] [--buckets 10000] [--threads 2]

Idle connections: RSS (VmRSS of /proc/PID/status) after a warm-up, then after
opening N connections that each sent one request, read its response and stayed
open (keep-alive, idle); and after opening N connections that sent nothing yet.
Buckets: INFO memory used_memory before and after N requests with N distinct
`query:k` values through a route limited by them, DBSIZE, MEMORY USAGE and PTTL
of one bucket key.
"""
import argparse
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SLUICE = os.environ.get("SLUICE_BIN", os.path.join(ROOT, "build", "sluice"))
ECHO = os.environ.get("SLUICE_ECHO_BIN", os.path.join(ROOT, "build", "sluice-echo"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def wait_port(port, timeout=10.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listens on {port}")


def http_get(port, target, headers=""):
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(f"GET {target} HTTP/1.1\r\nHost: x\r\n{headers}Connection: close\r\n\r\n"
                  .encode())
        data = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return data
            data += chunk


def metric(admin_port, name):
    text = http_get(admin_port, "/metrics").decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


def read_response(sock):
    """Reads one response with a Content-Length body; returns the status."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, rest = data.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"(?i)content-length:\s*(\d+)", head).group(1))
    while len(rest) < length:
        rest += sock.recv(65536)
    return int(head.split()[1])


class Procs:
    def __init__(self):
        self.procs = []
        self.dir = tempfile.mkdtemp(prefix="sluice-footprint-")

    def start(self, args, name):
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        p = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
                try:
                    p.wait(15)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_gateway(procs, threads, upstream, routes, redis_url=None):
    port, admin = free_port(), free_port()
    lines = [
        "server:", f'  listen: "127.0.0.1:{port}"', f"  threads: {threads}",
        "  max_connections: 100000", "  idle_timeout_ms: 600000",
        "admin:", f'  listen: "127.0.0.1:{admin}"',
        "log:", "  level: warn", "  access_log: false",
    ]
    if redis_url:
        lines += ["redis:", f'  url: "{redis_url}"', "  timeout_ms: 1000"]
    lines += ["upstreams:", "  echo:", f'    servers: ["{upstream}"]', routes]
    path = os.path.join(procs.dir, f"sluice-{port}.yaml")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    p = procs.start([SLUICE, "--config", path], f"sluice-{port}")
    wait_port(admin)
    wait_port(port)
    return p, port, admin


def idle_connections(procs, n, threads, upstream):
    routes = "routes:\n  - name: all\n    match: { path_prefix: / }\n    upstream: echo\n"
    gw, port, admin = start_gateway(procs, threads, upstream, routes)
    for _ in range(50):
        http_get(port, "/warm")
    time.sleep(3)  # past one memory-trim period
    base = rss_kib(gw.pid)
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        socks.append(s)
    for s in socks:
        assert read_response(s) == 200
    time.sleep(5)  # spare relay buffers trimmed, connections idle
    active = metric(admin, "sluice_connections_active")
    kept = rss_kib(gw.pid)
    for s in socks:
        s.close()
    time.sleep(5)
    after_close = rss_kib(gw.pid)

    gw.send_signal(signal.SIGTERM)
    gw.wait(15)

    # Connections that sent nothing yet (waiting for their first request head),
    # on a fresh gateway so that they cannot reuse memory the others freed.
    gw, port, admin = start_gateway(procs, threads, upstream, routes)
    for _ in range(50):
        http_get(port, "/warm")
    time.sleep(3)
    base2 = rss_kib(gw.pid)
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
    time.sleep(3)  # well within header_timeout_ms (10 s)
    silent_rss = rss_kib(gw.pid)
    silent_active = metric(admin, "sluice_connections_active")
    for s in silent:
        s.close()
    time.sleep(1)
    return {
        "threads": threads, "connections": n, "active_metric": active,
        "rss_base_kib": base, "rss_idle_kib": kept,
        "bytes_per_idle_keepalive": (kept - base) * 1024 / n,
        "rss_after_close_kib": after_close,
        "rss_before_silent_kib": base2, "rss_silent_kib": silent_rss,
        "silent_active_metric": silent_active,
        "bytes_per_silent_connection": (silent_rss - base2) * 1024 / n,
    }


def redis_cmd(port, *args):
    out = subprocess.run(["redis-cli", "-p", str(port), *args], capture_output=True, text=True,
                         check=True)
    return out.stdout.strip()


def used_memory(port):
    info = redis_cmd(port, "INFO", "memory")
    return int(re.search(r"used_memory:(\d+)", info).group(1))


def buckets(procs, n, threads, upstream):
    rport = free_port()
    procs.start(["redis-server", "--port", str(rport), "--bind", "127.0.0.1", "--save", "",
                 "--appendonly", "no"], "redis")
    wait_port(rport)
    routes = ("limits:\n  per_value:\n    key: query:k\n    capacity: 100\n"
              "    refill_per_second: 10\n"
              "routes:\n  - name: limited\n    match: { path_prefix: / }\n    upstream: echo\n"
              "    limits: [per_value]\n")
    gw, port, admin = start_gateway(procs, threads, upstream, routes,
                                    f"redis://127.0.0.1:{rport}/0")
    http_get(port, "/warm?k=warm")  # script loaded, connections up
    redis_cmd(rport, "FLUSHALL")
    time.sleep(0.5)
    before = used_memory(rport)
    s = socket.create_connection(("127.0.0.1", port))
    for i in range(n):
        s.sendall(f"GET /b?k=value-{i:08d} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        assert read_response(s) == 200
    s.close()
    after = used_memory(rport)
    keys = int(redis_cmd(rport, "DBSIZE"))
    one = redis_cmd(rport, "RANDOMKEY")
    return {
        "requests": n, "keys": keys, "used_memory_before": before, "used_memory_after": after,
        "bytes_per_bucket_info": (after - before) / max(keys, 1),
        "example_key": one, "key_length": len(one),
        "memory_usage_one_key": int(redis_cmd(rport, "MEMORY", "USAGE", one)),
        "pttl_ms_right_after": int(redis_cmd(rport, "PTTL", one)),
        "ttl_expected_ms": 100 / 10 * 1000 + 1000,
        "redis_commands_metric": metric(admin, "sluice_redis_commands_total"),
        "redis_writes_metric": metric(admin, "sluice_redis_writes_total"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--buckets", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-redis", action="store_true")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    procs = Procs()
    try:
        echo_port = free_port()
        procs.start([ECHO, "--listen", f"127.0.0.1:{echo_port}", "--quiet"], "echo")
        wait_port(echo_port)
        upstream = f"127.0.0.1:{echo_port}"
        print("idle connections:", idle_connections(procs, args.connections, args.threads,
                                                    upstream), flush=True)
        if not args.skip_redis and shutil.which("redis-server"):
            print("buckets:", buckets(procs, args.buckets, args.threads, upstream), flush=True)
    finally:
        procs.stop_all()


if __name__ == "__main__":
    sys.exit(main())
