"""IP allow and deny lists (ip_access) through the real sluice binary, a real
redis-server and sluice-echo, clients told apart by X-Forwarded-For from the
trusted loopback proxy.

- The longest listed prefix decides, the top-level list first and then the
  route's; an allow list lets in only its own. A refused client gets 403
  problem+json over HTTP/1.1 and HTTP/2, is counted by route and reason, spends
  no token and never reaches the upstream.
- X-Forwarded-For counts only from a trusted proxy: with none trusted, the
  peer's own address decides.
- A deny file of 100,000 entries is read at start, and a SIGHUP reload of an
  edited file changes who is refused without a restart.
- A list with a malformed entry, a conflicting one or an unreadable file is
  refused by --check with the entry named, and a reload to it keeps the old lists.
"""

import json
import os
import random
import shutil
import tempfile
import unittest

from harness import (ProcessTestCase, gateway_config, limit, metric_sum, request, route,
                     run_cli, to_yaml, wait_redis_ready, wait_until)
from testkit.h2client import H2Client


def forwarded(ip):
    return {"X-Forwarded-For": ip}


class IpAccessTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()
        self.dir = tempfile.mkdtemp(prefix="sluice-ip-access-")
        self.addCleanup(shutil.rmtree, self.dir, True)

    def config(self, top=None, partners=None, server=None):
        # One bucket for the whole route (key: route): a refused request that
        # spent a token would show in the next allowed one's Remaining.
        limits = {"shared": limit("route", 100)}
        routes = [route("partners", "/partners", ["shared"],
                        **({"ip_access": partners} if partners else {})),
                  route("open", "/", [])]
        return gateway_config(
            {"echo": [self.echo.address]}, routes,
            server={"threads": 2, "http2": {"enabled": True}, **(server or {})},
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 2000},
            limits=limits, **({"ip_access": top} if top is not None else {}))

    def start(self, **kwargs):
        gw = self.start_sluice(self.config(**kwargs))
        wait_redis_ready(gw)
        return gw

    def denied(self, gw, route_name, reason):
        return metric_sum(gw, "sluice_access_denied_total", route=route_name, reason=reason)

    def test_longest_prefix_decides_and_a_refusal_spends_nothing(self):
        gw = self.start(
            top={"deny": ["203.0.113.0/24", "2001:db8:bad::/48"]},
            partners={"allow": ["10.0.0.0/8", "2001:db8::/32", "10.66.0.5"],
                      "deny": ["10.66.0.0/16"]})
        cases = [
            ("10.1.2.3", "/partners/a", 200),
            ("10.66.1.1", "/partners/a", 403),        # a longer deny entry
            ("10.66.0.5", "/partners/a", 200),        # a longer allow entry again
            ("11.0.0.1", "/partners/a", 403),         # no entry: not allowed
            ("2001:db8:1::7", "/partners/a", 200),
            ("2001:db8:bad::7", "/partners/a", 403),  # the top-level list, first
            ("203.0.113.9", "/open", 403),            # every route
            ("198.51.100.1", "/open", 200),           # only a deny list: let in
        ]
        for ip, path, expected in cases:
            status, headers, body = request(gw.port, "GET", path, headers=forwarded(ip))
            self.assertEqual(status, expected, (ip, path, body))
            if status == 403:
                self.assertEqual(headers["Content-Type"], "application/problem+json")
                doc = json.loads(body)
                self.assertEqual(doc["status"], 403)
                self.assertIn("client address", doc["detail"])
                self.assertNotIn("X-RateLimit-Remaining", headers)
            else:
                self.assertIn(b'"method"', body)  # the echo's answer
        self.assertEqual(self.denied(gw, "partners", "ip_denied"), 2)
        self.assertEqual(self.denied(gw, "partners", "ip_not_allowed"), 1)
        self.assertEqual(self.denied(gw, "open", "ip_denied"), 1)
        # Three allowed requests took one token each from the route's one bucket;
        # the three refused ones took none.
        status, headers, _ = request(gw.port, "GET", "/partners/b", headers=forwarded("10.1.2.3"))
        self.assertEqual(status, 200)
        self.assertEqual(headers["X-RateLimit-Remaining"], str(100 - 4))
        # Nothing refused reached the upstream: it saw the allowed requests only.
        self.assertEqual(metric_sum(gw, "sluice_upstream_requests_total"), 5)

    def test_http2_clients_are_refused_alike(self):
        gw = self.start(partners={"allow": ["10.0.0.0/8"]})
        c = H2Client(gw.port)
        try:
            ok = c.request("GET", "/partners/x", headers=[("x-forwarded-for", "10.9.9.9")])
            no = c.request("GET", "/partners/x", headers=[("x-forwarded-for", "192.0.2.1")])
            self.assertEqual(ok.status, 200)
            self.assertEqual(no.status, 403)
            self.assertEqual(no.header("content-type"), "application/problem+json")
            self.assertEqual(json.loads(no.body)["status"], 403)
        finally:
            c.close()
        self.assertEqual(self.denied(gw, "partners", "ip_not_allowed"), 1)

    def test_forwarded_for_counts_only_from_a_trusted_proxy(self):
        gw = self.start(server={"trusted_proxies": []}, partners={"deny": ["127.0.0.1"]})
        # The peer is 127.0.0.1 whatever the header says.
        status, _, _ = request(gw.port, "GET", "/partners/x", headers=forwarded("10.1.2.3"))
        self.assertEqual(status, 403)
        self.assertEqual(request(gw.port, "GET", "/other")[0], 200)

    def test_a_large_deny_file_and_its_reload(self):
        deny_file = os.path.join(self.dir, "deny.txt")
        rng = random.Random(7)
        lines = ["# generated"]
        for _ in range(100_000):
            lines.append(f"{rng.randrange(1, 223)}.{rng.randrange(256)}.{rng.randrange(256)}."
                         f"{rng.randrange(256)}/{rng.choice([24, 28, 32])}")
        lines.append("192.0.2.0/24")
        with open(deny_file, "w") as f:
            f.write("\n".join(lines) + "\n")
        config = self.config(top={"deny_file": deny_file})
        gw = self.start_sluice(config)
        wait_redis_ready(gw)
        self.assertEqual(request(gw.port, "GET", "/x", headers=forwarded("192.0.2.77"))[0], 403)
        self.assertEqual(request(gw.port, "GET", "/x", headers=forwarded("198.51.100.77"))[0], 200)
        # The file changes; a reload reads it again.
        with open(deny_file, "w") as f:
            f.write("198.51.100.0/24\n")
        gw.reload(config)
        wait_until(lambda: metric_sum(gw, "sluice_config_reloads_total", result="ok") == 1, 10,
                   message="the reload")
        wait_until(lambda: request(gw.port, "GET", "/x", headers=forwarded("198.51.100.77"))[0]
                   == 403, 10, message="the new list in force")
        self.assertEqual(request(gw.port, "GET", "/x", headers=forwarded("192.0.2.77"))[0], 200)

    def test_bad_lists_are_refused_and_a_bad_reload_keeps_the_old_ones(self):
        bad_file = os.path.join(self.dir, "bad.txt")
        with open(bad_file, "w") as f:
            f.write("10.0.0.0/8\n10.0.0.0/33\n")
        good = self.config(top={"deny": ["192.0.2.0/24"]})
        config = {**good, "ip_access": {"allow": ["10.0.0.0/8", "not-an-ip"],
                                        "deny": ["10.0.0.0/8"], "deny_file": bad_file}}
        path = os.path.join(self.dir, "bad.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(config))
        result = run_cli(["--config", path, "--check"])
        self.assertEqual(result.returncode, 1, result.stderr)
        self.assertIn('ip_access.allow[1]: invalid CIDR "not-an-ip"', result.stderr)
        self.assertIn("ip_access.deny[0]: 10.0.0.0/8 is both allowed and denied", result.stderr)
        self.assertIn(f'ip_access.deny_file: {bad_file}:2: invalid CIDR "10.0.0.0/33"',
                      result.stderr)
        # A running gateway told to load it keeps serving with its old lists.
        gw = self.start_sluice(good)
        wait_redis_ready(gw)
        gw.reload(config)
        wait_until(lambda: metric_sum(gw, "sluice_config_reloads_total", result="error") == 1, 10,
                   message="the failed reload")
        self.assertEqual(request(gw.port, "GET", "/x", headers=forwarded("192.0.2.1"))[0], 403)
        self.assertEqual(request(gw.port, "GET", "/x", headers=forwarded("10.1.1.1"))[0], 200)


if __name__ == "__main__":
    unittest.main()
