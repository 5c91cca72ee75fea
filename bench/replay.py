#!/usr/bin/env python
"""Replay benchmark: pytest-careful's replay + verdict against bfcl-eval's own checker.

One process, one workload of 1,400 conversations:

* the 800 reference trajectories (ground truth as a BFCL result, passthrough decoder);
* the 600-conversation real run (gpt-oss-20b, vLLM, 2025-11-12; base, miss_func,
  miss_param), decoded with the ``gpt-4.1-2025-04-14-FC`` handler.

Measured, in this order:

1. ours, cold: ``evaluate(..., snapshots=True)`` with an empty ``reference()``
   cache, so it includes the 800 reference replays. This pass is also the
   warm-up that fills the cache for the passes after it.
2. ours, warm, snapshots on: the same, references already cached.
3. ours, warm, ``snapshots=False``: bare replay + verdict (the reference replays
   in the cache were taken with snapshots; that does not matter when warm).
4. bfcl-eval: ``eval_runner._evaluate_single_multi_turn_entry`` as
   ``tests/helpers/oracle_worker.py`` calls it (unique model name per call, the module
   globals it leaves behind deleted). Only the checker call is timed: the
   prompt-entry copy it mutates and the global clean-up are not.
5. the 800 reference replays alone (cache cleared, ``reference()`` on each).

Steps 2-4 run ``--repeat`` times, interleaved (one of each per round, so load from
other processes hits all three alike); the table shows medians of wall and CPU time.
Every pass's verdicts (valid, error_type) are compared with bfcl-eval's.
``--profile`` adds a cProfile of one warm snapshots-on pass.

bfcl-eval ``eval``s the call strings it checks; as in the parity tests, it only
sees the dataset's ground truth and the shared real run.

Run: ``.venv/bin/python bench/replay.py [--repeat N] [--profile] [--top 15]``
"""

from __future__ import annotations

import os
import sys
import tempfile

# bfcl-eval writes result/ score/ .file_locks/ under BFCL_PROJECT_ROOT on import;
# its OpenAI handler refuses to construct without a key, even just to decode.
os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="careful-bench-"))
os.environ.setdefault("OPENAI_API_KEY", "unused-by-the-bench")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import gc  # noqa: E402
import io  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import pstats  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pytest_careful.common import bfcl as _bfcl  # noqa: E402
from pytest_careful.data import dataset  # noqa: E402
from pytest_careful.data.result_files import read_result_file  # noqa: E402
from pytest_careful.evaluation.evaluate import decode_turns, evaluate  # noqa: E402
from pytest_careful.evaluation.replay import new_simulators, reference  # noqa: E402
from pytest_careful.execution import decoding  # noqa: E402

REAL_RUN = ROOT.parent / "shared" / "real-runs" / "gpt-oss-20b-vllm-2025-11-12"
REAL_RUN_CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param")
REAL_RUN_DECODER = "gpt-4.1-2025-04-14-FC"
SPEEDUP_TARGET = 10.0  # ours (snapshots on, warm) at least this much faster than bfcl
SNAPSHOT_OVERHEAD_TARGET = 3.0  # snapshots on at most this much slower than bare

Verdict = tuple[bool, str]


@dataclass
class Case:
    set: str  # "references" or "real run"
    conversation: dataset.Conversation
    result: Any
    decoder_key: str  # "passthrough" or a registry key


@dataclass
class Pass:
    seconds: float  # wall clock
    cpu: float  # this process's CPU time (steadier on a shared machine)
    verdicts: list[Verdict]


# --------------------------------------------------------------------------- memory


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (ru_maxrss is KiB on Linux)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024


def current_rss_mib() -> float:
    try:
        with open("/proc/self/statm") as handle:
            pages = int(handle.read().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return float("nan")


# --------------------------------------------------------------------------- workload


def build_cases() -> list[Case]:
    cases = [
        Case("references", c, [[list(turn)] if turn else [] for turn in c.ground_truth], "passthrough")
        for c in dataset.load()
    ]
    for category in REAL_RUN_CATEGORIES:
        path = REAL_RUN / f"BFCL_v4_{category}_result.json"
        entries, problems = read_result_file(path, category)
        if problems:
            raise SystemExit(f"{path}: {len(problems)} input problems, first: {problems[0]}")
        cases.extend(Case("real run", dataset.get(e.id), e.result, REAL_RUN_DECODER) for e in entries)
    return cases


# --------------------------------------------------------------------------- ours


def run_ours(cases: list[Case], decoders: dict[str, decoding.Decoder], snapshots: bool) -> Pass:
    verdicts: list[Verdict] = []
    start, start_cpu = time.perf_counter(), time.process_time()
    for case in cases:
        evaluation = evaluate(
            case.conversation, case.result, decoders[case.decoder_key], model_name="bench", snapshots=snapshots
        )
        verdicts.append((evaluation.verdict.valid, evaluation.verdict.error_type))
    return Pass(time.perf_counter() - start, time.process_time() - start_cpu, verdicts)


def live_execution_floor(cases: list[Case], decoders: dict[str, decoding.Decoder]) -> float:
    """Seconds to create the instances of the real run's diverging replays and execute their calls."""
    work = []
    for case in cases:
        if case.set != "real run" or not isinstance(case.result, list):
            continue
        calls = [c for t in decode_turns(decoders[case.decoder_key], case.result) for s in t for c in s]
        opening = [r.call for r in reference(case.conversation).calls]
        shared = 0
        while shared < min(len(calls), len(opening)) and calls[shared] == opening[shared]:
            shared += 1
        if shared < len(calls):
            work.append((case.conversation, calls))
    start = time.perf_counter()
    for conversation, calls in work:
        sim = new_simulators(conversation, "bench")
        for call in calls:
            sim.execute(call)
    return time.perf_counter() - start


def decoding_only(cases: list[Case], decoders: dict[str, decoding.Decoder]) -> float:
    """Seconds to decode the real run's steps with its registered BFCL handler (what we must run)."""
    start = time.perf_counter()
    for case in cases:
        if case.set == "real run" and isinstance(case.result, list):
            decode_turns(decoders[case.decoder_key], case.result)
    return time.perf_counter() - start


# --------------------------------------------------------------------------- bfcl


class _Passthrough:
    """tests/helpers/oracle_worker.py's decoder for inputs that already are call strings."""

    is_fc_model = True

    def decode_execute(self, result, has_tool_call_tag=False):
        if not isinstance(result, list):
            raise ValueError("not a list of calls")
        return result


class Bfcl:
    """bfcl-eval's checker, with its own dataset loaders, handlers and clean-up."""

    def __init__(self, cases: list[Case]) -> None:
        from bfcl_eval.eval_checker import eval_runner
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils
        from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

        self.checker = eval_runner._evaluate_single_multi_turn_entry
        self.utils = multi_turn_utils
        self.handlers = {"passthrough": _Passthrough(), REAL_RUN_DECODER: eval_runner.get_handler(REAL_RUN_DECODER)}
        self.prompts: dict[str, str] = {}  # id -> JSON text (the checker mutates its copy)
        self.answers: dict[str, Any] = {}
        for category in sorted({c.conversation.category for c in cases}):
            entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
            for entry, answer in zip(entries, load_ground_truth_entry(category)):
                self.prompts[entry["id"]] = json.dumps(entry)
                self.answers[entry["id"]] = answer["ground_truth"]
        self.calls = 0

    def run(self, cases: list[Case]) -> Pass:
        verdicts: list[Verdict] = []
        elapsed = elapsed_cpu = 0.0
        for case in cases:
            cid = case.conversation.id
            prompt = json.loads(self.prompts[cid])  # untimed: a fresh copy per call
            self.calls += 1
            model_name = f"bench_{self.calls}"  # unique: bfcl keeps instances in module globals
            start, start_cpu = time.perf_counter(), time.process_time()
            out = self.checker(
                self.handlers[case.decoder_key],
                cid,
                case.result,
                self.answers[cid],
                prompt,
                model_name,
                case.conversation.category,
            )
            elapsed += time.perf_counter() - start
            elapsed_cpu += time.process_time() - start_cpu
            for name in [g for g in vars(self.utils) if g.startswith(model_name)]:
                delattr(self.utils, name)
            error = out.get("error", {})
            verdicts.append((out["valid"], error.get("error_type", "") if isinstance(error, dict) else ""))
        return Pass(elapsed, elapsed_cpu, verdicts)


# --------------------------------------------------------------------------- reporting


class Variant:
    """Repeated passes of one variant; all verdicts must be the same every time."""

    def __init__(self, label: str, run: Callable[[], Pass]) -> None:
        self.label, self.run = label, run
        self.wall: list[float] = []
        self.cpu: list[float] = []
        self.verdicts: list[Verdict] | None = None

    def once(self) -> None:
        gc.collect()
        p = self.run()
        self.wall.append(p.seconds)
        self.cpu.append(p.cpu)
        if self.verdicts is None:
            self.verdicts = p.verdicts
        elif p.verdicts != self.verdicts:
            raise SystemExit(f"{self.label}: verdicts changed between repeats (not deterministic)")

    @property
    def median(self) -> float:
        return statistics.median(self.wall)

    @property
    def median_cpu(self) -> float:
        return statistics.median(self.cpu)


def agreement(cases: list[Case], ours: list[Verdict], theirs: list[Verdict]) -> tuple[dict[str, tuple[int, int]], list]:
    per_set: dict[str, list[int]] = {}
    mismatches = []
    for case, a, b in zip(cases, ours, theirs):
        counts = per_set.setdefault(case.set, [0, 0])
        counts[1] += 1
        if a == b:
            counts[0] += 1
        else:
            mismatches.append((case.set, case.conversation.id, a, b))
    return {k: (v[0], v[1]) for k, v in per_set.items()}, mismatches


def fmt_agreement(per_set: dict[str, tuple[int, int]]) -> str:
    total = sum(a for a, _ in per_set.values()), sum(n for _, n in per_set.values())
    parts = ", ".join(f"{k} {a}/{n}" for k, (a, n) in per_set.items())
    return f"{total[0]}/{total[1]} ({parts})"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="timed passes of each warm variant, interleaved (default 5)"
    )
    parser.add_argument(
        "--profile", action="store_true", help="cProfile one warm snapshots-on pass and print the top functions"
    )
    parser.add_argument("--top", type=int, default=15, help="rows of the profile (default 15)")
    parser.add_argument("--profile-out", type=Path, help="also dump the raw profile here (pstats format)")
    args = parser.parse_args()
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    if not REAL_RUN.is_dir():
        raise SystemExit(f"real run not found at {REAL_RUN}")

    rss: list[tuple[str, float, float]] = []

    def mark(label: str) -> None:
        rss.append((label, current_rss_mib(), peak_rss_mib()))

    mark("start (interpreter + imports)")
    t = time.perf_counter()
    cases = build_cases()
    decoders = {"passthrough": decoding.passthrough_decoder(), REAL_RUN_DECODER: decoding.decoder(REAL_RUN_DECODER)}
    for class_name in _bfcl.SIMULATOR_CLASSES:  # import the simulator modules outside any timing
        _bfcl.simulator_class(class_name)
    bfcl = Bfcl(cases)
    setup = time.perf_counter() - t
    n = len(cases)
    sets = Counter(c.set for c in cases)
    mark("workload loaded (dataset, real run, decoders, bfcl)")

    print("pytest-careful replay benchmark")
    print(
        f"  python {platform.python_version()}, bfcl-eval {_bfcl.bfcl_version()}, "
        f"{os.cpu_count()} CPUs, one process, one thread; load average at start "
        f"{os.getloadavg()[0]:.2f}"
    )
    print(
        f"  workload: {n} conversations = {sets['references']} reference trajectories "
        f"(passthrough decoder) + {sets['real run']} real-run conversations"
    )
    print(f"            ({REAL_RUN.name}: base, miss_func, miss_param; decoder {REAL_RUN_DECODER})")
    print(f"  setup, not timed: {setup:.1f}s (dataset, result files, decoders, bfcl's own dataset loaders)")
    print()

    # 1. cold: the warm-up pass, with an empty reference cache.
    reference.cache_clear()
    print("warm-up: the first pass of ours (snapshots on) starts with an EMPTY reference() cache and fills it;")
    print("         it is reported as 'cold'. Every later pass of ours finds all 800 references cached.")
    gc.collect()
    cold = run_ours(cases, decoders, snapshots=True)
    cache_info = reference.cache_info()
    mark("after the cold pass (reference cache full)")

    variants = {
        "bfcl": Variant("bfcl-eval checker", lambda: bfcl.run(cases)),
        "on": Variant("ours, snapshots on, warm", lambda: run_ours(cases, decoders, True)),
        "off": Variant("ours, snapshots off (bare), warm", lambda: run_ours(cases, decoders, False)),
    }
    print(f"timing: {args.repeat} rounds, each runs bfcl, ours snapshots-on, ours bare once (interleaved,")
    print("        so load from other processes hits all three alike)", flush=True)
    for _ in range(args.repeat):
        for variant in variants.values():
            variant.once()
    mark("after the timed rounds")

    # The reference replays on their own.
    reference.cache_clear()
    gc.collect()
    t, t_cpu = time.perf_counter(), time.process_time()
    for conversation in dataset.load():
        reference(conversation)
    ref_wall, ref_cpu = time.perf_counter() - t, time.process_time() - t_cpu
    mark("after re-filling the reference cache")
    print()

    bfcl_v, on, off = variants["bfcl"], variants["on"], variants["off"]
    theirs = bfcl_v.verdicts
    rows = [
        (bfcl_v.label, bfcl_v.median, min(bfcl_v.wall), bfcl_v.median_cpu, None),
        ("ours, snapshots on, cold (+800 ref replays)", cold.seconds, cold.seconds, cold.cpu, cold.verdicts),
        (on.label, on.median, min(on.wall), on.median_cpu, on.verdicts),
        (off.label, off.median, min(off.wall), off.median_cpu, off.verdicts),
    ]
    print(f"{n} conversations per pass; wall = median of {args.repeat} (best), cpu = median process CPU time")
    print(f"{'variant':<44} {'wall s':>7} {'(best)':>8} {'conv/s':>7} {'ms/conv':>8} {'cpu s':>7}  verdicts = bfcl's")
    print("-" * 112)
    for label, wall, best, cpu, verdicts in rows:
        agree = "-" if verdicts is None else fmt_agreement(agreement(cases, verdicts, theirs)[0]).split(" (")[0]
        print(
            f"{label:<44} {wall:>7.3f} {f'({best:.3f})':>8} {n / wall:>7.0f} {1000 * wall / n:>8.3f} {cpu:>7.3f}  {agree}"
        )
    print(
        f"{'  800 reference replays alone (cold)':<44} {ref_wall:>7.3f} {'':>8} {800 / ref_wall:>7.0f} "
        f"{1000 * ref_wall / 800:>8.3f} {ref_cpu:>7.3f}  (per reference)"
    )
    print()

    def ratio(a: Variant | float, b: Variant | float, cpu: bool = False) -> float:
        value = lambda v: v if isinstance(v, float) else (v.median_cpu if cpu else v.median)  # noqa: E731
        return value(a) / value(b)

    met = lambda ok: "MET" if ok else "MISSED"  # noqa: E731
    speedup, speedup_cpu = ratio(bfcl_v, on), ratio(bfcl_v, on, cpu=True)
    overhead, overhead_cpu = ratio(on, off), ratio(on, off, cpu=True)
    print("ratios (medians)                            wall     cpu   target")
    print(
        f"  speed-up: bfcl / ours snapshots-on, warm {speedup:6.2f}x {speedup_cpu:6.2f}x   >= {SPEEDUP_TARGET:.0f}x   "
        f"{met(min(speedup, speedup_cpu) >= SPEEDUP_TARGET)}"
    )
    print(
        f"  speed-up: bfcl / ours snapshots-on, cold {ratio(bfcl_v, cold.seconds):6.2f}x "
        f"{ratio(bfcl_v.median_cpu, cold.cpu):6.2f}x   (every reference computed too, as bfcl does)"
    )
    print(f"  speed-up: bfcl / ours bare, warm         {ratio(bfcl_v, off):6.2f}x {ratio(bfcl_v, off, cpu=True):6.2f}x")
    print(
        f"  overhead: snapshots-on / bare, warm      {overhead:6.2f}x {overhead_cpu:6.2f}x   <= {SNAPSHOT_OVERHEAD_TARGET:.0f}x   "
        f"{met(max(overhead, overhead_cpu) <= SNAPSHOT_OVERHEAD_TARGET)}"
    )
    print()

    # Where the time goes: each set on its own (median of 3), and what the real
    # run's replays cannot avoid: creating its instances and executing the calls
    # that are not the reference's opening (nothing else: no parse, snapshot, check).
    print("per set, warm (median of 3)                 bfcl s   ours s   ratio")
    for label in ("references", "real run"):
        subset = [c for c in cases if c.set == label]
        theirs_s = statistics.median(bfcl.run(subset).seconds for _ in range(3))
        ours_s = statistics.median(run_ours(subset, decoders, True).seconds for _ in range(3))
        print(f"  {label + f' ({len(subset)})':<42} {theirs_s:7.3f}  {ours_s:7.3f}  {theirs_s / ours_s:6.2f}x")
    floor = statistics.median(live_execution_floor(cases, decoders) for _ in range(3))
    print(
        f"  {'real run: instances + live calls only':<42} {'':7}  {floor:7.3f}  "
        f"(bfcl's real-run time / this = the most any replay could gain)"
    )
    decode_s = statistics.median(decoding_only(cases, decoders) for _ in range(3))
    print(f"  {'real run: decoding with the BFCL handler':<42} {'':7}  {decode_s:7.3f}")
    refs_s = statistics.median(
        run_ours([c for c in cases if c.set == "references"], decoders, True).seconds for _ in range(3)
    )
    print(
        f"  bound with no parsing, snapshots or verdict at all: bfcl {bfcl_v.median:.3f} s / "
        f"(references {refs_s:.3f} + floor {floor:.3f} + decoding {decode_s:.3f}) = "
        f"{bfcl_v.median / (refs_s + floor + decode_s):.2f}x"
    )
    print()

    print("verdict agreement with bfcl-eval, (valid, error_type) per conversation:")
    all_ok = True
    for label, verdicts in (("cold", cold.verdicts), ("snapshots on", on.verdicts), ("bare", off.verdicts)):
        per_set, mismatches = agreement(cases, verdicts, theirs)
        all_ok &= not mismatches
        print(f"  ours, {label:<13} {fmt_agreement(per_set)}")
        for m in mismatches[:5]:
            print(f"      MISMATCH {m}")
    cold_ok = not agreement(cases, cold.verdicts, theirs)[1]
    if cold_ok and not all_ok:
        print("  note: the cold pass agrees but warm passes do not. The warm passes replay after bfcl-eval's")
        print("        passes, against references cached before them: our results depend on process-wide")
        print("        state that bfcl's unguarded simulator calls changed (e.g. mpmath precision).")
    tally = Counter(e or "valid" for _, e in theirs)
    print("  bfcl's verdicts: " + ", ".join(f"{k.replace('multi_turn:', '')} {v}" for k, v in tally.most_common()))
    print(
        f"  reference() cache after the cold pass: {cache_info.currsize} entries "
        f"({cache_info.misses} computed, {cache_info.hits} reused by real-run conversations)"
    )
    print()

    print(f"{'memory, MiB (resource.getrusage ru_maxrss = peak so far)':<60} {'RSS now':>8} {'peak RSS':>9}")
    for label, cur, peak in rss:
        print(f"  {label:<58} {cur:>8.0f} {peak:>9.0f}")

    if args.profile:
        print()
        print(
            "profile: one more warm snapshots-on pass of ours under cProfile (the profiler inflates Python-level calls)"
        )
        profiler = cProfile.Profile()
        gc.collect()
        profiler.enable()
        run_ours(cases, decoders, snapshots=True)
        profiler.disable()
        if args.profile_out:
            profiler.dump_stats(str(args.profile_out))
        for key in ("cumulative", "tottime"):
            buffer = io.StringIO()
            pstats.Stats(profiler, stream=buffer).strip_dirs().sort_stats(key).print_stats(args.top)
            text = buffer.getvalue()
            total = next((line.strip() for line in text.splitlines() if "function calls" in line), "")
            body = text[text.index("   ncalls") :] if "   ncalls" in text else text
            print(f"\n  top {args.top} by {key} time ({total}):")
            print("\n".join("  " + line for line in body.rstrip().splitlines()))

    return 0 if all_ok else 1


if __name__ == "__main__":
    sys.exit(main())
