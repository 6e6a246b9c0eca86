"""Helpers for the metrics and operator-kit tests (standard library only).

parse_exposition() checks Prometheus text format 0.0.4 strictly and returns its
families; documented_metric_names() reads docs/metrics.md; metric_names_in()
finds metric names in PromQL; promtool() finds or fetches promtool through
scripts/get-promtool.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import unittest

from harness import SOURCE_DIR

METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(
    rf"^({METRIC_NAME})(?:\{{((?:{LABEL_NAME}={LABEL_VALUE}(?:,{LABEL_NAME}={LABEL_VALUE})*)?,?)\}})?"
    r" (\S+)(?: (-?\d+))?$")
LABEL_PAIR = re.compile(rf"({LABEL_NAME})=({LABEL_VALUE})")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}

DOCS_PATH = os.path.join(SOURCE_DIR, "docs", "metrics.md")
# A family the docs or PromQL may name: Sluice's own and the process metrics.
FAMILY_TOKEN = re.compile(r"\b((?:sluice|process)_[a-z0-9_]*[a-z0-9])\b")


class Family:
    def __init__(self, name: str):
        self.name = name
        self.type: str | None = None
        self.help: str | None = None
        self.samples: list[tuple[str, dict, float]] = []  # (sample name, labels, value)

    def series(self, sample_name: str | None = None) -> list[tuple[dict, float]]:
        wanted = sample_name or self.name
        return [(labels, value) for name, labels, value in self.samples if name == wanted]


def _value(text: str) -> float:
    if text in ("+Inf", "-Inf", "NaN"):
        return float(text.replace("Inf", "inf").replace("NaN", "nan"))
    if not re.fullmatch(r"[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?", text):
        raise ValueError(text)
    return float(text)


def _unescape(quoted: str) -> str:
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), quoted[1:-1])


def parse_exposition(text: str) -> dict[str, Family]:
    """Families by name. Raises AssertionError naming the line for anything that is
    not valid text format 0.0.4: a malformed line, a sample before its TYPE, a
    repeated HELP/TYPE, a family split in two, a histogram without +Inf, ..."""
    families: dict[str, Family] = {}
    finished: set[str] = set()
    current: str | None = None

    def fail(number, line, why):
        raise AssertionError(f"line {number}: {why}: {line!r}")

    def family_of(sample_name: str) -> str | None:
        if sample_name in families and families[sample_name].type not in SUFFIXES:
            return sample_name
        for family in families.values():
            for suffix in SUFFIXES.get(family.type or "", ()):
                if sample_name == family.name + suffix:
                    return family.name
        return None

    if not text.endswith("\n"):
        raise AssertionError("the exposition does not end with a newline")
    for number, line in enumerate(text.split("\n")[:-1], 1):
        if not line:
            fail(number, line, "empty line")
        if line.startswith("#"):
            m = re.match(rf"^# (HELP|TYPE) ({METRIC_NAME}) ?(.*)$", line)
            if not m:
                if line.startswith("# HELP") or line.startswith("# TYPE"):
                    fail(number, line, "malformed HELP/TYPE line")
                continue  # a plain comment
            kind, name, rest = m.groups()
            if name in finished:
                fail(number, line, f"family {name} continued after another family")
            if current and current != name:
                finished.add(current)
            current = name
            family = families.setdefault(name, Family(name))
            if kind == "HELP":
                if family.help is not None:
                    fail(number, line, "second HELP")
                family.help = rest
            else:
                if family.type is not None:
                    fail(number, line, "second TYPE")
                if family.samples:
                    fail(number, line, "TYPE after samples")
                if rest not in TYPES:
                    fail(number, line, "unknown type")
                family.type = rest
            continue
        m = SAMPLE.match(line)
        if not m:
            fail(number, line, "not a valid sample line")
        sample_name, label_text, value_text, _ = m.groups()
        name = family_of(sample_name)
        if name is None:
            fail(number, line, "sample without a HELP/TYPE of its family")
        if name in finished:
            fail(number, line, f"family {name} continued after another family")
        if current and current != name:
            finished.add(current)
        current = name
        labels = {}
        for label, quoted in LABEL_PAIR.findall(label_text or ""):
            if label in labels:
                fail(number, line, f"label {label} twice")
            labels[label] = _unescape(quoted)
        try:
            value = _value(value_text)
        except ValueError:
            fail(number, line, "not a number")
        family = families[name]
        if family.type == "counter" and (math.isnan(value) or value < 0):
            fail(number, line, "negative counter")
        if sample_name.endswith("_bucket") and family.type == "histogram" and "le" not in labels:
            fail(number, line, "bucket without le")
        family.samples.append((sample_name, labels, value))
    for family in families.values():
        if family.type == "histogram":
            for labels, count in family.series(family.name + "_count"):
                inf = [v for lb, v in family.series(family.name + "_bucket")
                       if lb.get("le") == "+Inf" and {k: x for k, x in lb.items() if k != "le"}
                       == labels]
                if inf != [count]:
                    raise AssertionError(f"{family.name}{labels}: +Inf bucket {inf} != count {count}")
    return families


def family_of_name(name: str, families: dict[str, Family]) -> str:
    """The family a sample name belongs to (x_bucket of histogram x is x)."""
    if name in families:
        return name
    for suffix in ("_bucket", "_sum", "_count"):
        base = name[: -len(suffix)]
        if name.endswith(suffix) and families.get(base) and families[base].type in SUFFIXES:
            return base
    return name


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
    """Metric family names written as string literals in the C++ sources."""
    names = set()
    for folder in ("gateway", "middleware", "upstream"):
        directory = os.path.join(SOURCE_DIR, folder)
        for entry in sorted(os.listdir(directory)):
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
