"""Integration-test harness for Sluice (standard library only).

Processes: start_echo(), start_redis(), start_sluice() on a ProcessTestCase start
a real process, wait until it serves (polling, never fixed sleeps) and register
its PID for stopping in cleanup (SIGTERM, then SIGKILL after a bound). A Sluice
that died on its own before cleanup fails the test with its stderr.

Clients: request() (http.client, one request per call), Client (http.client,
one keep-alive connection), RawConnection (exact bytes over a socket and a
small HTTP/1.x response reader, for malformed input and pipelining).

Environment: SLUICE_BIN, SLUICE_ECHO_BIN, SLUICE_SOURCE_DIR (defaults: the
repository this file lives in, binaries in build/).
"""

from __future__ import annotations

import hashlib
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest

SOURCE_DIR = os.environ.get(
    "SLUICE_SOURCE_DIR",
    os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
SLUICE_BIN = os.environ.get("SLUICE_BIN", os.path.join(SOURCE_DIR, "build", "sluice"))
ECHO_BIN = os.environ.get("SLUICE_ECHO_BIN", os.path.join(SOURCE_DIR, "build", "sluice-echo"))

# Set (to e.g. "address,undefined") when the binaries are built with sanitizers:
# memory figures are then meaningless and tracing conflicts with LeakSanitizer.
SANITIZED = os.environ.get("SLUICE_SANITIZED", "")

START_TIMEOUT = 10.0  # seconds for a process to start serving
STOP_TIMEOUT = 5.0  # seconds between SIGTERM and SIGKILL
IO_TIMEOUT = 10.0  # default socket timeout of the clients


# ---------------------------------------------------------------- utilities

def free_port() -> int:
    """An ephemeral TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (connections are refused)."""
    return free_port()


def wait_until(predicate, timeout: float = 5.0, interval: float = 0.01, message: str = ""):
    """Polls predicate() until it returns a truthy value, which is returned.
    Raises AssertionError after `timeout` seconds."""
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


def rss_kib(pid: int) -> int:
    """Resident set size of a process in KiB (VmRSS of /proc/PID/status)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise ValueError(f"no VmRSS for pid {pid}")


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


def _yaml_scalar(value) -> str:
    if value is True:
        return "true"
    if value is False:
        return "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid double-quoted YAML scalar


def to_yaml(value, indent: int = 0) -> str:
    """Block-style YAML for nested dicts/lists of scalars (enough for configs)."""
    pad = " " * indent
    lines = []
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(item, (dict, list)) and item:
                lines.append(f"{pad}{key}:")
                lines.append(to_yaml(item, indent + 2))
            elif isinstance(item, (dict, list)):
                lines.append(f"{pad}{key}: {'{}' if isinstance(item, dict) else '[]'}")
            else:
                lines.append(f"{pad}{key}: {_yaml_scalar(item)}")
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, dict) and item:
                body = to_yaml(item, indent + 2).split("\n")
                lines.append(f"{pad}- {body[0].lstrip()}")
                lines.extend(body[1:])
            elif isinstance(item, list) and item:
                lines.append(f"{pad}- {json.dumps(item)}")
            else:
                lines.append(f"{pad}- {_yaml_scalar(item)}")
    else:
        lines.append(pad + _yaml_scalar(value))
    return "\n".join(lines)


def gateway_config(upstreams: dict, routes: list, server: dict | None = None,
                   port: int | None = None, admin_port: int | None = None,
                   **sections) -> dict:
    """A config dict listening on 127.0.0.1 ephemeral ports.

    upstreams: name -> list of "host:port" strings, or name -> full dict.
    routes: list of route dicts; `limits: []` is filled in when missing.
    server: extra server keys. sections: other top-level sections (log, redis...).
    """
    config = {
        "server": {
            "listen": f"127.0.0.1:{port or free_port()}",
            "threads": 2,
            **(server or {}),
        },
        "admin": {"listen": f"127.0.0.1:{admin_port or free_port()}"},
        "log": {"level": "warn", "access_log": True},
    }
    config.update(sections)
    config["upstreams"] = {
        name: ({"servers": list(spec)} if isinstance(spec, (list, tuple)) else spec)
        for name, spec in upstreams.items()}
    config["routes"] = [{**route, "limits": route.get("limits", [])} for route in routes]
    return config


def _listen_ports(config_text: str) -> tuple[int, int]:
    """(data port, admin port) from the `listen:` keys of server and admin."""
    ports = {}
    section = None
    for line in config_text.splitlines():
        top = re.match(r"^([A-Za-z_]\w*):", line)
        if top:
            section = top.group(1)
            continue
        m = re.match(r"^\s+listen:\s*[\"']?[^\"'\s]*:(\d+)", line)
        if m and section in ("server", "admin"):
            ports[section] = int(m.group(1))
    return ports.get("server", 8080), ports.get("admin", 9901)


def echo_header(doc: dict, name: str) -> list[str]:
    """Values of header `name` (case-insensitive) in an echo document, in order."""
    return [v for n, v in doc["headers"] if n.lower() == name.lower()]


def echo_header_names(doc: dict) -> set[str]:
    return {n.lower() for n, _ in doc["headers"]}


# ---------------------------------------------------------------- processes

class Process:
    """A child process whose stdout/stderr go to files (never a pipe that can fill)."""

    def __init__(self, name: str, args: list[str], workdir: str, cwd: str | None = None):
        self.name = name
        self.args = args
        self.stdout_path = os.path.join(workdir, f"{name}.stdout")
        self.stderr_path = os.path.join(workdir, f"{name}.stderr")
        self._stdout = open(self.stdout_path, "wb")
        self._stderr = open(self.stderr_path, "wb")
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=self._stdout,
                                     stderr=self._stderr, cwd=cwd)
        self.pid = self.proc.pid
        self.expected_exit = False

    def alive(self) -> bool:
        return self.proc.poll() is None

    def _until_ready(self, wait):
        """Runs wait(); if it fails, the process is stopped before the error propagates
        (the test never got hold of it, so cleanup cannot)."""
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
        """Sends a signal; after SIGTERM/SIGINT/SIGKILL an exit is what the test expects."""
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
    """sluice-echo; `port` is read from its first stdout line."""

    def __init__(self, workdir: str, name: str = "echo"):
        super().__init__(name, [ECHO_BIN, "--listen", "127.0.0.1:0", "--quiet"], workdir)
        line = self._until_ready(lambda: wait_until(
            self._first_line, START_TIMEOUT, message=f"{name} listening line"))
        m = re.match(r"listening 127\.0\.0\.1:(\d+)$", line)
        if not m:
            self.stop()
            raise AssertionError(f"unexpected first line from sluice-echo: {line!r}")
        self.port = int(m.group(1))
        self.address = f"127.0.0.1:{self.port}"
        self.stats_calls = 0

    def _first_line(self):
        if not self.alive():
            raise AssertionError(f"sluice-echo exited early\n{self.output_tail()}")
        text = self.stdout()
        return text.split("\n", 1)[0] if "\n" in text else None

    def stats(self) -> dict:
        """{"connections": n, "requests": n, "bad_requests": n} as sluice-echo reports
        them: every /__stats call (this one included) counts as a connection and a request."""
        self.stats_calls += 1
        status, _, body = request(self.port, "GET", "/__stats")
        assert status == 200, status
        return json.loads(body)

    def counts(self) -> dict:
        """Like stats(), without the harness's own /__stats calls: what others sent."""
        stats = self.stats()
        for key in ("connections", "requests"):
            stats[key] -= self.stats_calls
        return stats


class Redis(Process):
    def __init__(self, workdir: str, port: int | None = None):
        self.port = port or free_port()
        binary = shutil.which("redis-server") or "redis-server"
        super().__init__("redis", [binary, "--port", str(self.port), "--bind", "127.0.0.1",
                                   "--save", "", "--appendonly", "no"], workdir, cwd=workdir)
        self._until_ready(lambda: wait_until(self._pong, START_TIMEOUT, message="redis PING"))

    def _pong(self) -> bool:
        if not self.alive():
            raise AssertionError(f"redis-server exited early\n{self.output_tail()}")
        return redis_command(self.port, "PING") == b"+PONG\r\n"


def redis_command(port: int, *args: str, timeout: float = 1.0) -> bytes:
    """Sends one RESP command and returns the raw reply (one recv; fine for short replies)."""
    payload = f"*{len(args)}\r\n".encode()
    for a in args:
        b = a.encode() if isinstance(a, str) else a
        payload += b"$%d\r\n%s\r\n" % (len(b), b)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        return s.recv(65536)


class Sluice(Process):
    """The gateway under test, started with --config FILE and polled on /healthz."""

    def __init__(self, workdir: str, config, extra_args=(), name: str = "sluice",
                 wait_healthy: bool = True, wrapper=()):
        """wrapper: a command the binary runs under (e.g. strace and its options)."""
        self.config_path = os.path.join(workdir, f"{name}.yaml")
        self.write_config(config)
        super().__init__(name, [*wrapper, SLUICE_BIN, "--config", self.config_path, *extra_args],
                         workdir)
        if wait_healthy:
            self._until_ready(self.wait_healthy)

    def write_config(self, config):
        """Writes a dict (as YAML) or text to the config file; ports are taken from it."""
        text = config if isinstance(config, str) else to_yaml(config) + "\n"
        self.config_text = text
        self.port, self.admin_port = _listen_ports(text)
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
        """The value of one sample of the Prometheus text, or None if absent."""
        for line in self.metrics().splitlines():
            if line.startswith("#"):
                continue
            m = re.match(r"^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)", line)
            if not m or m.group(1) != name:
                continue
            found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
            if all(found.get(k) == str(v) for k, v in labels.items()):
                return float(m.group(4))
        return None


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

    def start_redis(self, port: int | None = None) -> Redis:
        if not shutil.which("redis-server"):
            self.skipTest("redis-server not installed")
        return self._own(Redis(self.workdir, port))

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


# ---------------------------------------------------------------- clients

def run_cli(args, cwd: str | None = None, timeout: float = 10.0) -> subprocess.CompletedProcess:
    """Runs sluice to completion (e.g. --check, --version); text stdout/stderr."""
    return subprocess.run([SLUICE_BIN, *args], cwd=cwd, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, errors="replace", timeout=timeout)


def request(port: int, method: str, target: str, body=None, headers=None,
            timeout: float = IO_TIMEOUT, chunked: bool = False):
    """One request on a fresh connection. Returns (status, HTTPMessage headers, body bytes).
    body may be bytes or an iterable of bytes (sent chunked when chunked=True)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request(method, target, body=body, headers=headers or {}, encode_chunked=chunked)
        res = conn.getresponse()
        data = res.read()
        return res.status, res.headers, data
    finally:
        conn.close()


class Client:
    """One keep-alive http.client connection; request() returns (status, headers, body)."""

    def __init__(self, port: int, timeout: float = IO_TIMEOUT):
        self.conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)

    def request(self, method: str, target: str, body=None, headers=None, chunked=False):
        self.conn.request(method, target, body=body, headers=headers or {},
                          encode_chunked=chunked)
        res = self.conn.getresponse()
        return res.status, res.headers, res.read()

    def stream(self, method: str, target: str, headers=None):
        """Sends a request and returns the unread HTTPResponse (read it in pieces)."""
        self.conn.request(method, target, headers=headers or {})
        return self.conn.getresponse()

    def close(self):
        self.conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Response:
    def __init__(self, version: str, status: int, reason: str, headers: list, body: bytes):
        self.version = version
        self.status = status
        self.reason = reason
        self.headers = headers  # [(name, value)] in received order
        self.body = body

    def header(self, name: str) -> str | None:
        values = self.all(name)
        return ", ".join(values) if values else None

    def all(self, name: str) -> list[str]:
        return [v for n, v in self.headers if n.lower() == name.lower()]

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return f"<Response {self.version} {self.status} {self.headers} {self.body[:200]!r}>"


class RawConnection:
    """Exact bytes over one TCP connection, and a reader for HTTP/1.x responses."""

    def __init__(self, port: int, timeout: float = IO_TIMEOUT):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buffer = b""

    def send(self, data: bytes):
        self.sock.sendall(data)

    def _fill(self) -> bool:
        chunk = self.sock.recv(65536)
        if not chunk:
            return False
        self.buffer += chunk
        return True

    def _read_line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            if not self._fill():
                raise ConnectionError(f"closed before a full line: {self.buffer[:200]!r}")
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _read_exact(self, n: int) -> bytes:
        while len(self.buffer) < n:
            if not self._fill():
                raise ConnectionError(f"closed after {len(self.buffer)} of {n} body bytes")
        data, self.buffer = self.buffer[:n], self.buffer[n:]
        return data

    def read_response(self, head_request: bool = False) -> Response:
        """Reads one final response (1xx interim responses are skipped)."""
        while True:
            while b"\r\n\r\n" not in self.buffer:
                if not self._fill():
                    raise ConnectionError(f"closed before a response head: {self.buffer[:200]!r}")
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            lines = head.decode("latin-1").split("\r\n")
            m = re.match(r"^HTTP/(\d\.\d) (\d{3})(?: (.*))?$", lines[0])
            if not m:
                raise ValueError(f"not an HTTP status line: {head[:120]!r} (stray bytes after "
                                 f"the previous message?)")
            status = int(m.group(2))
            headers = []
            for line in lines[1:]:
                name, _, value = line.partition(":")
                headers.append((name.strip(), value.strip()))
            if 100 <= status < 200:
                continue
            break
        response = Response(m.group(1), status, m.group(3) or "", headers, b"")
        te = (response.header("Transfer-Encoding") or "").lower()
        cl = response.header("Content-Length")
        if head_request or status in (204, 304):
            return response
        if "chunked" in te:
            body = bytearray()
            while True:
                size = int(self._read_line().split(b";")[0].strip(), 16)
                if size == 0:
                    while self._read_line():  # trailers until the empty line
                        pass
                    break
                body += self._read_exact(size)
                if self._read_line() != b"":
                    raise ValueError("chunk not followed by CRLF")
            response.body = bytes(body)
        elif cl is not None:
            response.body = self._read_exact(int(cl))
        else:
            while self._fill():  # delimited by close
                pass
            response.body, self.buffer = self.buffer, b""
        return response

    def peek(self, timeout: float) -> bytes:
        """The unread bytes after waiting up to `timeout` for some to arrive (not consumed)."""
        if not self.buffer:
            previous = self.sock.gettimeout()
            self.sock.settimeout(timeout)
            try:
                self._fill()
            except socket.timeout:
                pass
            finally:
                self.sock.settimeout(previous)
        return self.buffer

    def read_until_close(self, timeout: float = IO_TIMEOUT) -> bytes:
        """Everything until the peer closes (raises socket.timeout otherwise)."""
        self.sock.settimeout(timeout)
        try:
            while self._fill():
                pass
        except ConnectionResetError:
            pass
        data, self.buffer = self.buffer, b""
        return data

    def is_closed(self, timeout: float = 3.0) -> bool:
        """True if the peer closes (EOF or reset) within `timeout` with no further bytes.
        Unread buffered bytes count as "not closed"."""
        if self.buffer:
            return False
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True
        except socket.timeout:
            return False

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def raw_exchange(port: int, data: bytes, timeout: float = IO_TIMEOUT) -> Response:
    """Sends `data` on a fresh connection and reads one response."""
    with RawConnection(port, timeout) as conn:
        conn.send(data)
        return conn.read_response()


# ---------------------------------------------------------------- Redis and rate limiting
# (appended for the rate-limiting tests; nothing above depends on it)

class RedisReplyError(Exception):
    """A RESP error reply (returned, not raised, by redis_call/redis_pipeline)."""

    def __eq__(self, other):
        return isinstance(other, RedisReplyError) and self.args == other.args

    def __hash__(self):
        return hash(self.args)


def resp_encode(*args) -> bytes:
    out = b"*%d\r\n" % len(args)
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return out


class _RespIncomplete(Exception):
    pass


def _resp_parse(buf: bytes, pos: int = 0):
    """(value, next position) of the RESP2 reply at buf[pos:]; raises _RespIncomplete."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise _RespIncomplete()
    kind, line = buf[pos:pos + 1], buf[pos + 1:end]
    pos = end + 2
    if kind == b"+":
        return line.decode(), pos
    if kind == b"-":
        return RedisReplyError(line.decode(errors="replace")), pos
    if kind == b":":
        return int(line), pos
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            raise _RespIncomplete()
        return buf[pos:pos + n], pos + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            item, pos = _resp_parse(buf, pos)
            items.append(item)
        return items, pos
    raise ValueError(f"not a RESP reply: {buf[pos - len(line) - 3:][:80]!r}")


def redis_pipeline(port: int, commands, timeout: float = 2.0, ssl_context=None) -> list:
    """Sends every command (a list of arguments each) on one connection and returns
    the parsed replies: str, int, bytes, None, list, or RedisReplyError."""
    payload = b"".join(resp_encode(*c) for c in commands)
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    if ssl_context is not None:
        sock = ssl_context.wrap_socket(sock, server_hostname="127.0.0.1")
    with sock:
        sock.sendall(payload)
        buf, replies, pos = b"", [], 0
        while len(replies) < len(commands):
            try:
                value, next_pos = _resp_parse(buf, pos)
            except _RespIncomplete:
                chunk = sock.recv(65536)
                if not chunk:
                    raise ConnectionError(f"redis closed after {len(replies)} replies")
                buf += chunk
                continue
            replies.append(value)
            pos = next_pos
        return replies


def redis_call(port: int, *args, timeout: float = 2.0, db: int | None = None,
               ssl_context=None):
    """One command (after SELECT db when given); returns the parsed reply."""
    commands = ([["SELECT", db]] if db is not None else []) + [list(args)]
    return redis_pipeline(port, commands, timeout, ssl_context)[-1]


class TlsRedis(Process):
    """redis-server serving TLS only (--port 0) on `port`; polled with PING over TLS."""

    def __init__(self, workdir: str, cert: str, key: str, ca: str, port: int | None = None):
        import ssl
        self.port = port or free_port()
        self.ssl_context = ssl.create_default_context(cafile=ca)
        binary = shutil.which("redis-server") or "redis-server"
        super().__init__("redis-tls", [
            binary, "--port", "0", "--tls-port", str(self.port), "--bind", "127.0.0.1",
            "--tls-cert-file", cert, "--tls-key-file", key, "--tls-ca-cert-file", ca,
            "--tls-auth-clients", "no", "--save", "", "--appendonly", "no"], workdir, cwd=workdir)
        self._until_ready(lambda: wait_until(self._pong, START_TIMEOUT, message="redis TLS PING"))

    def _pong(self) -> bool:
        if not self.alive():
            raise AssertionError(f"redis-server exited early\n{self.output_tail()}")
        return redis_call(self.port, "PING", ssl_context=self.ssl_context) == "PONG"


def start_tls_redis(case: ProcessTestCase, cert: str, key: str, ca: str) -> TlsRedis:
    if not shutil.which("redis-server"):
        case.skipTest("redis-server not installed")
    return case._own(TlsRedis(case.workdir, cert, key, ca))


def readyz(sluice: Sluice) -> tuple[int, dict]:
    """(status, parsed body) of GET /readyz on the admin listener."""
    status, _, body = request(sluice.admin_port, "GET", "/readyz", timeout=2.0)
    return status, json.loads(body)


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
    """Sum of every sample of `name` whose labels include `labels` (0 if none)."""
    total = 0.0
    for line in sluice.metrics().splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r"^([a-zA-Z_:][\w:]*)(\{(.*)\})?\s+(\S+)", line)
        if not m or m.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', m.group(3) or ""))
        if all(found.get(k) == str(v) for k, v in labels.items()):
            total += float(m.group(4))
    return total


RATE_LIMIT_HEADERS = ("X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
                      "RateLimit-Policy", "RateLimit")
