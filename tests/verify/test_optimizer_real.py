"""The optimizer on real traces, its verdicts checked by bfcl-eval's own checker, live.

* A real reference with a re-read or a repeated no-op write inserted gives back the reference's call
  count, and bfcl-eval passes what it gives.
* On the real logged run, every optimized trace gets bfcl-eval's verdict and error type of the
  trace it came from (every 25th conversation here; every one in the slow suite).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REAL_RUN_DECODER, run_oracle
from pytest_careful.data import dataset
from pytest_careful.data.result_files import read_result_file
from pytest_careful.effects import declarations
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.execution.decoding import decoder, passthrough_decoder
from pytest_careful.verify.literals import function_of
from pytest_careful.verify.optimizer import optimize

CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param")


def _inserted(kind: str) -> list[tuple[str, list[list[list[str]]], int]]:
    """References (one step a call) with the first read, or idempotent write, of each called twice in a row."""
    decl = declarations.load()
    made = []
    for conversation in dataset.load(["multi_turn_base"])[:60]:
        trace = [[[call] for call in turn] for turn in conversation.ground_truth]
        for turn in trace:
            for index, (call,) in enumerate(turn):
                declared = decl.functions.get(function_of(call) or "")
                if declared is None:
                    continue
                wanted = not declared.is_write if kind == "read" else declared.is_write and declared.idempotent
                if wanted:
                    turn.insert(index + 1, [call])
                    break
            else:
                continue
            break
        else:
            continue
        made.append((conversation.id, trace, sum(len(t) for t in conversation.ground_truth)))
    assert len(made) >= 10, kind
    return made


@pytest.mark.parametrize("kind", ["read", "write"])
def test_an_inserted_repeat_is_removed_and_bfcl_passes_the_result(kind: str) -> None:
    cases = _inserted(kind)
    optimized = {}
    for cid, trace, reference_calls in cases:
        o = optimize(evaluate(dataset.get(cid), trace, passthrough_decoder()))
        assert o.calls_before == reference_calls + 1
        assert o.calls_after <= reference_calls, (cid, [r.to_json() for r in o.rewrites])
        optimized[cid] = o.turns
    verdicts = run_oracle(
        {"id": cid, "result": turns, "decoder": "passthrough", "model_name": "optimized"}
        for cid, turns in optimized.items()
    )
    assert len(verdicts) == len(optimized)
    assert all(v["valid"] for v in verdicts), [v for v in verdicts if not v["valid"]][:3]


def _real_verdicts(real_run: Path, every: int) -> None:
    entries = [e for c in CATEGORIES for e in read_result_file(real_run / f"BFCL_v4_{c}_result.json", c)[0]][::every]
    dec = decoder(REAL_RUN_DECODER)
    optimized = {
        e.id: optimize(evaluate(dataset.get(e.id), e.result, dec, model_name=REAL_RUN_DECODER)) for e in entries
    }
    assert sum(o.calls_before - o.calls_after for o in optimized.values()) > 0  # it removes something
    theirs = {
        v["id"]: v
        for v in run_oracle(
            {"id": e.id, "result": e.result, "decoder": REAL_RUN_DECODER, "model_name": "original"} for e in entries
        )
    }
    raw = {e.id: e.result for e in entries}
    rewritten = run_oracle(  # a trace with no rewrite is written as it was logged (an inference error among them)
        {"id": cid, "result": o.turns, "decoder": "passthrough", "model_name": "optimized"}
        if o.rewrites
        else {"id": cid, "result": raw[cid], "decoder": REAL_RUN_DECODER, "model_name": "optimized"}
        for cid, o in optimized.items()
    )
    assert len(rewritten) == len(theirs) == len(entries)
    for after in rewritten:
        before = theirs[after["id"]]
        assert (after["valid"], after["error_type"]) == (before["valid"], before["error_type"]), after["id"]


def test_optimized_real_traces_keep_bfcls_verdict(real_run: Path) -> None:
    _real_verdicts(real_run, every=25)


@pytest.mark.slow
def test_every_optimized_real_trace_keeps_bfcls_verdict(real_run: Path) -> None:
    _real_verdicts(real_run, every=1)
