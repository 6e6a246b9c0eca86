"""Test certificates made with the openssl CLI: a CA, and server certificates it signs
for given names. Files go into a work directory the caller owns."""

import os
import ssl
import subprocess


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def make_ca(workdir: str, name: str) -> str:
    """A self-signed CA `name`.crt / `name`.key (P-256); returns the certificate's path."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2",
            "-subj", f"/CN=sluice test {name}",
            "-addext", "basicConstraints=critical,CA:TRUE",
            "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=workdir)
    return os.path.join(workdir, f"{name}.crt")


def sign_request(workdir: str, ca: str, name: str, alt: str, usage: str) -> tuple[str, str]:
    """Signs `name`.csr with CA `ca` for 2 days, with the subject alternative names
    `alt` (openssl's form, may be empty) and extended key usage `usage`; returns
    (`name`.crt, `name`.key)."""
    with open(os.path.join(workdir, f"{name}.ext"), "w") as f:
        f.write((f"subjectAltName={alt}\n" if alt else "") +
                f"basicConstraints=CA:FALSE\nextendedKeyUsage={usage}\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
            cwd=workdir)
    return os.path.join(workdir, f"{name}.crt"), os.path.join(workdir, f"{name}.key")


def make_server_cert(workdir: str, ca: str, name: str, dns=(), ips=("127.0.0.1",),
                     common_name: str | None = None, rsa: bool = False) -> tuple[str, str]:
    """A server certificate `name`.crt / `name`.key signed by CA `ca` (a make_ca name)
    for the DNS names and IP addresses given, with a P-256 key (`rsa`: RSA 2048);
    returns (cert path, key path)."""
    cn = common_name or (dns[0] if dns else "localhost")
    key = ["rsa:2048"] if rsa else ["ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"]
    openssl("req", "-newkey", *key, "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=workdir)
    alt = ",".join([f"DNS:{d}" for d in dns] + [f"IP:{i}" for i in ips])
    return sign_request(workdir, ca, name, alt, "serverAuth")


def make_client_cert(workdir: str, ca: str, name: str, uri: str | None = None, dns=(),
                     common_name: str | None = None) -> tuple[str, str]:
    """A client certificate `name`.crt / `name`.key (P-256) signed by CA `ca` (a make_ca
    name), with a URI and DNS subject alternative names when given; returns (cert, key)."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr",
            "-subj", f"/O=Sluice Tests/CN={common_name or name}", cwd=workdir)
    alt = ",".join(([f"URI:{uri}"] if uri else []) + [f"DNS:{d}" for d in dns])
    return sign_request(workdir, ca, name, alt, "clientAuth")


def client_context(ca_file: str) -> ssl.SSLContext:
    """A client context trusting `ca_file` only, offering ALPN http/1.1."""
    context = ssl.create_default_context(cafile=ca_file)
    context.set_alpn_protocols(["http/1.1"])
    return context
