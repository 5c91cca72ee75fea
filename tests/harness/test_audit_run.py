"""The item audit in a run (with and without xdist): a failing item whose reference has a defect says so
in its failure text and JUnit, the scorecard gives the figures twice, and --careful-audit's three modes.

The run is a model that does what the user asked where the reference does not: it tweets the sort's
own output (base_4) and writes the year the user dictated (base_176). Both fail BFCL, as the audit
says every model must; base_17 follows the reference and passes.
"""

from __future__ import annotations

import hashlib
import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from pytest_careful.data import dataset
from pytest_careful.reports.baseline import audit_problem
from pytest_careful.verify import audit_file

QWEN = "Qwen/Qwen3-8B"  # a prompting decoder: each step is "[call, call]"
IDS = ["multi_turn_base_4", "multi_turn_base_17", "multi_turn_base_176"]
#: What the obedient model writes instead of the reference's literal.
OBEDIENT = {
    "multi_turn_base_4": (
        "Initial report content More unsorted data Unsorted data",
        "Initial report content Unsorted data More unsorted data",
    ),
    "multi_turn_base_176": ("December 15, 2023", "December 15, 2026"),
}
MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}


def _result(cid: str) -> list[list[str]]:
    turns = []
    for calls in dataset.get(cid).ground_truth:
        step = "[" + ", ".join(calls) + "]"
        if cid in OBEDIENT:
            step = step.replace(*OBEDIENT[cid])
        turns.append([step, "Done."] if calls else ["I cannot do that."])
    return turns


@pytest.fixture
def run_dir(pytester: pytest.Pytester) -> Path:
    folder = pytester.path / "result" / "obedient"
    folder.mkdir(parents=True)
    lines = [json.dumps({"id": cid, "result": _result(cid)}) for cid in IDS]
    (folder / "BFCL_v4_multi_turn_base_result.json").write_text("\n".join(lines) + "\n")
    return folder


def _run(pytester: pytest.Pytester, run_dir: Path, mode: list[str], *extra: str) -> tuple[pytest.RunResult, dict, dict]:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *mode, f"--careful-results={run_dir}", f"--careful-decoder={QWEN}",
        "--junitxml=j.xml", *extra, *(f"{cid}[standard]" for cid in IDS), timeout=600,
    )  # fmt: skip
    card = json.loads((pytester.path / "scorecards" / "obedient" / "standard" / "scorecard.json").read_text())
    cases = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")} | {"_case": case}
        for case in ET.parse(pytester.path / "j.xml").iter("testcase")
    }
    return result, card, cases


@pytest.mark.parametrize("mode", list(MODES))
def test_marked_by_default(pytester: pytest.Pytester, run_dir: Path, mode: str) -> None:
    result, card, cases = _run(pytester, run_dir, MODES[mode])
    result.assert_outcomes(passed=1, failed=2)
    out = result.stdout.str()
    # the failure text: the audit's block after the gate's line, before BFCL's
    text = out.split("multi_turn_base_176[standard] _")[1]
    assert text.index("[audit] the reference has 1 defect") < text.index("[bfcl] failed")
    assert "one_word_changed: turn 1, call 1, description" in text and "[2026 → 2023]" in text
    assert "reordered: turn 2, call 0, content" in out.split("multi_turn_base_4[standard] _")[1]
    assert cases["multi_turn_base_176[standard]"]["careful_audit"] == "defect:one_word_changed (turn 1, description)"
    assert cases["multi_turn_base_17[standard]"]["careful_audit"] == ""
    # the figures twice, each labelled; the verdicts as BFCL's
    audit = card["totals"]["all"]["audit"]
    assert audit["defect_items"] == 2 and audit["all"]["conversations"] == 3
    assert (audit["all"]["bfcl_pass"], audit["no_defect"]["conversations"], audit["no_defect"]["bfcl_pass"]) == (
        1,
        1,
        1,
    )
    assert card["totals"]["all"]["bfcl_pass"] == 1 and card["totals"]["all"]["conversations"] == 3
    assert "audit [standard]: 2 conversations of 3 have a defect" in out
    assert "without them BFCL 100.0%, safe 100.0% (all: BFCL 33.3%, safe 33.3%)" in out
    shipped = hashlib.sha256(audit_file.SHIPPED.read_bytes()).hexdigest()
    assert card["provenance"]["audit"] == {"mode": "mark", "sha256": shipped, "bfcl_eval": "2026.3.23"}
    rows = {r["id"]: r for r in card["rows"]}
    assert [m["finding"] for m in rows["multi_turn_base_4"]["audit"]] == ["reordered"]
    assert "audit" not in rows["multi_turn_base_17"]
    page = (pytester.path / "scorecards" / "obedient" / "standard" / "report.html").read_text()
    assert 'data-audit="defect"' in page and "no model can pass it as given" in page


@pytest.mark.parametrize("mode", list(MODES))
def test_exclude_leaves_the_defects_out(pytester: pytest.Pytester, run_dir: Path, mode: str) -> None:
    result, card, cases = _run(pytester, run_dir, MODES[mode], "--careful-audit=exclude", "--careful-min-bfcl=1.0")
    result.assert_outcomes(passed=1, xfailed=2)
    assert result.ret == 0  # the gate judges the item without a defect only
    totals = card["totals"]["all"]
    assert (totals["conversations"], totals["bfcl_pass"], totals["bfcl_accuracy"]) == (1, 1, 1.0)
    assert totals["audit"]["all"]["conversations"] == 3
    assert card["provenance"]["audit"]["mode"] == "exclude"
    assert "excluded from every figure (--careful-audit=exclude)" in result.stdout.str()
    skipped = cases["multi_turn_base_4[standard]"]["_case"].find("skipped")
    assert skipped is not None and "excluded by --careful-audit=exclude" in (skipped.get("message") or "")


def test_off_is_the_run_as_before(pytester: pytest.Pytester, run_dir: Path) -> None:
    result, card, cases = _run(pytester, run_dir, MODES["no-xdist"], "--careful-audit=off")
    result.assert_outcomes(passed=1, failed=2)
    assert "[audit]" not in result.stdout.str() and "audit [standard]" not in result.stdout.str()
    assert "careful_audit" not in cases["multi_turn_base_4[standard]"]
    assert "audit" not in card["provenance"] and "audit" not in card["totals"]["all"]
    assert all("audit" not in r for r in card["rows"])


def test_a_misspelt_mode_is_one_line(pytester: pytest.Pytester, run_dir: Path) -> None:
    result = pytester.runpytest_subprocess(
        f"--careful-results={run_dir}", f"--careful-decoder={QWEN}", "--careful-audit=exclud"
    )
    assert result.ret == 4
    assert "--careful-audit: invalid choice: 'exclud'" in result.stderr.str()


def _report(pytester: pytest.Pytester, *folders: str) -> pytest.RunResult:
    return pytester.run(str(Path(sys.executable).parent / "careful-report"), *folders, "--out", "compared", timeout=300)


def test_careful_report_names_the_items_every_run_fails(pytester: pytest.Pytester, run_dir: Path) -> None:
    _run_labelled(pytester, run_dir, "first")
    _run_labelled(pytester, run_dir, "second")
    result = _report(pytester, "scorecards/first", "scorecards/second")
    assert result.ret == 0, result.stderr.str()
    comparison = json.loads((pytester.path / "compared" / "comparison.json").read_text())
    found = comparison["universal_failures"]
    assert (found["count"], found["with_defect"], found["with_doubt_only"]) == (2, 2, 0)
    assert {i["id"]: i["findings"] for i in found["items"]} == {
        "multi_turn_base_4": ["defect:reordered"],
        "multi_turn_base_176": ["defect:one_word_changed"],
    }
    table = (pytester.path / "compared" / "table.md").read_text()
    assert "2 conversations are failed by every run (BFCL's verdict): 2 carry a defect" in table
    card = (pytester.path / "scorecards" / "first" / "standard" / "scorecard.md").read_text()
    assert "| all | 2 | 33.3 | 33.3 | 1 | 100.0 | 100.0 |" in card


def test_careful_report_refuses_exclude_beside_another_mode(pytester: pytest.Pytester, run_dir: Path) -> None:
    _run_labelled(pytester, run_dir, "first")
    _run_labelled(pytester, run_dir, "second", "--careful-audit=exclude")
    result = _report(pytester, "scorecards/first", "scorecards/second")
    assert result.ret == 2
    assert "--careful-audit=mark, the other under --careful-audit=exclude" in result.stderr.str()


def test_exclude_runs_on_different_audits_are_refused_and_on_the_same_audit_paired() -> None:
    """audit_problem, which careful-report and --careful-baseline ask before pairing two scorecards."""
    old, new = hashlib.sha256(b"one audit").hexdigest(), hashlib.sha256(b"another audit").hexdigest()

    def provenance(sha: str) -> dict:
        return {"audit": {"mode": "exclude", "sha256": sha, "bfcl_eval": "2026.3.23"}}

    problem = audit_problem(provenance(old), provenance(new))
    assert problem is not None and "with different audits" in problem
    assert old[:12] in problem and new[:12] in problem, problem
    assert audit_problem(provenance(new), provenance(new)) is None


def _run_labelled(pytester: pytest.Pytester, run_dir: Path, label: str, *extra: str) -> None:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:xdist", f"--careful-results={run_dir}", f"--careful-decoder={QWEN}",
        f"--careful-label={label}", *extra, *(f"{cid}[standard]" for cid in IDS), timeout=600,
    )  # fmt: skip
    assert result.ret in (0, 1), result.stdout.str()[-2000:]
