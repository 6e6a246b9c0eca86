"""The integration tests' layer over the testkit (tests/testkit, standard library only).

ProcessTestCase owns the processes a test starts: start_echo(), start_redis(),
start_sluice() wait until the process serves and register it for stopping in
cleanup; a Sluice that died on its own before cleanup fails the test with its
stderr. Everything else a test needs (ports, clients, configs, RESP, metrics) is
the testkit's, imported here under the names the tests use.

Environment: SLUICE_BIN, SLUICE_ECHO_BIN, SLUICE_SOURCE_DIR (defaults: the
repository this file lives in, binaries in build/).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

# Re-exported for the tests: the testkit's names, some under the names tests know.
from testkit.configs import gateway_config, to_yaml  # noqa: E402,F401
from testkit.http import (IO_TIMEOUT, Client, RawConnection, Response, raw_exchange,  # noqa: E402,F401
                          request)
from testkit.metrics import metric_sum as exposition_sum  # noqa: E402
from testkit.ports import closed_port, free_port  # noqa: E402,F401
from testkit.processes import (ECHO_BIN, SLUICE_BIN, SOURCE_DIR, START_TIMEOUT,  # noqa: E402,F401
                               STOP_TIMEOUT, Echo, Process, Redis, Sluice, wait_until)
from testkit.procfs import rss_kib  # noqa: E402,F401
from testkit.resp import ReplyError as RedisReplyError  # noqa: E402,F401
from testkit.resp import encode as resp_encode  # noqa: E402,F401
from testkit.resp import raw_command as redis_command  # noqa: E402,F401
from testkit.resp import redis_call, redis_pipeline  # noqa: E402,F401

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

    def start_redis(self, port: int | None = None, **options) -> Redis:
        """options: those of testkit.processes.Redis (tls=(cert, key, ca), name, ...)."""
        if not shutil.which("redis-server"):
            self.skipTest("redis-server not installed")
        return self._own(Redis(self.workdir, port, **options))

    def start_sluice(self, config, extra_args=(), name: str = "sluice",
                     wait_healthy: bool = True, wrapper=()) -> Sluice:
        """config: a dict (see gateway_config) or YAML text. Fails with sluice's
        stderr if /healthz is not 200 within START_TIMEOUT."""
        self._require(SLUICE_BIN)
        return self._own(Sluice(self.workdir, config, extra_args, name, wait_healthy, wrapper),
                         check_alive=True)

    def _require(self, path: str):
        if not os.access(path, os.X_OK):
            self.fail(f"binary not found or not executable: {path}")


def run_cli(args, cwd: str | None = None, timeout: float = 10.0) -> subprocess.CompletedProcess:
    """Runs sluice to completion (e.g. --check, --version); text stdout/stderr."""
    return subprocess.run([SLUICE_BIN, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, errors="replace", timeout=timeout)


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
