"""The access log's lines are gathered and written together, as nginx's
`buffer=64k flush=1s` does, through the real sluice binary and sluice-echo:
- by default (log.access_log_flush_ms 0) each request's line is a write(2)
  of its own; with 1000 a burst of requests costs a few writes, under a
  quarter of that (the process's write calls, from /proc/PID/io, while stdout
  is a file);
- every line arrives whole and once, within the flush time;
- lines still waiting when the gateway is stopped are written before it exits,
  and a reload writes them before its new settings apply.
"""

import json
import unittest

from harness import ProcessTestCase, gateway_config, metric_sum, pipelined, wait_until

REQUESTS = 400


def write_calls(pid: int) -> int:
    with open(f"/proc/{pid}/io") as f:
        for line in f:
            if line.startswith("syscw:"):
                return int(line.split()[1])
    raise AssertionError("no syscw in /proc/PID/io")


def send(port: int, paths) -> int:
    """Pipelined GETs on one connection; the count of 200 answers."""
    return pipelined(port, [b"GET %s HTTP/1.1\r\nHost: t\r\n\r\n" % p.encode()
                            for p in paths]).get(200, 0)


class AccessLogBufferTest(ProcessTestCase):
    def start(self, **log):
        echo = self.start_echo()
        config = gateway_config({"echo": [echo.address]},
                                [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo"}],
                                server={"threads": 2},
                                log={"level": "warn", "access_log": True, **log})
        return self.start_sluice(config)

    def lines(self, gw, prefix: str) -> list[dict]:
        docs = []
        for line in gw.stdout().splitlines():
            if f'"path":"{prefix}' in line:
                docs.append(json.loads(line))  # whole lines only: a torn one fails here
        return docs

    def burst_writes(self, gw, prefix: str) -> int:
        """Write calls the gateway made for a burst of requests, once all its lines are out."""
        paths = [f"{prefix}{i}" for i in range(REQUESTS)]
        before = write_calls(gw.pid)
        self.assertEqual(send(gw.port, paths), REQUESTS)
        wait_until(lambda: len(self.lines(gw, prefix)) == REQUESTS, 10,
                   message=f"{REQUESTS} access-log lines")
        seen = sorted(d["path"] for d in self.lines(gw, prefix))
        self.assertEqual(seen, sorted(paths))  # each once
        return write_calls(gw.pid) - before

    def test_lines_are_gathered_into_few_writes(self):
        unbuffered = self.start()
        each = self.burst_writes(unbuffered, "/each/")
        self.assertGreaterEqual(each, REQUESTS)  # a write per line
        gathered = self.start(access_log_flush_ms=1000)
        few = self.burst_writes(gathered, "/gathered/")
        # The process's other writes (event wake-ups between threads) count too,
        # more of them when a sanitizer slows the burst down: a quarter of the
        # unbuffered count still leaves no room for a write per line.
        self.assertLess(few, each // 4, f"{few} writes for {REQUESTS} lines ({each} unbuffered)")

    def test_waiting_lines_are_written_at_stop(self):
        gw = self.start(access_log_flush_ms=60000)
        self.assertEqual(send(gw.port, [f"/kept/{i}" for i in range(50)]), 50)
        self.assertEqual(self.lines(gw, "/kept/"), [])  # a minute to wait: nothing yet
        self.assertEqual(gw.stop(), 0)
        self.assertEqual(sorted(d["path"] for d in self.lines(gw, "/kept/")),
                         sorted(f"/kept/{i}" for i in range(50)))

    def test_a_reload_writes_the_waiting_lines(self):
        gw = self.start(access_log_flush_ms=60000)
        self.assertEqual(send(gw.port, [f"/before/{i}" for i in range(20)]), 20)
        # An exchange is recorded (counted, then its line gathered) once its
        # response is written, which may be after the client read it: the
        # reload goes once all 20 are counted (a worker runs it after that).
        wait_until(lambda: metric_sum(gw, "sluice_http_requests_total") >= 20, 10,
                   message="the 20 exchanges recorded")
        self.assertEqual(self.lines(gw, "/before/"), [])
        gw.reload(gw.config_text)  # the same settings: a reload alone writes what waits
        wait_until(lambda: len(self.lines(gw, "/before/")) == 20, 10,
                   message="the waiting lines after the reload")


if __name__ == "__main__":
    unittest.main()
