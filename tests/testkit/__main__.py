"""The testkit for shell scripts: PYTHONPATH=tests python3 -m testkit COMMAND ...

  free-port                  prints a free 127.0.0.1 port
  stack WORKDIR CONFIG [--limit NAME CAPACITY RATE]
                             starts sluice-echo, redis-server and sluice with CONFIG (a
                             file on the conventional addresses, see configs.retarget)
                             moved to free ports, optionally one limit's capacity and
                             refill set; waits until sluice's Redis is ready; prints
                             `port=N admin_port=N redis_port=N` and exits, leaving them
                             running, each recorded in WORKDIR/pids
  stop PIDFILE               stops what PIDFILE records, newest first
  cluster [--workdir D] [--ports P,...] [--pid-file F]
                             a Redis Cluster (3 primaries, 3 replicas; the given ports
                             first, free ones for the rest) in the foreground: prints
                             `ready seeds=HOST:PORT,...` once it serves, and stops it
                             (by PID) on SIGTERM, SIGINT or SIGHUP
  sentinel [--workdir D] [--ports P,...] [--master NAME] [--pid-file F]
                             the same for a primary, a replica and 3 sentinels (on the
                             given ports first): prints `ready sentinels=HOST:PORT,...
                             master=NAME primary=HOST:PORT`
  redis-config cluster|sentinel CONFIG OUT
                             writes OUT: CONFIG with its redis section pointed at a local
                             topology on free ports (url and nodes; sentinel_master
                             mymaster), for `cluster`/`sentinel --ports` to bring up
  redis-plan CONFIG          prints the redis section's `TOPOLOGY<TAB>MASTER<TAB>HOST:PORT
                             ...` (the url's address first, then nodes)

Exit status 2 with the reason on stderr when the stack or topology does not come up
(what had started is stopped again).
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys

from .cluster import RedisCluster, unique_free_ports
from .configs import redis_settings, retarget, set_limit, set_redis_topology
from .sentinel import MASTER_NAME, RedisSentinelSet
from .ports import free_port
from .processes import Echo, Process, Redis, Sluice, stop_recorded, wait_until


def stack(workdir: str, config: str, limit: list[str] | None) -> int:
    options = {"pid_file": os.path.join(workdir, "pids")}
    started: list[Process] = []
    try:
        echo = Echo(workdir, **options)
        started.append(echo)
        redis = Redis(workdir, extra_args=("--loglevel", "warning", "--dir", workdir), **options)
        started.append(redis)
        with open(config) as f:
            text = retarget(f.read(), free_port(), free_port(), redis.port, echo.address,
                            source=config)
        if limit:
            text = set_limit(text, *limit, source=config)
        gateway = Sluice(workdir, text, **options)
        started.append(gateway)

        def redis_ready():
            if not gateway.alive():
                raise AssertionError(f"sluice exited\n{gateway.output_tail()}")
            return gateway.readyz()[1].get("dependencies", {}).get("redis") == "ready"
        wait_until(redis_ready, 10, interval=0.05, message="sluice /readyz redis ready")
    except (AssertionError, OSError) as e:
        for process in reversed(started):
            process.stop()
        print(f"the stack did not come up: {e}", file=sys.stderr)
        return 2
    print(f"port={gateway.port} admin_port={gateway.admin_port} redis_port={redis.port}")
    return 0


class Stopped(Exception):
    """A stop signal arrived."""


def _stop_on_signal(signum, frame):
    raise Stopped(signum)


def foreground(start) -> int:
    """Runs start() (a ProcessGroup factory) until a stop signal, then stops the group.
    A signal during the start stops what had started."""
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _stop_on_signal)
    group = None
    try:
        group = start()
        print(group.ready_line(), flush=True)
        while True:
            signal.pause()
    except Stopped:
        return 0
    except (AssertionError, OSError) as e:
        print(f"the Redis topology did not come up: {e}", file=sys.stderr)
        return 2
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)  # the stop below is not interrupted
        if group is not None:
            group.stop()


def redis_config(topology: str, config: str, out: str) -> int:
    with open(config) as f:
        text = f.read()
    count = 6 if topology == "cluster" else 3
    addresses = [f"127.0.0.1:{p}" for p in unique_free_ports(count)]
    text = set_redis_topology(text, topology, f"redis://{addresses[0]}/0", addresses[1:],
                              MASTER_NAME if topology == "sentinel" else "", source=config)
    with open(out, "w") as f:
        f.write(text)
    return 0


def redis_plan(config: str) -> int:
    with open(config) as f:
        settings = redis_settings(f.read())
    m = re.match(r"^rediss?://(?:[^@/]*@)?([^/?#]+)", settings["url"])
    addresses = ([m.group(1)] if m else []) + settings["nodes"]
    print(settings["topology"], settings["sentinel_master"] or "-", " ".join(addresses),
          sep="\t")
    return 0


def ports_of(text: str | None) -> list[int]:
    return [int(p) for p in text.split(",") if p] if text else []


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m testkit", description=__doc__.split("\n\n")[0])
    commands = ap.add_subparsers(dest="command", required=True)
    commands.add_parser("free-port")
    up = commands.add_parser("stack")
    up.add_argument("workdir")
    up.add_argument("config")
    up.add_argument("--limit", nargs=3, metavar=("NAME", "CAPACITY", "RATE"))
    down = commands.add_parser("stop")
    down.add_argument("pid_file")
    for name in ("cluster", "sentinel"):
        topology = commands.add_parser(name)
        topology.add_argument("--workdir")
        topology.add_argument("--ports", help="comma-separated ports to use first")
        topology.add_argument("--pid-file")
        if name == "sentinel":
            topology.add_argument("--master", default=MASTER_NAME)
    derived = commands.add_parser("redis-config")
    derived.add_argument("topology", choices=("cluster", "sentinel"))
    derived.add_argument("config")
    derived.add_argument("out")
    plan = commands.add_parser("redis-plan")
    plan.add_argument("config")
    args = ap.parse_args(argv)
    if args.command == "free-port":
        print(free_port())
    elif args.command == "stack":
        return stack(args.workdir, args.config, args.limit)
    elif args.command == "cluster":
        return foreground(lambda: RedisCluster(args.workdir, ports_of(args.ports),
                                               pid_file=args.pid_file))
    elif args.command == "sentinel":
        return foreground(lambda: RedisSentinelSet(args.workdir, ports_of(args.ports),
                                                   args.master, pid_file=args.pid_file))
    elif args.command == "redis-config":
        return redis_config(args.topology, args.config, args.out)
    elif args.command == "redis-plan":
        return redis_plan(args.config)
    else:
        stop_recorded(args.pid_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
