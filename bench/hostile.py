"""Cost of the worst payloads of issue 12, class 2, against a normal conversation.

    .venv/bin/python bench/hostile.py                # every payload, default budget (~1.5 min)
    .venv/bin/python bench/hostile.py --unmetered    # the same with no budget (60 s cap each)
    .venv/bin/python bench/hostile.py --real         # what real runs use: the defaults' margin

Each payload is scored in a fresh child process exactly as an item scores it (decode,
replay, BFCL verdict, rules, transcript and failure evidence, inside ``limits.metered``),
after a warm-up (imports, the reference replay). Printed per payload: its calls, the
outcome (BFCL's verdict or the resource limit hit), wall time, the growth of the child's
peak RSS during scoring, and the memory the budget counted (``limits.Meter.bytes``).

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
sys.path.insert(0, str(ROOT / "tests"))
REAL_RUN = ROOT.parent / "shared" / "real-runs" / "gpt-oss-20b-vllm-2025-11-12"
DECODER = "gpt-4.1-2025-04-14-FC"

#: (label, payload kind, size): the worst of each class the issue names, and a normal one.
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
    """What an item does with one conversation (item._score), returning BFCL's verdict."""
    from pytest_careful import declarations, evidence, rules
    from pytest_careful.results import evaluate

    evaluation = evaluate(conversation, result, decoder)
    rules.score(evaluation, declarations.load())
    evidence.transcript(evaluation)
    evidence.format_bfcl_failure(evaluation)
    return "BFCL pass" if evaluation.verdict.valid else f"BFCL {evaluation.verdict.error_type}"


def child(kind: str, size: int, unmetered: bool) -> dict[str, Any]:
    import hostile_payloads as payloads
    from pytest_careful import declarations, limits
    from pytest_careful.decoding import passthrough_decoder
    from pytest_careful.replay import reference

    if kind == "real":  # the real run's conversation that costs the most (bench/hostile.py --real)
        from pytest_careful import dataset, results
        from pytest_careful.decoding import decoder as registered

        path = REAL_RUN / "BFCL_v4_multi_turn_miss_param_result.json"
        entry = next(e for e in results.read_result_file(path, "multi_turn_miss_param")[0]
                     if e.id == "multi_turn_miss_param_2")
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
    return {"calls": meter.calls, "outcome": outcome, "seconds": seconds,
            "peak_mb": _peak_mb() - before, "counted_mb": counted / 2**20}


def hostile(unmetered: bool) -> None:
    print(f"{'payload':44s} {'calls':>8s} {'outcome':42s} {'wall s':>7s} {'peak MB':>8s} {'counted MB':>10s}")
    for label, kind, size in PAYLOADS:
        command = [sys.executable, __file__, "--child", kind, str(size)] + (["--unmetered"] if unmetered else [])
        proc = subprocess.run(command, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            print(f"{label:44s} child failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        row = json.loads(proc.stdout.strip().splitlines()[-1])
        print(f"{label:44s} {row['calls']:8d} {row['outcome'][:42]:42s} {row['seconds']:7.3f} "
              f"{row['peak_mb']:8.1f} {row['counted_mb']:10.1f}")


def real() -> None:
    import tracemalloc

    from pytest_careful import dataset, declarations, limits, results
    from pytest_careful.decoding import decoder, passthrough_decoder
    from pytest_careful.replay import reference

    sets: dict[str, list[tuple[Any, Any, Any]]] = {"800 references": [], "600 gpt-oss-20b": []}
    for conversation in dataset.load():
        sets["800 references"].append((conversation, [[list(t)] if t else [] for t in conversation.ground_truth],
                                       passthrough_decoder()))
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
        print(f"{name:18s} {int(worst['calls'][0]):10d} {worst['seconds'][0]:14.3f} {worst['counted'][0]:15.2f} "
              f"{worst['peak'][0]:26.2f}")
        print(f"{'':18s} {worst['calls'][1]:>10s} {worst['seconds'][1]:>14s} {worst['counted'][1]:>15s} "
              f"{worst['peak'][1]:>26s}")
    print(f"defaults: --careful-max-calls={limits.DEFAULT_MAX_CALLS} --careful-max-seconds="
          f"{limits.DEFAULT_MAX_SECONDS:g} --careful-max-memory-mb={limits.DEFAULT_MAX_MEMORY_MB:g}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=2, metavar=("KIND", "SIZE"), help=argparse.SUPPRESS)
    parser.add_argument("--unmetered", action="store_true", help="no budget (each payload capped at 60 s)")
    parser.add_argument("--real", action="store_true", help="measure the references and the real run")
    args = parser.parse_args()
    os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="bench-bfcl-"))
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.unmetered)))
    elif args.real:
        real()
    else:
        hostile(args.unmetered)


if __name__ == "__main__":
    main()
