"""Helpers for the metrics and operator-kit tests (standard library only).

documented_families() reads docs/metrics.md; metric_names_in() finds metric
names in PromQL; source_metric_names() in the C++ sources; promtool() finds or
fetches promtool through scripts/get-promtool. The exposition parser itself is
the testkit's (testkit.metrics), re-exported here.
"""

from __future__ import annotations

import os
import re
import subprocess
import unittest

from harness import SOURCE_DIR
from testkit.metrics import Family, family_of_name, parse_exposition  # noqa: F401

DOCS_PATH = os.path.join(SOURCE_DIR, "docs", "metrics.md")
# A family the docs or PromQL may name: Sluice's own and the process metrics.
FAMILY_TOKEN = re.compile(r"\b((?:sluice|process)_[a-z0-9_]*[a-z0-9])\b")


def documented_families() -> set[str]:
    """The families docs/metrics.md describes: its `### \\`name\\`` headings."""
    with open(DOCS_PATH) as f:
        return set(re.findall(r"^### `([a-z_:][a-z0-9_:]*)`$", f.read(), re.M))


def names_mentioned_in_docs() -> set[str]:
    """Every sluice_* / process_* name written anywhere in docs/metrics.md."""
    with open(DOCS_PATH) as f:
        return set(FAMILY_TOKEN.findall(f.read()))


def metric_names_in(promql: str) -> set[str]:
    """Sluice and process metric names used in a PromQL expression."""
    return set(FAMILY_TOKEN.findall(promql))


def source_metric_names() -> set[str]:
    """Metric family names written as string literals in the C++ sources (every
    subfolder of gateway/, middleware/ and upstream/ included)."""
    names = set()
    for folder in ("gateway", "middleware", "upstream"):
        for directory, _, entries in sorted(os.walk(os.path.join(SOURCE_DIR, folder))):
            for entry in sorted(entries):
                if entry.endswith((".cpp", ".hpp")):
                    with open(os.path.join(directory, entry)) as f:
                        names.update(re.findall(r'"((?:sluice|process)_[a-z0-9_]+)"', f.read()))
    return names


def promtool(case: unittest.TestCase) -> str:
    """The path of promtool: $SLUICE_PROMTOOL, or what scripts/get-promtool finds or
    fetches (Debian's prometheus package, unpacked, never installed). Skips the test
    only when it cannot be obtained at all, and never in CI (CI=true): there it fails."""
    explicit = os.environ.get("SLUICE_PROMTOOL")
    if explicit and os.access(explicit, os.X_OK):
        return explicit
    tools = os.environ.get("SLUICE_TOOLS_DIR") or os.path.join(SOURCE_DIR, "build", "tools")
    script = os.path.join(SOURCE_DIR, "scripts", "get-promtool")
    result = subprocess.run([script, tools], capture_output=True, text=True, timeout=600)
    path = result.stdout.strip()
    if result.returncode == 0 and path and os.access(path, os.X_OK):
        return path
    why = f"promtool could not be obtained: {result.stderr.strip()}"
    if os.environ.get("CI"):
        case.fail(why)
    case.skipTest(why)
