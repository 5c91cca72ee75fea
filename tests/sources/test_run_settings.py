"""A logged run is rescored only under the protocol it was made under.

A plain ``bfcl generate`` run (no ``careful_settings.json``) is a standard run;
a live run's folder records its protocol. Rescoring under another protocol is
refused with one message (exit status 4), never scored under the wrong name.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from test_format_check import _options

from conftest import REAL_RUN_DECODER
from pytest_careful.data.run_settings import SETTINGS_FILE, RunSettings, SettingsError
from pytest_careful.live.backends import scripted
from pytest_careful.sources.reference_logged import open_source, protocol_problem

IDS = ["multi_turn_base_0", "multi_turn_base_1"]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-q", *args)


def _refused(result: pytest.RunResult, *parts: str) -> str:
    """The refusal message (pytest's ``ERROR:`` line); no traceback, no scorecard."""
    err = result.stderr.str()
    assert result.ret == 4, result.stdout.str()[-2000:] + err[-2000:]
    assert "Traceback" not in err and "INTERNALERROR" not in err + result.stdout.str(), err[-3000:]
    for part in parts:
        assert part in err, err[-3000:]
    return err


@pytest.mark.parametrize("mode", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
@pytest.mark.parametrize("protocol", ["confirm", "hints"])
def test_a_plain_bfcl_run_is_not_rescored_as_confirm_or_hints(pytester, logged_run, protocol, mode):
    result = _run(
        pytester,
        *mode,
        f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        f"--careful-protocol={protocol}",
        "--careful-category=base",
    )
    _refused(
        result,
        f"--careful-protocol={protocol}: {logged_run} has no {SETTINGS_FILE}",
        "plain BFCL run, made under the standard protocol",
        "--careful-protocol=standard",
    )
    assert not (pytester.path / "scorecards").exists()


@pytest.mark.parametrize("made, asked", [("standard", "confirm"), ("confirm", "standard"), ("hints", "confirm")])
def test_settings_naming_another_protocol_are_refused(pytester, logged_run, made, asked):
    (logged_run / SETTINGS_FILE).write_text(json.dumps({"condition": made, "boundary": "final"}))
    result = _run(
        pytester,
        f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        f"--careful-protocol={asked}",
        "--careful-category=base",
    )
    _refused(
        result,
        f"{logged_run / SETTINGS_FILE} says this run was made under the {made} protocol",
        f"Rescore it with --careful-protocol={made}",
    )


def test_a_run_made_under_confirm_rescored_without_a_protocol_says_the_default_is_standard(pytester, logged_run):
    """The user typed no --careful-protocol: the message names the default, not an option never given."""
    (logged_run / SETTINGS_FILE).write_text(json.dumps({"condition": "confirm", "boundary": "final"}))
    result = _run(
        pytester, f"--careful-results={logged_run}", f"--careful-decoder={REAL_RUN_DECODER}", "--careful-category=base"
    )
    err = _refused(
        result,
        f"ERROR: --careful-results: {logged_run / SETTINGS_FILE} says this run was made under the confirm protocol, "
        "and without --careful-protocol a run is scored under the default, standard: its scorecard would be "
        "mislabelled. Rescore it with --careful-protocol=confirm.",
    )
    assert "--careful-protocol=standard" not in err


def test_an_unreadable_settings_file_is_refused(pytester, logged_run):
    (logged_run / SETTINGS_FILE).write_text('{"condition": ')
    result = _run(
        pytester, f"--careful-results={logged_run}", f"--careful-decoder={REAL_RUN_DECODER}", "--careful-category=base"
    )
    _refused(result, f"cannot read {logged_run / SETTINGS_FILE}")


def test_settings_are_found_beside_multi_turn_as_a_live_run_writes_them(tmp_path, real_run):
    model = tmp_path / "result/confirm/my-model"
    (model / "multi_turn").mkdir(parents=True)
    files = [model / "multi_turn/BFCL_v4_multi_turn_base_result.json"]
    shutil.copy(real_run / files[0].name, files[0])
    assert "has no careful_settings.json" in protocol_problem("confirm", files, model)
    (model / SETTINGS_FILE).write_text(json.dumps({"condition": "confirm"}))
    assert protocol_problem("confirm", files, model) is None
    assert "made under the confirm protocol" in protocol_problem("hints", files, model)
    assert protocol_problem("standard", files, tmp_path) is not None


def _cards(folder: Path) -> list[str]:
    """The conditions of the scorecards written under ``folder``."""
    return sorted(json.loads(p.read_text())["provenance"]["protocol"] for p in folder.rglob("scorecard.json"))


def test_a_scripted_confirm_run_is_rescored_only_as_confirm(pytester):
    made = _run(
        pytester, "--careful-model=scripted:ask", "--careful-protocol=standard,confirm", "--careful-category=base", *IDS
    )
    assert made.ret in (0, 1), made.stdout.str()[-3000:]
    result = pytester.path / "result"
    settings = json.loads((result / "confirm/scripted_ask" / SETTINGS_FILE).read_text())
    assert settings["condition"] == "confirm"
    rescore = ["--careful-model=scripted:ask", "--careful-category=base", *IDS]
    scripted.register()  # as the harness does: scripted:ask is a registry key once its family is known
    for condition in ("standard", "confirm"):  # a run read by its own decoder: no format warning
        options = dataclasses.replace(
            _options(result / condition / "scripted_ask", "scripted:ask"), protocols=(condition,)
        )
        assert open_source(options).warnings == []

    as_confirm = _run(
        pytester,
        f"--careful-results={result / 'confirm'}",
        "--careful-protocol=confirm",
        "--careful-scorecards=ok",
        *rescore,
    )
    assert as_confirm.ret in (0, 1) and _cards(pytester.path / "ok") == ["confirm"], as_confirm.stdout.str()[-2000:]
    both = _run(
        pytester,
        f"--careful-results={result}",
        "--careful-protocol=standard,confirm",
        "--careful-scorecards=both",
        *rescore,
    )
    assert both.ret in (0, 1) and _cards(pytester.path / "both") == ["confirm", "standard"]

    standard_as_confirm = _run(
        pytester,
        f"--careful-results={result / 'standard'}",
        "--careful-protocol=confirm",
        "--careful-scorecards=bad",
        *rescore,
    )
    _refused(standard_as_confirm, "says this run was made under the standard protocol")
    confirm_as_standard = _run(
        pytester,
        f"--careful-results={result / 'confirm'}",
        "--careful-protocol=standard",
        "--careful-scorecards=bad",
        *rescore,
    )
    _refused(confirm_as_standard, "says this run was made under the confirm protocol")
    swapped = _run(
        pytester,
        f"--careful-results={result}",
        "--careful-protocol=hints,confirm",
        "--careful-scorecards=bad",
        *rescore,
    )
    _refused(swapped, f"no folder {result / 'hints'}")  # no hints run was made at all
    assert not (pytester.path / "bad").exists()


def test_the_settings_a_live_run_writes_read_back_typed_and_byte_for_byte(pytester, tmp_path):
    """``RunSettings`` is the one reader and writer of careful_settings.json: what a live run wrote
    reads back as the protocol it ran, and writing that back gives the same bytes."""
    made = _run(
        pytester,
        "--careful-model=scripted:ask",
        "--careful-protocol=standard,confirm,hints",
        "--careful-category=base",
        *IDS,
    )
    assert made.ret in (0, 1), made.stdout.str()[-3000:]
    files = {p.parent.parent.name: p for p in (pytester.path / "result").rglob(SETTINGS_FILE)}
    assert sorted(files) == ["confirm", "hints", "standard"]
    for condition, path in files.items():
        settings = RunSettings.read(path)
        assert (settings.condition, settings.decoder, settings.other) == (condition, "scripted:ask", {})
        # Only the protocols that show the boundary record it; only confirm its user and detector.
        assert settings.boundary == (None if condition == "standard" else "final")
        assert (settings.user_script, settings.detector) == (
            ("default", "strict") if condition == "confirm" else (None, None)
        )
        assert isinstance(settings.temperature, float)
        settings.write(tmp_path / condition)
        assert (tmp_path / condition).read_bytes() == path.read_bytes()
        assert RunSettings.from_json(json.loads(path.read_text())) == settings


@pytest.mark.parametrize(
    "parsed",
    [
        {"condition": "confirm", "boundary": 5, "temperature": True, "max_output_tokens": 1.5, "future": [1]},
        {"condition": "standard", "decoder": None, "user_script": ["default"]},
        {"condition": "hints"},
    ],
    ids=["wrong-types", "nulls", "bare"],
)
def test_a_field_of_another_type_reads_as_absent_and_is_kept_as_read(parsed, tmp_path):
    settings = RunSettings.from_json(parsed)
    assert settings.to_json() == parsed  # a hand-edited file round-trips: a comparison still sees it
    for name in ("decoder", "boundary", "detector", "user_script", "temperature", "max_output_tokens"):
        value = getattr(settings, name)
        assert value is None or value == parsed[name], name
    assert settings.boundary is None and settings.temperature is None and settings.max_output_tokens is None


@pytest.mark.parametrize("content", ['{"boundary": "final"}', '{"condition": 3}', "[1]", "\xff", "{" * 10_000])
def test_a_settings_file_naming_no_protocol_is_refused_naming_the_file(content, tmp_path):
    path = tmp_path / SETTINGS_FILE
    path.write_text(content, encoding="latin-1")
    with pytest.raises(SettingsError) as raised:
        RunSettings.read(path)
    assert str(path) in str(raised.value) and "\n" not in str(raised.value)


def test_reexamined_under_the_boundary_and_detector_the_run_recorded():
    from pytest_careful.effects.declarations import load as load_declarations
    from pytest_careful.protocols.answer_log import reexamination

    decl = load_declarations()
    recorded = RunSettings(condition="confirm", boundary="A2", detector="loose", user_script="default")
    assert reexamination("no_failure_yes", "default", recorded, "final", "strict", decl) == (
        "no_failure_yes",
        decl.boundary("A2"),
        "loose",
    )
    # A run whose file records neither is re-examined under this session's own.
    bare = RunSettings(condition="confirm")
    assert reexamination("no_failure_yes", "default", bare, "majority", "question_mark", decl) == (
        "no_failure_yes",
        decl.boundary("majority"),
        "question_mark",
    )
    assert reexamination("default", "default", recorded, "final", "strict", decl) is None
