"""The integration tests' layer over the testkit (tests/testkit, standard library only).

ProcessTestCase owns the processes a test starts: start_echo(), start_redis(),
start_sluice() wait until the process serves and register it for stopping in
cleanup (start_ws_upstream() likewise for the in-process WebSocket echo
upstream); a Sluice that died on its own before cleanup fails the test with its
stderr. Everything else a test needs (ports, clients, configs, RESP, metrics) is
the testkit's, imported here under the names the tests use (the WebSocket echo
upstream and client of testkit.websocket with a Ws/ws_/WS_ prefix).

For the Redis topology tests (a cluster or a sentinel set from the testkit):
require_topology_support() fails at once when the binary rejects redis.topology,
topology_redis() writes the redis section, Load sends requests from many threads
and keeps every answer, assert_serves_without_redis() checks a gateway whose Redis
is unusable for a stated reason.

Environment: SLUICE_BIN, SLUICE_ECHO_BIN, SLUICE_SOURCE_DIR (defaults: the
repository this file lives in, binaries in build/).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# Re-exported for the tests: the testkit's names, some under the names tests know.
from testkit.configs import gateway_config, to_yaml  # noqa: E402,F401
from testkit.http import (IO_TIMEOUT, Client, RawConnection, Response, raw_exchange,  # noqa: E402,F401
                          request)
from testkit.metrics import metric_sum as exposition_sum  # noqa: E402
from testkit.ports import closed_port, free_port  # noqa: E402,F401
from testkit.processes import (ECHO_BIN, SLUICE_BIN, SOURCE_DIR, START_TIMEOUT,  # noqa: E402,F401
                               STOP_TIMEOUT, Echo, GrpcUpstream, Process, Redis, Sluice,
                               wait_until)
from testkit.procfs import rss_kib  # noqa: E402,F401
from testkit.resp import ReplyError as RedisReplyError  # noqa: E402,F401
from testkit.resp import encode as resp_encode  # noqa: E402,F401
from testkit.resp import raw_command as redis_command  # noqa: E402,F401
from testkit.resp import (bucket_state, redis_call, redis_pipeline,  # noqa: E402,F401
                          script_calls, stall_redis)
from testkit.tls import client_context, make_ca, make_server_cert  # noqa: E402,F401
from testkit.websocket import BINARY as WS_BINARY  # noqa: E402,F401
from testkit.websocket import CLOSE as WS_CLOSE  # noqa: E402,F401
from testkit.websocket import EOF as WS_EOF  # noqa: E402,F401
from testkit.websocket import PING as WS_PING  # noqa: E402,F401
from testkit.websocket import PONG as WS_PONG  # noqa: E402,F401
from testkit.websocket import TEXT as WS_TEXT  # noqa: E402,F401
from testkit.websocket import EchoUpstream as WsEchoUpstream  # noqa: E402,F401
from testkit.websocket import HandshakeError as WsHandshakeError  # noqa: E402,F401
from testkit.websocket import WebSocketClient  # noqa: E402,F401
from testkit.websocket import accept_key as ws_accept_key  # noqa: E402,F401
from testkit.websocket import close_code as ws_close_code  # noqa: E402,F401
from testkit.websocket import encode_frame as ws_encode_frame  # noqa: E402,F401
from testkit.websocket import handshake_request as ws_handshake_request  # noqa: E402,F401
from testkit.websocket import mask_bytes as ws_mask_bytes  # noqa: E402,F401

# Set (to e.g. "address,undefined") when the binaries are built with sanitizers:
# memory figures are then meaningless and tracing conflicts with LeakSanitizer.
SANITIZED = os.environ.get("SLUICE_SANITIZED", "")


def pattern_sha256(size: int) -> str:
    """SHA-256 of sluice-echo's download pattern (byte i = i % 251) of `size` bytes."""
    period = bytes(i % 251 for i in range(251)) * 4096  # 251 * 4096 bytes, whole periods
    h = hashlib.sha256()
    left = size
    while left > 0:
        n = min(left, len(period))
        h.update(period[:n])
        left -= n
    return h.hexdigest()


def pattern_bytes(size: int) -> bytes:
    return (bytes(i % 251 for i in range(251)) * (size // 251 + 1))[:size]


def pipelined(port: int, requests: list[bytes], batch: int = 400) -> dict:
    """Sends the requests (whole HTTP/1.1 heads, without bodies) pipelined on one
    connection, `batch` at a time, and reads every answer; the count of each status."""
    statuses: dict = {}
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        buffer = b""
        for at in range(0, len(requests), batch):
            chunk = requests[at:at + batch]
            s.sendall(b"".join(chunk))
            answered = 0
            while answered < len(chunk):
                end = buffer.find(b"\r\n\r\n")
                if end >= 0:
                    head = buffer[:end].decode("latin-1").split("\r\n")
                    length = 0
                    for line in head[1:]:
                        name, _, value = line.partition(":")
                        if name.strip().lower() == "content-length":
                            length = int(value)
                    if len(buffer) >= end + 4 + length:
                        status = int(head[0].split(" ")[1])
                        statuses[status] = statuses.get(status, 0) + 1
                        buffer = buffer[end + 4 + length:]
                        answered += 1
                        continue
                data = s.recv(1 << 20)
                if not data:
                    raise AssertionError("the gateway closed the connection")
                buffer += data
    return statuses


def echo_header(doc: dict, name: str) -> list[str]:
    """Values of header `name` (case-insensitive) in an echo document, in order."""
    return [v for n, v in doc["headers"] if n.lower() == name.lower()]


def echo_header_names(doc: dict) -> set[str]:
    return {n.lower() for n, _ in doc["headers"]}


class ProcessTestCase(unittest.TestCase):
    """A TestCase that owns the processes it starts and stops them in cleanup."""

    def setUp(self):
        super().setUp()
        self.workdir = tempfile.mkdtemp(prefix="sluice-it-")
        self.addCleanup(shutil.rmtree, self.workdir, True)

    def _own(self, process: Process, check_alive: bool = False):
        """Stops `process` in cleanup; with check_alive, an exit the test did not cause
        (signal() with SIGTERM/SIGINT, wait() or stop()) fails the test."""
        def stop():
            crashed = check_alive and not process.expected_exit and not process.alive()
            code = process.stop()
            if crashed:
                raise AssertionError(f"{process.name} died during the test (exit {code})\n"
                                     f"{process.output_tail()}")
        self.addCleanup(stop)
        return process

    def start_echo(self, name: str = "echo") -> Echo:
        self._require(ECHO_BIN)
        return self._own(Echo(self.workdir, name))

    def start_grpc_upstream(self, **options) -> GrpcUpstream:
        """A gRPC server (testkit/grpc_upstream.py; options as GrpcUpstream's)."""
        try:
            import grpc  # noqa: F401
        except ImportError:
            self.skipTest("python3-grpcio not installed")
        return self._own(GrpcUpstream(self.workdir, **options))

    def start_redis(self, port: int | None = None, **options) -> Redis:
        """options: those of testkit.processes.Redis (tls=(cert, key, ca), name, ...)."""
        if not shutil.which("redis-server"):
            self.skipTest("redis-server not installed")
        return self._own(Redis(self.workdir, port, **options))

    def start_ws_upstream(self, **options) -> WsEchoUpstream:
        """A WebSocket echo upstream (testkit.websocket.EchoUpstream, options as there),
        in this process's threads; stopped in cleanup."""
        upstream = WsEchoUpstream(**options).start()
        self.addCleanup(upstream.stop)
        return upstream

    def start_sluice(self, config, extra_args=(), name: str = "sluice",
                     wait_healthy: bool = True, wrapper=(), env: dict | None = None) -> Sluice:
        """config: a dict (see gateway_config) or YAML text; env: variables set
        for it. Fails with sluice's stderr if /healthz is not 200 within
        START_TIMEOUT."""
        self._require(SLUICE_BIN)
        return self._own(Sluice(self.workdir, config, extra_args, name, wait_healthy, wrapper,
                                env=env),
                         check_alive=True)

    def start_http2_sluice(self, upstreams: dict, routes: list, redis_port: int,
                           limits: dict | None = None, server: dict | None = None,
                           **sections) -> Sluice:
        """One worker with HTTP/2 on, using the Redis at `redis_port`; with
        limits, started once Redis is ready."""
        config = gateway_config(
            upstreams, routes,
            server={"threads": 1, "http2": {"enabled": True}, **(server or {})},
            redis={"url": f"redis://127.0.0.1:{redis_port}/0"},
            limits=limits or {}, **sections)
        gw = self.start_sluice(config)
        if limits:
            wait_redis_ready(gw)
        return gw

    def _require(self, path: str):
        if not os.access(path, os.X_OK):
            self.fail(f"binary not found or not executable: {path}")


def shipped_config_env(workdir: str) -> dict:
    """What the shipped configs (conf/*.yaml) need from the environment, as
    scripts/run provides it: SLUICE_KEY_SECRET_FILE naming a fresh key secret."""
    path = os.path.join(workdir, "key-secret")
    with open(path, "w") as f:
        f.write(os.urandom(24).hex() + "\n")
    os.chmod(path, 0o600)  # as scripts/run makes it: a secret others can read is warned of
    return {"SLUICE_KEY_SECRET_FILE": path}


def run_cli(args, cwd: str | None = None, timeout: float = 10.0,
            env: dict | None = None) -> subprocess.CompletedProcess:
    """Runs sluice to completion (e.g. --check, --version); text stdout/stderr;
    env: variables set for it."""
    return subprocess.run([SLUICE_BIN, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, errors="replace", timeout=timeout,
                          env={**os.environ, **env} if env else None)


def require_store_policies():
    """Skips the module while the binary's config has no `shadow` key: the store's
    shadow limits and reservations land with it."""
    workdir = tempfile.mkdtemp(prefix="sluice-it-check-")
    try:
        path = os.path.join(workdir, "check.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(gateway_config(
                {"u": ["127.0.0.1:9"]},
                [{"name": "r", "match": {"path_prefix": "/"}, "upstream": "u",
                  "limits": ["l"], "on_limit": "delay", "max_delay_ms": 100}],
                limits={"l": {"key": "ip", "capacity": 1, "refill_per_second": 1,
                              "shadow": True}})) + "\n")
        checked = run_cli(["--config", path, "--check"])
    finally:
        shutil.rmtree(workdir, True)
    if checked.returncode != 0:
        raise unittest.SkipTest(f"no shadow limits nor reservations in this build:\n"
                                f"{checked.stderr}")


def start_tls_redis(case: ProcessTestCase, cert: str, key: str, ca: str) -> Redis:
    """redis-server serving TLS only; its ssl_context trusts `ca`."""
    return case.start_redis(name="redis-tls", tls=(cert, key, ca))


def readyz(sluice: Sluice) -> tuple[int, dict]:
    """(status, parsed body) of GET /readyz on the admin listener."""
    return sluice.readyz()


def wait_redis_ready(sluice: Sluice, timeout: float = 10.0) -> dict:
    """Polls /readyz until every worker's Redis connection is ready and no breaker is
    open (decisions made before that fail open or closed). Returns the body."""
    def ready():
        if not sluice.alive():
            raise AssertionError(f"sluice exited\n{sluice.output_tail()}")
        status, doc = readyz(sluice)
        deps = doc.get("dependencies", {})
        return doc if (status == 200 and deps.get("redis") == "ready"
                       and not deps.get("redis_circuit_open")) else None
    try:
        return wait_until(ready, timeout, interval=0.01, message="/readyz redis ready")
    except AssertionError as e:
        raise AssertionError(f"{e}\nlast /readyz: {readyz(sluice)}\n"
                             f"{sluice.output_tail()}") from None


def metric_sum(sluice: Sluice, name: str, **labels) -> float:
    """Sum of every sample of `name` on sluice's /metrics whose labels include `labels`."""
    return exposition_sum(sluice.metrics(), name, **labels)


RATE_LIMIT_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
                      "RateLimit-Policy", "RateLimit")


class Holder:
    """A plain TCP server (not HTTP, not Redis) holding a loopback port (a free one
    when 0): it answers every connection with `reply` and closes it."""

    def __init__(self, port: int = 0, reply: bytes = b"hello from something else\r\n"):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", port))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.address = f"127.0.0.1:{self.port}"
        self.reply = reply
        self.connections = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            with conn:
                try:
                    conn.sendall(self.reply)
                except OSError:
                    pass

    def close(self):
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()
        self.thread.join(5)


# -- Redis topologies (tests/testkit/cluster.py, sentinel.py)

def require_binaries(*names):
    """Skips the module or test when a binary the topology needs is not installed."""
    missing = [n for n in names if not shutil.which(n)]
    if missing:
        raise unittest.SkipTest(f"not installed: {', '.join(missing)}")


def require_topology_support(topology: str):
    """Fails at once, with the binary's own words, when sluice rejects a config with
    redis.topology `topology` (a binary built before the topologies existed)."""
    workdir = tempfile.mkdtemp(prefix="sluice-it-check-")
    try:
        path = os.path.join(workdir, "check.yaml")
        redis = {"url": "redis://127.0.0.1:7000/0", "topology": topology,
                 "nodes": ["127.0.0.1:7001"]}
        if topology == "sentinel":
            redis["sentinel_master"] = "mymaster"
        with open(path, "w") as f:
            f.write(to_yaml(gateway_config(
                {"u": ["127.0.0.1:9"]},
                [{"name": "r", "match": {"path_prefix": "/"}, "upstream": "u",
                  "limits": ["l"]}],
                redis=redis, limits={"l": {"key": "ip", "capacity": 1,
                                           "refill_per_second": 1}})) + "\n")
        checked = run_cli(["--config", path, "--check"])
    finally:
        shutil.rmtree(workdir, True)
    if checked.returncode != 0:
        raise AssertionError(f"sluice rejects redis.topology: {topology}:\n{checked.stderr}")


def topology_redis(url_node: str, nodes, topology: str, **extra) -> dict:
    """The redis section of a config naming a cluster's seeds or a set's sentinels."""
    return {"url": f"redis://{url_node}/0", "topology": topology, "nodes": list(nodes),
            **extra}


class SharedCluster:
    """Mixed into a test class: a 3-primary Redis Cluster its tests share
    (cls.cluster), skipped where redis-cli cannot make one."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        require_binaries("redis-server", "redis-cli")
        require_topology_support("cluster")
        from testkit.cluster import RedisCluster
        cls.cluster = RedisCluster()
        cls.addClassCleanup(cls.cluster.stop)


def redis_nodes(sluice: Sluice) -> list[dict]:
    """/readyz dependencies.redis_nodes: one object per node (address, role, state,
    slots, last_error)."""
    return readyz(sluice)[1].get("dependencies", {}).get("redis_nodes", [])


class Load:
    """Requests sent from `clients` threads, each with a keep-alive connection per
    port, until the jobs run out or stop() is called. A job is (port, target,
    headers, tag); every answer is kept as a Result, every exception (a socket error,
    a timeout) in `errors`."""

    class Result:
        __slots__ = ("tag", "target", "status", "remaining", "at")

        def __init__(self, tag, target, status, remaining, at):
            self.tag, self.target, self.status = tag, target, status
            self.remaining, self.at = remaining, at

        @property
        def decided(self) -> bool:
            """Redis decided it (an answer of a failed decision has no rate-limit headers)."""
            return self.remaining is not None

        def __repr__(self):
            return f"{self.status} {self.target} {self.tag} remaining={self.remaining}"

    def __init__(self, jobs, clients: int = 16, timeout: float = 10.0):
        self._jobs = iter(jobs)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.timeout = timeout
        self.results: list[Load.Result] = []
        self.errors: list[str] = []
        self.threads = [threading.Thread(target=self._client, daemon=True)
                        for _ in range(clients)]

    def _next(self):
        with self._lock:
            return None if self._stop.is_set() else next(self._jobs, None)

    def _client(self):
        conns: dict[int, Client] = {}
        try:
            while (job := self._next()) is not None:
                port, target, headers, tag = job
                try:
                    conn = conns.setdefault(port, Client(port, timeout=self.timeout))
                    status, h, _ = conn.request("GET", target, headers=headers)
                    remaining = h.get("X-RateLimit-Remaining")
                    result = Load.Result(tag, target, status,
                                         None if remaining is None else int(remaining),
                                         time.monotonic())
                    with self._lock:
                        self.results.append(result)
                except Exception as e:  # noqa: BLE001  reported by the test
                    with self._lock:
                        self.errors.append(f"{target} {tag}: {e!r}")
                    conns.pop(port).close()
        finally:
            for conn in conns.values():
                conn.close()

    def start(self) -> "Load":
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self._stop.set()

    def join(self, timeout: float = 120.0) -> "Load":
        deadline = time.monotonic() + timeout
        for t in self.threads:
            t.join(max(0.0, deadline - time.monotonic()))
        if any(t.is_alive() for t in self.threads):
            self.stop()
            raise AssertionError(f"load clients still running after {timeout}s")
        return self

    def run(self, timeout: float = 120.0) -> "Load":
        return self.start().join(timeout)

    def by_tag(self) -> dict:
        """tag -> [Result] in the order the answers came."""
        tags: dict = {}
        for r in sorted(self.results, key=lambda r: r.at):
            tags.setdefault(r.tag, []).append(r)
        return tags

    def allowed_remaining(self) -> dict:
        """tag -> X-RateLimit-Remaining of the answers Redis allowed, in arrival order."""
        return {tag: [r.remaining for r in results if r.status == 200 and r.decided]
                for tag, results in self.by_tag().items()}

    def statuses(self, results=None) -> dict[int, int]:
        counts: dict[int, int] = {}
        for r in self.results if results is None else results:
            counts[r.status] = counts.get(r.status, 0) + 1
        return counts


TINY_RATE = 0.001  # a refill that refills nothing within a test


def limit(key, capacity, rate=TINY_RATE, **extra) -> dict:
    return {"key": key, "capacity": capacity, "refill_per_second": rate, **extra}


def route(name, prefix, limits, upstream="echo", **extra) -> dict:
    return {"name": name, "match": {"path_prefix": prefix}, "upstream": upstream,
            "limits": list(limits), **extra}


def assert_serves_without_redis(case: unittest.TestCase, sluice: Sluice, reason: str,
                                open_target="/open/x", closed_target="/closed/x"):
    """Redis is unusable for a reason the operator must be told: the process serves,
    fails open (no rate-limit headers) and closed (503), /readyz reports redis not
    ready with `reason` in its dependencies, sluice_redis_up is 0, the log says it."""
    def not_ready():
        status, doc = readyz(sluice)
        deps = doc.get("dependencies", {})
        return ((status, doc) if deps.get("redis") != "ready" and reason in json.dumps(deps)
                else None)
    status, doc = wait_until(not_ready, 10, interval=0.05,
                             message=f"/readyz to say redis is not ready: {reason}")
    case.assertEqual(status, 200, doc)  # the gateway itself takes traffic
    status, h, _ = request(sluice.port, "GET", open_target)
    case.assertEqual(status, 200)
    case.assertIsNone(h.get("X-RateLimit-Remaining"), dict(h))
    case.assertEqual(request(sluice.port, "GET", closed_target)[0], 503)
    case.assertEqual(sluice.metric("sluice_redis_up"), 0)
    wait_until(lambda: reason in sluice.stdout() + sluice.stderr(), 5,
               message=f"the log to say {reason!r}")


class PythonUpstream:
    """A threaded HTTP/1.1 upstream on a free 127.0.0.1 port whose GET is
    `do_get(handler, query)` (query: parse_qs of the target); stop() ends it."""

    def __init__(self, do_get):
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                do_get(self, urllib.parse.parse_qs(urllib.parse.urlsplit(self.path).query))

        self.server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
        self.server.daemon_threads = True
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
