"""Our verdict against bfcl-eval's own evaluation (run live, in a child process)."""

from __future__ import annotations

import collections
import json

import pytest
from perturb import as_result, cases

from conftest import REAL_RUN_DECODER, ROOT, run_oracle
from pytest_careful.data import dataset
from pytest_careful.data.result_files import read_result_file
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.execution.decoding import decoder, passthrough_decoder


def _ours(conversation, result, dec=None, model_name="parity"):
    evaluation = evaluate(conversation, result, dec or passthrough_decoder(), model_name=model_name)
    return evaluation.verdict.valid, evaluation.verdict.error_type


def _compare(items, decoder_key="passthrough", dec=None):
    """items: (conversation, label, result). Returns mismatches and a verdict tally."""
    oracle = run_oracle({"id": c.id, "result": r, "decoder": decoder_key, "model_name": "parity"} for c, _, r in items)
    assert len(oracle) == len(items)
    mismatches, tally = [], collections.Counter()
    for (conversation, label, result), theirs in zip(items, oracle):
        mine = _ours(conversation, result, dec)
        tally[theirs["error_type"] or "valid"] += 1
        if mine != (theirs["valid"], theirs["error_type"]):
            mismatches.append((conversation.id, label, mine, theirs))
    return mismatches, tally


@pytest.mark.parametrize(
    "category", ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
)
def test_reference_trajectories_match_bfcl(category):
    items = [(c, "reference", as_result(c.ground_truth)) for c in dataset.load_category(category)]
    mismatches, tally = _compare(items)
    assert not mismatches, mismatches[:5]
    assert sum(tally.values()) == 200


@pytest.mark.slow
def test_perturbed_references_match_bfcl():
    conversations = dataset.load()
    items = list(cases(conversations, per_conversation=3, seed=20261202))
    assert len(items) >= 2000
    mismatches, tally = _compare(items)
    assert not mismatches, mismatches[:5]
    # The generator must exercise every verdict BFCL can give, or it proves little.
    assert {
        "valid",
        "multi_turn:inference_error",
        "multi_turn:force_terminated",
        "multi_turn:empty_turn_model_response",
        "multi_turn:instance_state_mismatch",
        "multi_turn:execution_response_mismatch",
    } <= set(tally), tally


@pytest.mark.parametrize("category", ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param"])
def test_real_run_matches_bfcl(real_run, category):
    path = real_run / f"BFCL_v4_{category}_result.json"
    entries, problems = read_result_file(path, category)
    assert not problems and len(entries) == 200
    dec = decoder(REAL_RUN_DECODER)
    oracle = run_oracle(
        {"id": e.id, "result": e.result, "decoder": REAL_RUN_DECODER, "model_name": "gpt_oss"} for e in entries
    )
    ours = [evaluate(dataset.get(e.id), e.result, dec, model_name="gpt_oss") for e in entries]
    # Decoding: our guarded decoder gives exactly what the stock decoder gives.
    # (An inference error has nothing to decode: the oracle says None, we keep [].)
    assert [o.decoded for o in ours] == [t["decoded"] or [] for t in oracle]
    assert [(o.verdict.valid, o.verdict.error_type) for o in ours] == [(t["valid"], t["error_type"]) for t in oracle]


EXAMPLE = ROOT / "examples" / "smollm2-135m-vllm-cpu" / "SmolLM2-135M-Instruct"


@pytest.mark.parametrize(
    "category", ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
)
def test_the_shipped_example_run_matches_bfcl(category):
    """The run every fresh clone has (examples/), decoded by the handler its settings name: the same
    decoded calls and verdicts as bfcl-eval's own decoder and checker."""
    key = json.loads((EXAMPLE / "careful_settings.json").read_text())["decoder"]
    entries, problems = read_result_file(EXAMPLE / "multi_turn" / f"BFCL_v4_{category}_result.json", category)
    assert not problems and len(entries) == 40
    dec = decoder(key)
    oracle = run_oracle({"id": e.id, "result": e.result, "decoder": key, "model_name": "example"} for e in entries)
    ours = [evaluate(dataset.get(e.id), e.result, dec, model_name="example") for e in entries]
    assert [o.decoded for o in ours] == [t["decoded"] or [] for t in oracle]
    assert [(o.verdict.valid, o.verdict.error_type) for o in ours] == [(t["valid"], t["error_type"]) for t in oracle]
