"""Replays that take their first calls from the reference equal replays that execute every call.

``results.evaluate`` replays a model beside the cached reference: calls that
repeat the reference's opening are not executed again. Here every workload the
benchmarks use (800 references as models, the 600-conversation real run,
systematic perturbations) is replayed both ways, and every record, snapshot and
turn state must be the same.
"""

from __future__ import annotations

import random

import perturb
import pytest

from conftest import REAL_RUN_DECODER
from pytest_careful.data import dataset
from pytest_careful.data.result_files import read_result_file
from pytest_careful.evaluation.evaluate import decode_turns
from pytest_careful.evaluation.replay import Replay, reference, replay
from pytest_careful.execution.decoding import decoder
from pytest_careful.execution.executor import instance_name


def _same(shared: Replay, executed: Replay) -> None:
    assert shared.initial_state.classes == executed.initial_state.classes
    assert len(shared.turns) == len(executed.turns)
    for a, b in zip(shared.turns, executed.turns):
        assert a.steps == b.steps
        assert a.state_after.classes == b.state_after.classes
        assert [r.to_json() for r in a.calls] == [r.to_json() for r in b.calls]
        for x, y in zip(a.calls, b.calls):
            assert x.classes == y.classes and x.changed_state == y.changed_state
            if x.after is not None or y.after is not None:
                assert x.before.classes == y.before.classes and x.after.classes == y.after.classes


def _both(conversation, turns, snapshots=True):
    shared = replay(conversation, turns, "model", snapshots, prefix=reference(conversation))
    executed = replay(conversation, turns, "model", snapshots)
    _same(shared, executed)
    return shared


@pytest.mark.parametrize("snapshots", [True, False])
def test_references_as_models(snapshots):
    for conversation in dataset.load():
        _both(conversation, perturb.as_result(conversation.ground_truth), snapshots)


def test_real_run(real_run):
    dec = decoder(REAL_RUN_DECODER)
    seen = 0
    for name in ("base", "miss_func", "miss_param"):
        entries, problems = read_result_file(real_run / f"BFCL_v4_multi_turn_{name}_result.json", f"multi_turn_{name}")
        assert not problems
        for entry in entries:
            if isinstance(entry.result, list):
                _both(dataset.get(entry.id), decode_turns(dec, entry.result))
                seen += 1
    assert seen > 500


def test_perturbed_references():
    conversations = dataset.load()
    kinds = set()
    for conversation, kind, result in perturb.cases(conversations, per_conversation=3, seed=11):
        if isinstance(result, list):
            _both(conversation, result)
            kinds.add(kind)
    assert len(kinds) >= 6


def test_a_call_that_sees_the_model_name_is_executed_not_shared():
    # bfcl-eval's rewrite turns 'ls(' inside a string literal into
    # '<instance name>.ls(', and the instance name carries the model name.
    conversation = next(
        c for c in dataset.load_category("multi_turn_base") if "GorillaFileSystem" in c.involved_classes
    )
    call = "echo(content='run ls(a=True) first',file_name='note.txt')"
    turns = [[["touch(file_name='note.txt')"], [call], ["cat(file_name='note.txt')"]]]
    prefix = replay(conversation, turns, "other")
    shared = replay(conversation, turns, "model", prefix=prefix)
    _same(shared, replay(conversation, turns, "model"))
    own = instance_name("model_eval", conversation.id, "GorillaFileSystem")
    assert shared.turns[0].calls[0].result == prefix.turns[0].calls[0].result  # touch: shared
    assert own in shared.turns[0].calls[2].result
    assert own not in prefix.turns[0].calls[2].result


def test_diverging_after_a_shared_opening_continues_from_the_same_state():
    rng = random.Random(3)
    conversations = [c for c in dataset.load() if sum(map(len, c.ground_truth)) >= 4]
    for conversation in rng.sample(conversations, 40):
        flat = [c for turn in conversation.ground_truth for c in turn]
        cut = rng.randrange(1, len(flat))
        # The opening as the reference makes it, then one call of its own, then the rest.
        turns = [
            [
                flat[:cut],
                ["pwd()" if "GorillaFileSystem" in conversation.involved_classes else flat[cut - 1]],
                flat[cut:],
            ]
        ]
        shared = _both(conversation, turns)
        assert [r.call for r in shared.calls[:cut]] == flat[:cut]
