"""Hostile result-file lines (issue 12, classes 1 and 5): one line costs one line, whatever its bytes.

The corpus is generated (``hostile_lines.py``, seeded); each line's expectation is
what the generator made it to be, never what the reader answered.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
from hostile_lines import Corpus, Generator, corpus, dumps, nested_text
from perturb import as_result

from conftest import REAL_RUN_DECODER, run_oracle
from pytest_careful.data import dataset
from pytest_careful.data.result_files import MAX_NESTING, find_result_files, read_result_file
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.execution.decoding import decoder

CATEGORY = "multi_turn_base"
IDS = [f"{CATEGORY}_{i}" for i in range(200)]
FOREIGN = [f"multi_turn_miss_func_{i}" for i in range(0, 200, 7)] + ["multi_turn_long_context_3"]


def reference_result(cid: str) -> Any:
    return as_result(dataset.get(cid).ground_truth)


def n_turns(cid: str) -> int:
    return dataset.get(cid).n_turns


def reference_corpus(seed: int, **kwargs: Any) -> Corpus:
    return corpus(seed, IDS, reference_result, n_turns, FOREIGN, **kwargs)


def check_read(path: Path, made: Corpus) -> None:
    entries, problems = read_result_file(path, CATEGORY)
    want_entries, want_problems = made.expected()
    assert {e.id: (e.line, e.result) for e in entries} == want_entries
    got = {(p.line, p.conversation) for p in problems}
    kinds = {n: line.kind for n, line in enumerate(made.lines, start=1)}
    assert got == want_problems, (
        f"missing: {sorted((n, kinds[n], c) for n, c in want_problems - got)[:10]}; "
        f"unexpected: {sorted((n, kinds[n], c) for n, c in got - want_problems)[:10]}"
    )
    for problem in problems:
        shown = str(problem)
        shown.encode("utf-8")  # a terminal can print it: no lone surrogate
        assert shown.isprintable() and shown.startswith(f"{path}:{problem.line}")
        assert len(problem.message) < 400  # a 100,000-character id is quoted, not pasted


@pytest.mark.parametrize("seed", range(12))
def test_generated_corpus_each_line_is_an_entry_or_its_own_problem(tmp_path: Path, seed: int) -> None:
    made = reference_corpus(seed)
    assert len(made.lines) >= 200 + 20 + 12
    path = tmp_path / f"BFCL_v4_{CATEGORY}_result.json"
    path.write_bytes(made.text())
    check_read(path, made)


@pytest.mark.parametrize("kind", Generator.HOSTILE)
def test_every_hostile_kind_many_times(tmp_path: Path, kind: str) -> None:
    """40 lines of one hostile kind, each for another conversation: all refused, each located."""
    rng = random.Random(kind)
    make = Generator(rng, reference_result, n_turns, FOREIGN)
    made = Corpus([getattr(make, kind)(cid) for cid in rng.sample(IDS, 40)])
    path = tmp_path / "result.json"
    path.write_bytes(made.text())
    check_read(path, made)
    entries, problems = read_result_file(path, CATEGORY)
    assert entries == [] and len(problems) == 40


def test_garbage_lines_belong_to_no_conversation(tmp_path: Path) -> None:
    rng = random.Random(7)
    make = Generator(rng, reference_result, n_turns, FOREIGN)
    made = Corpus([make.random_bytes() for _ in range(150)] + [make.foreign() for _ in range(150)])
    path = tmp_path / "result.json"
    path.write_bytes(made.text())
    check_read(path, made)


def test_the_issue_lines_exactly(tmp_path: Path) -> None:
    """The two lines of the issue: 10^5 brackets and an integer past the digit limit."""
    good = json.dumps({"id": f"{CATEGORY}_0", "result": reference_result(f"{CATEGORY}_0")})
    lines = [
        good,
        '{"id": "multi_turn_base_1", "result": ' + "[" * 100_000 + "]" * 100_000 + "}",
        '{"id": "multi_turn_base_2", "result": [[' + "1" * 5000 + "]]}",
    ]
    path = tmp_path / "r.json"
    path.write_text("\n".join(lines) + "\n")
    entries, problems = read_result_file(path, CATEGORY)
    assert [e.id for e in entries] == [f"{CATEGORY}_0"]
    assert [(p.line, p.conversation) for p in problems] == [(2, f"{CATEGORY}_1"), (3, f"{CATEGORY}_2")]
    assert "nested more than" in problems[0].message
    assert "digits" in problems[1].message


def test_nesting_bound_is_the_same_at_any_stack_depth(tmp_path: Path) -> None:
    """Read or refused by depth alone, not by how deep the reader's own stack happens to be."""
    path = tmp_path / "r.json"
    # the entry itself adds 3 levels (object, result, turn) to the step's
    depths = (MAX_NESTING - 10, MAX_NESTING - 3, MAX_NESTING - 2, MAX_NESTING + 1, MAX_NESTING + 100)
    lines = [
        json.dumps({"id": f"{CATEGORY}_{i}", "result": [[json.loads(nested_text(d))]]}) for i, d in enumerate(depths)
    ]
    path.write_text("\n".join(lines) + "\n")

    def read_at(depth: int) -> tuple[list[str], list[int | None]]:
        if depth:
            return read_at(depth - 1)
        entries, problems = read_result_file(path, CATEGORY)
        return [e.id for e in entries], [p.line for p in problems]

    read = [f"{CATEGORY}_0", f"{CATEGORY}_1"]
    for depth in (0, 100, 300):
        assert read_at(depth) == (read, [3, 4, 5])


def test_separators_inside_strings_do_not_split_lines(tmp_path: Path) -> None:
    """U+2028, U+2029, U+0085, form feed... raw in a string: one line, as bfcl-eval reads it."""
    path = tmp_path / "r.json"
    texts = ["a\u2028b", "a\u2029b", "a\u0085b", "a\x0cb", "a\x1cb\x1db\x1eb", "a\x0bb"]
    written = []
    for i, text in enumerate(texts):
        result = reference_result(f"{CATEGORY}_{i}")
        result[0].append(text)
        written.append((f"{CATEGORY}_{i}", result))
    path.write_bytes(b"".join(dumps({"id": i, "result": r}) + b"\n" for i, r in written))
    entries, problems = read_result_file(path, CATEGORY)
    assert problems == [] and [(e.id, e.result) for e in entries] == written
    # bfcl-eval's own reader sees the same entries
    from bfcl_eval.utils import load_file

    assert [(e["id"], e["result"]) for e in load_file(path, use_lock=False)] == written


def test_fifo_named_like_a_result_file_does_not_hang(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    folder.mkdir()
    fifo = folder / f"BFCL_v4_{CATEGORY}_result.json"
    os.mkfifo(fifo)
    outcome: list[Any] = []
    worker = threading.Thread(
        target=lambda: outcome.append((find_result_files(folder), read_result_file(fifo, CATEGORY))), daemon=True
    )
    worker.start()
    worker.join(10)
    if worker.is_alive():  # unblock the reader before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO blocked")
    (found, _), (entries, problems) = outcome[0]
    assert found == {CATEGORY: fifo}
    assert entries == [] and "not a regular file" in str(problems[0])


# -- duplicate ids: BFCL's own rule, checked against bfcl-eval ----------------------------------

BFCL_WRITE = textwrap.dedent("""
    import json, sys, types
    from pathlib import Path
    from bfcl_eval.model_handler.base_handler import BaseHandler
    out = Path(sys.argv[1])
    self = types.SimpleNamespace(registry_dir_name="m")
    for line in sys.stdin:  # one write per entry, in file order, as a resumed run rewrites ids
        BaseHandler.write(self, json.loads(line), out, update_mode=True)
""")


def _bfcl(script: str, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "BFCL_PROJECT_ROOT": tempfile.mkdtemp(prefix="bfcl-"), "OPENAI_API_KEY": "unused"}
    return subprocess.run(
        [sys.executable, "-c", script, *args], input=stdin, capture_output=True, text=True, env=env, timeout=300
    )


def test_duplicate_ids_keep_the_last_entry_as_bfcl_eval_does(tmp_path: Path) -> None:
    rng = random.Random(3)
    lines = []
    for n in range(60):
        cid = f"{CATEGORY}_{rng.randrange(8)}"
        result = rng.choice(
            [reference_result(cid), [[] for _ in range(rng.randrange(1, 3))], f"Error during inference: {n}"]
        )
        lines.append({"id": cid, "result": result, "n": n})
    path = tmp_path / "r.json"
    path.write_text("".join(json.dumps(e) + "\n" for e in lines))

    proc = _bfcl(BFCL_WRITE, str(tmp_path / "bfcl"), stdin=path.read_text())
    assert proc.returncode == 0, proc.stderr[-3000:]
    bfcl_file = tmp_path / "bfcl" / "m" / "multi_turn" / f"BFCL_v4_{CATEGORY}_result.json"
    kept_by_bfcl = {e["id"]: e["n"] for e in map(json.loads, bfcl_file.read_text().splitlines())}

    entries, problems = read_result_file(path, CATEGORY)
    assert {e.id: e.raw["n"] for e in entries} == kept_by_bfcl
    # every superseded entry that was not an error is reported, at the line that replaced it
    assert problems and all("the last entry of an id counts" in p.message for p in problems)


BFCL_EVALUATE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from bfcl_eval.eval_checker import eval_runner
    root = Path(sys.argv[1])
    try:
        eval_runner.runner([sys.argv[2]], ["multi_turn_base"], root / "result", root / "score",
                           allow_missing=True)
    except BaseException as exc:
        print("REFUSED", type(exc).__name__)
    else:
        print("EVALUATED")
""")


def test_bfcl_evaluate_refuses_duplicates_and_accepts_what_we_keep(tmp_path: Path) -> None:
    from pytest_careful.data.result_store import ResultStore

    key = REAL_RUN_DECODER
    store = ResultStore(tmp_path / "result", key)
    for cid in (f"{CATEGORY}_0", f"{CATEGORY}_1", f"{CATEGORY}_0"):
        store.append(CATEGORY, {"id": cid, "result": reference_result(cid)})
    refused = _bfcl(BFCL_EVALUATE, str(tmp_path), key)
    assert "REFUSED" in refused.stdout, refused.stdout[-2000:] + refused.stderr[-2000:]
    store.compact(CATEGORY)
    accepted = _bfcl(BFCL_EVALUATE, str(tmp_path), key)
    assert "EVALUATED" in accepted.stdout, accepted.stdout[-2000:] + accepted.stderr[-2000:]


# -- hostile values inside a well-formed step: scored as bfcl-eval scores them ---------------------


def test_hostile_steps_are_scored_as_bfcl_eval_scores_them(real_run: Path) -> None:
    real = {
        e["id"]: e["result"]
        for e in map(
            json.loads, (real_run / f"BFCL_v4_{CATEGORY}_result.json").read_text(encoding="utf-8").splitlines()
        )
    }
    rng = random.Random(11)
    make = Generator(rng, lambda cid: real[cid], n_turns, FOREIGN)
    cases = []
    for cid in rng.sample([c for c, r in real.items() if isinstance(r, list)], 36):
        line = make.hostile_step(cid) if rng.random() < 0.7 else make.weird_strings(cid)
        cases.append({"id": cid, "result": line.result, "decoder": REAL_RUN_DECODER})
    oracle = run_oracle(cases)
    assert len(oracle) == len(cases)
    for n, (case, bfcl) in enumerate(zip(cases, oracle)):
        ours = evaluate(
            dataset.get(case["id"]), case["result"], decoder(REAL_RUN_DECODER), model_name=f"hostile_{n}"
        ).verdict
        assert (ours.valid, ours.error_type) == (bfcl["valid"], bfcl["error_type"]), case["id"]


# -- the plugin, end to end ------------------------------------------------------------------------


def _real_corpus(real_run: Path, seed: int) -> Corpus:
    real = {
        e["id"]: e["result"]
        for e in map(
            json.loads, (real_run / f"BFCL_v4_{CATEGORY}_result.json").read_text(encoding="utf-8").splitlines()
        )
    }
    return corpus(seed, IDS, lambda cid: json.loads(json.dumps(real[cid])), n_turns, FOREIGN, hostile_share=0.35)


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_plugin_scores_everything_but_the_hostile_lines(
    pytester: pytest.Pytester, real_run: Path, xdist: list[str]
) -> None:
    made = _real_corpus(real_run, seed=len(xdist))
    folder = pytester.path / "result" / "gpt-oss-20b"
    folder.mkdir(parents=True)
    path = folder / f"BFCL_v4_{CATEGORY}_result.json"
    path.write_bytes(made.text())
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--careful-results",
        str(folder),
        "--careful-decoder",
        REAL_RUN_DECODER,
        "--careful-category=base",
        *xdist,
        timeout=900,
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out[-4000:]
    assert "INTERNALERROR" not in out + result.stderr.str()

    entries, problems = made.expected()
    for line, cid in problems:
        assert f"input problem: {path}:{line}" + (f" [{cid}]" if cid else ":") in out, (line, cid)
    card = json.loads((pytester.path / "scorecards" / "gpt-oss-20b" / "standard" / "scorecard.json").read_text())
    rows = {r["id"]: r for r in card["rows"]}
    assert set(rows) == set(IDS)
    assert {i for i, r in rows.items() if "unscored" not in r} == set(entries)
    for cid in set(IDS) - set(entries):
        assert f"{path}:" in rows[cid]["unscored"]  # located: its own line(s)


def test_fifo_result_file_fails_its_conversations_not_the_run(pytester: pytest.Pytester) -> None:
    folder = pytester.path / "run"
    folder.mkdir()
    os.mkfifo(folder / f"BFCL_v4_{CATEGORY}_result.json")
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "--careful-results",
        str(folder),
        "--careful-decoder",
        REAL_RUN_DECODER,
        "--careful-category=base",
        "multi_turn_base_0",
        "multi_turn_base_1",
        timeout=300,
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "not a regular file" in result.stdout.str()
