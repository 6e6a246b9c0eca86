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

Exit status 2 with the reason on stderr when the stack does not come up (what had
started is stopped again).
"""

from __future__ import annotations

import argparse
import os
import sys

from .configs import retarget, set_limit
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
    args = ap.parse_args(argv)
    if args.command == "free-port":
        print(free_port())
    elif args.command == "stack":
        return stack(args.workdir, args.config, args.limit)
    else:
        stop_recorded(args.pid_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
