"""The load of scripts/bench --failover, in threads of this process: clients that
send requests as fast as their keep-alive connection allows and record every
answer, and a prober that checks, again and again, that a fresh key is admitted
exactly its capacity.

An answer is "decided" when it carries X-RateLimit-Limit: a fail-open answer
(Redis unreachable, the route says open) has no X-RateLimit-* headers. Times are
time.monotonic() seconds. Every socket error is recorded, and the client connects
again.
"""

from __future__ import annotations

import http.client
import threading
import time

IO_TIMEOUT = 5.0


class Answer:
    __slots__ = ("sent", "done", "status", "decided", "key", "remaining")

    def __init__(self, sent, done, status, decided, key, remaining):
        self.sent, self.done, self.status = sent, done, status
        self.decided, self.key, self.remaining = decided, key, remaining

    @property
    def latency(self) -> float:
        return self.done - self.sent

    @property
    def fail_open(self) -> bool:
        return self.status == 200 and not self.decided


class Connections:
    """One keep-alive connection per port; get() answers one request as an Answer."""

    def __init__(self, ports: list[int]):
        self.ports = ports
        self.conns: dict[int, http.client.HTTPConnection] = {}

    def get(self, port: int, path: str, key: str) -> Answer:
        conn = self.conns.get(port)
        if conn is None:
            conn = self.conns[port] = http.client.HTTPConnection("127.0.0.1", port,
                                                                 timeout=IO_TIMEOUT)
        sent = time.monotonic()
        try:
            conn.request("GET", path, headers={"X-API-Key": key})
            res = conn.getresponse()
            res.read()
        except (OSError, http.client.HTTPException):
            conn.close()
            del self.conns[port]
            raise
        remaining = res.getheader("X-RateLimit-Remaining")
        return Answer(sent, time.monotonic(), res.status,
                      res.getheader("X-RateLimit-Limit") is not None, key,
                      int(remaining) if remaining is not None else None)

    def close(self):
        for conn in self.conns.values():
            conn.close()


class Driver:
    """`clients` threads, client i sending keys[i], keys[i + clients], ... in turn,
    to the gateways in turn; plus the prober (see probe())."""

    def __init__(self, ports: list[int], keys: list[str], probe_keys: list[str],
                 probe_capacity: int, clients: int = 8, probe_period: float = 0.1):
        self.ports, self.keys, self.clients = ports, keys, clients
        self.probe_keys, self.capacity, self.period = probe_keys, probe_capacity, probe_period
        self.answers: list[Answer] = []  # list.append is atomic: no lock needed
        self.errors: list[tuple[float, str]] = []
        self.probes: list[dict] = []
        self.stopping = threading.Event()
        self.threads = [threading.Thread(target=self._client, args=(i,), daemon=True)
                        for i in range(clients)]
        self.threads.append(threading.Thread(target=self._prober, daemon=True))

    def start(self) -> Driver:
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(IO_TIMEOUT + 5)

    def _client(self, index: int):
        conns = Connections(self.ports)
        mine = self.keys[index::self.clients]
        n = 0
        while not self.stopping.is_set():
            port = self.ports[(index + n) % len(self.ports)]
            try:
                self.answers.append(conns.get(port, "/load", mine[n % len(mine)]))
            except (OSError, http.client.HTTPException) as e:
                self.errors.append((time.monotonic(), f"{port}: {e!r}"))
            n += 1
        conns.close()

    def _prober(self):
        conns = Connections(self.ports)
        for key in self.probe_keys:
            if self.stopping.wait(self.period):
                break
            self.probes.append(self.probe(conns, key))
        conns.close()

    def probe(self, conns: Connections, key: str) -> dict:
        """capacity + 1 requests on a fresh key, to the gateways in turn: exact when
        the first `capacity` are 200 with X-RateLimit-Remaining capacity-1 .. 0 and the
        last is 429."""
        answers, error = [], None
        start = time.monotonic()
        for n in range(self.capacity + 1):
            try:
                answers.append(conns.get(self.ports[n % len(self.ports)], "/probe", key))
            except (OSError, http.client.HTTPException) as e:
                error = repr(e)
                self.errors.append((time.monotonic(), f"probe: {error}"))
                break
        expected = [(200, r) for r in range(self.capacity - 1, -1, -1)]
        got = [(a.status, a.remaining) for a in answers]
        exact = error is None and got[:-1] == expected and got[-1][0] == 429
        return {"start": start, "end": time.monotonic(), "key": key, "exact": exact,
                "got": got, "fail_open": sum(a.fail_open for a in answers)}
