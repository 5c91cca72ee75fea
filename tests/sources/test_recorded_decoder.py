"""Rescoring the plugin's own live output needs no --careful-decoder: careful_settings.json names it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REAL_RUN_DECODER

IDS = ["multi_turn_base_7", "multi_turn_base_8"]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)


def _rows(pytester: pytest.Pytester, label: str) -> list[dict[str, object]]:
    card = json.loads((pytester.path / "scorecards" / label / "standard" / "scorecard.json").read_text())
    return sorted(({k: r[k] for k in ("id", "bfcl", "counts", "safe")} for r in card["rows"]), key=str)


def test_a_live_runs_folder_rescores_with_the_decoder_it_recorded(pytester: pytest.Pytester) -> None:
    live = _run(pytester, "--careful-model=scripted:ask", "--careful-output=out", "--careful-label=live", *IDS)
    assert live.ret in (0, 1), live.stdout.str()[-2000:]
    (settings,) = (pytester.path / "out").rglob("careful_settings.json")
    assert json.loads(settings.read_text())["decoder"] == "scripted:ask"
    rescored = _run(pytester, "--careful-results=out/standard", "--careful-label=again", *IDS)
    assert rescored.ret == live.ret, rescored.stdout.str()[-2000:] + rescored.stderr.str()[-2000:]
    assert _rows(pytester, "again") == _rows(pytester, "live")
    # A folder made before the decoder was recorded resumes as it did (the key is not a difference).
    made = json.loads(settings.read_text())
    del made["decoder"]
    settings.write_text(json.dumps(made))
    resumed = _run(pytester, "--careful-model=scripted:ask", "--careful-output=out", "--careful-label=live", *IDS)
    assert resumed.ret == live.ret and "holds results made with" not in resumed.stdout.str() + resumed.stderr.str()


def test_a_plain_bfcl_folder_still_needs_the_decoder_and_says_why(pytester: pytest.Pytester, real_run: Path) -> None:
    folder = pytester.path / "bfcl"
    folder.mkdir()
    shutil.copy(real_run / "BFCL_v4_multi_turn_base_result.json", folder)
    refused = _run(pytester, f"--careful-results={folder}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*needs --careful-decoder KEY*careful_settings.json; this folder holds none*"])
    assert _run(pytester, f"--careful-results={folder}", f"--careful-decoder={REAL_RUN_DECODER}", IDS[0]).ret == 1


@pytest.mark.parametrize(
    "content",
    ['{"condition": "standard", "decoder": []}', '{"decoder": "a\\u001b[31m"}', "[1, 2]", "\xff\xfe", "{" * 10_000],
    ids=["a list", "an escape", "not an object", "not utf-8", "too deep"],
)
def test_a_hostile_settings_file_names_no_decoder(tmp_path: Path, content: str) -> None:
    from pytest_careful.data.run_settings import recorded_decoder

    folder = tmp_path / "standard" / "model"
    folder.mkdir(parents=True)
    (folder / "careful_settings.json").write_bytes(content.encode("utf-8", "surrogateescape"))
    assert recorded_decoder(tmp_path) is None
    (folder / "careful_settings.json").write_text('{"condition": "standard", "decoder": "gpt-4.1-2025-04-14-FC"}')
    assert recorded_decoder(tmp_path) == "gpt-4.1-2025-04-14-FC"


def test_a_fifo_named_like_the_settings_file_is_not_opened(tmp_path: Path) -> None:
    import os

    from pytest_careful.data.run_settings import recorded_decoder

    os.mkfifo(tmp_path / "careful_settings.json")
    assert recorded_decoder(tmp_path) is None  # returns at once: a read would block forever
