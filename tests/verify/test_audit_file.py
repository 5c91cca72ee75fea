"""audit.json: the shipped file is careful-audit's output, overrides apply with their reasons, --check
names each finding that differs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_careful.cli import audit as cli
from pytest_careful.common.bfcl import PINNED_VERSION
from pytest_careful.data import dataset
from pytest_careful.verify import audit_file
from pytest_careful.verify.audit import CLASSES, DEFECT, DOUBT, audit_conversation
from pytest_careful.verify.audit_file import AuditFileError, Override, document, dumps

SOME = ["multi_turn_base_4", "multi_turn_base_17", "multi_turn_base_176", "multi_turn_miss_func_172"]


def _audits() -> list:
    return [audit_conversation(dataset.get(c)) for c in SOME]


def test_the_shipped_audit_is_careful_audits_output() -> None:
    """Recomputed on every conversation (both cores): byte-identical to the shipped file, or the findings that differ."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest_careful.cli.audit", "--check", "-j", "2"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "is up to date" in done.stdout


def test_the_shipped_audit_says_what_it_audited() -> None:
    shipped = json.loads(audit_file.SHIPPED.read_text(encoding="utf-8"))
    assert shipped["schema"] == audit_file.SCHEMA and shipped["bfcl_eval"] == PINNED_VERSION
    assert set(shipped["rules"]["classes"]) == set(CLASSES)
    assert shipped["totals"]["conversations"] == len(dataset.load())
    for cid, found in shipped["conversations"].items():
        dataset.get(cid)  # every id is one of the dataset's
        for finding in found:
            assert {"turn", "call", "argument", "finding", "severity", "evidence"} <= set(finding)
            reviewed = finding.get("review", {}).get("verdict")
            assert finding["severity"] == (reviewed if reviewed in (DEFECT, DOUBT) else CLASSES[finding["finding"]][0])
    # the totals are the findings' own
    rows = [f for found in shipped["conversations"].values() for f in found]
    assert shipped["totals"]["findings"] == {s: sum(f["severity"] == s for f in rows) for s in (DEFECT, DOUBT)}


def test_an_override_rejects_a_finding_with_its_reason_and_keeps_it_listed() -> None:
    audits = _audits()
    plain = document(audits)
    target = plain["conversations"]["multi_turn_base_4"][0]
    override = Override(
        "multi_turn_base_4",
        target["turn"],
        target["call"],
        target["argument"],
        target["finding"],
        "rejected",
        "a test says so",
    )
    reviewed = document(audits, [override])
    assert "multi_turn_base_4" not in reviewed["conversations"]
    assert reviewed["rejected"][0]["conversation"] == "multi_turn_base_4"
    assert reviewed["rejected"][0]["reason"] == "a test says so"
    assert reviewed["totals"]["findings"][DEFECT] == plain["totals"]["findings"][DEFECT] - 1


def test_an_override_may_change_a_severity() -> None:
    audits = _audits()
    target = document(audits)["conversations"]["multi_turn_base_176"][0]
    override = Override(
        "multi_turn_base_176",
        target["turn"],
        target["call"],
        target["argument"],
        target["finding"],
        DOUBT,
        "read as a guess",
    )
    row = document(audits, [override])["conversations"]["multi_turn_base_176"][0]
    assert row["severity"] == DOUBT and row["review"] == {"verdict": DOUBT, "reason": "read as a guess"}


def test_an_override_that_names_no_finding_is_an_error() -> None:
    stale = Override("multi_turn_base_17", 0, 0, "a", "no_source", "confirmed", "gone since")
    with pytest.raises(AuditFileError, match="name no finding"):
        document(_audits(), [stale])


def test_overrides_file_errors_name_the_entry(tmp_path: Path) -> None:
    path = tmp_path / "audit_overrides.yaml"
    path.write_text(
        "overrides:\n- conversation: multi_turn_base_4\n  turn: 2\n  call: 0\n  finding: reordered\n  verdict: rejected\n"
    )
    with pytest.raises(AuditFileError, match="override 1: missing reason"):
        audit_file.read_overrides(path)
    path.write_text("overrides: [{conversation: x, turn: 0, call: 0, finding: nope, verdict: rejected, reason: r}]\n")
    with pytest.raises(AuditFileError, match="finding 'nope' is not one of"):
        audit_file.read_overrides(path)


def test_check_lists_the_findings_that_differ() -> None:
    doc = document(_audits())
    changed = json.loads(dumps(doc))
    changed["conversations"]["multi_turn_base_4"][0]["severity"] = DOUBT
    del changed["conversations"]["multi_turn_base_176"]
    lines = audit_file.differences(changed, doc)
    assert any(line.startswith("~ multi_turn_base_4 ") and "severity" in line for line in lines), lines
    assert any(line.startswith("+ multi_turn_base_176 ") for line in lines), lines


def test_a_damaged_audit_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "audit.json"
    bad.write_text('{"schema": 99}')
    with pytest.raises(AuditFileError, match="not an audit of schema"):
        audit_file.load(bad)
    bad.write_text("{")
    with pytest.raises(AuditFileError, match="not a readable audit file"):
        audit_file.load(bad)


def test_careful_audit_check_exits_1_and_lists_each_differing_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command itself: it writes an audit, --check passes on it, and on a copy with two findings
    altered it exits 1 with one line per finding. It recomputes four conversations, not 800, for speed
    (the full recomputation is test_the_shipped_audit_is_careful_audits_output's)."""
    real = cli.audit_all
    monkeypatch.setattr(cli, "audit_all", lambda ids, jobs: real([c for c in ids if c in SOME], 1))
    written = tmp_path / "audit.json"
    assert cli.main(["--file", str(written)]) == 0
    assert cli.main(["--check", "--file", str(written)]) == 0
    assert "is up to date" in capsys.readouterr().out

    altered = json.loads(written.read_text(encoding="utf-8"))
    altered["conversations"]["multi_turn_base_4"][0]["severity"] = DOUBT
    altered["conversations"]["multi_turn_base_176"][0]["evidence"]["near_miss"] = "user turn 0: 'something else'"
    copy = tmp_path / "altered.json"
    copy.write_text(dumps(altered), encoding="utf-8")
    assert cli.main(["--check", "--file", str(copy)]) == 1
    out = capsys.readouterr().out.splitlines()
    differing = [line for line in out if not line.startswith("careful-audit:")]
    assert len(differing) == 2, out
    assert differing[0].startswith("~ multi_turn_base_176 turn 1 call 1 description one_word_changed:"), out
    assert "evidence" in differing[0]
    assert differing[1].startswith("~ multi_turn_base_4 turn 2 call 0 content reordered:"), out
    assert "severity" in differing[1]
    assert out[-1].startswith(f"careful-audit: {copy} is stale"), out
