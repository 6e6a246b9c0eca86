"""scripts/bench --sittings N: the speed table (or --budget's rows) measured in N
sittings one after another, each with servers of its own, its own warm-up and
its own repetitions. Each row's figures are then the median over the sittings
of the sittings' medians, and the budgets are judged on those: a budget's
goal is a median of sittings, and one sitting on a shared machine moves by
more than most changes do.
"""

from __future__ import annotations

import datetime
import math
import statistics

from report import evaluate_budget

Medians = dict[int, dict]


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not (isinstance(v, float) and math.isnan(v))


def combine(meds: list[Medians]) -> Medians:
    """The rows every sitting measured, each figure the median over the sittings
    that have a number for it (None when none has)."""
    rows = set.intersection(*(set(m) for m in meds)) if meds else set()
    out: Medians = {}
    for num in rows:
        keys = set.intersection(*(set(m[num]) for m in meds))
        out[num] = {}
        for k in keys:
            values = [m[num][k] for m in meds if _number(m[num][k])]
            out[num][k] = statistics.median(values) if values else None
    return out


def _figure(b: dict, figure) -> str:
    if figure is None:
        return "—"
    if b.get("minus") and isinstance(figure, float):
        return f"{figure:+.2f}"
    return f"{figure:.2f}" if isinstance(figure, float) else str(figure)


def sittings_section(w, meds: list[Medians], goals: dict) -> list[str]:
    """The budget table over the sittings: each sitting's figure, the figure of
    the rows' medians over the sittings, and its verdict. Answers the budgets
    over."""
    combined = combine(meds)
    shown = [b for b in goals.get("budgets", [])
             if b["row"] in combined and b.get("base", b["row"]) in combined]
    over = []
    w(f"## Budgets over {len(meds)} sittings")
    w("")
    w("Each sitting's figure from its own medians; the verdict on the median over the "
      "sittings of each row's figures (CPU: the gateway's µs per request).")
    w("")
    heads = " | ".join(f"sitting {i + 1}" for i in range(len(meds)))
    w(f"| row | base row | what | {heads} | median of sittings | budget | within |")
    w("|---|---|---|" + "---:|" * len(meds) + "---:|---:|---|")
    for b in shown:
        each = [_figure(b, evaluate_budget(b, m)[0]) for m in meds]
        figure, bound, within = evaluate_budget(b, combined)
        mark = "—" if within is None else "yes" if within else "**no**"
        if within is False:
            over.append(f"row {b['row']}: {b['what']}")
        w(f"| {b['row']} | {b.get('base', '—')} | {b['what']} | {' | '.join(each)} | "
          f"{_figure(b, figure)} | {bound or '—'} | {mark} |")
    w("")
    return over


def sittings_report(texts: list[str], meds: list[Medians], goals: dict,
                    started: datetime.datetime, command: str) -> tuple[str, list[str]]:
    """The report of N sittings: the budgets over them, then each sitting's own
    report (its headings one level down). Answers it and the budgets over."""
    lines: list[str] = []
    w = lines.append
    w(f"# Sluice benchmark — {started:%Y-%m-%d %H:%M}, {len(meds)} sittings")
    w("")
    w(f"- Command: `{command}`.")
    w("")
    over = sittings_section(w, meds, goals)
    for i, text in enumerate(texts):
        w(f"## Sitting {i + 1}")
        w("")
        for line in text.splitlines():
            w("#" + line if line.startswith("#") else line)
        w("")
    return "\n".join(lines), over
