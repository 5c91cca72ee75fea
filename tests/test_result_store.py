"""ResultStore: BFCL's result-file layout, crash safety and concurrent appends."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_careful.result_store import ResultStore
from pytest_careful.results import read_result_file

ROOT = Path(__file__).resolve().parents[1]
CATEGORY = "multi_turn_base"
MODEL = "openai/gpt-oss-20b-FC"


def entry(index: int, result: Any = None, **extra: Any) -> dict[str, Any]:
    return {"id": f"{CATEGORY}_{index}", "result": [[]] if result is None else result,
            "input_token_count": [[1]], "output_token_count": [[2]], "latency": [[0.5]],
            "inference_log": [{"begin_of_turn_query": [{"role": "user", "content": "héllo"}]}],
            **extra}


def test_path_matches_bfcl_layout(tmp_path: Path) -> None:
    from bfcl_eval.constants.category_mapping import VERSION_PREFIX
    from bfcl_eval.utils import get_directory_structure_by_category

    store = ResultStore(tmp_path, MODEL)
    for category in ("multi_turn_base", "multi_turn_long_context"):
        # BaseHandler.write: result_dir / registry_dir_name / group / f"{VERSION_PREFIX}_{category}_result.json"
        expected = (tmp_path / MODEL.replace("/", "_") / get_directory_structure_by_category(category)
                    / f"{VERSION_PREFIX}_{category}_result.json")
        assert store.path(category) == expected
    with pytest.raises(ValueError):
        store.path("simple")


def test_round_trip_with_read_result_file(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, MODEL)
    written = [entry(i) for i in (2, 0, 1)]
    for e in written:
        store.append(CATEGORY, e)
    entries, problems = read_result_file(store.path(CATEGORY), CATEGORY)
    assert problems == []
    assert [e.raw for e in entries] == written
    assert list(entries[0].raw) == list(written[0])  # key order as given
    assert set(store.completed(CATEGORY)) == {f"{CATEGORY}_{i}" for i in range(3)}
    # ensure_ascii=False, as bfcl's write_list_of_dicts_to_file
    assert "héllo" in store.path(CATEGORY).read_text(encoding="utf-8")


def test_errored_entries_are_not_completed_and_retry_wins(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, MODEL)
    store.append(CATEGORY, entry(0, result="Error during inference: boom"))
    store.append(CATEGORY, entry(1, error="timeout"))
    store.append(CATEGORY, entry(2))
    assert set(store.completed(CATEGORY)) == {f"{CATEGORY}_2"}

    store.append(CATEGORY, entry(0, result=[["retried"]]))  # the retry is appended again
    assert store.completed(CATEGORY)[f"{CATEGORY}_0"]["result"] == [["retried"]]
    store.compact(CATEGORY)
    entries, problems = read_result_file(store.path(CATEGORY), CATEGORY)
    assert problems == []
    # the never-completed id keeps its errored entry, scored by BFCL as a failure
    assert [(e.id, e.result) for e in entries] == [
        (f"{CATEGORY}_0", [["retried"]]), (f"{CATEGORY}_1", [[]]), (f"{CATEGORY}_2", [[]])]
    assert entries[1].raw["error"] == "timeout"


def test_torn_last_line_is_ignored_and_next_append_starts_a_new_line(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, MODEL)
    store.append(CATEGORY, entry(0))
    path = store.path(CATEGORY)
    with path.open("ab") as f:
        f.write(json.dumps(entry(1)).encode()[:40])  # a writer killed mid-line
    assert set(store.completed(CATEGORY)) == {f"{CATEGORY}_0"}

    store.append(CATEGORY, entry(1))
    lines = path.read_text(encoding="utf-8").splitlines()
    assert len(lines) == 3 and json.loads(lines[2]) == entry(1)
    assert set(store.completed(CATEGORY)) == {f"{CATEGORY}_0", f"{CATEGORY}_1"}

    store.compact(CATEGORY)
    entries, problems = read_result_file(path, CATEGORY)
    assert problems == [] and [e.id for e in entries] == [f"{CATEGORY}_0", f"{CATEGORY}_1"]
    assert [p.name for p in path.parent.iterdir()] == [path.name]  # no temp file left


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from pytest_careful.result_store import ResultStore
    store = ResultStore(Path(sys.argv[1]), sys.argv[2])
    ids = range(int(sys.argv[3]), 200, int(sys.argv[4]))
    pad = "x" * int(sys.argv[5])
    for i in ids:
        store.append("multi_turn_base", {"id": f"multi_turn_base_{i}", "result": [[]],
                     "input_token_count": 0, "output_token_count": 0, "latency": 0.0,
                     "inference_log": [pad]})
        time.sleep(float(sys.argv[6]))
""")


def writer(tmp_path: Path, start: int, step: int, pad: int, sleep: float) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path), MODEL, str(start), str(step),
                             str(pad), str(sleep)], env=env)


def test_sigkill_mid_run_then_rerun_loses_nothing(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, MODEL)
    path = store.path(CATEGORY)
    child = writer(tmp_path, 0, 1, 2000, 0.005)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= 50:
            break
        time.sleep(0.005)
    child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=5) == -signal.SIGKILL

    done = store.completed(CATEGORY)
    assert 50 <= len(done) < 200, "the child should have been killed mid-way"
    for i in range(200):  # the rerun: only what is not completed
        if f"{CATEGORY}_{i}" not in done:
            store.append(CATEGORY, entry(i))
    store.compact(CATEGORY)

    entries, problems = read_result_file(path, CATEGORY)
    assert problems == []
    assert [e.id for e in entries] == [f"{CATEGORY}_{i}" for i in range(200)]


def test_concurrent_writers_keep_every_line_intact(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, MODEL)
    # 100 KiB lines: above what the kernel guarantees to append atomically
    children = [writer(tmp_path, start, 2, 100_000, 0) for start in (0, 1)]
    for child in children:
        assert child.wait(timeout=30) == 0

    lines = store.path(CATEGORY).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 200
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(f"{CATEGORY}_{i}" for i in range(200))
    entries, problems = read_result_file(store.path(CATEGORY), CATEGORY)
    assert problems == [] and len(entries) == 200
