"""JSON Web Tokens (auth.jwt, routes[].auth) through the real sluice binary, a
real redis-server and sluice-echo; tokens made with python3-jwt and keys with
python3-cryptography.

- RS256, PS256, ES256, ES384 and EdDSA tokens of a JWKS provider and HS256 of
  a secret provider are accepted; the verified `sub` and `org.id` go upstream
  as X-User-Id and X-Org-Id, and a client's own copies of those never do.
- Claims key limits (jwt:sub) and pick the plan (a pro token gets the pro
  capacity; an unknown plan gets the default and is counted).
- A missing, expired, not-yet-valid, wrong-audience, wrong-issuer, unsigned,
  tampered, algorithm-confused (RS256 re-signed as HS256 with the public key),
  unknown-kid, crit-header, 10,000-deep or oversized token is answered 401 with
  RFC 6750's WWW-Authenticate, spends no token and reaches no upstream.
- An optional route lets a request without a token through and refuses a bad one.
- A repeated token is taken from the worker's cache; HTTP/2 alike; the token may
  come from a cookie or a query parameter.
- Bad provider settings are refused by --check with their reasons.
- A jwks_url provider fetches its keys, fetches again when a token names a kid
  it lacks (rotation), but never more often than jwks_min_refresh_ms whatever
  the kids an attacker makes up; a JWKS server that answers slowly, too much,
  garbage or 500 changes nothing: the keys there were stay in use.
"""

import base64
import json
import os
import shutil
import tempfile
import time
import unittest

from harness import (ProcessTestCase, echo_header, gateway_config, make_ca, make_server_cert,
                     metric_sum, request, run_cli, to_yaml, wait_redis_ready, wait_until)
from testkit.h2client import H2Client
from testkit.jwks import JwksServer

try:
    import jwt
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
    from jwt.algorithms import ECAlgorithm, OKPAlgorithm, RSAAlgorithm
except ImportError:  # the test packages install them; skipped elsewhere
    jwt = None

ISSUER = "https://idp.test/"
HMAC_ISSUER = "https://hmac.test/"
SECRET = "0123456789abcdef0123456789abcdef-hmac"


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@unittest.skipUnless(jwt, "python3-jwt and python3-cryptography are not installed")
class JwtTest(ProcessTestCase):
    @classmethod
    def setUpClass(cls):
        cls.keys = {
            "rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "p256": ec.generate_private_key(ec.SECP256R1()),
            "p384": ec.generate_private_key(ec.SECP384R1()),
            "ed": ed25519.Ed25519PrivateKey.generate(),
        }
        jwks = []
        for kid, key, algorithm in (("rsa", cls.keys["rsa"], RSAAlgorithm),
                                    ("p256", cls.keys["p256"], ECAlgorithm),
                                    ("p384", cls.keys["p384"], ECAlgorithm),
                                    ("ed", cls.keys["ed"], OKPAlgorithm)):
            jwk = json.loads(algorithm.to_jwk(key.public_key()))
            jwk["kid"] = kid
            jwk["use"] = "sig"
            jwks.append(jwk)
        cls.jwks = {"keys": jwks}

    def setUp(self):
        super().setUp()
        self.dir = tempfile.mkdtemp(prefix="sluice-jwt-")
        self.addCleanup(shutil.rmtree, self.dir, True)
        self.jwks_file = os.path.join(self.dir, "jwks.json")
        with open(self.jwks_file, "w") as f:
            json.dump(self.jwks, f)
        self.secret_file = os.path.join(self.dir, "hmac.secret")
        with open(self.secret_file, "w") as f:
            f.write(SECRET + "\n")
        os.chmod(self.secret_file, 0o600)
        self.redis = self.start_redis()
        self.echo = self.start_echo()
        self.gw = self.start_sluice(self.config())
        wait_redis_ready(self.gw)

    def config(self, **changes):
        providers = [
            {"name": "idp", "issuer": ISSUER, "audiences": ["orders"],
             "jwks_file": self.jwks_file, "consumer_claim": "sub", "plan_claim": "plan",
             "org_claim": "org.id",
             "forward_claims": {"sub": "X-User-Id", "org.id": "X-Org-Id"}},
            {"name": "hmac", "issuer": HMAC_ISSUER, "secret_file": self.secret_file,
             "algorithms": ["HS256"], "consumer_claim": "sub"},
        ]
        config = gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "orders", "match": {"path_prefix": "/orders"}, "upstream": "echo",
              "auth": "required", "limits": ["per_user"]},
             {"name": "public", "match": {"path_prefix": "/public"}, "upstream": "echo",
              "auth": "optional", "limits": ["per_user"]},
             {"name": "teams", "match": {"path_prefix": "/teams"}, "upstream": "echo",
              "auth": "required", "limits": ["per_org"]},
             {"name": "open", "match": {"path_prefix": "/"}, "upstream": "echo"}],
            # Room in a head for a 10,000-deep token, so the token's own checks meet it.
            server={"threads": 1, "http2": {"enabled": True}, "max_header_bytes": 65535},
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 2000},
            plans=["free", "pro"],
            limits={"per_user": {"key": "jwt:sub", "capacity": 3, "refill_per_second": 0.001,
                                 "plans": {"pro": {"capacity": 5}}},
                    "per_org": {"key": "org", "capacity": 2, "refill_per_second": 0.001}},
            auth={"jwt": {"providers": providers, "max_token_bytes": 32768,
                          "from": ["header:Authorization", "cookie:session",
                                   "query:access_token"]}})
        config.update(changes)
        return config

    def token(self, alg="RS256", kid=None, sub="alice", key=None, headers=None, **claims):
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": "orders", "sub": sub, "iat": now, "exp": now + 300,
                   "org": {"id": "acme"}, **claims}
        payload = {k: v for k, v in payload.items() if v is not None}
        if key is None:
            key = {"RS256": "rsa", "PS256": "rsa", "ES256": "p256", "ES384": "p384",
                   "EdDSA": "ed"}[alg]
            kid = kid or key
            key = self.keys[key]
        return jwt.encode(payload, key, algorithm=alg, headers={"kid": kid, **(headers or {})})

    def call(self, path, token=None, headers=None):
        h = dict(headers or {})
        if token is not None:
            h["Authorization"] = f"Bearer {token}"
        return request(self.gw.port, "GET", path, headers=h)

    def upstream_requests(self):
        return metric_sum(self.gw, "sluice_upstream_requests_total")

    def assert_refused(self, token, reason, path="/orders/x"):
        before = self.upstream_requests()
        status, headers, body = self.call(path, token)
        self.assertEqual(status, 401, (reason, body))
        self.assertEqual(headers["Content-Type"], "application/problem+json")
        challenge = headers["WWW-Authenticate"]
        self.assertTrue(challenge.startswith('Bearer realm="sluice", error="invalid_token", '
                                             'error_description="'), challenge)
        self.assertNotIn("X-RateLimit-Remaining", headers)
        self.assertEqual(self.upstream_requests(), before, "a refused request went upstream")
        self.assertGreaterEqual(metric_sum(self.gw, "sluice_auth_denied_total", route="orders",
                                           reason=reason), 1, reason)

    # ---- accepted ------------------------------------------------------------------

    def test_every_algorithm_is_verified_and_the_claims_go_upstream(self):
        for i, alg in enumerate(("RS256", "PS256", "ES256", "ES384", "EdDSA")):
            status, headers, body = self.call("/orders/a", self.token(alg, sub=f"user-{i}"),
                                              headers={"X-User-Id": "spoofed"})
            self.assertEqual(status, 200, (alg, body))
            doc = json.loads(body)
            self.assertEqual(echo_header(doc, "X-User-Id"), [f"user-{i}"], alg)
            self.assertEqual(echo_header(doc, "X-Org-Id"), ["acme"], alg)
        hmac = jwt.encode({"iss": HMAC_ISSUER, "sub": "svc", "exp": int(time.time()) + 60},
                          SECRET, algorithm="HS256")
        self.assertEqual(self.call("/orders/a", hmac)[0], 200)
        self.assertEqual(metric_sum(self.gw, "sluice_auth_tokens_total", provider="idp",
                                    result="verified"), 5)

    def test_claims_key_the_limits_and_pick_the_plan(self):
        alice, bob = self.token(sub="alice"), self.token(sub="bob")
        statuses = [self.call("/orders/x", alice)[0] for _ in range(4)]
        self.assertEqual(statuses, [200, 200, 200, 429])
        status, headers, _ = self.call("/orders/x", bob)
        self.assertEqual(status, 200)  # bob has a bucket of his own
        self.assertEqual(headers["X-RateLimit-Remaining"], "2")
        pro = self.token(sub="carol", plan="pro")
        status, headers, _ = self.call("/orders/x", pro)
        self.assertEqual(headers["X-RateLimit-Limit"], "5")
        gold = self.token(sub="dave", plan="gold")  # not a plan: the default one, counted
        status, headers, _ = self.call("/orders/x", gold)
        self.assertEqual(headers["X-RateLimit-Limit"], "3")
        self.assertEqual(metric_sum(self.gw, "sluice_auth_unknown_plan_total", provider="idp"), 1)
        # The repeated token was taken from the cache.
        self.assertGreaterEqual(metric_sum(self.gw, "sluice_auth_tokens_total", provider="idp",
                                           result="cached"), 3)

    def test_the_org_claim_names_the_organisation_whose_bucket_its_members_share(self):
        ann, bob = self.token(sub="ann"), self.token(sub="bob")  # both of org acme
        statuses = [self.call("/teams/x", t)[0] for t in (ann, bob, ann)]
        self.assertEqual(statuses, [200, 200, 429])
        globex = self.token(sub="cid", org={"id": "globex"})
        self.assertEqual(self.call("/teams/x", globex)[0], 200)  # a bucket of its own
        lone = self.token(sub="dee", org=None)  # no organisation: keyed by the client IP
        self.assertEqual(self.call("/teams/x", lone)[0], 200)
        self.assertEqual(metric_sum(self.gw, "sluice_ratelimit_missing_key_total", route="teams",
                                    source="org"), 1)

    def test_cookie_query_and_http2(self):
        token = self.token(sub="erin")
        self.assertEqual(request(self.gw.port, "GET", "/orders/c",
                                 headers={"Cookie": f"theme=dark; session={token}"})[0], 200)
        self.assertEqual(request(self.gw.port, "GET", f"/orders/q?access_token={token}")[0], 200)
        c = H2Client(self.gw.port)
        try:
            ok = c.request("GET", "/orders/h2", headers=[("authorization", f"Bearer {token}")])
            missing = c.request("GET", "/orders/h2")
        finally:
            c.close()
        self.assertEqual(ok.status, 200)
        self.assertEqual(json.loads(ok.body)["headers"] and
                         echo_header(json.loads(ok.body), "X-User-Id"), ["erin"])
        self.assertEqual(missing.status, 401)
        self.assertEqual(missing.header("www-authenticate"), 'Bearer realm="sluice"')

    def test_optional_route(self):
        status, _, body = self.call("/public/x", headers={"X-User-Id": "spoofed"})
        self.assertEqual(status, 200)
        self.assertEqual(echo_header(json.loads(body), "X-User-Id"), [])  # never believed
        self.assertEqual(self.call("/public/x", "not.a.token")[0], 401)
        self.assertEqual(self.call("/public/x", self.token(sub="frank"))[0], 200)

    # ---- refused -------------------------------------------------------------------

    def test_missing_token(self):
        status, headers, _ = self.call("/orders/x")
        self.assertEqual(status, 401)
        self.assertEqual(headers["WWW-Authenticate"], 'Bearer realm="sluice"')
        self.assertEqual(metric_sum(self.gw, "sluice_auth_denied_total", route="orders",
                                    reason="missing"), 1)
        # A Basic credential is no bearer token either.
        self.assertEqual(self.call("/orders/x", headers={"Authorization": "Basic YTpi"})[0], 401)

    def test_bad_tokens_are_refused_and_spend_nothing(self):
        now = int(time.time())
        rsa_public_pem = self.keys["rsa"].public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
        header = b64(json.dumps({"alg": "RS256", "kid": "rsa"}).encode())
        good = self.token(sub="victim")
        h, p, s = good.split(".")
        tampered_payload = json.loads(base64.urlsafe_b64decode(p + "=="))
        tampered_payload["sub"] = "mallory"
        confused_header = b64(json.dumps({"alg": "HS256", "kid": "rsa", "typ": "JWT"}).encode())
        import hmac as hmac_lib, hashlib
        confused_body = confused_header + "." + p
        confused = confused_body + "." + b64(hmac_lib.new(rsa_public_pem, confused_body.encode(),
                                                          hashlib.sha256).digest())
        deep = "[" * 10000 + "]" * 10000
        cases = [
            (self.token(exp=now - 3600), "expired"),
            (self.token(nbf=now + 3600), "not_yet_valid"),
            (self.token(aud="billing"), "audience"),
            (self.token(iss="https://evil.test/"), "unknown_issuer"),
            (jwt.encode({"iss": ISSUER, "aud": "orders", "sub": "x", "exp": now + 60}, None,
                        algorithm="none"), "algorithm"),
            (h + "." + b64(json.dumps(tampered_payload).encode()) + "." + s, "signature"),
            (confused, "algorithm"),
            (self.token(kid="../../etc/passwd"), "unknown_key"),
            (self.token(kid="https://evil.test/jwks.json"), "unknown_key"),
            (self.token(headers={"crit": ["exp"]}), "critical_header"),
            (header + "." + b64(('{"a":' + deep + "}").encode()) + ".c2ln", "malformed"),
            ("a.b", "malformed"),
            ("x" * 40000, "too_large"),
            (self.token(exp=None), "malformed"),
        ]
        for token, reason in cases:
            with self.subTest(reason=reason):
                self.assert_refused(token, reason)
        # The victim's bucket was never touched by the forgeries.
        status, headers, _ = self.call("/orders/x", good)
        self.assertEqual(status, 200)
        self.assertEqual(headers["X-RateLimit-Remaining"], "2")

    # ---- configuration -------------------------------------------------------------

    def test_bad_provider_settings_are_refused(self):
        bad_jwks = os.path.join(self.dir, "bad-jwks.json")
        with open(bad_jwks, "w") as f:
            f.write('{"keys": [{"kty": "RSA", "kid": "k", "n": "!!", "e": "AQAB"}]}')
        config = self.config(auth={"jwt": {"providers": [
            {"name": "both", "issuer": "https://a.test/", "jwks_file": self.jwks_file,
             "secret_file": self.secret_file},
            {"name": "unsigned", "issuer": "https://b.test/", "jwks_file": self.jwks_file,
             "algorithms": ["none", "HS256"]},
            {"name": "broken", "issuer": "https://c.test/", "jwks_file": bad_jwks},
            {"name": "plain", "issuer": "https://d.test/", "jwks_url": "http://idp.example.com/jwks"}]}})
        path = os.path.join(self.dir, "bad.yaml")
        with open(path, "w") as f:
            f.write(to_yaml(config))
        result = run_cli(["--config", path, "--check"])
        self.assertEqual(result.returncode, 1, result.stderr)
        for message in (
                "a provider with a JWKS takes no secret_file: an HMAC secret beside public keys "
                "invites algorithm confusion",
                'unknown algorithm "none" (an unsigned token is never accepted)',
                "HS256 needs secret_file; this provider has a JWKS",
                'key "k": an RSA key without base64url n and e',
                "http only for a key server on this host (127.0.0.1, ::1, localhost); use https"):
            self.assertIn(message, result.stderr)
        no_providers = self.config()
        del no_providers["auth"]
        with open(path, "w") as f:
            f.write(to_yaml(no_providers))
        result = run_cli(["--config", path, "--check"])
        self.assertIn("routes[0].auth: needs auth.jwt.providers: no token could be verified",
                      result.stderr)


@unittest.skipUnless(jwt, "python3-jwt and python3-cryptography are not installed")
class JwksUrlTest(ProcessTestCase):
    MIN_REFRESH_MS = 600

    def setUp(self):
        super().setUp()
        self.keys = {kid: rsa.generate_private_key(public_exponent=65537, key_size=2048)
                     for kid in ("k1", "k2")}
        self.jwks = JwksServer(self.key_set("k1"))
        self.addCleanup(self.jwks.stop)
        self.redis = self.start_redis()
        self.echo = self.start_echo()
        self.gw = self.start_sluice(gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "echo",
              "auth": "required"}],
            server={"threads": 2},
            log={"level": "warn", "access_log": False},
            redis={"url": f"redis://127.0.0.1:{self.redis.port}/0", "timeout_ms": 2000},
            auth={"jwt": {"providers": [
                {"name": "idp", "issuer": ISSUER, "jwks_url": self.jwks.url,
                 "jwks_refresh_ms": 600000, "jwks_min_refresh_ms": self.MIN_REFRESH_MS,
                 "jwks_timeout_ms": 1000}]}}))

    def key_set(self, *kids):
        keys = []
        for kid in kids:
            jwk = json.loads(RSAAlgorithm.to_jwk(self.keys[kid].public_key()))
            jwk["kid"] = kid
            keys.append(jwk)
        return {"keys": keys}

    def token(self, kid, key=None):
        now = int(time.time())
        return jwt.encode({"iss": ISSUER, "sub": "u", "exp": now + 300}, key or self.keys[kid],
                          algorithm="RS256", headers={"kid": kid})

    def status(self, token):
        return request(self.gw.port, "GET", "/x",
                       headers={"Authorization": f"Bearer {token}"})[0]

    def fetches(self, result):
        return metric_sum(self.gw, "sluice_auth_jwks_fetches_total", provider="idp",
                          result=result)

    def test_keys_are_fetched_and_a_rotation_is_followed(self):
        wait_until(lambda: self.status(self.token("k1")) == 200, 10, message="the first fetch")
        self.jwks.jwks = self.key_set("k1", "k2")  # the provider rotates in k2
        # k2 is unknown until the next fetch, which that very token asks for.
        wait_until(lambda: self.status(self.token("k2")) == 200, 10,
                   message="the rotated key fetched")
        self.assertEqual(self.status(self.token("k1")), 200)
        self.assertGreaterEqual(self.fetches("ok"), 2)
        # The provider withdraws k1: a token verified (and cached) with it stops
        # working once the keys without it are fetched.
        self.jwks.jwks = self.key_set("k2")
        unknown = self.token("k3-not-yet", key=self.keys["k2"])
        wait_until(lambda: self.status(unknown) == 401 and self.status(self.token("k1")) == 401,
                   10, message="the withdrawn key's tokens refused")
        self.assertEqual(self.status(self.token("k2")), 200)

    def test_made_up_kids_cannot_drive_fetches(self):
        wait_until(lambda: self.status(self.token("k1")) == 200, 10, message="the first fetch")
        before = self.jwks.count()
        started = time.monotonic()
        attacker = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        for i in range(150):
            self.assertEqual(self.status(self.token(f"made-up-{i}", key=attacker)), 401)
        elapsed = time.monotonic() - started
        allowed = int(elapsed * 1000 / self.MIN_REFRESH_MS) + 2
        self.assertLessEqual(self.jwks.count() - before, allowed,
                             f"{self.jwks.count() - before} fetches in {elapsed:.2f} s")
        self.assertGreaterEqual(metric_sum(self.gw, "sluice_auth_denied_total", route="api",
                                           reason="unknown_key"), 150)

    def test_keys_over_https_verified_against_jwks_ca_file(self):
        workdir = tempfile.mkdtemp(prefix="sluice-jwks-tls-")
        self.addCleanup(shutil.rmtree, workdir, True)
        ca = make_ca(workdir, "jwks-ca")
        server = JwksServer(self.key_set("k1"), tls=make_server_cert(workdir, "jwks-ca", "jwks"))
        self.addCleanup(server.stop)
        make_ca(workdir, "other-ca")
        providers = [{"name": "tls", "issuer": ISSUER, "jwks_url": server.url,
                      "jwks_ca_file": ca, "jwks_min_refresh_ms": 200},
                     {"name": "untrusted", "issuer": "https://other.test/", "jwks_url": server.url,
                      "jwks_ca_file": os.path.join(workdir, "other-ca.crt"),
                      "jwks_min_refresh_ms": 200}]
        gw = self.start_sluice(gateway_config(
            {"echo": [self.echo.address]},
            [{"name": "api", "match": {"path_prefix": "/"}, "upstream": "echo", "auth": "required"}],
            log={"level": "warn", "access_log": False},
            auth={"jwt": {"providers": providers}}), name="sluice-tls")
        token = self.token("k1")
        wait_until(lambda: request(gw.port, "GET", "/x",
                                   headers={"Authorization": f"Bearer {token}"})[0] == 200,
                   10, message="keys fetched over HTTPS")
        wait_until(lambda: metric_sum(gw, "sluice_auth_jwks_fetches_total", provider="untrusted",
                                      result="error") >= 1, 10,
                   message="a server the CA does not vouch for refused")
        self.assertEqual(metric_sum(gw, "sluice_auth_jwks_fetches_total", provider="untrusted",
                                    result="ok"), 0)

    def test_a_misbehaving_jwks_server_changes_nothing(self):
        wait_until(lambda: self.status(self.token("k1")) == 200, 10, message="the first fetch")
        for mode in ("slow", "huge", "garbage", "error"):
            with self.subTest(mode=mode):
                self.jwks.mode = mode
                self.jwks.delay = 3.0
                errors = self.fetches("error")
                # An unknown kid asks for a fetch (once min_refresh has passed).
                wait_until(lambda: (self.status(self.token("k2")) == 401 and
                                    self.fetches("error") > errors), 10,
                           message=f"a failed fetch ({mode})")
                self.assertEqual(self.status(self.token("k1")), 200, mode)
        self.jwks.mode = "ok"


if __name__ == "__main__":
    unittest.main()
