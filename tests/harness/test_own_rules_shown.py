"""A rule of the run's own shows wherever the built-in rules do: report.html's summary table and
violations chart, and the terminal's "most violations" list.

The run is the reference trajectories, which break no built-in rule, under a gated rule of a
conftest that flags every ``cd`` call: whatever the page and the terminal show of the run's
violations is that rule's. Expected figures are counted here from the scorecard's rows (each
row's violation entries), never from the totals or the page under test.
"""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest

IDS = [f"multi_turn_base_{n}" for n in range(12)]
RULE = "changes_directory"
CONFTEST = f'''
import pytest_careful


class ChangesDirectory(pytest_careful.Rule):
    name = "{RULE}"
    description = "every cd call (a test's rule)"
    gated = True

    def check(self, conversation):
        for call in conversation.calls:
            if call.name == "cd":
                yield pytest_careful.Violation(call, "changed directory")


def pytest_careful_rules(config):
    return [ChangesDirectory()]
'''
#: The built-in counts "most violations" adds up (the heading names them).
BUILT_IN = ("collateral_destructive", "duplicate_writes", "redundant_reads", "failed_calls")


@pytest.mark.parametrize("mode", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_the_runs_own_rule_shows_beside_the_built_in_ones(pytester: pytest.Pytester, mode: list[str]) -> None:
    run = _run(pytester, mode)
    _check_most_violations(run)
    _check_summary_table(run)
    _check_violations_chart(run)


def _run(pytester: pytest.Pytester, mode: list[str]) -> dict[str, Any]:
    pytester.makeconftest(CONFTEST)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *mode, "--careful-model", "reference", *(f"{c}[standard]" for c in IDS)
    )
    folder = pytester.path / "scorecards" / "reference" / "standard"
    card = json.loads((folder / "scorecard.json").read_text(encoding="utf-8"))
    own = {r["id"]: sum(v["rule"] == RULE for v in r["violations"]) for r in card["rows"]}
    assert sum(own.values()) > 0 and len(set(own.values())) > 2  # the rule flags some, unevenly
    assert all(r["counts"][name] == 0 for r in card["rows"] for name in BUILT_IN)  # references break none
    return {"out": result.stdout.str(), "card": card, "own": own, "page": (folder / "report.html").read_text()}


def _check_most_violations(run: dict[str, Any]) -> None:
    """The terminal's "most violations" adds the rule's violations up with the built-in ones'."""
    lines = run["out"].splitlines()
    heading = "most violations (collateral + duplicate writes + redundant reads + failed calls + changes_directory):"
    assert heading in lines, run["out"][-3000:]
    listed = lines[lines.index(heading) + 1 : lines.index(heading) + 6]
    worst = sorted(((-n, f"{cid}[standard]") for cid, n in run["own"].items() if n), key=lambda x: x)[:5]
    assert [(int(line.split()[0]), line.split()[2].strip("'")) for line in listed] == [(-n, node) for n, node in worst]


class _SummaryTable(HTMLParser):
    """The rows of report.html's summary table (``table.summary``), header first, as cell texts."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table" and ("class", "summary") in attrs:
            self._inside = True
        elif self._inside and tag == "tr":
            self.rows.append([])
        elif self._inside and tag in ("td", "th"):
            self.rows[-1].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._inside = False

    def handle_data(self, data: str) -> None:
        if self._inside and self.rows and self.rows[-1]:
            self.rows[-1][-1] += data


def _check_summary_table(run: dict[str, Any]) -> None:
    """report.html's summary table has a column for the rule, beside the built-in rules'."""
    table = _SummaryTable()
    table.feed(run["page"])
    header, *body = table.rows
    rows = {cells[0]: dict(zip(header, cells)) for cells in body}
    assert header.index(f"{RULE}*") == header.index("asked") + 1  # beside the built-in rules, gated marked
    assert rows["all"][f"{RULE}*"] == rows["base"][f"{RULE}*"] == str(sum(run["own"].values()))
    safe = sum(1 for r in run["card"]["rows"] if r["bfcl"]["valid"] and not run["own"][r["id"]])
    assert rows["all"]["safe %"] == f"{100 * safe / len(IDS):.1f}"  # the rule's violations are why safe fell
    assert "every cd call (a test&#39;s rule)" in run["page"] or "every cd call (a test's rule)" in run["page"]


def _check_violations_chart(run: dict[str, Any]) -> None:
    """report.html's violations chart draws a bar for the rule, after the built-in rules' bars."""
    chart = re.search(r'<figure id="chart-violations">(.*?)</figure>', run["page"], re.S)
    assert chart is not None
    texts = re.findall(r'<text style="font-size: (\d+)px[^"]*"[^>]*>([^<]*)</text>', chart.group(1))
    assert RULE in [text for _, text in texts]  # the rule's name beside the built-in ones
    bar_labels = [text for size, text in texts if size == "7"]  # each bar's count, in the rules' order
    assert bar_labels[-1] == str(sum(run["own"].values()))
    assert set(bar_labels[:-1]) == {"0"}
