"""Loopback TCP ports: a free one to listen on, and whether something listens."""

from __future__ import annotations

import collections
import socket

LOOPBACK = "127.0.0.1"


# The ports handed out lately: the kernel may offer a port again as soon as its
# probe socket closed, so two calls for one configuration (server and admin
# listeners) could get the same port; a recent one is asked for again instead.
_recent: collections.deque[int] = collections.deque(maxlen=256)


def free_port() -> int:
    """An ephemeral TCP port on 127.0.0.1 that was free a moment ago, and not
    one of the last 256 this process was given."""
    for _ in range(100):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((LOOPBACK, 0))
            port = s.getsockname()[1]
        if port not in _recent:
            break
    _recent.append(port)
    return port


def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (connections are refused)."""
    return free_port()


def port_open(port: int, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on 127.0.0.1:port."""
    try:
        with socket.create_connection((LOOPBACK, port), timeout=timeout):
            return True
    except OSError:
        return False
