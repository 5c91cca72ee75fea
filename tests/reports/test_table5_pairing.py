"""careful-report's Table 5 pairs each condition with its model's standard run, on real scorecards.

The scorecards are the plugin's own: the deterministic ``scripted:ask`` model run live under all
three protocols, again under confirm with a second user script, and twice more under two
boundaries. Gained, lost and p are counted here from the scorecards' rows and checked against
the same run's pairs section and scipy's exact binomial test; nothing is typed in.
"""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
from careful_cli import careful_command
from scipy.stats import binomtest

from pytest_careful.reports import compare_runs

#: Conversations of base whose references make destructive calls and some that make none:
#: scripted:ask fails the first kind without a scripted user (it asks and stops) and passes the rest.
IDS = [f"multi_turn_base_{i}" for i in range(24)]
MODEL = "--careful-model=scripted:ask"


def _session(folder: Path, *args: str) -> subprocess.Popen[bytes]:
    folder.mkdir(parents=True)
    return subprocess.Popen(
        [*careful_command(folder, MODEL, "-p", "no:randomly", "-p", "no:xdist", *args, *IDS)],
        cwd=folder,
        stdout=(folder / "session.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


@pytest.fixture(scope="module")
def sessions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four sessions of scripted:ask, each in a folder of its own (results, scorecards, log)."""
    root = tmp_path_factory.mktemp("pairing")
    running = {  # both spellings of the options, as users write them
        "all": _session(root / "all", "--careful-protocol=standard,hints,confirm"),
        "script": _session(
            root / "script", "--careful-protocol", "confirm", "--careful-user-script", "asking_sentences_only"
        ),
        "final": _session(root / "final", "--careful-protocol=standard,confirm", "--careful-boundary=final"),
        "majority": _session(
            root / "majority", "--careful-protocol", "standard,confirm", "--careful-boundary", "majority"
        ),
    }
    for name, proc in running.items():
        log = root / name / "session.log"
        assert proc.wait(timeout=300) in (0, 1) and (root / name / "cards").is_dir(), log.read_text()[-3000:]
    return root


def _report(tmp_path: Path, *folders: Path) -> dict[str, Any]:
    out = tmp_path / "out"
    assert compare_runs.main([*map(str, folders), "--out", str(out)]) == 0
    return json.loads((out / "comparison.json").read_text(encoding="utf-8"))


def _verdicts(run: dict[str, Any]) -> dict[str, bool]:
    card = json.loads(Path(run["path"]).read_text(encoding="utf-8"))
    return {row["id"]: row["bfcl"]["valid"] for row in card["rows"]}


def _by(report: dict[str, Any], condition: str, path_part: str = "") -> tuple[dict[str, Any], dict[str, Any]]:
    """The run summary and Table 5 row of the one run of ``condition`` whose path holds ``path_part``."""
    [index] = [
        i
        for i, r in enumerate(report["runs"])
        if r["condition"] == condition and (not path_part or path_part in Path(r["path"]).parts)
    ]
    return report["runs"][index], report["table5"][index]


def _check_row_against_standard(
    report: dict[str, Any], row: dict[str, Any], run: dict[str, Any], std: dict[str, Any]
) -> None:
    """The row's gained, lost and p: counted from the two scorecards, as the pairs section has them, as scipy's."""
    here, there = _verdicts(run), _verdicts(std)
    gained = sum(1 for i in here if here[i] and not there[i])
    lost = sum(1 for i in here if there[i] and not here[i])
    vs = row["vs_standard"]
    assert vs is not None, row.get("standard_note")
    assert (vs["against"], vs["gained"], vs["lost"]) == (std["name"], gained, lost)
    [pair] = [p for p in report["pairs"] if {p["a"], p["b"]} == {run["name"], std["name"]}]
    overall = pair["bfcl"]["all"]
    as_pair = (overall["gained"], overall["lost"]) if pair["b"] == run["name"] else (overall["lost"], overall["gained"])
    assert (vs["gained"], vs["lost"]) == as_pair
    assert vs["p"] == overall["p"]
    if gained + lost:
        assert vs["p"] == pytest.approx(binomtest(min(gained, lost), gained + lost).pvalue, rel=1e-12)
    assert "standard_note" not in row


def test_confirm_and_hints_rows_match_the_pairs_section(sessions: Path, tmp_path: Path) -> None:
    report = _report(tmp_path, sessions / "all" / "cards")
    std, std_row = _by(report, "standard")
    for condition in ("hints", "confirm"):
        run, row = _by(report, condition)
        _check_row_against_standard(report, row, run, std)
    confirm = _by(report, "confirm")[1]["vs_standard"]
    assert confirm["gained"] > 0 and confirm["p"] < 0.05  # the scripted user lets ask act: a real difference
    assert std_row["vs_standard"] is None and "standard_note" not in std_row
    table = (tmp_path / "out" / "table.md").read_text(encoding="utf-8")
    confirm_line = next(line for line in table.splitlines() if "| confirm |" in line)
    assert f"| {confirm['gained']} / {confirm['lost']} |" in confirm_line


def test_a_confirm_run_under_another_user_script_pairs_with_the_one_standard_run(
    sessions: Path, tmp_path: Path
) -> None:
    report = _report(tmp_path, sessions / "all" / "cards", sessions / "script" / "cards")
    std, _ = _by(report, "standard")
    scripts = set()
    for part in ("all", "script"):
        run, row = _by(report, "confirm", part)
        _check_row_against_standard(report, row, run, std)
        scripts.add(run["settings"]["user_script"])
    assert scripts == {"default", "asking_sentences_only"}


def test_standard_runs_under_two_boundaries_each_pair_with_their_own(sessions: Path, tmp_path: Path) -> None:
    report = _report(tmp_path, sessions / "final" / "cards", sessions / "majority" / "cards")
    for boundary in ("final", "majority"):
        std, _ = _by(report, "standard", boundary)
        run, row = _by(report, "confirm", boundary)
        assert std["settings"]["boundary"] == run["settings"]["boundary"] == boundary
        _check_row_against_standard(report, row, run, std)


def test_no_standard_run_with_the_settings_is_said_in_a_note(sessions: Path, tmp_path: Path) -> None:
    confirm = sessions / "majority" / "cards" / "scripted_ask" / "confirm"
    report = _report(tmp_path, confirm, sessions / "final" / "cards" / "scripted_ask" / "standard")
    _, row = _by(report, "confirm")
    assert row["vs_standard"] is None
    assert (
        "no standard run of scripted:ask has its settings (boundary majority, not final as in" in row["standard_note"]
    )
    table = (tmp_path / "out" / "table.md").read_text(encoding="utf-8")
    assert "| – (1) | – |" in next(line for line in table.splitlines() if "| confirm |" in line)
    assert "(1) scripted\\_ask \\[confirm\\]: no standard run of scripted:ask has its settings" in table
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert 'id="table5-notes"' in page and "no standard run of scripted:ask has its settings" in page


def test_no_standard_run_of_the_model_is_said_in_a_note(sessions: Path, tmp_path: Path) -> None:
    cards = sessions / "all" / "cards" / "scripted_ask"
    report = _report(tmp_path, cards / "confirm", cards / "hints")
    for condition in ("confirm", "hints"):
        row = _by(report, condition)[1]
        assert row["vs_standard"] is None
        assert row["standard_note"].endswith("no standard run of scripted:ask among the runs")


def _copy(source: Path, target: Path, label: str) -> Path:
    card = json.loads((source / "scorecard.json").read_text(encoding="utf-8"))
    changed = copy.deepcopy(card)
    changed["provenance"]["label"] = label
    target.mkdir(parents=True)
    (target / "scorecard.json").write_text(json.dumps(changed), encoding="utf-8")
    return target


def test_two_standard_runs_that_qualify_are_named_in_a_note(sessions: Path, tmp_path: Path) -> None:
    cards = sessions / "all" / "cards" / "scripted_ask"
    other = _copy(cards / "standard", tmp_path / "other" / "standard", "other")
    report = _report(tmp_path, cards / "confirm", cards / "standard", other)
    run, row = _by(report, "confirm")
    std, _ = _by(report, "standard", "all")
    _check_row_against_standard_with_note(report, row, run, std)
    assert "the one of its label among the 2 standard runs of scripted:ask with its settings" in row["standard_note"]

    relabelled = _copy(cards / "confirm", tmp_path / "third" / "confirm", "third")
    report = _report(tmp_path / "again", relabelled, cards / "standard", other)
    row = _by(report, "confirm")[1]
    assert row["vs_standard"] is None
    assert (
        "2 standard runs of scripted:ask have its settings (scripted_ask [standard], other [standard])"
        in (row["standard_note"])
    )


def _check_row_against_standard_with_note(
    report: dict[str, Any], row: dict[str, Any], run: dict[str, Any], std: dict[str, Any]
) -> None:
    note = row.pop("standard_note")
    _check_row_against_standard(report, row, run, std)
    row["standard_note"] = note
