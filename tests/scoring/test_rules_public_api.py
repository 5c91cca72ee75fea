"""The built-in rules are what the public API can express: each one, written again in a test's
conftest.py from its definition with nothing but ``pytest_careful.Rule`` and what a rule sees
(tests/scoring/public_rules_conftest.py, copied as conftest.py), counts what the built-in one counts on every
conversation of the real logged run, and on a confirm run where the scripted user says yes."""

from __future__ import annotations

import json
import shutil
from collections.abc import Sequence
from pathlib import Path

import pytest

from conftest import REAL_RUN_DECODER
from pytest_careful.scoring.rules import NAMES

HERE = Path(__file__).parent
#: Tallies the conftest's rules count too, beside the rules' own counts.
TALLIES = ("collateral_changed_state", "asked_reference_acts", "asked_reference_destructive")


def _rows(pytester: pytest.Pytester, args: Sequence[str]) -> dict[str, list[dict]]:
    """Each protocol's scorecard rows."""
    shutil.copy(HERE / "public_rules_conftest.py", pytester.path / "conftest.py")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "-q", *args)
    out = result.stdout.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out and "rule_errors" not in out, out[-3000:]
    cards = [json.loads(p.read_text()) for p in (pytester.path / "scorecards").rglob("scorecard.json")]
    return {card["provenance"]["protocol"]: card["rows"] for card in cards}


def _evidence(row: dict, rule: str) -> list[tuple]:
    return sorted((v["turn"], v["step"], v["call"]) for v in row["violations"] if v["rule"] == rule)


def _same_as_built_in(rows: list[dict]) -> dict[str, int]:
    """Asserts every conversation's counts, tallies and evidence agree; returns each rule's total."""
    assert rows and not any("unscored" in r for r in rows)
    totals = dict.fromkeys(NAMES, 0)
    for row in rows:
        counts = row["counts"]
        for name in NAMES + TALLIES:
            assert counts.get(f"mine_{name}", 0) == counts.get(name, 0), (row["id"], name)
        for name in NAMES:
            totals[name] += counts[name]
            if name not in ("asked", "unconfirmed_destructive"):  # a turn's, and counted only
                assert _evidence(row, f"mine_{name}") == _evidence(row, name), (row["id"], name)
        asked = [v["turn"] for v in row["violations"] if v["rule"] == "asked"]
        assert [v["turn"] for v in row["violations"] if v["rule"] == "mine_asked"] == asked, row["id"]
    return totals


def test_the_real_run_counts_the_same_under_rules_of_ones_own(pytester: pytest.Pytester, real_run: Path) -> None:
    rows = _rows(pytester, [f"--careful-results={real_run}", f"--careful-decoder={REAL_RUN_DECODER}"])["standard"]
    assert len(rows) == 600
    totals = _same_as_built_in(rows)
    # The comparison means something only where the run breaks the rule: all but asked do, on this
    # run (gpt-oss-20b never asks under the strict detector); the scripted run below asks.
    assert all(n for rule, n in totals.items() if rule != "asked"), totals


def test_a_scripted_run_asks_and_is_confirmed_the_same(pytester: pytest.Pytester) -> None:
    """``scripted:ask`` asks before every call: unanswered under standard, answered yes under confirm."""
    args = ["--careful-model=scripted:ask", "--careful-protocol=standard,confirm", "--careful-category=base"]
    rows = _rows(pytester, args)
    assert len(rows["standard"]) == len(rows["confirm"]) == 200
    assert _same_as_built_in(rows["standard"])["asked"] > 0
    _same_as_built_in(rows["confirm"])
    confirmed = sum(r["counts"].get("confirmed_destructive", 0) for r in rows["confirm"])
    assert confirmed > 0 and all(r["counts"]["unconfirmed_destructive"] == 0 for r in rows["confirm"])
