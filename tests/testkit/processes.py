"""Child processes on loopback: redis-server, sluice-echo and sluice, started,
polled until they serve (never fixed sleeps) and stopped by PID.

A Process writes stdout/stderr to files in its workdir (never a pipe that can
fill). stop() sends SIGTERM and SIGKILL after STOP_TIMEOUT; a readiness wait that
fails stops the process before the error propagates. With pid_file, the PID and
its start time are appended there, so that stop_recorded() (also `python3 -m
testkit stop FILE`) can stop what is left if the starter dies, sparing a reused PID.

Binaries: $SLUICE_BIN and $SLUICE_ECHO_BIN, else $SLUICE_BUILD (default build/
of the repository this file lives in, or $SLUICE_SOURCE_DIR).
"""

from __future__ import annotations

import http.client
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from . import procfs
from .configs import listen_ports, to_yaml
from .http import request
from .metrics import metric_value
from .ports import free_port
from .resp import redis_call

SOURCE_DIR = os.environ.get(
    "SLUICE_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BUILD_DIR = os.environ.get("SLUICE_BUILD", os.path.join(SOURCE_DIR, "build"))
SLUICE_BIN = os.environ.get("SLUICE_BIN", os.path.join(BUILD_DIR, "sluice"))
ECHO_BIN = os.environ.get("SLUICE_ECHO_BIN", os.path.join(BUILD_DIR, "sluice-echo"))

# libfaketime (Debian's faketime package), preloaded into a process whose
# system clock must be wrong. Not the faketime command: it forks, and stopping
# it by PID would leave the process it started running.
LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"


def faketime_env(offset: str) -> dict | None:
    """The environment that moves a process's system clock by `offset`
    ("+2m", "-1d"), its monotonic clock left alone; None without libfaketime."""
    if not os.path.exists(LIBFAKETIME):
        return None
    asan = os.environ.get("ASAN_OPTIONS", "")
    return {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": offset, "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            # A sanitizer build's runtime would insist on coming first.
            "ASAN_OPTIONS": (asan + ":" if asan else "") + "verify_asan_link_order=0"}


START_TIMEOUT = 10.0  # seconds for a process to start serving
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01, message: str = ""):
    """Polls predicate() until it returns a truthy value, which is returned. Raises
    AssertionError after `timeout` seconds (an error the predicate raises other than
    OSError, HTTPException or ValueError ends the wait at once)."""
    deadline = time.monotonic() + timeout
    last_error = None
    while True:
        try:
            value = predicate()
            if value:
                return value
        except (OSError, http.client.HTTPException, ValueError) as e:
            last_error = e
        if time.monotonic() >= deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {message or predicate}"
                                 f"{detail}")
        time.sleep(interval)


class Process:
    """A child process; new_session puts it in a session of its own (a Ctrl-C in the
    terminal then reaches only its starter, which stops it)."""

    def __init__(self, name: str, args: list[str], workdir: str, cwd: str | None = None,
                 new_session: bool = False, pid_file: str | None = None,
                 env: dict | None = None):
        """env: variables set for the child on top of this process's environment."""
        self.name = name
        self.args = list(args)
        self.stdout_path = os.path.join(workdir, f"{name}.stdout")
        self.stderr_path = os.path.join(workdir, f"{name}.stderr")
        self._stdout = open(self.stdout_path, "wb")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(self.args, stdin=subprocess.DEVNULL, stdout=self._stdout,
                                     stderr=self._stderr, cwd=cwd, start_new_session=new_session,
                                     env={**os.environ, **env} if env else None)
        self.pid = self.proc.pid
        self.expected_exit = False
        if pid_file:
            with open(pid_file, "a") as f:
                f.write(f"{self.pid} {procfs.start_time(self.pid)}\n")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        """This process and its descendants (nginx: master and workers)."""
        return [self.pid, *procfs.descendants(self.pid)] if self.alive() else []

    def _listening_port(self, pattern: str, what: str) -> int:
        """Waits for the first line of stdout, which must match `pattern`, whose
        group 1 is the port the process listens on (else it is stopped)."""
        def first_line():
            if not self.alive():
                raise AssertionError(f"{what} exited early\n{self.output_tail()}")
            text = self.stdout()
            return text.split("\n", 1)[0] if "\n" in text else None
        line = self._until_ready(lambda: wait_until(
            first_line, START_TIMEOUT, message=f"{self.name} listening line"))
        m = re.match(pattern, line)
        if not m:
            self.stop()
            raise AssertionError(f"unexpected first line from {what}: {line!r}")
        return int(m.group(1))

    def _until_ready(self, wait):
        """Runs wait(); if it fails, the process is stopped before the error propagates
        (the caller never got hold of it, so cannot)."""
        try:
            return wait()
        except BaseException:
            self.stop()
            raise

    def stdout(self) -> str:
        with open(self.stdout_path, "rb") as f:
            return f.read().decode(errors="replace")

    def stderr(self) -> str:
        with open(self.stderr_path, "rb") as f:
            return f.read().decode(errors="replace")

    def output_tail(self, limit: int = 4000) -> str:
        return (f"--- {self.name} stderr ---\n{self.stderr()[-limit:]}\n"
                f"--- {self.name} stdout ---\n{self.stdout()[-limit:]}")

    def signal(self, sig: int):
        """Sends a signal; after SIGTERM/SIGINT/SIGKILL an exit is what the caller expects."""
        if sig in (signal.SIGTERM, signal.SIGINT, signal.SIGKILL):
            self.expected_exit = True
        if self.alive():
            os.kill(self.pid, sig)

    def wait(self, timeout: float) -> int:
        """Exit code, or AssertionError if still running after `timeout` seconds."""
        self.expected_exit = True
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self.name} (pid {self.pid}) still running after {timeout}s")

    def stop(self) -> int | None:
        """SIGTERM, then SIGKILL after STOP_TIMEOUT. Returns the exit code."""
        self.expected_exit = True
        if self.alive():
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()
        self._stdout.close()
        self._stderr.close()
        return self.proc.returncode


class Echo(Process):
    """sluice-echo on an ephemeral port, read from its first stdout line into `port`.
    wrapper: a command the binary runs under (e.g. taskset and its options)."""

    def __init__(self, workdir: str, name: str = "echo", wrapper=(), delay_ms: int = 0,
                 status: int = 200, **options):
        """delay_ms: every echo reply waits this long (sluice-echo --delay-ms);
        status: every echo reply's status (sluice-echo --status)."""
        delay = ["--delay-ms", str(delay_ms)] if delay_ms else []
        if status != 200:
            delay += ["--status", str(status)]
        super().__init__(name, [*wrapper, ECHO_BIN, "--listen", "127.0.0.1:0", "--quiet", *delay],
                         workdir, **options)
        self.port = self._listening_port(r"listening 127\.0\.0\.1:(\d+)$", "sluice-echo")
        self.address = f"127.0.0.1:{self.port}"
        self.stats_calls = 0

    def stats(self) -> dict:
        """{"connections": n, "requests": n, "bad_requests": n, "slow_peak": n} as
        sluice-echo reports them: every /__stats call (this one included) counts as a
        connection and a request."""
        self.stats_calls += 1
        status, _, body = request(self.port, "GET", "/__stats")
        assert status == 200, status
        return json.loads(body)

    def counts(self) -> dict:
        """Like stats(), without the kit's own /__stats calls: what others sent."""
        stats = self.stats()
        for key in ("connections", "requests"):
            stats[key] -= self.stats_calls
        return stats


def python_with_grpc() -> str:
    """This Python if it has grpcio, else Debian's (python3-grpcio is a Debian
    package: a Python of one's own may lack it)."""
    import importlib.util
    if importlib.util.find_spec("grpc") is not None:
        return sys.executable
    return "/usr/bin/python3"


class GrpcUpstream(Process):
    """testkit/grpc_upstream.py (a gRPC server on grpcio) on an ephemeral port (or
    `port`); tls: (cert, key) or (cert, key, client_ca) for TLS, else plain h2c;
    wrapper: a command it runs under (taskset); options: Process's."""

    def __init__(self, workdir: str, name: str = "grpc", tls=None, port: int = 0, wrapper=(),
                 **options):
        script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "grpc_upstream.py")
        args = [*wrapper, python_with_grpc(), script, "--port", str(port)]
        if tls:
            args += ["--cert", tls[0], "--key", tls[1]]
            if len(tls) > 2:
                args += ["--client-ca", tls[2]]
        super().__init__(name, args, workdir, **options)
        self.port = self._listening_port(r"listening (\d+)$", "the gRPC upstream")
        self.address = f"127.0.0.1:{self.port}"


class Redis(Process):
    """redis-server on 127.0.0.1:port (free when not given), no persistence, polled
    with PING; with tls=(cert, key, ca) it serves TLS only and `ssl_context` trusts ca."""

    def __init__(self, workdir: str, port: int | None = None, name: str = "redis",
                 extra_args=(), wrapper=(), tls: tuple[str, str, str] | None = None,
                 **options):
        self.port = port or free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.extra_args = tuple(extra_args)
        self.ssl_context = None
        listen = ["--port", str(self.port)]
        if tls:
            import ssl
            cert, key, ca = tls
            self.ssl_context = ssl.create_default_context(cafile=ca)
            listen = ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", cert,
                      "--tls-key-file", key, "--tls-ca-cert-file", ca, "--tls-auth-clients", "no"]
        binary = shutil.which("redis-server") or "redis-server"
        options.setdefault("cwd", workdir)
        super().__init__(name, [*wrapper, binary, *listen, "--bind", "127.0.0.1", "--save", "",
                                "--appendonly", "no", *extra_args], workdir, **options)
        self._until_ready(lambda: wait_until(
            self._pong, START_TIMEOUT, message="redis TLS PING" if tls else "redis PING"))

    def _pong(self) -> bool:
        if not self.alive():
            raise AssertionError(f"{self.name} exited early\n{self.output_tail()}")
        return redis_call(self.port, "PING", timeout=1.0, ssl_context=self.ssl_context) == "PONG"


class Sluice(Process):
    """The gateway, started with --config FILE (written from a dict or text) and polled
    on /healthz of its admin listener."""

    def __init__(self, workdir: str, config, extra_args=(), name: str = "sluice",
                 wait_healthy: bool = True, wrapper=(), binary: str | None = None, **options):
        """wrapper: a command the binary runs under (e.g. strace and its options);
        binary: another sluice binary than SLUICE_BIN (scripts/bench --compare)."""
        self.config_path = os.path.join(workdir, f"{name}.yaml")
        self.write_config(config)
        super().__init__(name, [*wrapper, binary or SLUICE_BIN, "--config", self.config_path,
                                *extra_args], workdir, **options)
        if wait_healthy:
            self._until_ready(self.wait_healthy)

    def write_config(self, config):
        """Writes a dict (as YAML) or text to the config file; ports are taken from it."""
        text = config if isinstance(config, str) else to_yaml(config) + "\n"
        self.config_text = text
        self.port, self.admin_port = listen_ports(text)
        with open(self.config_path, "w") as f:
            f.write(text)

    def wait_healthy(self, timeout: float = START_TIMEOUT):
        def healthy():
            if not self.alive():
                raise AssertionError(f"sluice exited early with code {self.proc.returncode}\n"
                                     f"{self.output_tail()}")
            try:
                return request(self.admin_port, "GET", "/healthz", timeout=1.0)[0] == 200
            except OSError:
                return False
        try:
            wait_until(healthy, timeout, interval=0.02, message="sluice /healthz == 200")
        except AssertionError as e:
            raise AssertionError(f"{e}\n{self.output_tail()}") from None

    def reload(self, config):
        """Writes the new config and sends SIGHUP (the listen ports must stay the same)."""
        ports = (self.port, self.admin_port)
        self.write_config(config)
        assert (self.port, self.admin_port) == ports, "a reload cannot move the listeners"
        os.kill(self.pid, signal.SIGHUP)

    def metrics(self) -> str:
        status, _, body = request(self.admin_port, "GET", "/metrics")
        assert status == 200, status
        return body.decode()

    def metric(self, name: str, **labels) -> float | None:
        """The value of one sample of /metrics, or None if absent."""
        return metric_value(self.metrics(), name, **labels)

    def readyz(self, timeout: float = 2.0) -> tuple[int, dict]:
        """(status, parsed body) of GET /readyz on the admin listener."""
        status, _, body = request(self.admin_port, "GET", "/readyz", timeout=timeout)
        return status, json.loads(body)


class ProcessGroup:
    """Processes started and stopped together (a Redis Cluster, a Sentinel set), in
    `workdir` (a temporary directory of its own, removed by stop(), when not given).
    A context manager: leaving the block stops every process by PID."""

    def __init__(self, workdir: str | None = None, pid_file: str | None = None,
                 prefix: str = "sluice-redis-"):
        self._own_workdir = workdir is None
        self.workdir = workdir or tempfile.mkdtemp(prefix=prefix)
        self.pid_file = pid_file
        self.processes: list[Process] = []

    def _own(self, process: Process) -> Process:
        self.processes.append(process)
        return process

    def _starting(self, start):
        """Runs start(); if it fails, whatever had started is stopped before the error
        propagates (the caller never got hold of the group, so cannot)."""
        try:
            return start()
        except BaseException:
            self.stop()
            raise

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes if p.alive()]

    def stop(self):
        """SIGTERM to every process at once, then each is waited for (SIGKILL after
        STOP_TIMEOUT); the group's own workdir is removed."""
        stop_all(self.processes)
        if self._own_workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def stop_all(processes):
    """Stops processes together: every one is sent SIGTERM first, so the waits overlap."""
    for process in processes:
        process.signal(signal.SIGTERM)
    for process in reversed(processes):
        process.stop()


def stop_recorded(pid_file: str, timeout: float = STOP_TIMEOUT):
    """Stops every process pid_file names whose start time still matches, newest
    first: SIGTERM, then SIGKILL after `timeout`. They need not be our children."""
    try:
        with open(pid_file) as f:
            entries = [line.split() for line in f if line.strip()]
    except FileNotFoundError:
        return
    for pid_text, started in reversed(entries):
        pid = int(pid_text)
        if procfs.start_time(pid) != started:
            continue  # gone, or the PID now names another process
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            continue
        deadline = time.monotonic() + timeout
        while procfs.running(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if procfs.running(pid) and procfs.start_time(pid) == started:
            os.kill(pid, signal.SIGKILL)
