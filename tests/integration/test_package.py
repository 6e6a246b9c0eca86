"""The Debian package of the binary this suite built, installed into a fresh
Debian 12 root and checked there by scripts/package-check: its files, the
`sluice` system user (owning nothing), the unit (systemd-analyze verify),
`sluice --check` of the shipped configuration as that user, and a purge.

Needs root and Debian's mirror (debootstrap, apt, bind mounts): skipped where the
mirror cannot be reached or the root cannot be made (scripts/package-check exits
3), and without root except in CI (CI=true), where that fails. Skipped under the sanitizers (the package is
of a plain build).
"""

import glob
import os
import re
import socket
import subprocess
import tempfile
import unittest
import urllib.parse

from harness import SANITIZED, SLUICE_BIN, SOURCE_DIR


def mirror() -> str:
    """The Debian mirror scripts/package-check uses: $SLUICE_DEBIAN_MIRROR, else the
    host's first apt source ending in /debian, else deb.debian.org."""
    if os.environ.get("SLUICE_DEBIAN_MIRROR"):
        return os.environ["SLUICE_DEBIAN_MIRROR"]
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")) + ["/etc/apt/sources.list"]:
        try:
            text = open(path).read()
        except OSError:
            continue
        found = re.search(r"^(?:URIs:|deb)\s+(\S+/debian)\s*$", text, re.M) or \
            re.search(r"^deb\s+(\S+/debian)\s", text, re.M)
        if found:
            return found.group(1)
    return "http://deb.debian.org/debian"


def mirror_reachable() -> bool:
    url = urllib.parse.urlsplit(mirror())
    try:
        socket.create_connection((url.hostname, url.port or 80), timeout=5).close()
        return True
    except OSError:
        return False


@unittest.skipIf(SANITIZED, "the package is of a plain build")
class PackageTest(unittest.TestCase):
    def setUp(self):
        why = None
        if os.geteuid() != 0:
            why = "needs root (debootstrap, chroot)"
        elif not mirror_reachable():
            self.skipTest(f"the Debian mirror {mirror()} is not reachable")
        if why:
            if os.environ.get("CI"):
                self.fail(why)
            self.skipTest(why)

    def test_the_package_installs_and_checks_in_a_debian_12_root(self):
        with tempfile.TemporaryDirectory(prefix="sluice-package-") as out:
            built = subprocess.run(
                [os.path.join(SOURCE_DIR, "scripts", "package"), "--out", out,
                 "--binary", SLUICE_BIN], capture_output=True, text=True, timeout=600)
            self.assertEqual(built.returncode, 0, built.stderr[-3000:])
            deb = built.stdout.strip().splitlines()[-1]
            self.assertTrue(deb.endswith("_amd64.deb") or deb.endswith(".deb"), deb)
            checked = subprocess.run(
                [os.path.join(SOURCE_DIR, "scripts", "package-check"), "--deb", deb],
                capture_output=True, text=True, timeout=900)
            print(checked.stdout)
            if checked.returncode == 3:
                self.skipTest("this machine cannot make a Debian root: "
                              + checked.stderr.strip().splitlines()[-1])
            self.assertEqual(checked.returncode, 0, checked.stdout[-4000:] + checked.stderr[-2000:])
            self.assertNotIn("FAIL ", checked.stdout)
            self.assertEqual(checked.stdout.count("PASS "), 12, checked.stdout)


if __name__ == "__main__":
    unittest.main()
