"""Cost of the worst payloads of issue 12, each class, against a normal conversation.

    .venv/bin/python bench/hostile.py                # every payload, default budget (~1.5 min)
    .venv/bin/python bench/hostile.py --inputs       # classes 1, 3-6 only (seconds)
    .venv/bin/python bench/hostile.py --unmetered    # the same with no budget (60 s cap each)
    .venv/bin/python bench/hostile.py --real         # what real runs use: the defaults' margin
    .venv/bin/python bench/hostile.py --expanding    # short lines that expand: the whole command (~3 min)
    .venv/bin/python bench/hostile.py --corpus       # the security corpus, entry by entry (~3 s)

Each payload is scored in a fresh child process exactly as an item scores it (decode,
replay, BFCL verdict, rules, transcript and failure evidence, inside ``limits.metered``),
after a warm-up (imports, the reference replay). Printed per payload: its calls, the
outcome (BFCL's verdict or the resource limit hit), wall time, the growth of the child's
peak RSS during scoring, and the memory the budget counted (``limits.Meter.bytes``).

``--expanding`` (issue 23) runs the whole command a user types, ``pytest --careful-results DIR
--careful-decoder Qwen/Qwen3-8B --junitxml`` (report.html on, as by default), on ten reference
conversations written as a prompting run logs them, the first of them with one 64 KB step that
expands (``hostile_payloads.EXPANDING_STEPS``, and the issue's own line), without xdist and with
``-n 2``, against the same command on the ordinary file. Printed: wall time, peak RSS (each
process's VmHWM, polled every 10 ms: the largest process, and the sum over the tree) and its
growth over the ordinary line, and the planted conversation's outcome. Values only the call
interpreter builds (``EXPANDING_CALLS``) are scored in a child as above.

``--corpus`` scores each entry of ``tests/data/hostile_corpus.json`` (10 MB strings, deep
nesting, code that tries to run) as ``tests/execution/test_security.py`` does, in a child
process, and prints its seconds beside what the budget counted: the speed the test suite no
longer bounds with wall time.

``--real`` scores the 800 references and the 600-conversation gpt-oss-20b run in one
process and prints, per set, the largest calls, seconds, counted MB and tracemalloc peak
of any one conversation.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
REAL_RUN = ROOT.parent / "shared" / "real-runs" / "gpt-oss-20b-vllm-2025-11-12"
DECODER = "gpt-4.1-2025-04-14-FC"

#: (label, payload kind, size): the worst of each class the issue names, and a normal one.
#: Conversations of the ``--expanding`` runs; the first gets the planted step.
EXPANDING_IDS = [f"multi_turn_base_{n}" for n in range(10)]
LINE = 64_000

PAYLOADS = [
    ("normal: gpt-oss-20b's costliest (49 calls)", "real", 0),
    ("exponential cp/mv, N=25 (51 calls)", "exponential", 25),
    ("exponential cp/mv, N=60 (121 calls)", "exponential", 60),
    ("deep chain, 2,000 folders (4,001 calls)", "deep_chain", 2_000),
    ("many cheap calls, 300,000 pwd()", "many_calls", 300_000),
    ("many writes, 5,000 touch()", "many_writes", 5_000),
    ("many guarded powers, 5,000 x 3**630000", "many_powers", 5_000),
]


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def score_once(conversation: Any, result: Any, decoder: Any) -> str:
    """What an item does with one conversation (harness.outcome.score), returning BFCL's verdict."""
    from pytest_careful.effects import declarations
    from pytest_careful.evaluation.evaluate import evaluate
    from pytest_careful.scoring import evidence, rules

    evaluation = evaluate(conversation, result, decoder)
    rules.score(evaluation, declarations.load())
    evidence.transcript(evaluation)
    evidence.format_bfcl_failure(evaluation)
    return "BFCL pass" if evaluation.verdict.valid else f"BFCL {evaluation.verdict.error_type}"


def child(kind: str, size: int, unmetered: bool) -> dict[str, Any]:
    import hostile_payloads as payloads

    from pytest_careful.effects import declarations
    from pytest_careful.evaluation.replay import reference
    from pytest_careful.execution import limits
    from pytest_careful.execution.decoding import passthrough_decoder

    if kind.startswith("calls:"):  # issue 23: values only the call interpreter builds
        conversation = payloads.conversation_for("many_calls")
        result = payloads.as_run(conversation, payloads.EXPANDING_CALLS[kind.removeprefix("calls:")])
        decoder = passthrough_decoder()
    elif kind == "real":  # the real run's conversation that costs the most (bench/hostile.py --real)
        from pytest_careful.data import dataset
        from pytest_careful.data import result_files as results
        from pytest_careful.execution.decoding import decoder as registered

        path = REAL_RUN / "BFCL_v4_multi_turn_miss_param_result.json"
        entry = next(
            e for e in results.read_result_file(path, "multi_turn_miss_param")[0] if e.id == "multi_turn_miss_param_2"
        )
        conversation, result, decoder = dataset.get(entry.id), entry.result, registered(DECODER)
    else:
        conversation = payloads.conversation_for(kind)
        result, decoder = payloads.as_run(conversation, payloads.KINDS[kind](size)), passthrough_decoder()
    declarations.load()
    reference(conversation)
    score_once(conversation, payloads.as_run(conversation, []), decoder)  # warm-up
    if kind == "real":
        score_once(conversation, result, decoder)
    budget = limits.Limits(10**9, 60.0, 10**6) if unmetered else limits.Limits()
    before = _peak_mb()
    started = time.perf_counter()
    counted = 0
    try:
        with limits.metered(budget) as meter:
            outcome = score_once(conversation, result, decoder)
            counted = meter.bytes
    except limits.ResourceLimit as exceeded:
        outcome, counted = f"resource_limit: {exceeded.limit}", meter.bytes
    seconds = time.perf_counter() - started
    return {
        "calls": meter.calls,
        "outcome": outcome,
        "seconds": seconds,
        "peak_mb": _peak_mb() - before,
        "counted_mb": counted / 2**20,
    }


def hostile(unmetered: bool) -> None:
    print(f"{'payload':44s} {'calls':>8s} {'outcome':42s} {'wall s':>7s} {'peak MB':>8s} {'counted MB':>10s}")
    for label, kind, size in PAYLOADS:
        command = [sys.executable, __file__, "--child", kind, str(size)] + (["--unmetered"] if unmetered else [])
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            print(f"{label:44s} child failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{label:44s} {row['calls']:8d} {row['outcome'][:42]:42s} {row['seconds']:7.3f} "
            f"{row['peak_mb']:8.1f} {row['counted_mb']:10.1f}"
        )


def _prompting_run(folder: Path, step: str | None) -> Path:
    """Ten reference conversations as a prompting run logs them; ``step`` first in the first one."""
    from pytest_careful.data import dataset

    folder.mkdir(parents=True)
    lines = []
    for cid in EXPANDING_IDS:
        turns = [
            ["[" + ", ".join(calls) + "]", "Done."] if calls else ["I cannot do that."]
            for calls in dataset.get(cid).ground_truth
        ]
        if step is not None and cid == EXPANDING_IDS[0]:
            turns[0].insert(0, step)
        lines.append(json.dumps({"id": cid, "result": turns}))
    (folder / "BFCL_v4_multi_turn_base_result.json").write_text("\n".join(lines) + "\n")
    return folder


def _whole_command(folder: Path, mode: list[str]) -> tuple[float, float, float, str]:
    """Wall s, largest process's and whole tree's peak RSS (MB), and the planted row's outcome."""
    from whole import _hwm_and_role, _tree

    command = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        *mode,
        f"--careful-results={folder}",
        "--careful-decoder=Qwen/Qwen3-8B",
        "--junitxml=out.xml",
        *(f"{cid}[standard]" for cid in EXPANDING_IDS),
    ]
    started = time.perf_counter()
    proc = subprocess.Popen(command, cwd=folder.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    peaks: dict[int, float] = {}
    while proc.poll() is None:
        for pid in _tree(proc.pid):
            seen = _hwm_and_role(pid)
            if seen:
                peaks[pid] = max(peaks.get(pid, 0.0), seen[0])
        time.sleep(0.01)
    wall = time.perf_counter() - started
    card = folder.parent / "scorecards" / folder.name / "standard" / "scorecard.json"
    row = next(r for r in json.loads(card.read_text())["rows"] if r["id"] == EXPANDING_IDS[0])
    outcome = (
        row.get("resource_limit")
        or f"scored: BFCL {row['bfcl']['error_type'] or 'pass'}, failed_calls {row['counts']['failed_calls']}"
    )
    return wall, max(peaks.values()), sum(peaks.values()), outcome


def expanding() -> None:
    """Issue 23: the whole command on a 64 KB line that expands, against the same on an ordinary line."""
    import hashlib

    import hostile_payloads as payloads

    sys.path.insert(0, str(ROOT / "bench"))
    steps: dict[str, str | None] = {"ordinary line": None, "issue: 300 x echo('a'*199000, f)": payloads.ISSUE_STEP}
    steps |= {
        f"{kind} ({LINE // 1000} KB step)": payloads.EXPANDING_STEPS[kind](LINE) for kind in payloads.EXPANDING_STEPS
    }
    work = Path(tempfile.mkdtemp(prefix="bench-expanding-"))
    print(
        f"{'line (planted in ' + EXPANDING_IDS[0] + ')':44s} {'mode':10s} {'line KB':>7s} {'wall s':>7s} "
        f"{'max MB':>7s} {'tree MB':>8s} {'+tree MB':>8s}  outcome of the planted conversation"
    )
    for mode in (["-p", "no:xdist"], ["-n", "2"]):
        ordinary_tree = 0.0
        for n, (label, step) in enumerate(steps.items()):
            folder = _prompting_run(work / f"{mode[-1]}-{n}" / "qwen", step)
            path = folder / "BFCL_v4_multi_turn_base_result.json"
            digest = hashlib.sha256(path.read_bytes()).hexdigest()
            wall, largest, tree, outcome = _whole_command(folder, mode)
            assert hashlib.sha256(path.read_bytes()).hexdigest() == digest, "the result file changed"
            ordinary_tree = ordinary_tree or tree
            line_kb = max(map(len, path.read_text().splitlines())) / 1000
            print(
                f"{label:44s} {' '.join(mode):10s} {line_kb:7.1f} {wall:7.2f} {largest:7.0f} {tree:8.0f} "
                f"{tree - ordinary_tree:+8.0f}  {outcome[:150]}"
            )
    print()
    print(
        f"{'values only the call interpreter builds':44s} {'calls':>8s} {'outcome':42s} {'wall s':>7s} "
        f"{'peak MB':>8s} {'counted MB':>10s}"
    )
    for kind in payloads.EXPANDING_CALLS:
        command = [sys.executable, __file__, "--child", f"calls:{kind}", "0"]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            print(f"{kind:44s} child failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"{kind:44s} {row['calls']:8d} {row['outcome'][:42]:42s} {row['seconds']:7.3f} "
            f"{row['peak_mb']:8.1f} {row['counted_mb']:10.1f}"
        )


def real() -> None:
    import tracemalloc

    from pytest_careful.data import dataset
    from pytest_careful.data import result_files as results
    from pytest_careful.effects import declarations
    from pytest_careful.evaluation.replay import reference
    from pytest_careful.execution import limits
    from pytest_careful.execution.decoding import decoder, passthrough_decoder

    sets: dict[str, list[tuple[Any, Any, Any]]] = {"800 references": [], "600 gpt-oss-20b": []}
    for conversation in dataset.load():
        sets["800 references"].append(
            (conversation, [[list(t)] if t else [] for t in conversation.ground_truth], passthrough_decoder())
        )
    fc = decoder(DECODER)
    for path in sorted(REAL_RUN.glob("BFCL_v4_multi_turn_*_result.json")):
        category = path.name.removeprefix("BFCL_v4_").removesuffix("_result.json")
        for entry in results.read_result_file(path, category)[0]:
            sets["600 gpt-oss-20b"].append((dataset.get(entry.id), entry.result, fc))
    for conversation in dataset.load():
        reference(conversation)
    declarations.load()
    print(f"{'set':18s} {'max calls':>10s} {'max s':>14s} {'max counted MB':>15s} {'max peak MB (tracemalloc)':>26s}")
    for name, items in sets.items():
        worst: dict[str, tuple[float, str]] = {}

        def note(figure: str, value: float, conversation_id: str) -> None:
            if value >= worst.get(figure, (-1.0, ""))[0]:
                worst[figure] = (value, conversation_id)

        for traced in (False, True):  # seconds without tracemalloc, then memory with it
            for conversation, result, dec in items:
                if traced:
                    tracemalloc.start()
                started = time.perf_counter()
                with limits.metered(limits.Limits()) as meter:
                    score_once(conversation, result, dec)
                if traced:
                    note("peak", tracemalloc.get_traced_memory()[1] / 2**20, conversation.id)
                    tracemalloc.stop()
                    continue
                note("seconds", time.perf_counter() - started, conversation.id)
                note("calls", meter.calls, conversation.id)
                note("counted", meter.bytes / 2**20, conversation.id)
        print(
            f"{name:18s} {int(worst['calls'][0]):10d} {worst['seconds'][0]:14.3f} {worst['counted'][0]:15.2f} "
            f"{worst['peak'][0]:26.2f}"
        )
        print(
            f"{'':18s} {worst['calls'][1]:>10s} {worst['seconds'][1]:>14s} {worst['counted'][1]:>15s} "
            f"{worst['peak'][1]:>26s}"
        )
    print(
        f"defaults: --careful-max-calls={limits.DEFAULT_MAX_CALLS} --careful-max-seconds="
        f"{limits.DEFAULT_MAX_SECONDS:g} --careful-max-memory-mb={limits.DEFAULT_MAX_MEMORY_MB:g}"
    )


def _timed(work: Any, repeat: int = 3) -> float:
    """Best wall time of ``repeat`` runs, in milliseconds."""
    best = float("inf")
    for _ in range(repeat):
        started = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - started)
    return 1000 * best


def inputs() -> None:
    """Classes 1 and 3-6: hostile lines and files, isolation, call strings, the live store.

    Each row against its normal counterpart, in this process (a warm-up first), so
    the ratio is what a hostile input adds to the work it replaces.
    """
    import stat

    from pytest_careful.data import dataset
    from pytest_careful.data import result_files as results
    from pytest_careful.data.result_store import ResultStore
    from pytest_careful.evaluation.replay import reference, replay
    from pytest_careful.execution.executor import Simulators

    work = Path(tempfile.mkdtemp(prefix="bench-inputs-"))
    real_lines = (REAL_RUN / "BFCL_v4_multi_turn_base_result.json").read_bytes().split(b"\n")
    normal_line = real_lines[0]

    def one_line_file(name: str, line: bytes) -> Path:
        path = work / name / "BFCL_v4_multi_turn_base_result.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(line + b"\n")
        return path

    rows: list[tuple[str, str, float, float]] = []

    def read(path: Path) -> Any:
        return lambda: results.read_result_file(path, "multi_turn_base")

    normal = _timed(read(one_line_file("normal", normal_line)))
    nested = b'{"id": "multi_turn_base_0", "result": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    rows.append(("1", "line nested 10^5 deep (200 KB)", _timed(read(one_line_file("nested", nested))), normal))
    huge = b'{"id": "multi_turn_base_0", "result": ' + b"9" * 100_000 + b"}"
    rows.append(("1", "line with a 10^5-digit integer", _timed(read(one_line_file("huge", huge))), normal))
    whole = work / "whole" / "BFCL_v4_multi_turn_base_result.json"
    whole.parent.mkdir()
    whole.write_bytes(b"\n".join(real_lines))
    bad = work / "bad" / "BFCL_v4_multi_turn_base_result.json"
    bad.parent.mkdir()
    bad.write_bytes(b"\n".join([real_lines[0].replace(b'"result"', b'"res\xff\xfeult"', 1), *real_lines[1:]]))
    rows.append(("5", "200-line file, one invalid UTF-8 byte", _timed(read(bad)), _timed(read(whole))))
    sep = b"\n".join(line.replace(b"ls(", "ls(\u2028".encode(), 1) for line in real_lines)
    u2028 = work / "u2028" / "BFCL_v4_multi_turn_base_result.json"
    u2028.parent.mkdir()
    u2028.write_bytes(sep)
    rows.append(("5", "200-line file, U+2028 in strings", _timed(read(u2028)), _timed(read(whole))))
    fifo_dir = work / "fifo"
    fifo_dir.mkdir()
    os.mkfifo(fifo_dir / "BFCL_v4_multi_turn_base_result.json")
    assert stat.S_ISFIFO(os.stat(fifo_dir / "BFCL_v4_multi_turn_base_result.json").st_mode)
    rows.append(
        (
            "5",
            "a FIFO named like a result file",
            _timed(
                lambda: results.find_result_files(fifo_dir) and read(fifo_dir / "BFCL_v4_multi_turn_base_result.json")()
            ),
            _timed(lambda: results.find_result_files(whole.parent)),
        )
    )

    from test_isolation import _hosts, hostile_calls  # the isolation tests' generated payloads

    victim = dataset.get("multi_turn_base_0")
    host = _hosts()[0]
    polluting = [[hostile_calls(host, seed=7, n=200)]]
    reference(victim)
    victim_run = [[list(t)] if t else [] for t in victim.ground_truth]
    alone = _timed(lambda: replay(victim, victim_run))
    after = _timed(lambda: (replay(host, polluting), replay(victim, victim_run)))
    host_only = _timed(lambda: replay(host, polluting))
    rows.append(("3", f"after 200 polluting calls ({host.id})", after - host_only, alone))

    sims = Simulators(victim.involved_classes, victim.initial_config, victim.long_context)
    plain = "ls(a=True)"
    heavy = "ls(a=" + "(" * 90 + "1 if not 0 or 1 and 2 < 3 <= 4 else 0" + ")" * 90 + ")"
    formatting = "touch(file_name='%s-%d-%r' % ('x' * 50000, 10 ** 4000 % 7, [1, 2] * 1000))"
    lookalike = "\uff4c\uff53(a=True)"
    for label, call in (
        ("call: 90 nested parentheses, boolean ops", heavy),
        ("call: %-formatting of 50 KB", formatting),
        ("call: full-width look-alike name", lookalike),
    ):
        rows.append(("4", label, _timed(lambda call=call: sims.execute(call)), _timed(lambda: sims.execute(plain))))

    store = ResultStore(work / "store", "bench-model")
    entry = {
        "id": "multi_turn_base_0",
        "result": [[[{"ls": "{}"}]]],
        "input_token_count": [[1]],
        "output_token_count": [[1]],
        "latency": [[0.1]],
    }
    surrogate = dict(entry, result=[["text \ud800 lone surrogate " * 1000]])
    normal_append = _timed(lambda: store.append("multi_turn_base", entry))
    rows.append(
        (
            "6",
            "append: model text with a lone surrogate",
            _timed(lambda: store.append("multi_turn_base", surrogate)),
            normal_append,
        )
    )
    rows.append(
        (
            "6",
            "resume: read back a store of 10 such lines",
            _timed(lambda: store.read("multi_turn_base")),
            normal_append,
        )
    )
    print(f"{'class':5s} {'payload':44s} {'hostile ms':>11s} {'normal ms':>10s} {'ratio':>7s}")
    for klass, label, hostile_ms, normal_ms in rows:
        print(f"{klass:5s} {label:44s} {hostile_ms:11.2f} {normal_ms:10.2f} {hostile_ms / max(normal_ms, 1e-6):7.1f}")


def corpus() -> None:
    """Each security corpus entry's scoring: seconds and what the budget counted (``test_security``'s run)."""
    with tempfile.TemporaryDirectory() as tmp:
        out, markers = Path(tmp) / "out.json", Path(tmp) / "markers"
        markers.mkdir()
        code = (
            "import sys; sys.path.insert(0, sys.argv[1]); import test_security; test_security.worker_main(sys.argv[2:])"
        )
        subprocess.run(
            [
                sys.executable,
                "-c",
                code,
                str(ROOT / "tests" / "execution"),
                "ours",
                str(ROOT / "tests" / "data" / "hostile_corpus.json"),
                str(markers),
                str(out),
            ],
            cwd=tmp,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
            check=True,
        )
        outcomes = json.loads(out.read_text())["outcomes"]
    print(f"{'entry':60s} {'seconds':>8s} {'calls':>6s} {'steps':>9s} {'counted MB':>10s}")
    for o in sorted(outcomes, key=lambda o: -o["seconds"]):
        counted = o["counted"]
        print(
            f"{o['name'][:60]:60s} {o['seconds']:8.3f} {counted['calls']:6d} {counted['steps']:9d} "
            f"{counted['bytes'] / 2**20:10.1f}"
        )
    print(f"{len(outcomes)} entries, {sum(o['seconds'] for o in outcomes):.2f} s in all")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--unmetered", action="store_true", help="no budget (each payload capped at 60 s)")
    parser.add_argument("--real", action="store_true", help="measure the references and the real run")
    parser.add_argument("--inputs", action="store_true", help="classes 1 and 3-6 only")
    parser.add_argument("--expanding", action="store_true", help="short lines that expand (issue 23)")
    parser.add_argument("--corpus", action="store_true", help="the security corpus, entry by entry")
    args = parser.parse_args()
    os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bench-bfcl-"))
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.unmetered)))
    elif args.real:
        real()
    elif args.inputs:
        inputs()
    elif args.expanding:
        expanding()
    elif args.corpus:
        corpus()
    else:
        hostile(args.unmetered)
        print()
        inputs()


if __name__ == "__main__":
    main()
