#!/usr/bin/env python3
"""scripts/bench's own logic on made-up inputs (nothing is measured here):
- the budgets (goals.json, report.py): each kind of bound is judged as its
  comment says, an entry without a bound is never over, budgets of rows not
  measured are left out, and every row a budget names is one the speed table has;
- --sittings (sittings.py): each row's figures are the median over the sittings
  that have a number for it, a row some sitting missed is left out, and the
  verdict is the medians', which
  may differ from every single sitting's;
- --allocations' count from a Callgrind file (allocations.py): calls into
  malloc, calloc and realloc from anywhere but each other, and the total."""

import os
import sys
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, os.path.join(ROOT, "scripts", "bench_lib"))

from allocations import call_counts  # noqa: E402
from report import budget_rows, budget_section, budgets_over, evaluate_budget, load_goals  # noqa: E402
from sittings import combine, sittings_report  # noqa: E402


class BudgetTest(unittest.TestCase):
    def test_each_kind_of_bound(self):
        med = {2: {"cpu_us": 20.0, "rps": 30000.0}, 4: {"cpu_us": 21.0, "rps": 28000.0},
               5: {"cpu_us": 26.0, "script_us_per_req": 3.5}, 12: {"rps": 61000.0}}
        at_most_base = {"row": 4, "base": 2, "metric": "cpu_us", "what": "x", "at_most_base": True}
        self.assertFalse(evaluate_budget(at_most_base, med)[2])  # 21 > 20
        med[4]["cpu_us"] = 20.0
        self.assertTrue(evaluate_budget(at_most_base, med)[2])

        minus = {"row": 5, "base": 4, "metric": "cpu_us", "what": "x", "minus": True,
                 "at_most": 4.0}
        figure, bound, within = evaluate_budget(minus, med)
        self.assertAlmostEqual(figure, 6.0)
        self.assertEqual(bound, "≤ 4")
        self.assertFalse(within)

        over = {"row": 12, "base": 2, "metric": "rps", "what": "x", "over": True,
                "at_least": 2.0}
        self.assertAlmostEqual(evaluate_budget(over, med)[0], 61000 / 30000)
        self.assertTrue(evaluate_budget(over, med)[2])
        med[12]["rps"] = 59000.0
        self.assertFalse(evaluate_budget(over, med)[2])

        alone = {"row": 5, "metric": "script_us_per_req", "what": "x", "at_most": 4.0}
        self.assertTrue(evaluate_budget(alone, med)[2])

        shown_only = {"row": 5, "base": 4, "metric": "cpu_us", "what": "x", "minus": True}
        self.assertIsNone(evaluate_budget(shown_only, med)[2])

        goals = {"budgets": [at_most_base, minus, over, alone, shown_only,
                             {"row": 99, "base": 2, "metric": "cpu_us", "what": "not measured",
                              "minus": True, "at_most": 0.0}]}
        self.assertEqual(budgets_over(med, goals), ["row 5: x", "row 12: x"])
        lines = []
        budget_section(lines.append, med, goals)
        table = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
        self.assertEqual(len(table), 5)  # row 99 was not measured
        self.assertIn("**no**", table[1])

    def test_a_missing_figure_is_over(self):
        # A row without the metric (no Redis measured) cannot be within its budget.
        med = {11: {"cpu_us": 25.0}, 24: {"cpu_us": 26.0}}
        entry = {"row": 24, "base": 11, "metric": "redis_cpu_us", "what": "x", "over": True,
                 "at_most": 1.25}
        self.assertFalse(evaluate_budget(entry, med)[2])

    def test_the_budgets_name_rows_of_the_speed_table(self):
        goals = load_goals()
        rows = budget_rows(goals)
        self.assertTrue({2, 4, 5, 11, 15, 16, 27, 28} <= rows)
        text = ""
        for name in ("stack.py", "h2_rows.py"):  # the HTTP/2 rows are h2_rows.py's
            with open(os.path.join(ROOT, "scripts", "bench_lib", name)) as f:
                text += f.read()
        for n in rows:
            self.assertRegex(text, rf"(Row|sluice_row|row)\({n}, ", f"row {n}")
        for entry in goals["budgets"]:
            kinds = [k for k in ("at_most_base", "minus", "over") if entry.get(k)]
            self.assertLessEqual(len(kinds), 1, entry)
            if entry.get("at_most_base"):
                self.assertIn("base", entry)


CALLGRIND = """# callgrind format
version: 1
events: Ir
fn=(1) main
0 100
cfn=(2) malloc
calls=3 0
0 30
cfn=(3) _mid_memalign.constprop.0
calls=1 0
0 12
fn=(3)
0 2
cfn=(2)
calls=1 0
0 10
fn=(4) realloc
0 4
cfn=(2)
calls=4 0
0 40
cfn=(5) calloc
calls=2 0
0 20
fn=(6) operator new(unsigned long)
0 1
cfn=(5)
calls=5 0
0 50
totals: 269
"""


class SittingsTest(unittest.TestCase):
    def test_each_figure_is_the_median_over_the_sittings(self):
        meds = [{4: {"cpu_us": 20.0, "redis": float("nan")}, 5: {"cpu_us": 30.0}, 7: {"cpu_us": 1.0}},
                {4: {"cpu_us": 22.0, "redis": 1.0}, 5: {"cpu_us": 23.0}},
                {4: {"cpu_us": 18.0, "redis": 2.0}, 5: {"cpu_us": 26.0}}]
        combined = combine(meds)
        self.assertEqual(set(combined), {4, 5})  # row 7: one sitting only
        self.assertEqual(combined[4]["cpu_us"], 20.0)
        self.assertEqual(combined[5]["cpu_us"], 26.0)
        self.assertEqual(combined[4]["redis"], 1.5)  # the sittings that have a number
        self.assertIsNone(combine([{4: {"redis": float("nan")}}])[4]["redis"])

    def test_the_verdict_is_the_medians(self):
        # The limiter's own work: 30-20 = +10, 23-22 = +1, 26-18 = +8 per sitting;
        # medians 26 - 20 = +6: over, though sitting 2 alone is within.
        meds = [{4: {"cpu_us": 20.0}, 5: {"cpu_us": 30.0}},
                {4: {"cpu_us": 22.0}, 5: {"cpu_us": 23.0}},
                {4: {"cpu_us": 18.0}, 5: {"cpu_us": 26.0}}]
        goals = {"budgets": [{"row": 5, "base": 4, "metric": "cpu_us", "what": "own work",
                              "minus": True, "at_most": 4.0}]}
        import datetime
        text, over = sittings_report(["# one\nrow", "# two", "# three"], meds, goals,
                                     datetime.datetime(2026, 12, 3), "scripts/bench --budget")
        self.assertEqual(over, ["row 5: own work"])
        line = next(x for x in text.splitlines() if x.startswith("| 5 |"))
        self.assertIn("| +10.00 | +1.00 | +8.00 | +6.00 | ≤ 4 | **no** |", line)
        self.assertIn("## Sitting 2", text)
        self.assertIn("\n## one\n", text)  # each sitting's headings one level down
        meds[0][5]["cpu_us"] = 21.0  # now +1, +1, +8: medians 23 - 20 = +3
        self.assertEqual(sittings_report([], meds, goals, datetime.datetime(2026, 12, 3), "x")[1], [])


class CallCountTest(unittest.TestCase):
    def test_allocations_are_counted_once(self):
        path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"callgrind.{os.getpid()}")
        with open(path, "w") as f:
            f.write(CALLGRIND)
        try:
            calls, total = call_counts(path)
        finally:
            os.unlink(path)
        # main -> malloc 3, memalign -> malloc 1, new -> calloc 5; realloc's own
        # calls into malloc and calloc are the same allocations again.
        self.assertEqual(calls, 9)
        self.assertEqual(total, 269)


if __name__ == "__main__":
    unittest.main()
