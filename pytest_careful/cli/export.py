"""``careful-export``: a logged run, optimized, as a run and as training data (EffectWorld §3.5-3.6).

careful-export RESULTS_FOLDER --decoder KEY --out DIR [--careful-category CATEGORY ...]

writes into DIR (never the input folder):

* the optimized run, in ``bfcl generate``'s layout: the input's result files under the same names
  and relative paths, one entry per conversation read, each in the input's own step encoding,
  with its own ``careful_settings.json``; ``bfcl evaluate`` and ``pytest --careful-results``
  rescore it as any run;
* ``positives.jsonl``: the conversations that pass (BFCL, and no gated rule broken), optimized
  and verified, as TRL's conversational ``messages`` with ``tools``;
* ``pairs.jsonl``: preference records (``prompt``, ``chosen``, ``rejected``, ``tools``) at the first
  step where the model's trace and its optimized trace differ (efficiency: the rewrite's class), and
  where a gated rule fired (safety: the rule's name; chosen is the reference's step, replayed without
  error on the model's prefix); prompts come from the run's ``inference_log`` (none logged: no pair);
* ``optimizer.json``: per conversation, calls and steps before and after, and the rewrites.

See docs/training-data.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from ..common.bfcl import CATEGORIES, GROUP_DIR
from ..data import dataset
from ..data.result_files import InputProblem, LoggedEntry, find_result_files, keep_last, read_result_file
from ..data.run_settings import SETTINGS_FILE, RunSettings, recorded, recorded_decoder
from ..effects import declarations
from ..evaluation.evaluate import Evaluation, evaluate
from ..evaluation.replay import OK, replay
from ..execution import limits
from ..execution.decoding import Decoder, UnknownModel, decoder
from ..scoring.conversation import ScoringConfig, score_evaluation
from ..scoring.row import Row
from ..scoring.rules import checking
from ..sources.options import CATEGORY
from ..verify.optimizer import BATCHED, Optimized, optimize
from ..verify.training import Unencodable, pair, positive, rewritten_entry

#: What the export records of a run that came through it (``careful_settings.json``'s own key).
EXPORTED = "careful_export"


class ExportError(ValueError):
    """A folder or option that cannot be used: one line for the user."""


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="careful-export", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "results", type=Path, metavar="RESULTS_FOLDER", help="A logged BFCL run (bfcl generate's folder)"
    )
    parser.add_argument("--decoder", help="The bfcl-eval registry key whose handler decodes the run")
    parser.add_argument("--out", type=Path, required=True, help="Where the optimized run and the training data go")
    parser.add_argument(
        CATEGORY.flag,
        action="append",
        default=[],
        metavar="CATEGORY",
        help="base, miss_func, ... (repeatable; default: every file)",
    )
    args = parser.parse_args(argv)
    try:
        lines = export(args.results, args.decoder, args.out, args.careful_category)
    except ExportError as problem:
        print(f"careful-export: {problem}", file=sys.stderr)
        return 2
    for line in lines:
        print(line)
    return 0


def export(results: Path, key: str | None, out: Path, categories: Sequence[str] = ()) -> list[str]:
    """The command's work; returns the lines to print. ExportError on unusable input."""
    started = time.perf_counter()
    files, problems = _inputs(results, out, categories)
    key = key or recorded_decoder(results)
    if not key:
        raise ExportError(f"{results}: --decoder KEY is needed (no careful_settings.json there names one)")
    try:
        dec = decoder(key)
    except UnknownModel as exc:
        raise ExportError(f"--decoder: {exc}") from None
    config = ScoringConfig(model="careful-export", decoder_key=key, declarations=declarations.load())
    summary = {"conversations": 0, "positives": 0, "pairs": 0, "kept_as_logged": 0, "no_log": 0}
    optimizer: dict[str, object] = {}
    positives: list[dict[str, object]] = []
    pairs: list[dict[str, object]] = []
    for category, path in files.items():
        entries, more = read_result_file(path, category)
        entries, repeated = keep_last(entries)
        problems += more + repeated
        written = []
        for entry in entries:
            done = _conversation(entry, dec, key, config)
            summary["conversations"] += 1
            written.append(done.entry)
            optimizer[entry.id] = done.report
            summary["kept_as_logged"] += done.kept_as_logged
            summary["no_log"] += done.no_log
            positives += done.positives
            pairs += done.pairs
        target = out / path.relative_to(results)
        target.parent.mkdir(parents=True, exist_ok=True)
        # The input's own escaping: BFCL writes non-ASCII text as it is (ensure_ascii=False), so an
        # entry the optimizer left alone is written byte for byte as it was read.
        ascii_only = path.read_bytes().isascii()
        target.write_text("".join(json.dumps(e, ensure_ascii=ascii_only) + "\n" for e in written), encoding="utf-8")
        _settings(results, path, target.parent, key)
    summary["positives"], summary["pairs"] = len(positives), len(pairs)
    _write_jsonl(out / "positives.jsonl", positives)
    _write_jsonl(out / "pairs.jsonl", pairs)
    report = {
        "decoder": key,
        "from": str(results),
        "summary": summary,
        "problems": [str(p) for p in problems],
        "conversations": optimizer,
    }
    (out / "optimizer.json").write_text(json.dumps(report, indent=1) + "\n", encoding="utf-8")
    before = sum(int(r["calls_before"]) for r in optimizer.values() if isinstance(r, dict))
    after = sum(int(r["calls_after"]) for r in optimizer.values() if isinstance(r, dict))
    n = max(summary["conversations"], 1)
    return [
        *(f"input problem: {p}" for p in problems),
        f"careful-export: {summary['conversations']} conversations, calls {before / n:.2f} -> {after / n:.2f} per "
        f"conversation; {summary['positives']} positives, {summary['pairs']} pairs"
        + (f" ({summary['no_log']} conversations logged no prompts: no pair)" if summary["no_log"] else "")
        + f"; wrote {out} in {time.perf_counter() - started:.1f} s",
    ]


def _inputs(results: Path, out: Path, categories: Sequence[str]) -> tuple[dict[str, Path], list[InputProblem]]:
    if not results.is_dir():
        raise ExportError(f"{results} is not a directory")
    inside = out.resolve() == results.resolve() or results.resolve() in out.resolve().parents
    if inside:
        raise ExportError(
            f"--out {out}: may not be the input folder or inside it (the optimized run is a run of its own)"
        )
    files, problems = find_result_files(results)
    wanted = [c if c.startswith("multi_turn_") else f"multi_turn_{c}" for c in categories]
    unknown = [c for c in wanted if c not in CATEGORIES]
    if unknown:
        raise ExportError(
            f"{CATEGORY} {unknown[0].removeprefix('multi_turn_')}: expected one of {', '.join(CATEGORIES)}"
        )
    chosen = {c: p for c, p in files.items() if not wanted or c in wanted}
    if not chosen:
        raise ExportError(f"{results}: no BFCL multi-turn result file (BFCL_v4_multi_turn_<category>_result.json)")
    return chosen, problems


class _Done:
    """One conversation exported: its entry, its optimizer report and its records."""

    def __init__(self, entry: dict[str, object], report: dict[str, object]) -> None:
        self.entry, self.report = entry, report
        self.positives: list[dict[str, object]] = []
        self.pairs: list[dict[str, object]] = []
        self.kept_as_logged = 0
        self.no_log = 0


def _conversation(entry: LoggedEntry, dec: Decoder, key: str, config: ScoringConfig) -> _Done:
    conversation = dataset.get(entry.id)
    try:
        with limits.metered(limits.Limits()):  # the run's budget, as a rescoring scores it
            evaluation = evaluate(conversation, entry.result, dec, model_name=key, entry=entry)
            row = score_evaluation(evaluation, "standard", config)
            optimized = optimize(evaluation)
            trace = replay(conversation, optimized.turns, evaluation.replay.model_name)
    except limits.ResourceLimit as exceeded:
        return _kept(entry, {"conversation": entry.id, "bounded": exceeded.reason})
    report = optimized.to_json() | {"bfcl": evaluation.verdict.to_json(), "safe": row["safe"]}
    try:
        written = rewritten_entry(entry, evaluation, optimized, trace)
        _check_decodes(written, optimized, dec)
    except Unencodable as problem:
        return _kept(entry, report | {"kept_as_logged": str(problem)})
    done = _Done(written, report)
    try:
        if row["safe"]:
            done.positives.append(positive(evaluation, optimized, trace))
        made = _pairs(evaluation, optimized, row, config)
    except Unencodable as problem:  # a call no record can hold as tool_calls: the run is written, no record made
        done.report = report | {"no_records": str(problem)}
        return done
    done.no_log = int(made is None)
    done.pairs = made or []
    return done


def _kept(entry: LoggedEntry, report: dict[str, object]) -> _Done:
    done = _Done(dict(entry.raw), report)
    done.kept_as_logged = 1
    return done


def _check_decodes(written: dict[str, object], optimized: Optimized, dec: Decoder) -> None:
    """Every written step, decoded again with the run's decoder, gives exactly the calls intended."""
    if not optimized.rewrites:
        return
    result = written.get("result")
    assert isinstance(result, list)
    for turn_index, steps in enumerate(result):
        decoded = []
        for step in steps:
            try:
                calls = dec.decode_step(step)
            except Exception:  # a text step: BFCL drops it, and so does this check
                continue
            if calls and calls != [""]:
                decoded.append(list(calls))
        if decoded != optimized.turns[turn_index]:
            raise Unencodable(f"turn {turn_index} does not decode to the optimized calls with this decoder")


def _pairs(
    evaluation: Evaluation, optimized: Optimized, row: Row, config: ScoringConfig
) -> list[dict[str, object]] | None:
    """The efficiency pair and the safety pair of one conversation; None where it logged no prompts."""
    run = evaluation.run
    if run is None or evaluation.entry is None or not isinstance(evaluation.entry.inference_log, list):
        return None
    made = []
    first = _first_difference(optimized)
    if first is not None:
        turn, step, kind, why = first
        chosen = _instead(optimized, turn, step)
        made.append(
            pair(evaluation, turn, run.raw_index[turn][step], chosen, optimized.original[turn][step], kind, why)
        )
    safety = _first_gated_violation(row, config)
    if safety is not None:
        turn, step, rule = safety
        chosen = list(evaluation.conversation.ground_truth[turn])
        rejected = optimized.original[turn][step]
        if chosen != rejected and _reference_runs_on_the_prefix(evaluation, turn, step, chosen):
            made.append(pair(evaluation, turn, run.raw_index[turn][step], chosen, rejected, rule, f"{rule} fired"))
    return [p for p in made if p is not None and p["chosen"] != p["rejected"]]


def _instead(optimized: Optimized, turn: int, step: int) -> list[str]:
    """What the optimized trace does in place of the original's decoded step ``step``: the step holding
    what is left of it (shortened, or merged), else the next step it keeps ([]: the turn is done)."""
    for calls, origin in zip(optimized.turns[turn], optimized.origins[turn]):
        if any(s == step for s, _ in origin):
            return list(calls)
    for calls, origin in zip(optimized.turns[turn], optimized.origins[turn]):
        if origin and origin[0][0] > step:
            return list(calls)
    return []


def _first_difference(optimized: Optimized) -> tuple[int, int, str, str] | None:
    """The first (turn, original decoded step) the optimized trace changed, with the rewrite that did."""
    for turn, (steps, origins) in enumerate(zip(optimized.original, optimized.origins)):
        kept = [o for origin in origins for o in origin]
        for step, calls in enumerate(steps):
            mine = [(step, p) for p in range(len(calls))]
            merged = any(
                origin != [(s, p) for s, p in origin if s == origin[0][0]] for origin in origins if (step, 0) in origin
            )
            if any(m not in kept for m in mine) or merged:
                rewrite = next(
                    (r for r in optimized.rewrites if r.turn == turn and (r.step == step or r.kind == BATCHED)), None
                )
                kind, why = (rewrite.kind, rewrite.evidence) if rewrite is not None else ("rewritten", "")
                return turn, step, kind, why
    return None


def _first_gated_violation(row: Row, config: ScoringConfig) -> tuple[int, int, str] | None:
    gated = set(checking.gate_names("safe", config.rules))
    for violation in row["violations"]:
        if violation["rule"] in gated and violation["step"] is not None:
            return violation["turn"], violation["step"], violation["rule"]
    return None


def _reference_runs_on_the_prefix(evaluation: Evaluation, turn: int, step: int, chosen: list[str]) -> bool:
    """The reference's calls of the turn, replayed after the model's calls before the step, raise no error."""
    steps = [list(t) for t in evaluation.decoded[:turn]] + [evaluation.decoded[turn][:step] + [chosen]]
    trace = replay(evaluation.conversation, steps, evaluation.replay.model_name, snapshots=False)
    return all(c.status == OK for c in trace.turns[turn].calls[-len(chosen) :]) if chosen else False


def _settings(results: Path, source_file: Path, folder: Path, key: str) -> None:
    """The optimized run's own ``careful_settings.json``: the input's, and where it came from."""
    made = recorded([source_file])
    settings: dict[str, object] = made.to_json() if made is not None else {"condition": "standard"}
    settings["decoder"] = key
    settings[EXPORTED] = {"from": str(results), "optimized": True}
    if folder.name == GROUP_DIR:  # <model>/multi_turn/: the settings lie beside the folder, as a live run's
        folder = folder.parent
    (folder / SETTINGS_FILE).write_text(
        json.dumps(RunSettings.from_json(settings).to_json(), indent=1, sort_keys=True) + "\n", encoding="utf-8"
    )


def _write_jsonl(path: Path, records: list[dict[str, object]]) -> None:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")


if __name__ == "__main__":
    sys.exit(main())
