"""Scorecards users hand over, hostile by class: --careful-baseline and careful-report.

Every bad file must end in ONE line naming the file and what is wrong (no traceback, no hang, no
terminal escape, no multi-megabyte line). The files are mutations of the real scorecard shipped with
the real logged run; expectations are written from the class of damage, never read from the code.
A bad baseline fails closed before any conversation runs: a usage error, exit 4 (README "baseline").
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_careful.harness import gate as report
from pytest_careful.reports import compare_runs

SCRIPT = Path(sys.executable).parent / "careful-report"
ESC = "\x1b[2J\x1b[31mEVIL\nsecond line\x07"


@pytest.fixture
def card(real_run: Path) -> dict[str, Any]:
    """The scorecard shipped with the real run (11 base conversations, written by the plugin)."""
    path = real_run / "scorecards" / "gpt-oss-20b-vllm-2025-11-12" / "standard" / "scorecard.json"
    return json.loads(path.read_text(encoding="utf-8"))


def _state(card: dict[str, Any]) -> Any:
    """What load_baseline reads of the session: the declarations' digest, the partial switch, the audit's mode."""
    return SimpleNamespace(
        declarations=SimpleNamespace(digest=card["provenance"]["declarations"]),
        options=SimpleNamespace(allow_partial_baseline=True, audit="mark"),
        scoring=SimpleNamespace(audit=None),
        baseline=None,
    )


def _save(folder: Path, data: Any = None, *, text: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "scorecard.json").write_text(json.dumps(data) if text is None else text, encoding="utf-8")
    return folder / "scorecard.json"


def _refusal(path: Path, card: dict[str, Any]) -> str:
    """load_baseline's usage error for ``path``; fails the test when it is accepted."""
    with pytest.raises(pytest.UsageError) as info:
        report.load_baseline(path, _state(card))
    return str(info.value)


def _one_clean_line(text: str, limit: int = 600) -> None:
    assert "\n" not in text.strip() and "\x1b" not in text and "\x07" not in text
    assert len(text) <= limit, len(text)


# --- --careful-baseline ------------------------------------------------------------------


def test_a_good_baseline_is_read(card: dict[str, Any], tmp_path: Path) -> None:
    state = _state(card)
    report.load_baseline(_save(tmp_path / "good", card).parent, state)  # a folder holding scorecard.json
    assert set(state.baseline["rows"]) == {r["id"] for r in card["rows"]}


@pytest.mark.parametrize("how", ["nested 10,000 deep", "nested inside provenance"])
def test_deep_nesting_is_one_line_not_a_crash(card: dict[str, Any], tmp_path: Path, how: str) -> None:
    # RecursionError escaped load_baseline: pytest printed an INTERNALERROR traceback, exit 3
    text = json.dumps(card)
    deep = "[" * 10_000 + "]" * 10_000
    text = deep if how.startswith("nested 10") else text.replace('"provenance": {', f'"provenance": {{"x": {deep}, ', 1)
    path = _save(tmp_path, text=text)
    message = _refusal(path, card)
    assert str(path) in message and "nested too deeply" in message
    _one_clean_line(message)


@pytest.mark.parametrize("kind", ["fifo", "device", "folder"])
def test_only_regular_files_are_read(card: dict[str, Any], tmp_path: Path, kind: str) -> None:
    # A FIFO named scorecard.json blocked the session for ever, /dev/zero filled memory. Run in a
    # subprocess so that the test fails (time-out) rather than hangs when reading blocks.
    folder = tmp_path / "run"
    folder.mkdir()
    path = folder / "scorecard.json"
    {"fifo": lambda: os.mkfifo(path), "device": lambda: path.symlink_to("/dev/zero"), "folder": lambda: path.mkdir()}[
        kind
    ]()
    code = (
        "import sys, pytest, json; from types import SimpleNamespace as N; from pathlib import Path; "
        "from pytest_careful.harness import gate as report\n"
        "s = N(declarations=N(digest='x'), options=N(allow_partial_baseline=True, audit='mark'), "
        "scoring=N(audit=None), baseline=None)\n"
        "try:\n    report.load_baseline(Path(sys.argv[1]), s)\nexcept pytest.UsageError as e:\n    print(e)"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout.startswith(f"--careful-baseline: {path}") and "not a regular file" in proc.stdout
    _one_clean_line(proc.stdout)


def test_values_quoted_from_the_file_are_escaped_and_short(card: dict[str, Any], tmp_path: Path) -> None:
    # The dataset digest is quoted in the refusal: an ESC sequence in it cleared the terminal and a
    # 2 MB value made a 2 MB line.
    for key, value in (("dataset", ESC), ("declarations", "x" * 2_000_000)):
        bad = copy.deepcopy(card)
        bad["provenance"][key] = value
        message = _refusal(_save(tmp_path / key, bad), card)
        assert str(tmp_path / key / "scorecard.json") in message
        _one_clean_line(message)
    assert "\\x1b[2J" in _refusal(tmp_path / "dataset", card)  # escaped, still readable


def test_control_characters_in_the_path_are_escaped(card: dict[str, Any], tmp_path: Path) -> None:
    folder = tmp_path / "a\x1b[31mb"
    message = _refusal(_save(folder, text="{nope"), card)
    assert "a\\x1b[31mb" in message
    _one_clean_line(message)


@pytest.mark.parametrize(
    "how, words",
    [
        ("duplicate id", "repeat another row's id"),
        ("conflicting duplicate", "repeat another row's id"),
        ("unknown id", "not a BFCL multi-turn conversation id"),
        ("no rows", "no rows"),
        ("top-level array", "a JSON array, not an object"),
        ("top-level number", "a JSON number, not an object"),
        ("no provenance", "no 'provenance'"),
    ],
)
def test_rows_and_shape_are_checked(card: dict[str, Any], tmp_path: Path, how: str, words: str) -> None:
    # Duplicate and unknown ids were taken silently (last row won; the gate later failed on "baseline
    # lacks ..." or passed on a verdict the user never saw); no rows passed to the end of the run.
    bad: Any = copy.deepcopy(card)
    if how == "duplicate id":
        bad["rows"][4]["id"] = bad["rows"][3]["id"]
    elif how == "conflicting duplicate":
        bad["rows"].append({**copy.deepcopy(bad["rows"][3]), "safe": not bad["rows"][3]["safe"]})
    elif how == "unknown id":
        bad["rows"][2]["id"] = "multi_turn_base_99999"
    elif how == "no rows":
        bad["rows"] = []
    elif how == "top-level array":
        bad = [bad]
    elif how == "top-level number":
        bad = 42
    else:
        del bad["provenance"]
    path = _save(tmp_path, bad)
    message = _refusal(path, card)
    assert message.startswith(f"--careful-baseline: {path}") and words in message
    _one_clean_line(message)


def test_a_bad_baseline_stops_the_session_with_one_line(tmp_path: Path) -> None:
    # End to end: exit 4 before any conversation runs, one ERROR line, no traceback.
    path = _save(tmp_path / "base", text="[" * 10_000 + "]" * 10_000)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:xdist",
            "--rootdir",
            str(tmp_path),
            "--careful-model=reference",
            "multi_turn_base_1",
            f"--careful-baseline={path}",
            f"--careful-scorecards={tmp_path / 'cards'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == pytest.ExitCode.USAGE_ERROR, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "Traceback" not in proc.stdout + proc.stderr and "INTERNALERROR" not in proc.stdout
    errors = [x for x in proc.stderr.splitlines() if x.startswith("ERROR:")]
    assert len(errors) == 1 and str(path) in errors[0] and "nested too deeply" in errors[0]
    assert not (tmp_path / "cards").exists()


# --- careful-report ------------------------------------------------------------------------


def _report(*args: Any) -> int:
    return compare_runs.main([str(a) for a in args])


def test_report_symlink_loop_is_one_line(
    card: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # find_scorecards' Path.resolve() raised RuntimeError("Symlink loop"): a traceback, exit 1
    _save(tmp_path / "good", card)
    loop = tmp_path / "loop"
    loop.mkdir()
    (loop / "self").symlink_to(loop / "self")
    (loop / "scorecard.json").symlink_to("self")
    assert _report(tmp_path / "good", loop, "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"careful-report: {loop / 'scorecard.json'}") and err.count("\n") == 1


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_report_reads_only_regular_files(card: dict[str, Any], tmp_path: Path, kind: str) -> None:
    _save(tmp_path / "good", card)
    (tmp_path / "bad").mkdir()
    path = tmp_path / "bad" / "scorecard.json"
    os.mkfifo(path) if kind == "fifo" else path.symlink_to("/dev/zero")
    proc = subprocess.run(
        [str(SCRIPT), str(tmp_path / "good"), str(tmp_path / "bad"), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    named = path if kind == "fifo" else "/dev/zero"  # a scorecard named through a symlink is read (and named) once
    assert proc.stderr.startswith(f"careful-report: {named}") and "not a regular file" in proc.stderr
    assert proc.stderr.count("\n") == 1


def test_report_messages_are_escaped_and_short(
    card: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _save(tmp_path / "good", card)
    for key, value in (("dataset", ESC), ("declarations", "x" * 2_000_000)):
        bad = copy.deepcopy(card)
        bad["provenance"][key] = value
        _save(tmp_path / key, bad)
        assert _report(tmp_path / "good", tmp_path / key, "--out", tmp_path / "out") == 2
        err = capsys.readouterr().err
        assert err.startswith("careful-report: ") and str(tmp_path / key) in err
        _one_clean_line(err)


def test_report_a_huge_label_is_cut_in_names(
    card: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A 5 MB label came back as a 5 MB terminal line and a 5 MB table cell
    for name in ("a", "b"):
        _save(tmp_path / name, {**card, "provenance": {**card["provenance"], "label": name + "L" * 5_000_000}})
    assert _report(tmp_path / "a", tmp_path / "b", "--out", tmp_path / "out") == 0
    out = capsys.readouterr().out
    assert max(len(x) for x in out.splitlines()) < 2000
    table = (tmp_path / "out" / "table.md").read_text(encoding="utf-8")
    assert max(len(x) for x in table.splitlines()) < 4000
    report_json = json.loads((tmp_path / "out" / "comparison.json").read_text(encoding="utf-8"))
    assert report_json["runs"][0]["name"] != report_json["runs"][1]["name"]  # still told apart


def test_report_hostile_strings_escaped_in_every_output(
    card: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The folder names, the repeat heading (model, condition) and the notes reached the page and the
    # terminal with ESC, BEL and U+202E (which reverses the text after it) as they were.
    evil = "<script>alert(1)</script>\x1b]0;title\x07\u202e|x|\r"
    for name in ("a", "b"):
        _save(
            tmp_path / "top" / (evil + name),
            {
                **card,
                "provenance": {
                    **card["provenance"],
                    "label": evil + name,
                    "model": evil,
                    "boundary": evil,
                    "protocol": evil,
                },
            },
        )
    assert _report(tmp_path / "top", "--out", tmp_path / "out") == 0
    texts = {
        "terminal": capsys.readouterr().out,
        **{f: (tmp_path / "out" / f).read_text(encoding="utf-8") for f in ("table.md", "report.html")},
    }
    for where, text in texts.items():  # a terminal does not run <script>; it does act on ESC and BEL
        assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text and "\r" not in text, where
    assert "<script>" not in texts["table.md"] + texts["report.html"] and "&lt;script&gt;" in texts["report.html"]
