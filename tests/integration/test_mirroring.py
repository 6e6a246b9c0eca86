"""A route's mirror (routes[].mirror) through the real sluice binary: the
primary upstream is sluice-echo, the mirror a scripted Python upstream that
records what it got (test_retries.ScriptedUpstream).

- every request copied whole (method, target, body, chunked too) when the
  share is 100, and exactly the share of them otherwise;
- a mirror upstream that is down changes no answer, and its copies count as
  failed;
- a slow mirror holds at most max_in_flight copies; the rest are skipped and
  counted, and the clients' answers come from the primary all the same;
- a body beyond max_body_bytes is not copied;
- an HTTP/2 client's requests are mirrored as well;
- a mirror upstream over h2c gets its copies answered and counted, though
  nothing but the copy's own wait holds it once the client's answer went.
"""

import json
import unittest

from harness import Client, ProcessTestCase, closed_port, gateway_config, request, wait_until
from test_retries import ScriptedUpstream
from testkit.h2client import H2Client


class MirroringTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.primary = self.start_echo("primary")

    def mirror_upstream(self, **options) -> ScriptedUpstream:
        server = ScriptedUpstream(**options)
        self.addCleanup(server.stop)
        return server

    def start(self, mirror_address, threads=1, shadow=None, **mirror):
        config = gateway_config(
            {"primary": [self.primary.address], "shadow": shadow or [mirror_address]},
            [{"name": "app", "match": {"path_prefix": "/"}, "upstream": "primary",
              "mirror": {"upstream": "shadow", **mirror}}],
            server={"threads": threads, "http2": {"enabled": True}},
            log={"level": "warn", "access_log": False})
        return self.start_sluice(config)

    def outcome(self, gw, outcome):
        return gw.metric("sluice_mirror_requests_total", route="app", outcome=outcome)

    def test_every_request_copied_whole(self):
        shadow = self.mirror_upstream(status=500)
        gw = self.start(shadow.address)
        body = bytes(range(256)) * 30
        with Client(gw.port) as client:
            status, _, reply = client.request("GET", "/a?x=1")
            self.assertEqual(status, 200)
            self.assertEqual(json.loads(reply)["target"], "/a?x=1")  # the primary's answer
            self.assertEqual(client.request("POST", "/b", body=body)[0], 200)
            self.assertEqual(client.request("PUT", "/c", body=iter([b"x" * 5000, b"y"]),
                                            chunked=True)[0], 200)
            self.assertEqual(client.request("DELETE", "/d", body=iter([]), chunked=True)[0], 200)
        wait_until(lambda: shadow.count() == 4, timeout=5, message="four copies")
        got = sorted(shadow.got, key=lambda g: g[1])
        self.assertEqual(got, [("GET", "/a?x=1", b""), ("POST", "/b", body),
                               ("PUT", "/c", b"x" * 5000 + b"y"), ("DELETE", "/d", b"")])
        wait_until(lambda: self.outcome(gw, "answered") == 4, timeout=5,
                   message="the copies counted")
        self.assertEqual(self.outcome(gw, "failed"), 0)

    def test_exactly_the_share(self):
        shadow = self.mirror_upstream()
        gw = self.start(shadow.address, percent=25)
        with Client(gw.port) as client:
            for i in range(100):
                self.assertEqual(client.request("GET", f"/s/{i}")[0], 200)
        outcomes = ("answered", "failed", "skipped")
        wait_until(lambda: sum(self.outcome(gw, o) for o in outcomes) == 25, timeout=10,
                   message="25 copies")
        self.assertEqual(self.outcome(gw, "answered"), 25,
                         {o: self.outcome(gw, o) for o in outcomes})
        self.assertEqual(shadow.count(), 25)
        self.assertEqual(self.primary.counts()["requests"], 100)

    def test_a_dead_mirror_changes_no_answer(self):
        gw = self.start(f"127.0.0.1:{closed_port()}")
        with Client(gw.port) as client:
            for i in range(10):
                self.assertEqual(client.request("GET", f"/dead/{i}")[0], 200)
        wait_until(lambda: self.outcome(gw, "failed") == 10, timeout=5,
                   message="ten failed copies")

    def test_a_slow_mirror_holds_at_most_max_in_flight(self):
        shadow = self.mirror_upstream(delay=1.5)
        gw = self.start(shadow.address, max_in_flight=2)
        with Client(gw.port) as client:
            for i in range(10):
                status, _, reply = client.request("GET", f"/slow/{i}")
                self.assertEqual(status, 200)
        # The ten answers came while the first two copies were still held.
        self.assertEqual(self.outcome(gw, "skipped"), 8)
        wait_until(lambda: self.outcome(gw, "answered") == 2, timeout=10,
                   message="the two copies answered")
        self.assertEqual(shadow.count(), 2)

    def test_a_body_beyond_the_bound_is_not_copied(self):
        shadow = self.mirror_upstream()
        gw = self.start(shadow.address, max_body_bytes=1000)
        self.assertEqual(request(gw.port, "POST", "/big", body=b"z" * 4000)[0], 200)
        self.assertEqual(request(gw.port, "POST", "/small", body=b"z" * 1000)[0], 200)
        wait_until(lambda: self.outcome(gw, "answered") == 1, timeout=5, message="one copy")
        self.assertEqual(self.outcome(gw, "skipped"), 1)
        self.assertEqual([(m, p, len(b)) for m, p, b in shadow.got], [("POST", "/small", 1000)])

    def test_a_mirror_over_h2c_is_answered_and_counted(self):
        from testkit.h2server import H2Upstream
        shadow = H2Upstream(hold=0.5)
        self.addCleanup(shadow.stop)
        gw = self.start(None, shadow={"servers": [shadow.address], "protocol": "h2c"})
        self.assertEqual(request(gw.port, "GET", "/copied")[0], 200)
        wait_until(lambda: self.outcome(gw, "answered") == 1, timeout=5,
                   message="the copy answered after its hold")
        self.assertEqual((shadow.requests, shadow.resets), (1, []))
        self.assertEqual(self.outcome(gw, "failed"), 0)

    def test_http2_clients_are_mirrored(self):
        shadow = self.mirror_upstream()
        gw = self.start(shadow.address)
        client = H2Client(gw.port)
        try:
            r = client.request("POST", "/h2", body=b"q" * 3000)
            self.assertEqual(r.status, 200)
        finally:
            client.close()
        wait_until(lambda: shadow.count() == 1, timeout=5, message="one copy")
        self.assertEqual(shadow.got[0], ("POST", "/h2", b"q" * 3000))


if __name__ == "__main__":
    unittest.main()
