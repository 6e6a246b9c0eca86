"""Process, /proc and Redis helpers for scripts/bench (standard library only).

Every process is started through start(); its PID and start time go to
$SLUICE_BENCH_WORKDIR/pids so that the shell wrapper's trap can stop what is
left if this interpreter dies; stop_all() stops them here, newest first.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

CLK_TCK = os.sysconf("SC_CLK_TCK")


class Proc:
    def __init__(self, name: str, args: list[str], workdir: str, cpus: str | None = None):
        self.name = name
        self.args = list(args)
        if cpus is not None:
            self.args = ["taskset", "-c", cpus, *self.args]
        self.stdout_path = os.path.join(workdir, f"{name}.stdout")
        self.stderr_path = os.path.join(workdir, f"{name}.stderr")
        self._out = open(self.stdout_path, "wb")
        self._err = open(self.stderr_path, "wb")
        self.popen = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=self._out,
                                      stderr=self._err, cwd=workdir,
                                      start_new_session=True)  # Ctrl-C reaches us, not them
        self.pid = self.popen.pid
        with open(os.path.join(workdir, "pids"), "a") as f:
            f.write(f"{self.pid} {start_time(self.pid)}\n")

    def alive(self) -> bool:
        return self.popen.poll() is None

    def tail(self, limit: int = 2000) -> str:
        parts = []
        for path in (self.stderr_path, self.stdout_path):
            with open(path, "rb") as f:
                parts.append(f.read()[-limit:].decode(errors="replace"))
        return f"--- {self.name} ---\n" + "\n".join(p for p in parts if p)

    def pids(self) -> list[int]:
        """This process and its descendants (nginx: master and worker)."""
        return [self.pid, *descendants(self.pid)] if self.alive() else []

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 5.0):
        if self.alive():
            try:
                os.kill(self.pid, sig)
                self.popen.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.popen.wait()
            except ProcessLookupError:
                pass
        self._out.close()
        self._err.close()


STARTED: list[Proc] = []


def start(name: str, args: list[str], workdir: str, cpus: str | None = None) -> Proc:
    proc = Proc(name, args, workdir, cpus)
    STARTED.append(proc)
    return proc


def stop_all():
    while STARTED:
        STARTED.pop().stop()


# ------------------------------------------------------------------ /proc

def _stat_fields(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as f:
        text = f.read()
    # comm (field 2) is in parentheses and may hold spaces: split after it.
    return text[text.rindex(")") + 2:].split()


def start_time(pid: int) -> str:
    try:
        return _stat_fields(pid)[19]  # field 22
    except OSError:
        return "0"


def descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                ppid = int(_stat_fields(int(entry))[1])
            except (OSError, ValueError, IndexError):
                continue
            children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes (all their threads), in seconds."""
    ticks = 0
    for pid in pids:
        try:
            fields = _stat_fields(pid)
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # fields 14 and 15
    return ticks / CLK_TCK


def peak_rss_kib(pids: list[int]) -> int:
    """Sum of VmHWM (peak resident set) of the processes."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/status") as f:
                for line in f:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1])
        except OSError:
            pass
    return total


def set_affinity(pids: list[int], cpus: set[int]):
    """Moves every thread of the processes to `cpus` (like taskset -a -p)."""
    for pid in pids:
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(int(tid), cpus)
            except OSError:
                pass


# ------------------------------------------------------------------ network

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def wait_until(predicate, timeout: float, what: str, proc: Proc | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and not proc.alive():
            raise RuntimeError(f"{proc.name} exited early\n{proc.tail()}")
        try:
            if predicate():
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout}s waiting for {what}"
                       + (f"\n{proc.tail()}" if proc else ""))


def http_get(port: int, path: str, timeout: float = 5.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode(errors="replace")


def metric_sum(text: str, name: str, **labels) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(found.get(k) == str(v) for k, v in labels.items()):
            total += float(m.group(4))
    return total


class RedisError(Exception):
    pass


class Redis:
    """A minimal RESP client on one connection."""

    def __init__(self, port: int, timeout: float = 5.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.file = self.sock.makefile("rb")

    def __call__(self, *args):
        return self.pipeline(args)[0]

    def pipeline(self, *commands):
        """Sends every command in one write and returns their replies in order."""
        out = []
        for args in commands:
            out.append(b"*%d\r\n" % len(args))
            for a in args:
                b = a if isinstance(a, bytes) else str(a).encode()
                out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        self.sock.sendall(b"".join(out))
        return [self._read() for _ in commands]

    def _read(self):
        line = self.file.readline()
        if not line:
            raise ConnectionError("redis closed the connection")
        kind, rest = line[:1], line[1:-2]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            raise RedisError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            n = int(rest)
            return None if n < 0 else self.file.read(n + 2)[:-2]
        if kind == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise RedisError(f"unexpected reply {line!r}")

    def close(self):
        self.file.close()
        self.sock.close()

    def time_us(self) -> int:
        sec, usec = self("TIME")
        return int(sec) * 1_000_000 + int(usec)

    def commandstats(self) -> dict[str, dict[str, float]]:
        text = self("INFO", "commandstats").decode()
        stats = {}
        for line in text.splitlines():
            m = re.match(r"^cmdstat_([^:]+):(.*)$", line.strip())
            if m:
                stats[m.group(1)] = {k: float(v) for k, v in
                                     (kv.split("=") for kv in m.group(2).split(","))}
        return stats
