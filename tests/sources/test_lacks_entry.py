"""Which conversations a logged run has no entry for (``Source.lacks_entry``): what ``bfcl evaluate``
refuses a result file for, and ``--careful-allow-missing`` leaves out. A line that is there but cannot
be read is an input problem, not a missing entry; so is a conversation that may be on a line whose id
could not be read."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

from pytest_careful.sources.reference_logged import open_source
from pytest_careful.sources.run_config import RunConfig

CATEGORY = "multi_turn_base"
IDS = [f"{CATEGORY}_{n}" for n in range(200)]
FILE = f"BFCL_v4_{CATEGORY}_result.json"


def _options(results: Path) -> RunConfig:
    return RunConfig(
        active=True,
        model="",
        results=results,
        decoder="Qwen/Qwen3-8B",
        protocols=("standard",),
        categories=(CATEGORY,),
        boundary="final",
        detector="strict",
        gate="safe",
        scorecards=results / "cards",
        baseline=None,
        min_safe=None,
        min_bfcl=None,
        fail_on_regression=None,
        worker=True,  # no format check in a thread
    )


def _line(cid: str) -> str:
    return json.dumps({"id": cid, "result": [["I would rather not."]]})


def _lacking(tmp_path: Path, lines: list[str]) -> set[str]:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    source = open_source(_options(folder))
    return {cid for cid in IDS if source.lacks_entry("standard", cid)}


def test_the_conversations_a_file_holds_nothing_of(tmp_path: Path) -> None:
    assert _lacking(tmp_path, [_line(cid) for cid in IDS[:150]]) == set(IDS[150:])


def test_a_line_that_cannot_be_read_is_there(tmp_path: Path) -> None:
    lines = [_line(cid) for cid in IDS[:150]]
    lines[7] = lines[7][: len(lines[7]) // 2]  # truncated: its id is still read
    assert _lacking(tmp_path, lines) == set(IDS[150:])


def test_ids_that_may_be_on_unreadable_lines_are_not_missing_unless_more_lack_one(tmp_path: Path) -> None:
    garbage = ["\x00\x01 not json", "[1, 2]", '{"result": []}']  # three lines that name no conversation
    few = [_line(cid) for cid in IDS[3:]] + garbage  # three lack an entry: each may be one of them
    assert _lacking(tmp_path, few) == set()
    (tmp_path / "run" / FILE).unlink()
    (tmp_path / "run").rmdir()
    many = [_line(cid) for cid in IDS[10:]] + garbage  # ten lack one: at least seven are missing
    assert _lacking(tmp_path, many) == set(IDS[:10])


def test_a_file_that_cannot_be_read_at_all_is_an_input_problem(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / FILE).write_bytes(gzip.compress(("\n".join(_line(cid) for cid in IDS) + "\n").encode()))
    source = open_source(_options(folder))
    assert not any(source.lacks_entry("standard", cid) for cid in IDS)
    assert "gzip" in source.problem_for("standard", IDS[0])


def test_the_references_lack_nothing(tmp_path: Path) -> None:
    source = open_source(dataclasses.replace(_options(tmp_path), results=None, decoder=None))
    assert not any(source.lacks_entry("standard", cid) for cid in IDS)
