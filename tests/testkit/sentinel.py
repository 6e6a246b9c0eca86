"""A real Redis Sentinel set on 127.0.0.1: one primary, one replica (--replicaof)
and three redis-sentinel processes, each with a config file of its own, watching
the primary under one name with quorum 2.

The sentinels call a primary down after 1000 ms without an answer and give a
failover 3000 ms; the set is ready once every sentinel knows the primary, its
replica and the two other sentinels (polled, never fixed sleeps). Every process
is stopped by PID.
"""

from __future__ import annotations

import os
import shutil
import signal

from .processes import START_TIMEOUT, Process, ProcessGroup, Redis, wait_until
from .resp import redis_call
from .cluster import info_fields, unique_free_ports

MASTER_NAME = "mymaster"
QUORUM = 2
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000
READY_TIMEOUT = 30.0  # sentinels find each other through the primary every 2 s


def pairs(reply) -> dict[str, str]:
    """A flat [name, value, ...] reply (SENTINEL MASTER, one entry of SENTINEL
    REPLICAS) as a dict of strings."""
    items = [v.decode() if isinstance(v, bytes) else str(v) for v in reply]
    return dict(zip(items[::2], items[1::2]))


class Sentinel(Redis):
    """One redis-sentinel process on 127.0.0.1:port with its own config file."""

    def __init__(self, workdir: str, port: int, master_port: int, master_name: str,
                 **options):
        self.port = port
        self.address = f"127.0.0.1:{port}"
        self.ssl_context = None
        self.config_path = os.path.join(workdir, f"sentinel-{port}.conf")
        with open(self.config_path, "w") as f:
            f.write(f"port {port}\nbind 127.0.0.1\ndaemonize no\ndir {workdir}\n"
                    f"sentinel monitor {master_name} 127.0.0.1 {master_port} {QUORUM}\n"
                    f"sentinel down-after-milliseconds {master_name} {DOWN_AFTER_MS}\n"
                    f"sentinel failover-timeout {master_name} {FAILOVER_TIMEOUT_MS}\n"
                    f"sentinel parallel-syncs {master_name} 1\n")
        binary = shutil.which("redis-sentinel") or "redis-sentinel"
        Process.__init__(self, f"sentinel-{port}", [binary, self.config_path], workdir,
                         cwd=workdir, **options)
        self._until_ready(lambda: wait_until(self._pong, START_TIMEOUT,
                                             message="redis-sentinel PING"))


class RedisSentinelSet(ProcessGroup):
    """data: the primary and the replica as started (which one is the primary now is
    the sentinels' answer: primary()); sentinel_processes: the three sentinels."""

    def __init__(self, workdir: str | None = None, sentinel_ports=(),
                 master_name: str = MASTER_NAME, pid_file: str | None = None,
                 timeout: float = READY_TIMEOUT):
        super().__init__(workdir, pid_file, prefix="sluice-sentinel-")
        self.master_name = master_name
        ports = list(sentinel_ports)
        self._given_ports = ports
        self.data: list[Redis] = []
        self.sentinel_processes: list[Sentinel] = []
        self._starting(lambda: self._start(timeout))

    def _start(self, timeout: float):
        options = {"pid_file": self.pid_file}
        common = ("--dir", self.workdir, "--loglevel", "warning")
        primary = self._own(Redis(self.workdir, name="sentinel-primary", extra_args=common,
                                  **options))
        replica = self._own(Redis(self.workdir, name="sentinel-replica", extra_args=(
            *common, "--replicaof", "127.0.0.1", str(primary.port)), **options))
        self.data = [primary, replica]
        self.wait_synced(timeout)
        self.sentinel_processes = []
        for i in range(3):
            given = self._given_ports[i] if i < len(self._given_ports) else None
            self.sentinel_processes.append(self._own(self._sentinel(given, primary.port,
                                                                    options)))
        self.wait_until_known(timeout)

    def _sentinel(self, given: int | None, master_port: int, options: dict) -> Sentinel:
        """A sentinel on `given`, or on a port picked free just before it starts, and
        picked again when another process took it first (tests run side by side)."""
        taken = {p.port for p in self.sentinel_processes} | set(self._given_ports)
        for attempt in range(5):
            port = given or unique_free_ports(1, taken)[0]
            try:
                return Sentinel(self.workdir, port, master_port, self.master_name, **options)
            except AssertionError as e:
                if given or "already in use" not in str(e) or attempt == 4:
                    raise
        raise AssertionError("unreachable")

    # -- what the set looks like

    def ready_line(self) -> str:
        return (f"ready sentinels={','.join(self.sentinels())} master={self.master_name} "
                f"primary={self.primary_address()}")

    def sentinels(self) -> list[str]:
        """host:port of every live sentinel."""
        return [s.address for s in self.sentinel_processes if s.alive()]

    def ask(self, *args, sentinel: Sentinel | None = None):
        """One command on a sentinel (default: the first live one)."""
        sentinel = sentinel or next(s for s in self.sentinel_processes if s.alive())
        return redis_call(sentinel.port, *args)

    def primary_address(self, sentinel: Sentinel | None = None) -> str:
        host, port = self.ask("SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.master_name,
                              sentinel=sentinel)
        return f"{host.decode()}:{int(port)}"

    def primary(self) -> Redis:
        """The data node the sentinels name as primary."""
        address = self.primary_address()
        return next(n for n in self.data if n.address == address)

    def role(self, node: Redis) -> str:
        return redis_call(node.port, "ROLE")[0].decode()

    def _synced(self) -> bool:
        live = [n for n in self.data if n.alive()]
        if sum(self.role(n) == "master" for n in live) != 1:
            return False
        return all(info_fields(redis_call(n.port, "INFO", "replication"))
                   .get("master_link_status") == "up"
                   for n in live if self.role(n) == "slave")

    def wait_synced(self, timeout: float = READY_TIMEOUT):
        """Until one live data node is a primary and every live replica's link is up."""
        wait_until(self._synced, timeout, interval=0.05, message="replica in sync with the primary")

    def _known(self) -> bool:
        primary = self.primary_address()
        replicas = sum(n.alive() for n in self.data) - 1
        for sentinel in self.sentinel_processes:
            master = pairs(self.ask("SENTINEL", "MASTER", self.master_name, sentinel=sentinel))
            if (f"{master['ip']}:{master['port']}" != primary
                    or "s_down" in master["flags"] or "o_down" in master["flags"]
                    or int(master["num-slaves"]) < replicas
                    or int(master["num-other-sentinels"]) != len(self.sentinel_processes) - 1):
                return False
            known = [pairs(r) for r in self.ask("SENTINEL", "REPLICAS", self.master_name,
                                               sentinel=sentinel)]
            if sum("s_down" not in r["flags"] for r in known) < replicas:
                return False
        return True

    def wait_until_known(self, timeout: float = READY_TIMEOUT):
        """Until every sentinel names the same primary, sees it up, knows its live
        replicas up and the other sentinels (wait_synced() checks the replication
        links on the data nodes themselves: a sentinel refreshes its view of a
        replica only every 10 s)."""
        wait_until(self._known, timeout, interval=0.05,
                   message=f"every sentinel knows {self.master_name}, its replica and the others")

    # -- changes

    def failover(self):
        """SENTINEL FAILOVER: the sentinels promote the replica without waiting for a
        failure. Returns at once; wait_for_new_primary() follows it."""
        reply = self.ask("SENTINEL", "FAILOVER", self.master_name)
        if reply != "OK":
            raise AssertionError(f"SENTINEL FAILOVER {self.master_name}: {reply!r}")

    def kill_primary(self) -> Redis:
        """SIGKILL to the current primary by PID; returns it once it has exited."""
        node = self.primary()
        node.signal(signal.SIGKILL)
        node.wait(START_TIMEOUT)
        return node

    def wait_for_new_primary(self, old: Redis, timeout: float = 20.0) -> Redis:
        """Until every live sentinel names another live node than `old` as primary and
        that node says it is one (ROLE master). Returns the new primary."""
        def switched():
            addresses = {self.primary_address(sentinel=s)
                         for s in self.sentinel_processes if s.alive()}
            if len(addresses) != 1 or old.address in addresses:
                return None
            node = next((n for n in self.data if n.address in addresses and n.alive()), None)
            return node if node is not None and self.role(node) == "master" else None
        return wait_until(switched, timeout, interval=0.05,
                          message=f"a new primary of {self.master_name} (was {old.address})")

    def restart(self, node: Redis) -> Redis:
        """A stopped data node started again on its port; the sentinels make it a
        replica of the current primary."""
        node.stop()
        self.processes.remove(node)
        fresh = self._own(Redis(self.workdir, node.port, name=node.name,
                                extra_args=node.extra_args, pid_file=self.pid_file))
        self.data[self.data.index(node)] = fresh
        return fresh
