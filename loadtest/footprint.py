#!/usr/bin/env python3
"""Memory footprint of Sluice: RSS per idle client connection, Redis memory per bucket.

Standard library and the testkit (tests/testkit). Starts build/sluice,
build/sluice-echo and (for the bucket part) a redis-server on free 127.0.0.1
ports, measures, and stops what it started by PID. The figures quoted in docs/operations.md come from this script.

    loadtest/footprint.py [--connections 2000] [--buckets 10000] [--threads 2] [--tls]

Idle connections: RSS (VmRSS of /proc/PID/status) after a warm-up, then after
opening N connections that each sent one request, read its response and stayed
open (keep-alive, idle); and after opening N connections that sent nothing yet.
Buckets: INFO memory used_memory before and after N requests with N distinct
`query:k` values through a route limited by them, DBSIZE, MEMORY USAGE and PTTL
of one bucket key.
With --tls, the same for a TLS listener (a test CA and a P-256 certificate made
with the openssl CLI): connections that sent nothing, connections whose client
sent its ClientHello and then stalled mid-handshake, and idle keep-alive
connections after one request over TLS.
"""
import argparse
import os
import re
import resource
import shutil
import socket
import ssl
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
from testkit.configs import to_yaml  # noqa: E402
from testkit.http import RawConnection, request  # noqa: E402
from testkit.metrics import metric_sum  # noqa: E402
from testkit.ports import free_port  # noqa: E402
from testkit.processes import Echo, Redis, Sluice  # noqa: E402
from testkit.procfs import rss_kib  # noqa: E402
from testkit.resp import Connection  # noqa: E402
from testkit.tls import client_context, make_ca, make_server_cert  # noqa: E402


def http_get(port, target, headers=None):
    """One GET on a fresh connection; the status."""
    return request(port, "GET", target, headers=headers)[0]


def metric(gateway, name):
    return metric_sum(gateway.metrics(), name)


class Procs:
    """What this script started, stopped by PID at the end, newest first."""

    def __init__(self):
        self.procs = []
        self.dir = tempfile.mkdtemp(prefix="sluice-footprint-")

    def own(self, process):
        self.procs.append(process)
        return process

    def stop_all(self):
        for p in reversed(self.procs):
            p.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_gateway(procs, threads, upstream, sections, redis_url=None):
    config = {
        "server": {"listen": f"127.0.0.1:{free_port()}", "threads": threads,
                   "max_connections": 100000, "idle_timeout_ms": 600000},
        "admin": {"listen": f"127.0.0.1:{free_port()}"},
        "log": {"level": "warn", "access_log": False},
    }
    if redis_url:
        config["redis"] = {"url": redis_url, "timeout_ms": 1000}
    config["upstreams"] = {"echo": {"servers": [upstream]}}
    config.update(sections)
    return procs.own(Sluice(procs.dir, to_yaml(config) + "\n",
                            name=f"sluice-{len(procs.procs)}"))


def idle_connections(procs, n, threads, upstream):
    routes = {"routes": [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}]}
    gw = start_gateway(procs, threads, upstream, routes)
    for _ in range(50):
        http_get(gw.port, "/warm")
    time.sleep(3)  # past one memory-trim period
    base = rss_kib(gw.pid)
    conns = []
    for _ in range(n):
        c = RawConnection(gw.port)
        c.send(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        conns.append(c)
    for c in conns:
        assert c.read_response().status == 200
    time.sleep(5)  # spare relay buffers trimmed, connections idle
    active = metric(gw, "sluice_connections_active")
    kept = rss_kib(gw.pid)
    for c in conns:
        c.close()
    time.sleep(5)
    after_close = rss_kib(gw.pid)
    gw.stop()

    # Connections that sent nothing yet (waiting for their first request head),
    # on a fresh gateway so that they cannot reuse memory the others freed.
    gw = start_gateway(procs, threads, upstream, routes)
    for _ in range(50):
        http_get(gw.port, "/warm")
    time.sleep(3)
    base2 = rss_kib(gw.pid)
    silent = [RawConnection(gw.port) for _ in range(n)]
    time.sleep(3)  # well within header_timeout_ms (10 s)
    silent_rss = rss_kib(gw.pid)
    silent_active = metric(gw, "sluice_connections_active")
    for c in silent:
        c.close()
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


def tls_connections(procs, n, threads, upstream):
    """RSS per TLS connection in three states, each on a fresh gateway."""
    make_ca(procs.dir, "ca")
    cert, key = make_server_cert(procs.dir, "ca", "server", dns=("default.test",))
    context = client_context(os.path.join(procs.dir, "ca.crt"))
    sections = {"routes": [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}]}

    def fresh():
        gw = start_gateway(procs, threads, upstream,
                           {**sections, "server": {
                               "listen": f"127.0.0.1:{free_port()}", "threads": threads,
                               "max_connections": 100000, "idle_timeout_ms": 600000,
                               "header_timeout_ms": 60000,
                               "tls": {"cert_file": cert, "key_file": key}}})
        for _ in range(50):
            with context.wrap_socket(socket.create_connection(("127.0.0.1", gw.port)),
                                     server_hostname="default.test") as s:
                s.sendall(b"GET /warm HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                while s.recv(65536):
                    pass
        time.sleep(3)
        return gw, rss_kib(gw.pid)

    def client_hello():
        incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = context.wrap_bio(incoming, outgoing, server_hostname="default.test")
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        return outgoing.read()

    def silent(port):
        return socket.create_connection(("127.0.0.1", port))

    def mid_handshake(port):  # the ClientHello sent, the server's answer never read
        s = socket.create_connection(("127.0.0.1", port))
        s.sendall(client_hello())
        return s

    def keep_alive(port):  # one request sent; its response is read by settle()
        s = context.wrap_socket(socket.create_connection(("127.0.0.1", port)),
                                server_hostname="default.test")
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        return s

    def read_response(s):
        reply = b""
        while b"\r\n\r\n" not in reply:
            reply += s.recv(65536)
        head, _, body = reply.partition(b"\r\n\r\n")
        length = int(re.search(rb"(?i)content-length: *(\d+)", head).group(1))
        while len(body) < length:
            body += s.recv(65536)

    results = {"connections": n}
    for name, open_one, settle in (("silent_tls_connection", silent, None),
                                   ("mid_handshake_connection", mid_handshake, None),
                                   ("idle_tls_keepalive", keep_alive, read_response)):
        gw, base = fresh()
        socks = [open_one(gw.port) for _ in range(n)]
        for s in socks:
            if settle:
                settle(s)
        time.sleep(5)  # handshakes done, spare buffers trimmed
        results[f"bytes_per_{name}"] = (rss_kib(gw.pid) - base) * 1024 / n
        for s in socks:
            s.close()
        gw.stop()
    return results


def used_memory(redis):
    info = redis("INFO", "memory").decode()
    return int(re.search(r"used_memory:(\d+)", info).group(1))


def buckets(procs, n, threads, upstream):
    server = procs.own(Redis(procs.dir))
    redis = Connection(server.port, timeout=10.0)
    sections = {
        "limits": {"per_value": {"key": "query:k", "capacity": 100, "refill_per_second": 10}},
        "routes": [{"name": "limited", "match": {"path_prefix": "/"}, "upstream": "echo",
                    "limits": ["per_value"]}],
    }
    gw = start_gateway(procs, threads, upstream, sections, f"redis://127.0.0.1:{server.port}/0")
    http_get(gw.port, "/warm?k=warm")  # script loaded, connections up
    redis("FLUSHALL")
    time.sleep(0.5)
    before = used_memory(redis)
    with RawConnection(gw.port) as c:
        for i in range(n):
            c.send(f"GET /b?k=value-{i:08d} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            assert c.read_response().status == 200
    after = used_memory(redis)
    keys = redis("DBSIZE")
    one = redis("RANDOMKEY").decode()
    return {
        "requests": n, "keys": keys, "used_memory_before": before, "used_memory_after": after,
        "bytes_per_bucket_info": (after - before) / max(keys, 1),
        "example_key": one, "key_length": len(one),
        "memory_usage_one_key": redis("MEMORY", "USAGE", one),
        "pttl_ms_right_after": redis("PTTL", one),
        "ttl_expected_ms": 100 / 10 * 1000 + 1000,
        "redis_commands_metric": metric(gw, "sluice_redis_commands_total"),
        "redis_writes_metric": metric(gw, "sluice_redis_writes_total"),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=2000)
    ap.add_argument("--buckets", type=int, default=10000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-redis", action="store_true")
    ap.add_argument("--tls", action="store_true", help="measure TLS connections only")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = args.connections + 256
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(want, hard), hard))
    procs = Procs()
    try:
        upstream = procs.own(Echo(procs.dir)).address
        if args.tls:
            print("tls connections:", tls_connections(procs, args.connections, args.threads,
                                                      upstream), flush=True)
            return 0
        print("idle connections:", idle_connections(procs, args.connections, args.threads,
                                                    upstream), flush=True)
        if not args.skip_redis and shutil.which("redis-server"):
            print("buckets:", buckets(procs, args.buckets, args.threads, upstream), flush=True)
    finally:
        procs.stop_all()


if __name__ == "__main__":
    sys.exit(main())
