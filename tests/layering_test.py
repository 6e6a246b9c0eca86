#!/usr/bin/env python3
"""The include rule between the product folders, checked on every `#include "…"` line.

    gateway/main.cpp  the composition root: the only gateway file that includes middleware/,
                      services/ or telemetry/
    services/         services over the limiter besides the proxy (the Envoy rate-limit
                      service): above middleware/, may include it, gateway/ and below
    telemetry/        spans and their exporter: above middleware/, as services/
    middleware/       includes gateway's interface headers only, upstream/ and common/
    gateway/          includes no middleware/ (it knows no concrete middleware and no Redis);
                      outside gateway/session/ it includes only the session's doors from there
    upstream/         includes nothing of ours but itself and common/; upstream/h2/ includes
                      nothing of upstream/exchange/ (the exchange drives the h2 connection)
    common/           the header-only vocabulary every folder may use; includes only itself

The same arrows are checked in the CMake link lines: a library links only the
libraries its folder may include. Run with the source directory as argument
(CTest does); exits 1 and names every offending line otherwise.
"""

import pathlib
import re
import sys
import unittest

# ---- The allow-list (data; adjust here) ------------------------------------------------

# gateway/ headers that middleware/ may include: what a middleware is handed and
# what it may describe itself with. An entry ending in "/" allows the whole folder.
GATEWAY_INTERFACE = [
    "gateway/middleware.hpp",
    "gateway/config/",
    "gateway/metrics.hpp",
    "gateway/series_cache.hpp",  # series a middleware bumps per request, kept
    "gateway/client_ip.hpp",
    "gateway/session/local_reply.hpp",
    "gateway/worker_services.hpp",
    "gateway/admin/admin_routes.hpp",  # the bucket API adds its endpoints
    "gateway/request_target.hpp",  # the bucket API keys a path as requests are keyed
    "gateway/auth/",  # a JWT provider's keys as its config holds them (file or URL), the JWS check
    "gateway/tls/client_certificate.hpp",  # what the request context says of a client's cert
]

# gateway/session/ holds the client sessions, the top of gateway/: the rest of
# gateway/ includes from it only these headers (the front door hands a
# connection to a session; the admin server answers with the sessions' local
# replies; a scrape seeds the sessions' metrics).
SESSION_DOORS = [
    "gateway/session/exchange_log.hpp",  # the metrics a scrape seeds (seed_session_metrics)
    "gateway/session/local_reply.hpp",
    # The front door hands a connection to the session of its protocol.
    "gateway/session/http1_session.hpp",
    "gateway/session/http2_session.hpp",
]

# For a source file, the first rule whose prefix matches its path says which
# of our include prefixes it may use.
RULES = [
    ("gateway/main.cpp", ["gateway/", "middleware/", "services/", "telemetry/", "upstream/",
                          "common/"]),
    ("services/", ["services/", "middleware/", "gateway/", "upstream/", "common/"]),
    ("telemetry/", ["telemetry/", "middleware/", "gateway/", "upstream/", "common/"]),
    ("gateway/", ["gateway/", "upstream/", "common/"]),
    ("middleware/", ["middleware/", "upstream/", "common/"] + GATEWAY_INTERFACE),
    ("upstream/", ["upstream/", "common/"]),
    ("common/", ["common/"]),
]

# Lines of today's tree that break a rule, each with the reason it is still
# there. Remove an entry once its include is gone (a stale entry fails too).
EXCEPTIONS: dict = {
}

# Include prefixes that are ours; anything else ("hiredis/…", system headers) is not checked.
OURS = ("gateway/", "middleware/", "services/", "telemetry/", "upstream/", "common/")
SOURCE_SUFFIXES = {".cpp", ".hpp", ".h", ".ipp"}

# Libraries per folder, and which of our libraries each may link.
LIBRARY_OF = {"gateway": "sluice_gateway", "middleware": "sluice_middleware",
              "upstream": "sluice_upstream", "services": "sluice_services",
              "telemetry": "sluice_telemetry"}
LINKS = {
    "sluice_upstream": set(),
    "sluice_gateway": {"sluice_upstream"},
    "sluice_middleware": {"sluice_gateway", "sluice_upstream"},
    # The RLS messages, compiled from services/rls/proto in the same folder.
    "sluice_services": {"sluice_middleware", "sluice_rls_proto"},
    "sluice_telemetry": {"sluice_middleware"},
}

# ---------------------------------------------------------------------------------------

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


# Rooms above their neighbours: (files under, may not include from, but for).
# A file inside the upper room itself is not concerned.
UPPER_ROOMS = [
    ("gateway/", "gateway/session/", SESSION_DOORS),
    ("upstream/h2/", "upstream/exchange/", []),  # the exchange drives h2/, not the reverse
]


def reaches_up(path: str, include: str) -> bool:
    return any(path.startswith(under) and not path.startswith(upper)
               and include.startswith(upper) and include not in doors
               for under, upper, doors in UPPER_ROOMS)


def allowed(path: str, include: str) -> bool:
    if reaches_up(path, include):
        return False
    for prefix, allowed_prefixes in RULES:
        if path == prefix or (prefix.endswith("/") and path.startswith(prefix)):
            return any(include == a or (a.endswith("/") and include.startswith(a))
                       for a in allowed_prefixes)
    return True


def includes(root: pathlib.Path):
    """(path relative to root, included name) for every quoted include of our folders."""
    for folder in ("gateway", "middleware", "services", "telemetry", "upstream", "common"):
        for file in sorted((root / folder).rglob("*")):
            if file.suffix not in SOURCE_SUFFIXES or not file.is_file():
                continue
            rel = file.relative_to(root).as_posix()
            for line in file.read_text(encoding="utf-8", errors="replace").splitlines():
                m = INCLUDE.match(line)
                if m and m.group(1).startswith(OURS):
                    yield rel, m.group(1)


def used(entry: str, names) -> bool:
    return any(name == entry or (entry.endswith("/") and name.startswith(entry)) for name in names)


def stale_allowances(found):
    """Allow-list entries that no include uses any more: each must be removed."""
    problems = []
    middleware_names = {name for rel, name in found if rel.startswith("middleware/")}
    for entry in GATEWAY_INTERFACE:
        if not used(entry, middleware_names):
            problems.append(f'stale allow-list entry: no middleware/ file includes "{entry}"; '
                            "remove it from GATEWAY_INTERFACE")
    door_names = {name for rel, name in found
                  if rel.startswith("gateway/") and not rel.startswith("gateway/session/")}
    for entry in SESSION_DOORS:
        if not used(entry, door_names):
            problems.append(f'stale allow-list entry: no gateway/ file outside gateway/session/ '
                            f'includes "{entry}"; remove it from SESSION_DOORS')
    return problems


def include_violations(root: pathlib.Path):
    found = set()
    problems = []
    every = list(includes(root))
    problems += stale_allowances(every)
    for rel, name in every:
        if allowed(rel, name):
            continue
        if (rel, name) in EXCEPTIONS:
            found.add((rel, name))
            continue
        problems.append(f'{rel}: #include "{name}" breaks the layering rule')
    for rel, name in sorted(set(EXCEPTIONS) - found):
        problems.append(f'stale exception: {rel} no longer includes "{name}" against the rule; '
                        "remove it from EXCEPTIONS")
    return problems


def link_violations(root: pathlib.Path):
    problems = []
    link_line = re.compile(r"target_link_libraries\s*\(\s*(\S+)([^)]*)\)", re.S)
    for folder, library in LIBRARY_OF.items():
        text = (root / folder / "CMakeLists.txt").read_text(encoding="utf-8")
        for target, args in link_line.findall(text):
            if target != library:
                continue
            for linked in re.findall(r"\bsluice_\w+", args):
                if linked != "sluice_asio" and linked not in LINKS[library]:
                    problems.append(f"{folder}/CMakeLists.txt: {library} links {linked}")
    return problems


class LayeringTest(unittest.TestCase):
    root = pathlib.Path(__file__).resolve().parent.parent

    def test_includes_follow_the_layering(self):
        self.assertEqual(include_violations(self.root), [])

    def test_libraries_link_along_the_same_arrows(self):
        self.assertEqual(link_violations(self.root), [])

    def test_the_rules_catch_what_they_forbid(self):
        self.assertFalse(allowed("gateway/worker.cpp", "middleware/setup.hpp"))
        self.assertFalse(allowed("middleware/setup.cpp", "gateway/worker.hpp"))
        self.assertFalse(allowed("upstream/upstream_pool.cpp", "gateway/config/config.hpp"))
        self.assertFalse(allowed("upstream/upstream_pool.cpp", "gateway/metrics.hpp"))
        self.assertFalse(allowed("common/guarded.hpp", "upstream/upstream_pool.hpp"))
        self.assertTrue(allowed("upstream/upstream_pool.cpp", "common/ascii.hpp"))
        self.assertTrue(allowed("gateway/main.cpp", "middleware/setup.hpp"))
        self.assertTrue(allowed("middleware/setup.cpp", "gateway/worker_services.hpp"))
        self.assertFalse(allowed("gateway/router.cpp", "gateway/session/pipeline.hpp"))
        self.assertFalse(allowed("gateway/config/routes_section.cpp",
                                 "gateway/session/request_admission.hpp"))
        self.assertTrue(allowed("gateway/front_door.cpp", "gateway/session/http1_session.hpp"))
        self.assertTrue(allowed("gateway/session/pipeline.cpp", "gateway/session/exchange_log.hpp"))
        self.assertFalse(allowed("upstream/h2/h2_connection.hpp",
                                 "upstream/exchange/upstream_exchange.hpp"))
        self.assertTrue(allowed("upstream/h2/h2_connection.hpp", "upstream/upstream_error.hpp"))
        self.assertFalse(allowed("middleware/setup.cpp", "telemetry/span_exporter.hpp"))
        self.assertFalse(allowed("gateway/worker.cpp", "services/rls/rls_service.hpp"))
        self.assertTrue(allowed("services/rls/rls_call.cpp", "middleware/ratelimit/descriptors.hpp"))

    def test_a_stale_allow_list_entry_is_an_error(self):
        now = [("middleware/a.cpp", "gateway/middleware.hpp")]
        self.assertIn('stale allow-list entry: no middleware/ file includes "gateway/metrics.hpp"; '
                      "remove it from GATEWAY_INTERFACE", stale_allowances(now))
        self.assertFalse(any('"gateway/middleware.hpp"' in p for p in stale_allowances(now)))
        folder = [("middleware/a.cpp", "gateway/config/text.hpp")]
        self.assertFalse(any('"gateway/config/"' in p for p in stale_allowances(folder)))


if __name__ == "__main__":
    if len(sys.argv) > 1:
        LayeringTest.root = pathlib.Path(sys.argv.pop(1)).resolve()
    unittest.main(verbosity=2)
