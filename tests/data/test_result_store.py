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

from pytest_careful.data.result_files import read_result_file
from pytest_careful.data.result_store import ResultStore

ROOT = Path(__file__).resolve().parents[2]
CATEGORY = "multi_turn_base"
MODEL = "openai/gpt-oss-20b-FC"


def entry(index: int, result: Any = None, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"{CATEGORY}_{index}",
        "result": [[]] if result is None else result,
        "input_token_count": [[1]],
        "output_token_count": [[2]],
        "latency": [[0.5]],
        "inference_log": [{"begin_of_turn_query": [{"role": "user", "content": "héllo"}]}],
        **extra,
    }


def test_path_matches_bfcl_layout(tmp_path: Path) -> None:
    from bfcl_eval.constants.category_mapping import VERSION_PREFIX
    from bfcl_eval.utils import get_directory_structure_by_category

    store = ResultStore(tmp_path, MODEL)
    for category in ("multi_turn_base", "multi_turn_long_context"):
        # BaseHandler.write: result_dir / registry_dir_name / group / f"{VERSION_PREFIX}_{category}_result.json"
        expected = (
            tmp_path
            / MODEL.replace("/", "_")
            / get_directory_structure_by_category(category)
            / f"{VERSION_PREFIX}_{category}_result.json"
        )
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
        (f"{CATEGORY}_0", [["retried"]]),
        (f"{CATEGORY}_1", [[]]),
        (f"{CATEGORY}_2", [[]]),
    ]
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
    from pytest_careful.data.result_store import ResultStore
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
    return subprocess.Popen(
        [sys.executable, "-c", WRITER, str(tmp_path), MODEL, str(start), str(step), str(pad), str(sleep)], env=env
    )


def test_sigkill_mid_run_then_rerun_loses_nothing(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, MODEL)
    path = store.path(CATEGORY)
    # 50 ms a line: once 50 are written, 7.5 s are left to kill it mid-way, however busy the machine.
    child = writer(tmp_path, 0, 1, 2000, 0.05)
    deadline = time.monotonic() + 120  # a bound only a hang crosses
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


# -- hostile content (issue 12, class 6: the result-store half) -----------------------------------


def _reference(index: int) -> list[list[list[str]]]:
    from pytest_careful.data import dataset

    return [[list(calls)] if calls else [] for calls in dataset.get(f"{CATEGORY}_{index}").ground_truth]


# (A high surrogate followed by a low one is no lone surrogate: JSON reads the pair back as one character.)
@pytest.mark.parametrize(
    "text", ["lone \ud800 high", "\udfff", "low first \ude00\ud83d", "\udc80\udcff", "mixed é \ud800 \u2028 \x00"]
)
def test_lone_surrogates_are_written_and_read_back(tmp_path: Path, text: str) -> None:
    """Model text that is no valid UTF-8 string still makes one line that reads back as written."""
    from bfcl_eval.utils import load_file

    store = ResultStore(tmp_path, MODEL)
    written = entry(0, result=[[text], [[f"echo(content={text!r})"]]], inference_log=[{"content": text}])
    store.append(CATEGORY, written)
    store.append(CATEGORY, entry(1))
    entries, problems = read_result_file(store.path(CATEGORY), CATEGORY)
    assert problems == [] and [e.raw for e in entries] == [written, entry(1)]
    assert store.completed(CATEGORY)[f"{CATEGORY}_0"] == written  # served on resume, not paid again
    store.compact(CATEGORY)
    assert [e["result"] for e in load_file(store.path(CATEGORY), use_lock=False)] == [written["result"], [[]]]
    assert "héllo" in store.path(CATEGORY).read_text(encoding="utf-8")  # the other line: as bfcl writes it


@pytest.mark.parametrize(
    "foreign",
    [
        "multi_turn_base_abc",
        "multi_turn_base_1:x-y-z",
        "multi_turn_base_",
        "multi_turn_base_999999",
        "multi_turn_miss_func_3",
        "x" * 300,
        "multi_turn_base_\ud800",
        "multi_turn_base_-1",
        "multi_turn_base_1e3",
    ],
)
def test_compact_drops_foreign_ids_instead_of_crashing(tmp_path: Path, foreign: str) -> None:
    store = ResultStore(tmp_path, MODEL)
    store.append(CATEGORY, entry(2))
    with store.path(CATEGORY).open("ab") as f:  # planted: append() refuses ids of other categories
        f.write(json.dumps({"id": foreign, "result": [[]]}).encode() + b"\n")
    store.append(CATEGORY, entry(1))
    done, problems = store.read(CATEGORY)
    assert set(done) == {f"{CATEGORY}_1", f"{CATEGORY}_2"}
    assert [(p.line, p.conversation in (None, foreign)) for p in problems] == [(2, True)]
    store.compact(CATEGORY)
    assert [json.loads(x)["id"] for x in store.path(CATEGORY).read_text().splitlines()] == [
        f"{CATEGORY}_1",
        f"{CATEGORY}_2",
    ]


def test_planted_entry_with_too_many_turns_is_retried_and_located(tmp_path: Path) -> None:
    store = ResultStore(tmp_path, MODEL)
    store.append(CATEGORY, entry(0, result=_reference(0)))
    with store.path(CATEGORY).open("ab") as f:
        f.write(json.dumps({"id": f"{CATEGORY}_5", "result": [[]] * 40}).encode() + b"\n")
    assert f"{CATEGORY}_5" not in store.completed(CATEGORY)  # not served: retried
    _, problems = store.read(CATEGORY)
    assert [(p.line, p.conversation) for p in problems] == [(2, f"{CATEGORY}_5")]
    assert "has 40 turns" in problems[0].message


@pytest.mark.parametrize("seed", range(6))
def test_resume_and_compaction_follow_the_rescoring_rule(tmp_path: Path, seed: int) -> None:
    """A generated hostile log: resume serves, and compaction keeps, exactly what rescoring reads."""
    sys.path.insert(0, str(ROOT / "tests" / "data"))
    from hostile_lines import corpus

    from pytest_careful.data import dataset

    made = corpus(
        seed,
        [f"{CATEGORY}_{i}" for i in range(200)],
        lambda cid: _reference(int(cid.rsplit("_", 1)[1])),
        lambda cid: dataset.get(cid).n_turns,
        ["multi_turn_miss_func_1", "multi_turn_long_context_9"],
    )
    store = ResultStore(tmp_path, MODEL)
    path = store.path(CATEGORY)
    path.parent.mkdir(parents=True)
    path.write_bytes(made.text())
    expected, _ = made.expected()
    complete = {i: r for i, (_, r) in expected.items() if isinstance(r, list)}
    assert {i: e["result"] for i, e in store.completed(CATEGORY).items()} == complete

    store.compact(CATEGORY)
    entries, problems = read_result_file(path, CATEGORY)
    assert problems == []
    by_index = sorted(expected, key=lambda i: int(i.rsplit("_", 1)[1]))
    assert [(e.id, e.result) for e in entries] == [(i, expected[i][1]) for i in by_index]
    store.append(CATEGORY, entry(0, result=[["again"]]))  # the compacted file takes appends
    assert store.completed(CATEGORY)[f"{CATEGORY}_0"]["result"] == [["again"]]


def test_a_fifo_at_the_result_path_blocks_nothing(tmp_path: Path) -> None:
    import threading

    store = ResultStore(tmp_path, MODEL)
    path = store.path(CATEGORY)
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    outcome: list[Any] = []

    def use() -> None:
        outcome.append(store.completed(CATEGORY))
        store.compact(CATEGORY)
        try:
            store.append(CATEGORY, entry(0, inference_log=["x" * 200_000]))  # more than a pipe holds
        except OSError as exc:
            outcome.append(str(exc))

    worker = threading.Thread(target=use, daemon=True)
    worker.start()
    worker.join(10)
    if worker.is_alive():
        pytest.fail("the store blocked on a FIFO")
    assert outcome[0] == {} and "not a regular file" in outcome[1]


def _scripted(index: int) -> dict[str, Any]:
    """The entry the scripted reference model writes for a conversation (its own output format)."""
    from pytest_careful.data import dataset
    from pytest_careful.effects import declarations
    from pytest_careful.live import runner
    from pytest_careful.live.backends import scripted

    return runner.run(
        scripted.make_handler("scripted:reference"),
        dataset.get(f"{CATEGORY}_{index}"),
        runner.RunProtocol("standard", declarations.load()),
    ).entry


def _plant(path: Path, lines: list[bytes]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("ab") as f:
        f.write(b"".join(line + b"\n" for line in lines))


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_live_run_resumes_past_planted_lines_and_retries_them(tmp_path: Path, xdist: list[str]) -> None:
    """Hostile lines in an output folder: reported with their lines, their conversations run again."""
    store = ResultStore(tmp_path / "result" / "standard", "scripted_reference")
    path = store.path(CATEGORY)
    served = {**_scripted(3), "inference_log": ["lone \ud800"]}
    planted = [
        json.dumps({"id": f"{CATEGORY}_0", "result": [[]] * 30}).encode(),  # too many turns
        b'{"id": "multi_turn_base_1", "result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"id": "multi_turn_base_2", "result": [[' + b"7" * 6000 + b"]]}",
        json.dumps({"id": "multi_turn_base_abc", "result": [[]]}).encode(),  # garbage id
        json.dumps({"id": "multi_turn_miss_func_0", "result": [[]]}).encode(),  # another category
        b"\xff\xfe garbage \x00",
        json.dumps(served).encode(),  # escaped lone surrogate: a finished entry, served
        json.dumps({"id": f"{CATEGORY}_4", "result": [[]] * 30}).encode(),  # planted after a finished one
    ]
    store.append(CATEGORY, _scripted(4))  # finished; the planted line 9 after it is no entry
    _plant(path, planted)
    (store.model_dir / "careful_settings.json").write_text("[" * 100_000)  # planted too: taken over
    ids = [f"{CATEGORY}_{i}[standard]" for i in range(5)]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            f"--careful-output={tmp_path / 'result'}",
            f"--careful-scorecards={tmp_path / 'cards'}",
            "--careful-model=scripted:reference",
            *xdist,
            *ids,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "INTERNALERROR" not in out
    for line, cid in [
        (2, f"{CATEGORY}_0"),
        (3, f"{CATEGORY}_1"),
        (4, f"{CATEGORY}_2"),
        (5, "multi_turn_base_abc"),
        (6, "multi_turn_miss_func_0"),
        (7, None),
        (9, f"{CATEGORY}_4"),
    ]:
        assert f"input problem: {path}:{line}" + (f" [{cid}]" if cid else ":") in out, (line, cid, out[-3000:])
    card = json.loads((tmp_path / "cards/scripted_reference/standard/scorecard.json").read_text())
    rows = {r["id"]: r for r in card["rows"]}
    assert {i: r["resumed"] for i, r in rows.items()} == {
        f"{CATEGORY}_0": False,
        f"{CATEGORY}_1": False,
        f"{CATEGORY}_2": False,
        f"{CATEGORY}_3": True,
        f"{CATEGORY}_4": True,
    }
    assert all(r["bfcl"]["valid"] for r in rows.values())
    # compacted: one finished entry per id, the planted lines gone, the surrogate entry intact
    entries, problems = read_result_file(path, CATEGORY)
    assert problems == [] and [e.id for e in entries] == [f"{CATEGORY}_{i}" for i in range(5)]
    assert entries[3].raw == served and all(isinstance(e.result, list) for e in entries)
