"""Per-route header rules through the real sluice binary and sluice-echo.

sluice-echo reports the request headers it received (in order) and answers with
Server and Content-Type, so one exchange shows both directions of a route's rules.
"""

import os
import re
import unittest

from harness import (ProcessTestCase, closed_port, echo_header, gateway_config, raw_exchange,
                     run_cli, to_yaml)

RULES_ROUTE = {
    "name": "ruled", "match": {"path_prefix": "/ruled"}, "upstream": "echo",
    "request_headers": {
        "set": {"X-Tenant": "acme",
                "X-Client": "${client_ip} ${route} ${scheme} $$5",
                "X-Trace": "id=${request_id}"},
        "remove": ["Cookie", "x-debug"],
    },
    "response_headers": {
        "set": {"X-Served-By": "${route} ${request_id}", "Content-Type": "application/x-ruled"},
        "remove": ["server"],
    },
}

# What the client sends: lines the rules replace or drop, in mixed case and repeated.
CLIENT_HEADERS = (b"Host: app.test\r\n"
                  b"X-Tenant: spoofed-1\r\n"
                  b"Cookie: a=1\r\n"
                  b"x-tenant: spoofed-2\r\n"
                  b"X-Debug: 1\r\n"
                  b"COOKIE: b=2\r\n"
                  b"X-Kept: yes\r\n"
                  b"X-Forwarded-For: 10.9.9.9\r\n")


def get(port: int, target: str, extra: bytes = b""):
    return raw_exchange(port, b"GET " + target.encode() + b" HTTP/1.1\r\n" + CLIENT_HEADERS +
                        extra + b"Connection: close\r\n\r\n")


class HeaderRulesTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.echo = self.start_echo()
        routes = [
            RULES_ROUTE,
            {**RULES_ROUTE, "name": "down", "match": {"path_prefix": "/down"},
             "upstream": "down"},
            {"name": "plain", "match": {"path_prefix": "/plain"}, "upstream": "echo"},
        ]
        self.gateway = self.start_sluice(gateway_config(
            {"echo": [self.echo.address], "down": [f"127.0.0.1:{closed_port()}"]}, routes))

    def test_request_rules_set_and_remove_after_sluices_headers(self):
        res = get(self.gateway.port, "/ruled/x", b"X-Request-Id: rid-42\r\n")
        self.assertEqual(res.status, 200, res)
        doc = res.json()
        self.assertEqual(echo_header(doc, "X-Tenant"), ["acme"])
        self.assertEqual(echo_header(doc, "Cookie"), [])
        self.assertEqual(echo_header(doc, "X-Debug"), [])
        self.assertEqual(echo_header(doc, "X-Kept"), ["yes"])
        # The client IP Sluice decided on: the loopback peer is a trusted proxy,
        # so it is the client's X-Forwarded-For entry.
        self.assertEqual(echo_header(doc, "X-Client"), ["10.9.9.9 ruled http $5"])
        self.assertEqual(echo_header(doc, "X-Trace"), ["id=rid-42"])
        # Sluice's own headers are untouched.
        self.assertEqual(echo_header(doc, "X-Forwarded-For"), ["10.9.9.9, 127.0.0.1"])
        self.assertEqual(echo_header(doc, "X-Request-Id"), ["rid-42"])
        self.assertEqual(echo_header(doc, "X-Forwarded-Proto"), ["http"])
        self.assertEqual(echo_header(doc, "Via"), ["1.1 sluice"])
        # The rules' lines come after Sluice's.
        names = [n.lower() for n, _ in doc["headers"]]
        self.assertLess(names.index("via"), names.index("x-tenant"))

    def test_a_generated_request_id_is_the_one_the_rules_use(self):
        res = get(self.gateway.port, "/ruled/y")
        self.assertEqual(res.status, 200, res)
        rid = res.header("X-Request-Id")
        self.assertRegex(rid or "", r"^[0-9a-f]{32}$")
        self.assertEqual(echo_header(res.json(), "X-Trace"), [f"id={rid}"])
        self.assertEqual(res.all("X-Served-By"), [f"ruled {rid}"])

    def test_response_rules_set_and_remove(self):
        res = get(self.gateway.port, "/ruled/z", b"X-Request-Id: rid-7\r\n")
        self.assertEqual(res.status, 200, res)
        self.assertEqual(res.all("Server"), [])
        self.assertEqual(res.all("Content-Type"), ["application/x-ruled"])
        self.assertEqual(res.all("X-Served-By"), ["ruled rid-7"])
        self.assertEqual(res.all("X-Request-Id"), ["rid-7"])
        self.assertEqual(res.json()["target"], "/ruled/z")  # the body is relayed unchanged

    def test_a_route_without_rules_passes_headers_as_they_came(self):
        res = get(self.gateway.port, "/plain/x")
        self.assertEqual(res.status, 200, res)
        doc = res.json()
        self.assertEqual(echo_header(doc, "X-Tenant"), ["spoofed-1", "spoofed-2"])
        self.assertEqual(echo_header(doc, "Cookie"), ["a=1", "b=2"])
        self.assertEqual(echo_header(doc, "X-Client"), [])
        self.assertEqual(res.all("Server"), ["sluice-echo"])
        self.assertEqual(res.all("X-Served-By"), [])

    def test_sluices_own_replies_are_left_alone(self):
        res = get(self.gateway.port, "/down/x")
        self.assertEqual(res.status, 502, res)
        self.assertEqual(res.all("X-Served-By"), [])
        self.assertNotEqual(res.all("Content-Type"), ["application/x-ruled"])
        self.assertTrue(res.header("X-Request-Id"))


class HeaderRulesCheckTest(ProcessTestCase):
    def check(self, route: dict):
        path = os.path.join(self.workdir, "rules.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(gateway_config({"app": ["127.0.0.1:9"]}, [route])) + "\n")
        result = run_cli(["--config", path, "--check"])
        return result.returncode, result.stdout + result.stderr

    def test_a_rule_on_a_protected_header_is_a_check_error(self):
        base = {"name": "r", "match": {"path_prefix": "/"}, "upstream": "app"}
        cases = [
            ({"request_headers": {"set": {"X-Forwarded-For": "${client_ip}"}}},
             r'routes\[0\]\.request_headers\.set\.X-Forwarded-For: "X-Forwarded-For" is a header '
             r"Sluice sets or frames itself: a rule cannot set or remove it"),
            ({"request_headers": {"remove": ["x-request-id"]}},
             r'routes\[0\]\.request_headers\.remove\[0\]: "x-request-id" is a header Sluice'),
            ({"response_headers": {"remove": ["X-RateLimit-Remaining"]}},
             r'routes\[0\]\.response_headers\.remove\[0\]: "X-RateLimit-Remaining" is a header'),
            ({"response_headers": {"set": {"RateLimit": "x"}}},
             r'routes\[0\]\.response_headers\.set\.RateLimit: "RateLimit" is a header'),
        ]
        for rules, message in cases:
            with self.subTest(rules=rules):
                code, output = self.check({**base, **rules})
                self.assertEqual(code, 1, output)
                self.assertNotIn("configuration OK", output)
                self.assertRegex(output, re.compile(r"rules\.yaml:\d+: " + message, re.M))

    def test_good_rules_pass_the_check(self):
        code, output = self.check({"name": "r", "match": {"path_prefix": "/"}, "upstream": "app",
                                   **{k: RULES_ROUTE[k]
                                      for k in ("request_headers", "response_headers")}})
        self.assertEqual(code, 0, output)
        self.assertIn("configuration OK", output)


if __name__ == "__main__":
    unittest.main()
