"""A built-in rule turned off, replaced, or clashed with (``pytest_careful_modify_rules``), with and
without xdist: the rows, the provenance and JUnit say which rules the run had; a clash is one line."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET

import pytest

from pytest_careful.scoring.rules import NAMES

MODES = pytest.mark.parametrize("mode", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
RUN = ["-p", "no:cacheprovider", "--careful-model=scripted:ask", "--careful-category=base", "--junitxml=out.xml"]

LOOSE_ASKED = """
from pytest_careful import Rule, Violation, asking_sentences


class LooseAsked(Rule):
    name = "asked"
    description = "turns with no call whose text asks, under the loose detector"

    def check(self, conversation):
        for turn, texts in enumerate(conversation.texts):
            if not conversation.calls_in(turn) and any(asking_sentences(t, "loose") for t in texts):
                yield Violation(None, "asks", turn=turn)
"""


def _card(pytester: pytest.Pytester) -> dict:
    [path] = (pytester.path / "scorecards").rglob("standard/scorecard.json")
    return json.loads(path.read_text())


def _properties(pytester: pytest.Pytester) -> dict[str, dict[str, str]]:
    cases = ET.parse(pytester.path / "out.xml").getroot().iter("testcase")
    props = ({p.get("name"): p.get("value") for p in case.iter("property")} for case in cases)
    return {p["careful_conversation"]: p for p in props if "careful_conversation" in p}


@MODES
def test_a_built_in_rule_turned_off_and_one_replaced(pytester: pytest.Pytester, mode: list[str]) -> None:
    # The oracle: the built-in rule under the loose detector, which the replacement uses.
    assert pytester.runpytest_subprocess(*RUN, *mode, "--careful-detector=loose").ret == 1
    expected = {r["id"]: r["counts"]["asked"] for r in _card(pytester)["rows"]}
    assert sum(expected.values()) > 0

    pytester.makeconftest(
        LOOSE_ASKED
        + """
def pytest_careful_modify_rules(config, rules):
    rules[:] = [LooseAsked() if r.name == "asked" else r for r in rules if r.name != "redundant_reads"]
"""
    )
    result = pytester.runpytest_subprocess(*RUN, *mode)
    assert result.ret == 1
    card = _card(pytester)
    assert card["provenance"]["rules_off"] == ["redundant_reads", "asked"]
    assert [r["name"] for r in card["provenance"]["custom_rules"]] == ["asked"]
    assert not any("redundant_reads" in row["counts"] for row in card["rows"])
    junit = _properties(pytester)
    assert len(junit) == 200 and not any("careful_redundant_reads" in p for p in junit.values())
    assert {r["id"]: r["counts"]["asked"] for r in card["rows"]} == expected
    assert {cid: int(p["careful_asked"]) for cid, p in junit.items()} == expected
    _off_everywhere(pytester, result.stdout.str(), expected)


def _off_everywhere(pytester: pytest.Pytester, out: str, asked: dict[str, int]) -> None:
    """Every table shows the built-in rules the run did not have as ``off``, never as 0, and the
    replacement's count under its own heading."""
    # the terminal's violations table: red.r and asked are off; the run's own asked has its total
    # columns: collat. chg beyond d/w/r dup.w red.r failed asked
    violations = re.compile(r"\s*all\s+\d+\s+\d+\s+\d+/\d+/\d+\s+\d+\s+(\S+)\s+\d+\s+(\S+)\s*")
    [cells] = [m.groups() for m in map(violations.fullmatch, out.splitlines()) if m]
    assert cells == ("off", "off"), cells
    assert "redundant reads" not in next(line for line in out.splitlines() if line.startswith("most violations"))
    folder = pytester.path / "scorecards" / "scripted_ask" / "standard"
    md = (folder / "scorecard.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| all |")).split("|")
    assert row[10].strip() == row[12].strip() == "off", row  # redund. reads, asked
    own = [line for line in md.splitlines() if line.startswith("| all |")][1]
    assert own.split("|")[2].strip() == str(sum(asked.values()))
    header = (folder / "rows.csv").read_text().splitlines()[0].split(",")
    assert "redundant_reads" not in header and header.count("asked") == 1
    html = (folder / "report.html").read_text()
    assert html.count(">off<") >= 4  # redund. reads and asked, in the category's row and in all's
    assert "redundant reads" not in (folder / "violations.svg").read_text()
    totals = _card(pytester)["totals"]["all"]["counts"]
    assert "redundant_reads" not in totals and totals["asked"] == sum(asked.values())


def test_a_rule_named_as_a_built_in_one_is_refused_in_one_line(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(LOOSE_ASKED + "\n\ndef pytest_careful_rules(config):\n    return [LooseAsked()]\n")
    result = pytester.runpytest_subprocess(*RUN)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
    assert len(errors) == 1, result.stderr.str()
    assert "rule LooseAsked (conftest) is named asked, as the built-in rule Asked is" in errors[0]
    assert "pytest_careful_modify_rules" in errors[0]
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_without_the_plugins_own_rules_a_run_has_only_its_own(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(LOOSE_ASKED + "\n\ndef pytest_careful_rules(config):\n    return [LooseAsked()]\n")
    result = pytester.runpytest_subprocess(*RUN, "-p", "no:careful-rules")
    assert result.ret == 1, result.stdout.str()[-2000:]
    card = _card(pytester)
    assert card["provenance"]["rules_off"] == list(NAMES)
    assert all(set(row["counts"]) == {"asked"} for row in card["rows"])
