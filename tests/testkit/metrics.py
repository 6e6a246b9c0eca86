"""The Prometheus text format 0.0.4, parsed strictly; and the sums tests and the
benchmark read from it.

parse_exposition() returns the families of a scrape and raises AssertionError,
naming the line, for anything the format does not allow; metric_sum() and
metric_value() read samples through it, so every figure read also checks the
exposition it came from.
"""

from __future__ import annotations

import math
import re

METRIC_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
LABEL_NAME = r"[a-zA-Z_][a-zA-Z0-9_]*"
LABEL_VALUE = r'"(?:[^"\\\n]|\\[\\"n])*"'
SAMPLE = re.compile(
    rf"^({METRIC_NAME})(?:\{{((?:{LABEL_NAME}={LABEL_VALUE}(?:,{LABEL_NAME}={LABEL_VALUE})*)?,?)\}})?"
    r" (\S+)(?: (-?\d+))?$")
LABEL_PAIR = re.compile(rf"({LABEL_NAME})=({LABEL_VALUE})")
TYPES = ("counter", "gauge", "histogram", "summary", "untyped")
SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


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


def samples(text: str):
    """(sample name, labels, value) of every sample, in exposition order."""
    for family in parse_exposition(text).values():
        yield from family.samples


def _matches(labels: dict, wanted: dict) -> bool:
    return all(labels.get(k) == str(v) for k, v in wanted.items())


def metric_sum(text: str, name: str, **labels) -> float:
    """Sum of every sample `name` whose labels include `labels` (0 if none)."""
    return sum(value for sample, found, value in samples(text)
               if sample == name and _matches(found, labels))


def metric_value(text: str, name: str, **labels) -> float | None:
    """The value of the first sample `name` whose labels include `labels`, or None."""
    return next((value for sample, found, value in samples(text)
                 if sample == name and _matches(found, labels)), None)
