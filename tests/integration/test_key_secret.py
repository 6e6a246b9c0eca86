"""redis.key_secret_file: bucket hashes are HMAC-SHA-256 under the secret.

Two gateways with the same secret name a client's bucket alike, one with another
secret or none names it differently, and a gateway whose ip-keyed limit has no
secret warns at startup; with a secret it does not.
"""

import os
import re
import unittest

from harness import (ProcessTestCase, gateway_config, redis_call, request, wait_redis_ready,
                     wait_until)

WARNING = "limits keyed by ip (per_ip) with no redis.key_secret_file"


class KeySecretTest(ProcessTestCase):
    def setUp(self):
        super().setUp()
        self.redis = self.start_redis()
        self.echo = self.start_echo()

    def secret_file(self, name: str, text: str) -> str:
        path = os.path.join(self.workdir, name)
        with open(path, "w") as f:
            f.write(text + "\n")
        os.chmod(path, 0o600)  # a secret other users can read is warned of
        return path

    def gateway(self, prefix: str, secret: str | None):
        redis = {"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 1000,
                 "key_prefix": prefix}
        if secret:
            redis["key_secret_file"] = secret
        config = gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "all", "match": {"path_prefix": "/"}, "upstream": "echo",
              "limits": ["per_ip"]}],
            redis=redis,
            limits={"per_ip": {"key": "ip", "capacity": 100, "refill_per_second": 1}})
        gw = self.start_sluice(config, name=prefix.strip(":"))
        wait_redis_ready(gw)
        return gw

    def bucket_hash(self, gw, prefix: str) -> str:
        """One request from 127.0.0.1, then the hash part of the bucket key it made."""
        self.assertEqual(request(gw.port, "GET", "/")[0], 200)
        keys = redis_call(self.redis.port, "KEYS", f"{prefix}*")
        self.assertEqual(len(keys), 1, keys)
        m = re.fullmatch(rf"{re.escape(prefix)}per_ip:([0-9a-f]{{32}})", keys[0].decode())
        self.assertTrue(m, keys[0])
        return m.group(1)

    def test_same_secret_same_bucket_other_secret_or_none_another(self):
        one = self.secret_file("one", "correct horse battery staple 1")
        same = self.secret_file("same", "correct horse battery staple 1")
        two = self.secret_file("two", "correct horse battery staple 2")
        hashes = {}
        for prefix, secret in (("a:", one), ("b:", same), ("c:", two), ("d:", None)):
            hashes[prefix] = self.bucket_hash(self.gateway(prefix, secret), prefix)
        self.assertEqual(hashes["a:"], hashes["b:"], "same secret, same client: same bucket")
        self.assertNotEqual(hashes["a:"], hashes["c:"], "another secret names another bucket")
        self.assertNotEqual(hashes["a:"], hashes["d:"], "HMAC differs from plain SHA-256")

    def test_ip_keyed_limit_without_secret_warns_at_startup(self):
        plain = self.gateway("w:", None)
        wait_until(lambda: WARNING in plain.stderr(), timeout=5,
                   message=f"no startup warning; stderr: {plain.stderr()[-2000:]}")
        keyed = self.gateway("k:", self.secret_file("s", "0123456789abcdef0123"))
        self.assertEqual(request(keyed.port, "GET", "/")[0], 200)
        self.assertNotIn("key_secret_file", keyed.stderr())


if __name__ == "__main__":
    unittest.main()
