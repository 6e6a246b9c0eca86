"""upstreams.NAME.balance and per-server weights through the real sluice binary
and real upstreams (sluice-echo, and a slow Python server).

- round_robin with weights 3 and 1 sends exactly three requests in four to the
  first server (one worker: one cursor).
- least_request keeps most requests off a server that answers 100 ms late,
  where round robin sends it half of them.
- hash on a header sends each key to one server, the same every time; a key
  whose server is down goes to another, and the others' keys stay.
- random by weight never picks a server whose weight share is not its own.
- outlier_detection ejects a server after its errors in a row (it then gets
  nothing, and says so in its series), lets it back by itself when the
  ejection ends, and never ejects more than max_ejection_percent (at least one).
"""

import threading
import time
import unittest

from harness import (Client, PythonUpstream, ProcessTestCase, closed_port, gateway_config,
                     request, wait_until)


class BalancingTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.echoes = [self.start_echo(f"echo{i}") for i in range(3)]

    def start(self, upstream, threads=1):
        config = gateway_config({"app": upstream},
                                [{"name": "app", "match": {"path_prefix": "/"}, "upstream": "app"}],
                                server={"threads": threads},
                                log={"level": "warn", "access_log": False})
        return self.start_sluice(config)

    def counts(self):
        return [echo.counts()["requests"] for echo in self.echoes]

    def test_weighted_round_robin_is_exact(self):
        gw = self.start({"servers": [{"address": self.echoes[0].address, "weight": 3},
                                     self.echoes[1].address]})
        with Client(gw.port) as client:
            for i in range(400):
                self.assertEqual(client.request("GET", f"/rr/{i}")[0], 200)
        self.assertEqual(self.counts()[:2], [300, 100])

    def test_hash_on_header_keeps_each_key_on_one_server(self):
        gw = self.start({"servers": [e.address for e in self.echoes], "balance": "hash",
                         "hash_on": "header:X-User"}, threads=2)
        homes = {}
        with Client(gw.port) as client:
            for user in range(30):
                before = self.counts()
                for _ in range(5):
                    status = client.request("GET", "/h", headers={"X-User": f"user-{user}"})[0]
                    self.assertEqual(status, 200)
                delta = [a - b for a, b in zip(self.counts(), before)]
                self.assertEqual(sorted(delta), [0, 0, 5], f"user-{user}: {delta}")
                homes[user] = delta.index(5)
        # The keys spread over the three servers.
        self.assertEqual(len(set(homes.values())), 3, homes)
        # A second gateway with the same servers sends every key to the same one.
        gw2 = self.start({"servers": [e.address for e in self.echoes], "balance": "hash",
                          "hash_on": "header:X-User"})
        for user in range(30):
            before = self.counts()
            self.assertEqual(request(gw2.port, "GET", "/h",
                                     headers={"X-User": f"user-{user}"})[0], 200)
            delta = [a - b for a, b in zip(self.counts(), before)]
            self.assertEqual(delta.index(1), homes[user], f"user-{user}")

    def test_hash_key_of_a_dead_server_goes_elsewhere(self):
        dead = f"127.0.0.1:{closed_port()}"
        servers = [self.echoes[0].address, dead, self.echoes[1].address]
        gw = self.start({"servers": servers, "balance": "hash", "hash_on": "cookie:session"})
        for user in range(40):
            headers = {"Cookie": f"theme=dark; session=s{user}"}
            for _ in range(2):
                status, _, body = request(gw.port, "GET", "/d", headers=headers)
                self.assertEqual(status, 200, body[:200])
        self.assertEqual(sum(self.counts()[:2]), 80)

    def test_hash_without_the_key_spreads(self):
        gw = self.start({"servers": [e.address for e in self.echoes[:2]], "balance": "hash",
                         "hash_on": "header:X-User"})
        with Client(gw.port) as client:
            for i in range(200):
                self.assertEqual(client.request("GET", f"/n/{i}")[0], 200)
        counts = self.counts()[:2]
        self.assertEqual(sum(counts), 200)
        self.assertGreater(min(counts), 50, counts)

    def test_random_follows_the_weights(self):
        gw = self.start({"servers": [{"address": self.echoes[0].address, "weight": 9},
                                     self.echoes[1].address], "balance": "random"})
        with Client(gw.port) as client:
            for i in range(500):
                self.assertEqual(client.request("GET", f"/r/{i}")[0], 200)
        counts = self.counts()[:2]
        self.assertEqual(sum(counts), 500)
        self.assertGreater(counts[0], 400, counts)  # 450 expected
        self.assertGreater(counts[1], 15, counts)   # 50 expected

    def test_least_request_avoids_a_slow_server(self):
        served = {"slow": 0}
        lock = threading.Lock()

        def slow_get(handler, query):
            time.sleep(0.1)
            with lock:
                served["slow"] += 1
            handler.send_response(200)
            handler.send_header("Content-Length", "2")
            handler.end_headers()
            handler.wfile.write(b"ok")

        slow = PythonUpstream(slow_get)
        self.addCleanup(slow.stop)
        shares = {}
        for policy in ("round_robin", "least_request"):
            served["slow"] = 0
            before = self.counts()[0]
            gw = self.start({"servers": [self.echoes[0].address, slow.address],
                             "balance": policy})
            errors = []

            def client_loop():
                try:
                    with Client(gw.port) as client:
                        for i in range(30):
                            if client.request("GET", f"/l/{i}")[0] != 200:
                                errors.append("status")
                except Exception as e:  # noqa: BLE001 - reported below
                    errors.append(repr(e))

            threads = [threading.Thread(target=client_loop) for _ in range(8)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            self.assertEqual(errors, [], policy)
            total = served["slow"] + self.counts()[0] - before
            self.assertEqual(total, 240, policy)
            shares[policy] = served["slow"] / total
            gw.stop()
        self.assertGreater(shares["round_robin"], 0.4, shares)
        self.assertLess(shares["least_request"], 0.2, shares)

    def failing_server(self, status=503):
        """A Python upstream that answers every GET with `status`; its count of them."""
        answered = {"n": 0}
        lock = threading.Lock()

        def get(handler, query):
            with lock:
                answered["n"] += 1
            handler.send_response(status)
            handler.send_header("Content-Length", "0")
            handler.end_headers()

        server = PythonUpstream(get)
        self.addCleanup(server.stop)
        return server, answered

    def test_outlier_ejected_and_back_by_itself(self):
        bad, answered = self.failing_server()
        servers = [self.echoes[0].address, bad.address, self.echoes[1].address]
        gw = self.start({"servers": servers, "outlier_detection": {
            "consecutive_gateway_errors": 3, "consecutive_5xx": 0, "base_ejection_ms": 1500,
            "max_ejection_percent": 50}})
        statuses = []
        with Client(gw.port) as client:
            for i in range(30):
                statuses.append(client.request("GET", f"/o/{i}")[0])
        # Round robin gave the bad server every third request until its third 503.
        self.assertEqual(answered["n"], 3)
        self.assertEqual(statuses.count(503), 3)
        labels = {"upstream": "app", "server": bad.address}
        self.assertEqual(gw.metric("sluice_upstream_ejected", **labels), 1)
        self.assertEqual(gw.metric("sluice_upstream_ejections_total", **labels), 1)
        self.assertEqual(gw.metric("sluice_upstream_server_errors_total", **labels), 3)
        good = {"upstream": "app", "server": self.echoes[0].address}
        self.assertEqual(gw.metric("sluice_upstream_ejected", **good), 0)
        self.assertEqual(gw.metric("sluice_upstream_server_errors_total", **good), 0)
        # When the ejection ends, the server takes requests again.
        with Client(gw.port) as client:
            wait_until(lambda: client.request("GET", "/o/again")[0] and answered["n"] > 3,
                       timeout=10, interval=0.05, message="the ejected server back")
        self.assertEqual(gw.metric("sluice_upstream_ejected", **labels), 0)

    def test_outliers_never_empty_the_upstream(self):
        bad1, _ = self.failing_server(502)
        bad2, _ = self.failing_server(500)
        servers = [bad1.address, bad2.address, self.echoes[0].address]
        gw = self.start({"servers": servers, "outlier_detection": {
            "consecutive_5xx": 2, "base_ejection_ms": 60000}})  # 10 %: one server at most
        with Client(gw.port) as client:
            for i in range(60):
                client.request("GET", f"/m/{i}")
        ejected = [gw.metric("sluice_upstream_ejected", upstream="app", server=a) for a in servers]
        self.assertEqual(sum(ejected), 1, ejected)
        self.assertEqual(ejected[2], 0)


if __name__ == "__main__":
    unittest.main()
