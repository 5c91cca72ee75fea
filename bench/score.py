"""Scoring and plugin speed: rules vs bare verdict, pytest -n 2 vs in-process, collection.

    .venv/bin/python bench/score.py
    .venv/bin/python bench/score.py --turn-credit   # what per-turn credit adds (~5 s)

Builds an 800-conversation logged run in BFCL's FC result format: the 600 real
gpt-oss-20b conversations of ../shared/real-runs (base, miss_func, miss_param)
plus 200 long_context conversations written from the references with every
third turn's calls repeated (there is no real long_context run here). Then, in
one process, times (a) decode + replay + BFCL verdict, (b) the same plus all
rules, and, as child processes, (c) the same rescoring through pytest -n 2 and
(d) collecting 2,400 items (800 x 3 protocols).

``--turn-credit`` evaluates the 600 real conversations, then times per-turn credit on them
against the evaluation itself (it reuses the replay's snapshots: ``tests/scoring/test_turn_credit.py``
checks that it replays and captures nothing; the seconds are measured here).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_RUN = ROOT.parent / "shared" / "real-runs" / "gpt-oss-20b-vllm-2025-11-12"
DECODER = "gpt-4.1-2025-04-14-FC"


def _fc_step(call: str) -> list[dict[str, str]]:
    node = ast.parse(call, mode="eval").body
    args = {k.arg: ast.literal_eval(k.value) for k in node.keywords}
    return [{node.func.id: json.dumps(args)}]


def build_run(directory: Path) -> Path:
    from pytest_careful.data import dataset

    run = directory / "result" / "gpt-oss-20b-plus-lc"
    run.mkdir(parents=True)
    for name in ("base", "miss_func", "miss_param"):
        shutil.copy(REAL_RUN / f"BFCL_v4_multi_turn_{name}_result.json", run)
    lines = []
    for conversation in dataset.load_category("multi_turn_long_context"):
        turns = []
        for index, calls in enumerate(conversation.ground_truth):
            steps = [_fc_step(c) for c in calls]
            if index % 3 == 2:
                steps += [_fc_step(c) for c in calls]  # repeated: duplicate writes, redundant reads
            turns.append(steps)
        lines.append(json.dumps({"id": conversation.id, "result": turns}))
    (run / "BFCL_v4_multi_turn_long_context_result.json").write_text("\n".join(lines) + "\n")
    return run


def in_process(run: Path) -> dict[str, float]:
    from pytest_careful.data import dataset, result_files
    from pytest_careful.effects import declarations
    from pytest_careful.evaluation.evaluate import evaluate
    from pytest_careful.evaluation.replay import reference
    from pytest_careful.execution.decoding import decoder
    from pytest_careful.scoring import rules

    dec, decl = decoder(DECODER), declarations.load()
    files, _ = result_files.find_result_files(run)
    entries = []
    for category, path in files.items():
        entries.extend(result_files.read_result_file(path, category)[0])
    for conversation in dataset.load():
        reference(conversation)  # reference replays are shared by every run: warm them
    bare_times, full_times = [], []
    for _ in range(5):  # interleaved rounds; the median of each
        started = time.perf_counter()
        for e in entries:
            evaluate(dataset.get(e.id), e.result, dec, entry=e)
        bare_times.append(time.perf_counter() - started)
        started = time.perf_counter()
        rows = [rules.score(evaluate(dataset.get(e.id), e.result, dec, entry=e), decl) for e in entries]
        full_times.append(time.perf_counter() - started)
    return {
        "replay + verdict": sorted(bare_times)[2],
        "replay + verdict + rules": sorted(full_times)[2],
        "conversations": len(rows),
    }


def cold(run: Path) -> float:
    """Rescoring from a fresh process, imports and reference replays included."""
    started = time.perf_counter()
    subprocess.run([sys.executable, __file__, "--cold-run", str(run)], check=True)
    return time.perf_counter() - started


def _cold_child(run: Path) -> None:
    from pytest_careful.data import dataset, result_files
    from pytest_careful.effects import declarations
    from pytest_careful.evaluation.evaluate import evaluate
    from pytest_careful.execution.decoding import decoder
    from pytest_careful.scoring import rules

    dec, decl = decoder(DECODER), declarations.load()
    files, _ = result_files.find_result_files(run)
    for category, path in files.items():
        for entry in result_files.read_result_file(path, category)[0]:
            rules.score(evaluate(dataset.get(entry.id), entry.result, dec, entry=entry), decl)


def through_pytest(run: Path, workdir: Path, *extra: str) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-n",
            "2",
            f"--careful-results={run}",
            f"--careful-decoder={DECODER}",
            *extra,
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    tail = [line for line in out.stdout.splitlines() if re.search(r"\d+ (passed|failed)", line)]
    return elapsed, (tail[-1] if tail else out.stdout[-300:])


def trivial_items(workdir: Path) -> tuple[float, float]:
    """pytest -n 2 on 800 empty test functions, and on the same selecting none: pytest's own cost."""
    (workdir / "test_trivial.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('i', range(800))\ndef test_x(i):\n    pass\n"
    )
    times = []
    for extra in ([], ["-k", "no_such_item"]):
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-n", "2", "test_trivial.py", *extra],
            cwd=workdir,
            capture_output=True,
            check=False,
        )
        times.append(time.perf_counter() - started)
    (workdir / "test_trivial.py").unlink()
    return times[0], times[1]


def collection(workdir: Path) -> tuple[float, str]:
    started = time.perf_counter()
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            "--collect-only",
            "-q",
            "--careful-model=reference",
            "--careful-protocol=standard,hints,confirm",
        ],
        cwd=workdir,
        capture_output=True,
        text=True,
    )
    elapsed = time.perf_counter() - started
    line = next((text for text in out.stdout.splitlines() if "collected" in text), out.stdout[-200:])
    return elapsed, line


def turn_credit_cost() -> None:
    """Seconds per-turn credit adds to the 600 real conversations, beside their evaluation."""
    from pytest_careful.data import dataset
    from pytest_careful.data.result_files import read_result_file
    from pytest_careful.evaluation.evaluate import evaluate
    from pytest_careful.execution.decoding import decoder
    from pytest_careful.scoring import turn_credit

    dec = decoder(DECODER)
    evaluated, took = [], 0.0
    for category in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param"):
        for entry in read_result_file(REAL_RUN / f"BFCL_v4_{category}_result.json", category)[0]:
            started = time.perf_counter()
            evaluated.append(evaluate(dataset.get(entry.id), entry.result, dec, model_name="timing"))
            took += time.perf_counter() - started
    started = time.perf_counter()
    for evaluation in evaluated:
        turn_credit.of_evaluation(evaluation)
    added = time.perf_counter() - started
    print(f"turn credit: {added:.3f} s added on {len(evaluated)} conversations (evaluation itself {took:.3f} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cold-run", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--turn-credit", action="store_true", help="what per-turn credit adds")
    args = parser.parse_args()
    os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bench-bfcl-"))
    if args.cold_run:
        _cold_child(args.cold_run)
        return
    if args.turn_credit:
        turn_credit_cost()
        return
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        run = build_run(workdir)
        timings = in_process(run)
        n = timings["conversations"]
        bare, full = timings["replay + verdict"], timings["replay + verdict + rules"]
        cold_time = cold(run)
        pytest_time, pytest_line = through_pytest(run, workdir)
        # The floor: the same command selecting no item (controller + 2 workers start, collect).
        floor_time, _ = through_pytest(run, workdir, "-k", "no_such_item")
        # The same run without rendering 751 failures: pytest's failure summary is
        # quadratic (each failed report scans every quiet report for teardown sections).
        quiet_time, _ = through_pytest(run, workdir, "--tb=no")
        trivial_time, trivial_none = trivial_items(workdir)
        collect_time, collect_line = collection(workdir)
    print(f"logged run: {n} conversations (600 real gpt-oss-20b + 200 long_context from references)")
    print(f"{'in process, decode + replay + BFCL verdict':48s} {bare:7.2f} s  {n / bare:7.1f} conv/s")
    print(f"{'in process, the same + all rules':48s} {full:7.2f} s  {n / full:7.1f} conv/s")
    print(f"{'rules overhead (target <= 1.5x)':48s} {full / bare:7.2f} x")
    print(f"{'fresh process, imports + references + rules':48s} {cold_time:7.2f} s")
    print(f"{'pytest -n 2 --careful-results (whole command)':48s} {pytest_time:7.2f} s   [{pytest_line.strip()}]")
    print(f"{'pytest -n 2 / fresh-process rescoring (<= 1.5x)':48s} {pytest_time / cold_time:7.2f} x")
    print(
        f"{'pytest -n 2 selecting no item (the floor)':48s} {floor_time:7.2f} s   "
        f"= {floor_time / cold_time:.2f} x fresh-process rescoring"
    )
    print(
        f"{'  the same run with --tb=no (no failure report)':48s} {quiet_time:7.2f} s   "
        f"= {quiet_time / cold_time:.2f} x"
    )
    print(
        f"{'  800 empty tests, -n 2 (vs selecting none)':48s} {trivial_time:7.2f} s   "
        f"(+{trivial_time - trivial_none:.2f} s = {(trivial_time - trivial_none) / cold_time:.2f} x: pytest's own per-item cost)"
    )
    print(f"{'collect 2,400 items (whole command)':48s} {collect_time:7.2f} s   [{collect_line.strip()}]")


if __name__ == "__main__":
    main()
