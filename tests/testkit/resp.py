"""A RESP2 client for redis-server on loopback (plain or TLS).

Connection keeps one socket: pipeline() writes every command in one write and
returns the replies in order, an error reply returned in place as a ReplyError;
call() returns one reply and raises a ReplyError instead. redis_pipeline() and
redis_call() open a connection for one exchange; raw_command() returns the reply
bytes exactly as received, for tests that assert the wire. script_calls() and
bucket_state() read what Sluice left in a Redis: how many scripts it ran, what a
bucket holds.
"""

from __future__ import annotations

import re
import socket
import struct


class ReplyError(Exception):
    """A RESP error reply (-ERR ...); equal to another with the same text."""

    def __eq__(self, other):
        return isinstance(other, ReplyError) and self.args == other.args

    def __hash__(self):
        return hash(self.args)


def encode(*args) -> bytes:
    """One command as a RESP array of bulk strings (str, bytes or numbers)."""
    out = b"*%d\r\n" % len(args)
    for a in args:
        b = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(b), b)
    return out


class Incomplete(Exception):
    """The buffer ends before the reply does."""


def parse(buf: bytes, pos: int = 0):
    """(value, next position) of the reply at buf[pos:]: str, int, bytes, None, list
    or ReplyError. Raises Incomplete when more bytes are needed."""
    end = buf.find(b"\r\n", pos)
    if end < 0:
        raise Incomplete()
    kind, line = buf[pos:pos + 1], buf[pos + 1:end]
    pos = end + 2
    if kind == b"+":
        return line.decode(), pos
    if kind == b"-":
        return ReplyError(line.decode(errors="replace")), pos
    if kind == b":":
        return int(line), pos
    if kind == b"$":
        n = int(line)
        if n < 0:
            return None, pos
        if len(buf) < pos + n + 2:
            raise Incomplete()
        return buf[pos:pos + n], pos + n + 2
    if kind == b"*":
        n = int(line)
        if n < 0:
            return None, pos
        items = []
        for _ in range(n):
            item, pos = parse(buf, pos)
            items.append(item)
        return items, pos
    raise ValueError(f"not a RESP reply: {buf[pos - len(line) - 3:][:80]!r}")


class Connection:
    """One connection to 127.0.0.1:port; TLS when an ssl_context is given."""

    def __init__(self, port: int, timeout: float = 2.0, ssl_context=None):
        sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        if ssl_context is not None:
            sock = ssl_context.wrap_socket(sock, server_hostname="127.0.0.1")
        self.sock = sock
        self.buffer = b""

    def pipeline(self, *commands) -> list:
        """Sends every command (a sequence of arguments each) in one write; the replies
        in order, error replies as ReplyError values."""
        self.sock.sendall(b"".join(encode(*c) for c in commands))
        replies, pos = [], 0
        while len(replies) < len(commands):
            try:
                value, pos = parse(self.buffer, pos)
            except Incomplete:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError(f"redis closed after {len(replies)} replies")
                self.buffer += chunk
                continue
            replies.append(value)
        self.buffer = self.buffer[pos:]
        return replies

    def call(self, *args):
        """One command's reply; an error reply is raised as ReplyError."""
        reply = self.pipeline(args)[0]
        if isinstance(reply, ReplyError):
            raise reply
        return reply

    __call__ = call

    def time_us(self) -> int:
        """Redis's clock (TIME) in microseconds."""
        sec, usec = self.call("TIME")
        return int(sec) * 1_000_000 + int(usec)

    def commandstats(self) -> dict[str, dict[str, float]]:
        """INFO commandstats: command -> {"calls": n, "usec": n, ...}."""
        text = self.call("INFO", "commandstats").decode()
        stats = {}
        for line in text.splitlines():
            m = re.match(r"^cmdstat_([^:]+):(.*)$", line.strip())
            if m:
                stats[m.group(1)] = {k: float(v) for k, v in
                                     (kv.split("=") for kv in m.group(2).split(","))}
        return stats

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def redis_pipeline(port: int, commands, timeout: float = 2.0, ssl_context=None) -> list:
    """Every command on one fresh connection; the replies as Connection.pipeline()."""
    with Connection(port, timeout, ssl_context) as conn:
        return conn.pipeline(*commands)


def redis_call(port: int, *args, timeout: float = 2.0, db: int | None = None,
               ssl_context=None):
    """One command (after SELECT db when given); the reply, an error returned as a
    ReplyError value."""
    commands = ([["SELECT", db]] if db is not None else []) + [list(args)]
    return redis_pipeline(port, commands, timeout, ssl_context)[-1]


# A script that keeps Redis busy (nothing else runs) for ARGV[1] microseconds.
BUSY_SCRIPT = ("local s = redis.call('TIME') repeat local n = redis.call('TIME') "
               "until (n[1] - s[1]) * 1000000 + (n[2] - s[2]) > tonumber(ARGV[1])")


def stall_redis(port: int, seconds: float):
    """Keeps the Redis on `port` busy for `seconds` (BUSY_SCRIPT, in a thread);
    returns that thread once Redis is busy (a PING goes unanswered), polled for
    at most 5 s."""
    import threading
    import time
    busy = threading.Thread(target=lambda: redis_call(
        port, "EVAL", BUSY_SCRIPT, "0", str(int(seconds * 1e6)), timeout=seconds + 10))
    busy.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            redis_call(port, "PING", timeout=0.05)
        except OSError:
            return busy
        time.sleep(0.01)
    raise AssertionError("Redis never became busy")


def raw_command(port: int, *args, timeout: float = 1.0) -> bytes:
    """Sends one command and returns the reply bytes of one recv (short replies)."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(encode(*args))
        return s.recv(65536)


def script_calls(port: int, ssl_context=None) -> int:
    """Scripts Redis has run (EVALSHA and EVAL calls in INFO commandstats): one per
    rate-limit decision or refund call that reached this node."""
    with Connection(port, ssl_context=ssl_context) as conn:
        stats = conn.commandstats()
    return int(sum(stats.get(name, {}).get("calls", 0) for name in ("evalsha", "eval")))


def bucket_state(port: int, key, ssl_context=None) -> tuple[float, float] | None:
    """(tokens, timestamp in microseconds) of a token bucket: its value is two
    little-endian doubles. None when the key does not exist."""
    value = redis_call(port, "GET", key, ssl_context=ssl_context)
    if value is None:
        return None
    assert isinstance(value, bytes) and len(value) == 16, f"not a bucket: {key!r} = {value!r}"
    return struct.unpack("<dd", value)
