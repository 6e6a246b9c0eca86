"""The servers scripts/bench measures, started on free 127.0.0.1 ports through the
testkit and stopped by PID: sluice-echo, sluice-wsbench's echo server (the WebSocket
rows), redis-server, Sluice and nginx.

Every process is in a session of its own (a Ctrl-C reaches the driver, which stops
them) and recorded with its start time in $SLUICE_BENCH_WORKDIR/pids, so the shell
wrapper can stop what is left if the driver dies. Stack.stop_all() stops them here,
newest first. `load_script()` is the one place that knows where the rate-limit
Lua script lives.
"""

from __future__ import annotations

import json
import os
import re

from testkit import procfs
from testkit.cluster import RedisCluster
from testkit.configs import to_yaml
from testkit.http import request
from testkit.ports import free_port, port_open
from testkit.processes import (BUILD_DIR, SOURCE_DIR, Echo, GrpcUpstream, Process, Redis,
                               Sluice, faketime_env, wait_until)
from testkit.sentinel import RedisSentinelSet
from testkit.tls import make_ca, make_server_cert

ROOT = SOURCE_DIR
NGINX_DIR = os.path.join(ROOT, "loadtest", "nginx")
NGINX_MODULES = "/usr/lib/nginx/modules"

ALLOW_ALL = (1_000_000_000, 1_000_000_000)  # capacity, refill/s: never empties
DENY_MOST = (100, 100)  # ~100 allowed per second, the rest 429
DENY_ALL = (1, 0.001)  # one request allowed, then every one 429 for the whole run
LEASE_TOKENS = 50  # row 13's lease_tokens
SLIDING_WINDOW_MS = 60_000  # row 14's window
START_TIMEOUT = 10  # seconds for a server to serve
CLUSTER_KEYS = 10_000  # rows 9 and 10: API keys sent in turn, their buckets on every primary
STORE_CONSUMERS = 100_000  # rows 22 and 23: consumers imported into the consumer store
COLD_CACHE = 1_000  # row 23: cache entries per worker, far fewer than the keys sent
# The WebSocket echo server and load client of rows 17-20 (tests/support/ws_bench.cpp).
WSBENCH_BIN = os.environ.get("SLUICE_WSBENCH_BIN", os.path.join(BUILD_DIR, "sluice-wsbench"))
WS_SIZES = (16 * 1024, 128)  # message sizes: rows 17 and 18, rows 19 and 20
WS_PATH = "/ws/bench"
# Rows 31 and 32: a 64 KiB event stream shaped as a streamed chat completion.
STREAM_PATH = "/__sse/65536"
# Rows 33 and 34: the same stream as a model server sends it, an event per
# chunk, one every 100 µs.
PACED_STREAM_PATH = "/__sse/65536?pace_us=100"
# nginx's TLS 1.3 suites in Sluice's order of preference, so that rows 15 and 16
# (and --http2's h2 rows) negotiate the same suite.
NGINX_TLS13_ORDER = ("ssl_prefer_server_ciphers on;\n    ssl_conf_command Ciphersuites "
                     "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256;")
# Row 28's access log: about the fields and size of Sluice's line.
NGINX_JSON_LOG = (
    "log_format bench_json escape=json '{{\"time\":\"$time_iso8601\",\"request_id\":"
    "\"$request_id\",\"client\":\"$remote_addr\",\"method\":\"$request_method\","
    "\"path\":\"$uri\",\"query\":\"$args\",\"protocol\":\"$server_protocol\","
    "\"status\":$status,\"bytes_sent\":$bytes_sent,\"request_length\":$request_length,"
    "\"duration_ms\":$request_time,\"upstream\":\"$upstream_addr\","
    "\"upstream_status\":\"$upstream_status\",\"upstream_ms\":\"$upstream_response_time\","
    "\"user_agent\":\"$http_user_agent\",\"route\":\"bench\"}}';\n"
    "  access_log {path} bench_json buffer=64k flush=1s;")


def load_script() -> str:
    """The token-bucket Lua script, the very file the build embeds into the gateway."""
    path = os.path.join(ROOT, "middleware", "ratelimit", "algorithms", "decide_limits.lua")
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def sluice_config(port: int, admin: int, upstream: int, redis_port: int | None,
                  limit: tuple[float, float] | None, threads: int = 1,
                  key: str = "ip", key_prefix: str = "sluice:",
                  global_limit: tuple[float, float] | None = None,
                  redis: dict | None = None, more_limits: dict | None = None,
                  more_routes: list[dict] = (), lease_tokens: int | None = None,
                  local: dict | None = None, on_redis_failure: str = "open",
                  window_ms: int | None = None, tls: dict | None = None,
                  api_keys: dict | None = None, plans: list[str] | None = None,
                  quota_period: str | None = None, concurrency: bool = False,
                  settled: bool = False, access_log: bool = False,
                  access_log_flush_ms: int | None = None,
                  http2: bool = False, upstream_protocol: str | None = None,
                  sections: dict | None = None, route: dict | None = None,
                  upstream_extra: dict | None = None,
                  more_upstreams: dict | None = None) -> dict:
    """One route to the echo upstream; limited by `limit` (capacity, refill/s) per `key`,
    and by `global_limit` on one bucket shared by every request when given, or not
    limited when `limit` is None; on_redis_failure open unless told. `redis`: keys
    that replace or add to the redis section (a cluster's or a sentinel set's url,
    topology and nodes; timeout_ms). more_limits / more_routes: further limits and
    routes, the routes matched before the catch-all one. lease_tokens: the `limit`'s
    lease size; local: the local section (deny_cache, fleet_size); window_ms: `limit`
    is a sliding window of `capacity` per window_ms instead of a token bucket; tls: the
    server.tls section (the listener then speaks TLS only); api_keys, plans: those
    sections (the consumers of rows 21-23); quota_period: `limit` is a calendar quota of
    `capacity` per that period instead (row 24); concurrency: `limit` is a concurrency
    limit of `capacity` slots instead (row 25); settled: the route's cost (500) is settled
    from the response, the echo reporting 120 (row 26); access_log: the access log on, its
    lines going to the gateway's stdout file (row 27); access_log_flush_ms: how long
    its lines may be gathered (row 27: 1000, as row 28's nginx); http2: server.http2 on (h2c on the
    plain listener, h2 by ALPN with tls: scripts/bench --http2); upstream_protocol: the
    upstream's protocol (h2c: scripts/bench --grpc); sections: more top-level sections
    (auth, ip_access: rows 29 and 30); route: more keys of the bench route (auth, cors);
    upstream_extra: keys that replace or add to the echo upstream's (servers, balance:
    scripts/bench --balance); more_upstreams: further upstreams (a split's)."""
    capacity, rate = limit or ALLOW_ALL
    limits = {"bench": {"key": key, "capacity": capacity, "refill_per_second": rate}}
    if window_ms:
        limits["bench"] = {"key": key, "algorithm": "sliding_window", "capacity": capacity,
                           "window_ms": window_ms}
    if quota_period:
        limits["bench"] = {"key": key, "algorithm": "quota", "capacity": capacity,
                           "period": quota_period}
    if concurrency:
        limits["bench"] = {"key": key, "algorithm": "concurrency", "capacity": capacity}
    if lease_tokens:
        limits["bench"]["lease_tokens"] = lease_tokens
    if global_limit:
        limits["global"] = {"key": "global", "capacity": global_limit[0],
                            "refill_per_second": global_limit[1]}
    return {
        "server": {"listen": f"127.0.0.1:{port}", "threads": threads,
                   **({"tls": tls} if tls else {}),
                   **({"http2": {"enabled": True}} if http2 else {})},
        "admin": {"listen": f"127.0.0.1:{admin}"},
        "log": {"level": "warn", "access_log": access_log,
                **({"access_log_flush_ms": access_log_flush_ms}
                   if access_log_flush_ms is not None else {})},
        **({"local": local} if local else {}),
        **({"api_keys": api_keys} if api_keys else {}),
        **({"plans": plans} if plans else {}),
        **(sections or {}),
        "redis": {"url": f"redis://127.0.0.1:{redis_port}/0", "timeout_ms": 50,
                  "key_prefix": key_prefix, **(redis or {})},
        "upstreams": {"echo": {"servers": [f"127.0.0.1:{upstream}"],
                               "max_idle_connections": 64,
                               **({"protocol": upstream_protocol} if upstream_protocol
                                  else {}),
                               **(upstream_extra or {})},
                      **(more_upstreams or {})},
        "limits": {**limits, **(more_limits or {})},
        "routes": [*more_routes,
                   {"name": "bench", "match": {"path_prefix": "/"}, "upstream": "echo",
                    "limits": list(limits) if limit else [],
                    "on_redis_failure": on_redis_failure,
                    **(route or {}),
                    **({"cost": 500,
                        "cost_from_response": {"header": "X-Usage-Tokens"},
                        "request_headers": {"set": {"X-Echo-Usage": "120"}}}
                       if settled else {})}],
    }


def cluster_redis(seeds: list[str]) -> dict:
    """The redis keys of sluice_config() for a Redis Cluster known by its seed nodes."""
    return {"url": f"redis://{seeds[0]}/0", "topology": "cluster", "nodes": seeds[1:]}


def redis_state(admin: int) -> str | None:
    """dependencies.redis of a Sluice's /readyz ("ready", ...), None when unreadable."""
    _, _, body = request(admin, "GET", "/readyz", timeout=2)
    try:
        return json.loads(body).get("dependencies", {}).get("redis")
    except ValueError:
        return None


def running(process: Process) -> bool:
    """True while the process runs; RuntimeError with its output once it has exited."""
    if not process.alive():
        raise RuntimeError(f"{process.name} exited early\n{process.output_tail(2000)}")
    return True


class Row:
    """One line of the speed table: a server on `port` and what was measured on it.
    ws_size: a WebSocket row (measured with sluice-wsbench's client, messages of that
    many bytes echoed, instead of wrk); h2: an HTTP/2 row (h2load, h2_rows.py)."""

    def __init__(self, num: int, name: str, port: int, gateway: Process,
                 admin: int | None = None, redis: list[Process] = (),
                 wrk_args: list[str] = (), scheme: str = "http", ws_size: int | None = None,
                 path: str | None = None, h2: bool = False):
        self.num = num
        # h2load instead of wrk (HTTP/2 clients: h2c, or h2 with scheme https); wrk_args
        # are then more h2load arguments (a gRPC call's body and headers).
        self.h2 = h2
        self.path = path  # what wrk asks for (None: measure.PATH)
        self.scheme = scheme  # https: TLS terminated by the gateway
        self.ws_size = ws_size
        self.name = name
        self.port = port
        self.gateway = gateway
        self.admin = admin  # Sluice rows: the admin port (metrics)
        self.redis = list(redis)  # the Redis servers (a cluster's primaries) it reaches
        self.wrk_args = list(wrk_args)  # after "--" of report.lua: the key count
        self.pinned: list[dict] = []
        self.unpinned: dict | None = None
        self.single: dict | None = None
        self.tls: str | None = None  # https rows: the protocol and suite negotiated
        self.cache_warmup: dict | None = None  # row 22: its consumer cache filling up


class WsEcho(Process):
    """sluice-wsbench echo on an ephemeral port, read from its first stdout line."""

    def __init__(self, workdir: str, name: str = "ws-echo", wrapper=(), **options):
        super().__init__(name, [*wrapper, WSBENCH_BIN, "echo", "--listen", "127.0.0.1:0",
                                "--quiet"], workdir, **options)
        self.port = self._listening_port(r"listening 127\.0\.0\.1:(\d+)$",
                                         "sluice-wsbench echo")


class Stack:
    """Everything one run starts; servers on `server_cpus` when pinning."""

    def __init__(self, workdir: str, server_cpus: str | None, pid_file: str | None = None):
        """`pid_file`: where the PIDs are recorded (default workdir/pids; the
        shell's safety net stops what the top one lists)."""
        self.workdir = workdir
        self.started: list[Process] = []
        first, _, last = (server_cpus or "").partition("-")
        self.cpus = set(range(int(first), int(last or first) + 1)) if server_cpus else set()
        self.options = {"wrapper": ("taskset", "-c", server_cpus) if server_cpus else (),
                        "cwd": workdir, "new_session": True,
                        "pid_file": pid_file or os.path.join(workdir, "pids")}

    def _own(self, process: Process) -> Process:
        self.started.append(process)
        return process

    def echo(self, name: str = "echo", delay_ms: int = 0, status: int = 200) -> Echo:
        return self._own(Echo(self.workdir, name=name, delay_ms=delay_ms, status=status,
                              **self.options))

    def grpc_upstream(self) -> GrpcUpstream:
        return self._own(GrpcUpstream(self.workdir, **self.options))

    def ws_echo(self) -> WsEcho:
        return self._own(WsEcho(self.workdir, **self.options))

    def redis(self, name: str, port: int | None = None) -> Redis:
        """A redis-server on `port` (a free one when None)."""
        return self._own(Redis(self.workdir, port=port, name=name,
                               extra_args=("--loglevel", "warning"), **self.options))

    def sluice(self, name: str, binary: str | None = None, clock: str | None = None,
               **config) -> Sluice:
        """A Sluice of sluice_config(free ports, **config), healthy; `binary`: another
        sluice binary than the one measured (scripts/bench --compare); `clock`: a
        faketime offset ("+2m") its system clock runs at (its monotonic clock left
        alone)."""
        text = "# generated by scripts/bench\n" + to_yaml(
            sluice_config(free_port(), free_port(), **config)) + "\n"
        options = dict(self.options)
        if clock:
            options["env"] = faketime_env(clock)
        return self._own(Sluice(self.workdir, text, name=name, binary=binary, **options))

    def wait_redis(self, gateway: Sluice, ready: bool = True):
        """Until the gateway's Redis connection is ready (or, ready=False, is not)."""
        what = "redis ready" if ready else "redis not ready"
        wait_until(lambda: running(gateway) and (redis_state(gateway.admin_port) == "ready")
                   == ready, START_TIMEOUT, interval=0.05, message=f"{gateway.name}: {what}")

    def nginx(self, name: str, template: str, upstream: int, **values) -> tuple[Process, int]:
        """nginx from loadtest/nginx/TEMPLATE with its @PLACEHOLDERS@ filled in."""
        port = free_port()
        prefix = os.path.join(self.workdir, name)
        os.makedirs(prefix)
        with open(os.path.join(NGINX_DIR, template)) as f:
            text = f.read()
        values = {"PREFIX": prefix, "LISTEN": f"127.0.0.1:{port}", "TLS": "", "WORKERS": 1,
                  "UPSTREAM": f"127.0.0.1:{upstream}", "LUA_DIR": NGINX_DIR,
                  "ACCESS_LOG": "access_log off;",
                  "USER_LINE": "user root;" if os.geteuid() == 0 else "", **values}
        for k, v in values.items():
            text = text.replace(f"@{k}@", str(v))
        left = re.findall(r"@[A-Z_]+@", text)
        if left:
            raise RuntimeError(f"{template}: unfilled placeholders {left}")
        conf = os.path.join(prefix, "nginx.conf")
        with open(conf, "w") as f:
            f.write(text)
        wrapper = self.options["wrapper"]
        options = {k: v for k, v in self.options.items() if k != "wrapper"}
        proc = self._own(Process(name, [*wrapper, "nginx", "-p", prefix, "-e",
                                        os.path.join(prefix, "error.log"), "-c", conf,
                                        "-g", "daemon off;"], self.workdir, **options))
        wait_until(lambda: running(proc) and port_open(port) and len(proc.pids()) >= 2,
                   START_TIMEOUT, interval=0.05, message=f"{name} on {port}")
        return proc, port

    def cluster(self, name: str, primaries: int = 3, replicas: int = 0) -> RedisCluster:
        """A Redis Cluster (tests/testkit/cluster.py) in a directory of its own, its
        nodes pinned like every server and stopped by stop_all()."""
        workdir = os.path.join(self.workdir, name)
        os.makedirs(workdir)
        cluster = RedisCluster(workdir, primaries=primaries, replicas=replicas,
                               pid_file=self.options["pid_file"])
        return self._adopt(cluster)

    def sentinel_set(self, name: str) -> RedisSentinelSet:
        """A Sentinel set (tests/testkit/sentinel.py), like cluster()."""
        workdir = os.path.join(self.workdir, name)
        os.makedirs(workdir)
        return self._adopt(RedisSentinelSet(workdir, pid_file=self.options["pid_file"]))

    def _adopt(self, group):
        if self.cpus:
            procfs.set_affinity(group.pids(), self.cpus)
        self.started.extend(group.processes)
        return group

    def dead(self, spared=()) -> Process | None:
        """The first started process that is not running, other than those `spared`."""
        return next((p for p in self.started if not p.alive() and p not in spared), None)

    def stop(self, process: Process):
        process.stop()
        self.started.remove(process)

    def stop_group(self, group):
        """Stops a cluster or sentinel set of cluster() / sentinel_set()."""
        for process in group.processes:
            if process in self.started:
                self.started.remove(process)
        group.stop()

    def stop_all(self):
        while self.started:
            self.started.pop().stop()


def start_rows(stack: Stack, script_file: str, sha: str, compare: str | None = None) -> list[Row]:
    """Starts the servers of the twenty-three rows and returns the rows. Row 7's own Redis is
    stopped (and forgotten) once its Sluice had connected. Rows 9 and 10 share a
    3-primary Redis Cluster (no replicas: none of the other rows has one either);
    row 11 is row 9's load and limit on row 5's single Redis. Row 6 turns the denial
    cache off (every 429 asks Redis); rows 12 (the denial cache) and 13 (leases)
    each have a Redis of their own, so its counters hold only that row's calls
    (lease refunds after a measurement included); row 112 (--compare) shares row
    12's, measured at another time. Rows 17-20 echo WebSocket messages:
    sluice-wsbench's echo server directly (17, 19) and through a Sluice without limits
    whose one upstream it is (18, 20), 16 KiB messages (17, 18) and 128 bytes (19, 20)."""
    from h2_rows import start_h2_rows  # it builds on this module

    echo = stack.echo()
    up = echo.port
    redis = stack.redis("redis")
    doomed = stack.redis("redis-row7")
    deny_redis = stack.redis("redis-row12")
    lease_redis = stack.redis("redis-row13")
    cluster = stack.cluster("cluster")
    ws_echo = stack.ws_echo()
    seeds = cluster.seeds()

    n2 = stack.nginx("nginx-plain", "plain.conf.in", up)
    n3 = stack.nginx("nginx-limit-req", "limit_req.conf.in", up)
    if not os.path.exists(os.path.join(NGINX_MODULES, "ngx_http_lua_module.so")):
        raise RuntimeError("libnginx-mod-http-lua is not installed (row 8)")
    make_ca(stack.workdir, "bench-ca")  # rows 15 and 16: one certificate (P-256) for both
    cert, key = make_server_cert(stack.workdir, "bench-ca", "bench-server")
    n15 = stack.nginx("nginx-tls", "plain.conf.in", up,
                      TLS=f" ssl;\n    ssl_certificate {cert};\n    ssl_certificate_key {key};\n"
                          # nginx 1.22 offers TLS 1.2 at most unless told: both rows
                          # then agree on TLS 1.3 with the same suite (the report checks).
                          "    ssl_protocols TLSv1.2 TLSv1.3;\n"
                          # Sluice prefers TLS_AES_128_GCM_SHA256 (its server order);
                          # nginx follows the client's (AES-256 first) unless told.
                          f"    {NGINX_TLS13_ORDER}\n"
                          "    ssl_session_cache shared:SSL:10m")
    # Row 28: row 2 with an access log like Sluice's (a JSON line per request), written
    # as nginx is told to for speed: through a 64 KiB buffer flushed at least once a second.
    n28 = stack.nginx("nginx-access-log", "plain.conf.in", up, ACCESS_LOG=NGINX_JSON_LOG.format(
        path=os.path.join(stack.workdir, "nginx-access.log")))
    n8 = stack.nginx("nginx-lua", "lua_redis.conf.in", up, REDIS_PORT=redis.port,
                     SCRIPT_FILE=script_file, SCRIPT_SHA=sha, CAPACITY=ALLOW_ALL[0],
                     RATE=ALLOW_ALL[1])
    s4 = stack.sluice("sluice-nolimit", upstream=up, redis_port=redis.port, limit=None)
    # Row 27: row 4 with the access log on (one JSON line per request to a file).
    s27 = stack.sluice("sluice-access-log", upstream=up, redis_port=redis.port, limit=None,
                       access_log=True, access_log_flush_ms=1000)
    s5 = stack.sluice("sluice-allow", upstream=up, redis_port=redis.port, limit=ALLOW_ALL)
    # Rows 35 and 36: row 5 with tracing on, 1 % and all of the requests recorded, their
    # spans sent to a collector of their own (a sluice-echo: it reads each export and
    # answers 200, so every span counts as exported and none waits).
    collector = stack.echo("collector")

    def traced(ratio):
        return {"tracing": {"endpoint": f"http://127.0.0.1:{collector.port}/v1/traces",
                            "sampling_ratio": ratio, "max_queue_spans": 65536}}
    s35 = stack.sluice("sluice-traced-1pct", upstream=up, redis_port=redis.port,
                       limit=ALLOW_ALL, sections=traced(0.01))
    s36 = stack.sluice("sluice-traced-all", upstream=up, redis_port=redis.port,
                       limit=ALLOW_ALL, sections=traced(1))
    s6 = stack.sluice("sluice-deny", upstream=up, redis_port=redis.port, limit=DENY_MOST,
                      local={"deny_cache": False})
    s7 = stack.sluice("sluice-failopen", upstream=up, redis_port=doomed.port, limit=ALLOW_ALL)
    s9 = stack.sluice("sluice-cluster", upstream=up, redis_port=None, limit=ALLOW_ALL,
                      key="api_key", redis=cluster_redis(seeds))
    s10 = stack.sluice("sluice-cluster-global", upstream=up, redis_port=None, limit=ALLOW_ALL,
                       key="api_key", global_limit=ALLOW_ALL, redis=cluster_redis(seeds))
    s11 = stack.sluice("sluice-keys", upstream=up, redis_port=redis.port, limit=ALLOW_ALL,
                       key="api_key")
    s12 = stack.sluice("sluice-deny-cache", upstream=up, redis_port=deny_redis.port,
                       limit=DENY_ALL)
    s14 = stack.sluice("sluice-window", upstream=up, redis_port=redis.port, limit=ALLOW_ALL,
                       key="api_key", window_ms=SLIDING_WINDOW_MS)
    s16 = stack.sluice("sluice-tls", upstream=up, redis_port=redis.port, limit=None,
                       tls={"cert_file": cert, "key_file": key})
    s13 = stack.sluice("sluice-lease", upstream=up, redis_port=lease_redis.port,
                       limit=ALLOW_ALL, key="global", lease_tokens=LEASE_TOKENS)
    s18 = stack.sluice("sluice-websocket", upstream=ws_echo.port, redis_port=redis.port,
                       limit=None)
    # Rows 21-23: row 11's limit, its 10,000 keys held by consumers: listed in the YAML
    # (21), in the consumer store with 100,000 consumers and a cache that holds every
    # key sent (22), and with a cache of COLD_CACHE entries that they keep pushing
    # each other out of, so that every request looks its key up (23).
    secret = os.path.join(stack.workdir, "bench-key-secret")
    with open(secret, "w") as f:
        f.write("bench-consumer-store-secret-0123456789\n")
    os.chmod(secret, 0o600)
    yaml_consumers = [{"key": f"bench-{i}", "plan": "free", "id": f"c{i}"}
                      for i in range(CLUSTER_KEYS)]
    s21 = stack.sluice("sluice-consumers-yaml", upstream=up, redis_port=redis.port,
                       limit=ALLOW_ALL, key="api_key",
                       api_keys={"consumers": yaml_consumers}, redis={"key_secret_file": secret})
    store = {"store": "redis", "cache_ttl_ms": 600_000, "unknown_cache_ttl_ms": 600_000}
    s22 = stack.sluice("sluice-consumers-store", upstream=up, redis_port=redis.port,
                       limit=ALLOW_ALL, key="api_key", plans=["free", "pro"], api_keys=store,
                       redis={"key_secret_file": secret})
    s23 = stack.sluice("sluice-consumers-cold", upstream=up, redis_port=redis.port,
                       limit=ALLOW_ALL, key="api_key", plans=["free", "pro"],
                       api_keys={**store, "cache_max_entries": COLD_CACHE},
                       redis={"key_secret_file": secret})

    # Row 24: row 11's load on a calendar quota (a day of UTC) instead of a token bucket.
    s24 = stack.sluice("sluice-quota", upstream=up, redis_port=redis.port, limit=ALLOW_ALL,
                       key="api_key", quota_period="day")
    # Row 25: the same load on a concurrency limit per API key (a slot taken and given
    # back by every request).
    s25 = stack.sluice("sluice-concurrency", upstream=up, redis_port=redis.port,
                       limit=ALLOW_ALL, key="api_key", concurrency=True)
    # Row 26: the same load on a route whose cost (500) is settled from the response:
    # the echo reports 120, so every request gets 380 back.
    s26 = stack.sluice("sluice-settled", upstream=up, redis_port=redis.port, limit=ALLOW_ALL,
                       key="api_key", settled=True)

    # Row 29: row 11's load and limit, each of its 10,000 callers a JWT (HS256) whose
    # sub keys the limit on a route with auth: required (verified once per worker, then
    # from the cache). Row 30: row 4 with a top-level deny list of 100,000 entries and
    # CORS on the route, every request carrying an allowed Origin.
    tokens_file = write_bench_tokens(stack.workdir, secret, CLUSTER_KEYS)
    jwt_sections = {"auth": {"jwt": {"providers": [
        {"name": "bench", "issuer": BENCH_ISSUER, "secret_file": secret,
         "consumer_claim": "sub"}]}}}
    s29 = stack.sluice("sluice-jwt", upstream=up, redis_port=redis.port, limit=ALLOW_ALL,
                       key="jwt:sub", route={"auth": "required"}, sections=jwt_sections)
    s30 = stack.sluice("sluice-access", upstream=up, redis_port=redis.port, limit=None,
                       route={"cors": {"allow_origins": [BENCH_ORIGIN]}},
                       sections={"ip_access": {"deny_file": write_bench_deny_list(
                           stack.workdir, 100_000)}})

    # Rows 31 and 32: row 26 with every answer a 64 KiB event stream shaped as a
    # streamed chat completion (sluice-echo /__sse/65536); 31 settles it from the
    # X-Usage-Tokens header as row 26 does, 32 reads the usage from the stream itself
    # (cost_from_response.body): the difference is what reading the body costs.
    s31 = stack.sluice("sluice-stream-header", upstream=up, redis_port=redis.port,
                       limit=ALLOW_ALL, key="api_key", settled=True)
    s32 = stack.sluice("sluice-stream-body", upstream=up, redis_port=redis.port,
                       limit=ALLOW_ALL, key="api_key",
                       route={"cost": 500, "cost_from_response": {"body": "usage.total_tokens"}})

    # --compare: rows 4, 5, 12, 14, 16, 21, 22, 25, 26, 27 and 29 again with another
    # sluice binary, as rows 104, 105, 112, 114, 116, 121, 122, 125, 126, 127 and 129.
    s104 = s105 = s112 = s114 = s116 = s121 = s122 = s125 = s126 = s127 = s129 = None
    if compare:
        s112 = stack.sluice("sluice-deny-cache-compared", binary=compare, upstream=up,
                            redis_port=deny_redis.port, limit=DENY_ALL)
        s127 = stack.sluice("sluice-access-log-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=None, access_log=True,
                            access_log_flush_ms=1000)
        s125 = stack.sluice("sluice-concurrency-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=ALLOW_ALL, key="api_key",
                            concurrency=True)
        s126 = stack.sluice("sluice-settled-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=ALLOW_ALL, key="api_key", settled=True)
        s104 = stack.sluice("sluice-nolimit-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=None)
        s105 = stack.sluice("sluice-allow-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=ALLOW_ALL)
        s114 = stack.sluice("sluice-window-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=ALLOW_ALL, key="api_key",
                            window_ms=SLIDING_WINDOW_MS)
        s116 = stack.sluice("sluice-tls-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=None,
                            tls={"cert_file": cert, "key_file": key})
        s121 = stack.sluice("sluice-consumers-yaml-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=ALLOW_ALL, key="api_key",
                            api_keys={"consumers": yaml_consumers},
                            redis={"key_secret_file": secret})
        s122 = stack.sluice("sluice-consumers-store-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=ALLOW_ALL, key="api_key",
                            plans=["free", "pro"], api_keys=store,
                            redis={"key_secret_file": secret})
        s129 = stack.sluice("sluice-jwt-compared", binary=compare, upstream=up,
                            redis_port=redis.port, limit=ALLOW_ALL, key="jwt:sub",
                            route={"auth": "required"}, sections=jwt_sections)
        for gateway in (s105, s112, s114, s121, s122, s125, s126, s129):
            stack.wait_redis(gateway)

    def compare_rows() -> list[Row]:
        if not compare:
            return []
        binary = os.path.basename(compare)
        return [sluice_row(104, f"row 4 with {binary}", s104),
                sluice_row(105, f"row 5 with {binary}", s105, [redis]),
                sluice_row(112, f"row 12 with {binary}", s112, [deny_redis]),
                sluice_row(114, f"row 14 with {binary}", s114, [redis], keyed),
                sluice_row(116, f"row 16 with {binary}", s116, scheme="https"),
                sluice_row(121, f"row 21 with {binary}", s121, [redis], keyed),
                sluice_row(122, f"row 22 with {binary}", s122, [redis], keyed),
                sluice_row(125, f"row 25 with {binary}", s125, [redis], keyed),
                sluice_row(126, f"row 26 with {binary}", s126, [redis], keyed),
                sluice_row(127, f"row 27 with {binary}", s127),
                sluice_row(129, f"row 29 with {binary}", s129, [redis],
                           [str(CLUSTER_KEYS), tokens_file])]

    for gateway in (s5, s6, s7, s9, s10, s11, s12, s13, s14, s21, s22, s23, s24, s25, s26, s29,
                    s35, s36):
        stack.wait_redis(gateway)
    import_consumers(s22, STORE_CONSUMERS)
    stack.stop(doomed)  # row 7: Redis stopped after Sluice had connected
    stack.wait_redis(s7, ready=False)

    def sluice_row(num, name, gateway, redis=(), wrk_args=(), scheme="http", ws_size=None,
                   path=None):
        return Row(num, name, gateway.port, gateway, admin=gateway.admin_port, redis=redis,
                   wrk_args=wrk_args, scheme=scheme, ws_size=ws_size, path=path)

    big, small = WS_SIZES

    primaries = [node for node, _ in cluster.primaries()]
    keyed = [str(CLUSTER_KEYS)]
    return [
        Row(1, "upstream direct (sluice-echo)", up, echo),
        Row(2, "nginx reverse proxy (keep-alive pool)", n2[1], n2[0]),
        Row(3, "nginx + limit_req (allows all)", n3[1], n3[0]),
        sluice_row(4, "Sluice, no limits", s4),
        sluice_row(5, "Sluice + Redis limit (allows all)", s5, [redis]),
        sluice_row(6, "Sluice + Redis limit (denies most: 429), denial cache off", s6, [redis]),
        sluice_row(7, "Sluice, Redis down, fail-open", s7),
        Row(8, "nginx + Lua + Redis (EVALSHA, cosocket pool)", n8[1], n8[0], redis=[redis]),
        sluice_row(9, "Sluice + Redis Cluster limit (allowing all)", s9, primaries, keyed),
        sluice_row(10, "Sluice + Redis Cluster, per-key + global limit in different slots "
                   "(allowing all)", s10, primaries, keyed),
        sluice_row(11, "Sluice + Redis limit per API key, one Redis (allowing all)", s11,
                   [redis], keyed),
        sluice_row(12, "Sluice + Redis limit, 429 path with the denial cache (denies all)", s12,
                   [deny_redis]),
        sluice_row(13, f"Sluice + hot global key with leasing (lease_tokens {LEASE_TOKENS}, "
                   "allowing all)", s13, [lease_redis]),
        sluice_row(14, "Sluice + Redis sliding-window limit per API key, one Redis (allowing "
                   "all)", s14, [redis], keyed),
        Row(15, "nginx reverse proxy, TLS termination (keep-alive)", n15[1], n15[0],
            scheme="https"),
        sluice_row(16, "Sluice, no limits, TLS termination (keep-alive)", s16, scheme="https"),
        Row(17, f"WebSocket echo direct (sluice-wsbench echo), {size_text(big)} messages",
            ws_echo.port, ws_echo, ws_size=big),
        sluice_row(18, f"WebSocket echo via Sluice (no limits), {size_text(big)} messages", s18,
                   ws_size=big),
        Row(19, f"WebSocket echo direct (sluice-wsbench echo), {size_text(small)} messages",
            ws_echo.port, ws_echo, ws_size=small),
        sluice_row(20, f"WebSocket echo via Sluice (no limits), {size_text(small)} messages",
                   s18, ws_size=small),
        sluice_row(21, "row 11 with its 10,000 keys as YAML consumers (api_keys.consumers)",
                   s21, [redis], keyed),
        sluice_row(22, f"row 11 with its 10,000 keys among {STORE_CONSUMERS:,} consumers in "
                   "the consumer store, cache warm (all hits)", s22, [redis], keyed),
        sluice_row(23, f"row 22 with a cache of {COLD_CACHE:,} entries per worker (every "
                   "request a lookup)", s23, [redis], keyed),
        sluice_row(24, "row 11 with a daily quota per API key instead of its token bucket "
                   "(allowing all)", s24, [redis], keyed),
        sluice_row(25, "row 11 with a concurrency limit per API key instead of its token "
                   "bucket (allowing all; a slot taken and given back per request)", s25,
                   [redis], keyed),
        sluice_row(26, "row 11 with its cost (500) settled from the response (the echo "
                   "reports 120: every request refunded 380)", s26, [redis], keyed),
        sluice_row(27, "row 4 with the access log on (a JSON line per request to a file, "
                   "gathered as row 28's: access_log_flush_ms 1000)", s27),
        Row(28, "row 2 with nginx's access log on (a JSON line per request, buffer=64k "
            "flush=1s)", n28[1], n28[0]),
        sluice_row(29, "row 11 with each caller a JWT (HS256, auth: required) whose sub keys "
                   "the limit, verified once per worker then cached", s29, [redis],
                   [str(CLUSTER_KEYS), tokens_file]),
        sluice_row(30, "row 4 with a 100,000-entry deny list and CORS on the route (every "
                   "request from an allowed Origin)", s30, wrk_args=["0", "", BENCH_ORIGIN]),
        sluice_row(31, "row 26 with every answer a 64 KiB event stream (a streamed chat "
                   "completion), settled from the X-Usage-Tokens header", s31, [redis], keyed,
                   path=STREAM_PATH),
        sluice_row(32, "row 31 with the usage read from the stream itself "
                   "(cost_from_response.body: usage.total_tokens)", s32, [redis], keyed,
                   path=STREAM_PATH),
        sluice_row(33, "row 31 with the stream sent as a model server sends it (an event "
                   "per chunk, one every 100 µs)", s31, [redis], keyed, path=PACED_STREAM_PATH),
        sluice_row(34, "row 33 with the usage read from the stream itself", s32, [redis], keyed,
                   path=PACED_STREAM_PATH),
        sluice_row(35, "row 5 with tracing on, 1 % of the requests recorded (OTLP spans to a "
                   "collector)", s35, [redis]),
        sluice_row(36, "row 5 with tracing on, every request recorded (three spans each)", s36,
                   [redis]),
        *start_h2_rows(stack, up, redis, cert, key),
        *compare_rows(),
    ]


BENCH_ISSUER = "https://bench.sluice.test/"
BENCH_ORIGIN = "https://app.bench.test"


def write_bench_tokens(workdir: str, secret_file: str, count: int) -> str:
    """A file of `count` HS256 JWTs (one per line, sub bench-0 ..), signed with the
    secret file's bytes, valid for a day: row 29's callers."""
    import base64
    import hashlib
    import hmac
    import time

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    with open(secret_file, "rb") as f:
        secret = f.read().rstrip(b"\r\n")
    header = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    exp = int(time.time()) + 86400
    path = os.path.join(workdir, "bench-tokens.txt")
    with open(path, "w") as f:
        for i in range(count):
            payload = b64(json.dumps({"iss": BENCH_ISSUER, "sub": f"bench-{i}",
                                      "exp": exp}).encode())
            body = f"{header}.{payload}"
            sig = b64(hmac.new(secret, body.encode(), hashlib.sha256).digest())
            f.write(f"{body}.{sig}\n")
    return path


def write_bench_deny_list(workdir: str, count: int) -> str:
    """`count` random IPv4 prefixes away from 127.0.0.0/8 (the bench's own client): row
    30's deny list."""
    import random
    rng = random.Random(30)
    path = os.path.join(workdir, "bench-deny.txt")
    with open(path, "w") as f:
        for _ in range(count):
            f.write(f"{rng.randrange(1, 126)}.{rng.randrange(256)}.{rng.randrange(256)}."
                    f"{rng.randrange(256)}/{rng.choice([16, 24, 28, 32])}\n")
    return path


def import_consumers(gateway: Sluice, count: int):
    """Consumers c0.. holding keys bench-0.. (the keys report.lua sends), through the
    gateway's admin API; the store is shared with every gateway on that Redis."""
    def lines():
        for start in range(0, count, 1000):
            yield "".join(json.dumps({"id": f"c{i}", "keys": [f"bench-{i}"], "plan": "free"})
                          + "\n" for i in range(start, min(start + 1000, count))).encode()
    status, _, body = request(gateway.admin_port, "POST", "/consumers/import", body=lines(),
                              chunked=True, timeout=300,
                              headers={"Content-Type": "application/x-ndjson"})
    result = json.loads(body) if status == 200 else {}
    if status != 200 or result.get("failed_count"):
        raise RuntimeError(f"importing the bench's consumers failed: {status} {body[:300]!r}")


def size_text(size: int) -> str:
    """16 KiB, 128 B."""
    return f"{size // 1024} KiB" if size >= 1024 and size % 1024 == 0 else f"{size} B"
