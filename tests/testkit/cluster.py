"""A real Redis Cluster on 127.0.0.1: redis-server processes with cluster support
(each with its cluster bus on a free port of its own),
joined by `redis-cli --cluster create`, polled (never fixed sleeps) until every
live node reports cluster_state:ok, all agree on who owns which slot, every slot
is owned by a live primary and every replica's link is up.

The nodes time out quickly (cluster-node-timeout 1000 ms, so a replica takes over
a dead primary within about 2 s), accept a failover whatever the age of their
data (cluster-replica-validity-factor 0), and by default keep serving the slots
they own while another primary is down (cluster-require-full-coverage no), so
that only the dead primary's slots fail. Every process is stopped by PID.
"""

from __future__ import annotations

import shutil
import signal
import subprocess

from .ports import free_port
from .processes import START_TIMEOUT, ProcessGroup, Redis, wait_until
from .resp import redis_call

SLOTS = 16384
NODE_TIMEOUT_MS = 1000
CREATE_TIMEOUT = 60.0  # seconds for redis-cli --cluster create and the first ok


def redis_cli() -> str:
    return shutil.which("redis-cli") or "redis-cli"


def info_fields(text: bytes) -> dict[str, str]:
    """The `name:value` lines of an INFO or CLUSTER INFO reply."""
    fields = {}
    for line in text.decode(errors="replace").splitlines():
        name, sep, value = line.partition(":")
        if sep:
            fields[name.strip()] = value.strip()
    return fields


def unique_free_ports(count: int, taken=()) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports and port not in taken:
            ports.append(port)
    return ports


class RedisCluster(ProcessGroup):
    """primaries x (1 + replicas) cluster nodes on `ports` (free ones when not given;
    a shorter list is completed with free ports). nodes: the Redis processes."""

    def __init__(self, workdir: str | None = None, ports=(), primaries: int = 3,
                 replicas: int = 1, node_timeout_ms: int = NODE_TIMEOUT_MS,
                 require_full_coverage: bool = False, pid_file: str | None = None,
                 timeout: float = CREATE_TIMEOUT):
        super().__init__(workdir, pid_file, prefix="sluice-cluster-")
        ports = list(ports)
        ports += unique_free_ports(primaries * (1 + replicas) - len(ports), ports)
        # The cluster bus of each node gets a free port of its own (by default it is
        # port + 10000, which an ephemeral port may not allow).
        self.bus_ports = dict(zip(ports, unique_free_ports(len(ports), ports)))
        self.node_timeout_ms = node_timeout_ms
        self.require_full_coverage = require_full_coverage
        self.nodes: list[Redis] = []
        self._starting(lambda: self._create(ports, replicas, timeout))

    # -- start

    def _node_args(self, port: int) -> tuple:
        return ("--cluster-enabled", "yes", "--cluster-port", str(self.bus_ports[port]),
                "--cluster-config-file", f"nodes-{port}.conf",
                "--cluster-node-timeout", str(self.node_timeout_ms),
                "--cluster-require-full-coverage", "yes" if self.require_full_coverage else "no",
                "--cluster-replica-validity-factor", "0", "--dir", self.workdir,
                "--loglevel", "warning")

    def _start_node(self, port: int) -> Redis:
        return self._own(Redis(self.workdir, port, name=f"cluster-{port}",
                               extra_args=self._node_args(port), pid_file=self.pid_file))

    def _create(self, ports, replicas: int, timeout: float):
        self.nodes = [self._start_node(port) for port in ports]
        created = subprocess.run(
            [redis_cli(), "--cluster", "create", *(n.address for n in self.nodes),
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
            timeout=timeout)
        if created.returncode != 0:
            raise AssertionError(f"redis-cli --cluster create failed ({created.returncode})\n"
                                 f"{created.stdout[-3000:]}\n{created.stderr[-2000:]}")
        # redis-cli checks coverage right after the nodes meet: on a busy
        # machine one node may not yet know a primary's slots and it says "Not
        # all slots are covered" although every slot was assigned. Whether the
        # cluster came up is wait_until_ok's to say, once gossip has settled.
        self.wait_until_ok(timeout)

    # -- what the cluster looks like

    def ready_line(self) -> str:
        return f"ready seeds={','.join(self.seeds())}"

    def live_nodes(self) -> list[Redis]:
        return [n for n in self.nodes if n.alive()]

    def seeds(self) -> list[str]:
        """host:port of every live node."""
        return [n.address for n in self.live_nodes()]

    def _node_on(self, port: int) -> Redis:
        return next(n for n in self.nodes if n.port == port)

    def call(self, *args, node: Redis | None = None):
        """One command on `node` (default: the first live node)."""
        node = node or self.live_nodes()[0]
        return redis_call(node.port, *args)

    def set_node_timeout(self, ms: int):
        """cluster-node-timeout on every live node, at once (CONFIG SET)."""
        for node in self.live_nodes():
            redis_call(node.port, "CONFIG", "SET", "cluster-node-timeout", str(ms))

    def slot_view(self, node: Redis | None = None) -> tuple:
        """((first slot, last slot, primary port), ...) as CLUSTER SLOTS on `node` says."""
        ranges = self.call("CLUSTER", "SLOTS", node=node)
        return tuple(sorted((int(r[0]), int(r[1]), int(r[2][1])) for r in ranges))

    def primaries(self) -> list[tuple[Redis, list[tuple[int, int]]]]:
        """(primary node, its slot ranges first..last inclusive), ordered by first slot."""
        owned: dict[int, list[tuple[int, int]]] = {}
        for first, last, port in self.slot_view():
            owned.setdefault(port, []).append((first, last))
        return sorted(((self._node_on(port), ranges) for port, ranges in owned.items()),
                      key=lambda item: item[1][0])

    def replicas(self) -> list[Redis]:
        return [n for n in self.live_nodes() if self.call("ROLE", node=n)[0] == b"slave"]

    def node_for_slot(self, slot: int) -> Redis:
        for first, last, port in self.slot_view():
            if first <= slot <= last:
                return self._node_on(port)
        raise AssertionError(f"no node owns slot {slot}")

    def key_slot(self, key) -> int:
        return int(self.call("CLUSTER", "KEYSLOT", key))

    def node_id(self, node: Redis) -> str:
        return self.call("CLUSTER", "MYID", node=node).decode()

    def _healthy(self) -> bool:
        live = self.live_nodes()
        live_ports = {n.port for n in live}
        views = set()
        for node in live:
            info = info_fields(self.call("CLUSTER", "INFO", node=node))
            if (info.get("cluster_state") != "ok" or info.get("cluster_slots_ok") != str(SLOTS)
                    or info.get("cluster_known_nodes") != str(len(self.nodes))):
                return False
            role = self.call("ROLE", node=node)
            if role[0] == b"slave" and role[3] != b"connected":
                return False
            views.add(self.slot_view(node))
        if len(views) != 1:
            return False  # the nodes do not agree yet
        view = views.pop()
        return (sum(last - first + 1 for first, last, _ in view) == SLOTS
                and all(port in live_ports for _, _, port in view))

    def wait_until_ok(self, timeout: float = 15.0):
        """Polls until every live node says cluster_state:ok with every slot served by a
        live primary, all nodes agree on the owners and every replica's link is up."""
        wait_until(self._healthy, timeout, interval=0.05,
                   message="every cluster node ok, agreeing, every slot covered")

    # -- changes

    def kill(self, node: Redis):
        """SIGKILL by PID; returns once it has exited."""
        node.signal(signal.SIGKILL)
        node.wait(START_TIMEOUT)

    def restart(self, node: Redis) -> Redis:
        """A stopped node started again on its port with its nodes file: it rejoins
        (a killed primary comes back as a replica of the one that took over)."""
        node.stop()
        self.processes.remove(node)
        fresh = self._start_node(node.port)
        self.nodes[self.nodes.index(node)] = fresh
        return fresh

    def _reshard_args(self, slot_count: int, source: Redis, target: Redis) -> list[str]:
        entry = next(n for n in self.live_nodes() if n is not source and n is not target)
        return [redis_cli(), "--cluster", "reshard", entry.address,
                "--cluster-from", self.node_id(source), "--cluster-to", self.node_id(target),
                "--cluster-slots", str(slot_count), "--cluster-yes"]

    def reshard_async(self, slot_count: int, source: Redis, target: Redis,
                      name: str = "reshard") -> subprocess.Popen:
        """Starts moving slot_count slots (their keys too) from source to target with
        redis-cli --cluster reshard and returns at once; output in workdir/NAME.out.
        The caller waits for the Popen (and kills it by PID if it must)."""
        with open(f"{self.workdir}/{name}.out", "wb") as out:
            return subprocess.Popen(self._reshard_args(slot_count, source, target),
                                    stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT)

    def output_of(self, name: str) -> str:
        """The end of what reshard_async(name=NAME) printed."""
        try:
            with open(f"{self.workdir}/{name}.out", errors="replace") as f:
                return f.read()[-3000:]
        except OSError as e:
            return f"(no output: {e})"

    def reshard(self, slot_count: int, source: Redis, target: Redis,
                timeout: float = CREATE_TIMEOUT):
        """reshard_async() waited for; AssertionError with its output when it fails."""
        process = self.reshard_async(slot_count, source, target)
        try:
            code = process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            code = None
        if code != 0:
            raise AssertionError(f"redis-cli --cluster reshard: exit {code}\n"
                                 f"{self.output_of('reshard')}")
        self.wait_until_ok()
