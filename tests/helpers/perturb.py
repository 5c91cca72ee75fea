"""Systematic perturbations of reference trajectories, for parity tests.

Deterministic: the same seed gives the same cases. Each case is a BFCL-shaped
``result`` (per turn, per step, a list of call strings).
"""

from __future__ import annotations

import ast
import random
from collections.abc import Iterator
from typing import Any

from pytest_careful.data.dataset import Conversation

KINDS = ("drop", "duplicate", "reorder", "alter", "extra", "empty_turn", "truncate", "not_a_list")


def as_result(turns: list[list[str]]) -> list[list[list[str]]]:
    """One step per turn holding all of its calls (an empty turn has no step)."""
    return [[list(calls)] if calls else [] for calls in turns]


def _alter_call(call: str, rng: random.Random) -> str:
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call)
    if not node.keywords:
        return call.replace("()", "(unexpected_argument=1)") if call.endswith("()") else call
    keyword = rng.choice(node.keywords)
    value = ast.literal_eval(keyword.value)
    if isinstance(value, bool):
        value = not value
    elif isinstance(value, (int, float)):
        value = value + 1
    elif isinstance(value, str):
        value = value + "_x" if value else "x"
    elif isinstance(value, list):
        value = value[:-1] if value else ["x"]
    else:
        value = None
    keyword.value = ast.Constant(value) if not isinstance(value, list) else ast.parse(repr(value), mode="eval").body
    return ast.unparse(node)


def perturb(conversation: Conversation, kind: str, rng: random.Random) -> Any:
    turns = [list(t) for t in conversation.ground_truth]
    calls = [(i, j) for i, t in enumerate(turns) for j in range(len(t))]
    if kind == "not_a_list":
        return "Error during inference: context length exceeded"
    if kind == "truncate":
        return as_result(turns[: rng.randrange(len(turns))])
    if kind == "empty_turn":
        nonempty = [i for i, t in enumerate(turns) if t]
        turns[rng.choice(nonempty)] = []
        return as_result(turns)
    if not calls:
        return as_result(turns)
    i, j = rng.choice(calls)
    if kind == "drop":
        del turns[i][j]
    elif kind == "duplicate":
        turns[i].insert(j, turns[i][j])
    elif kind == "reorder":
        rng.shuffle(turns[i])
        if len(turns[i]) > 1 and turns[i] == conversation.ground_truth[i]:
            turns[i].reverse()
    elif kind == "alter":
        turns[i][j] = _alter_call(turns[i][j], rng)
    elif kind == "extra":
        k, m = rng.choice(calls)
        turns[i].insert(rng.randrange(len(turns[i]) + 1), conversation.ground_truth[k][m])
    result = as_result(turns)
    if kind in ("duplicate", "extra") and rng.random() < 0.5:
        # Split the turn into one step per call, as a function-calling model would.
        result[i] = [[c] for c in turns[i]]
    return result


def cases(
    conversations: list[Conversation], per_conversation: int, seed: int = 0
) -> Iterator[tuple[Conversation, str, Any]]:
    rng = random.Random(seed)
    for conversation in conversations:
        for n in range(per_conversation):
            kind = KINDS[(conversation.index + n) % len(KINDS)] if n < len(KINDS) else rng.choice(KINDS)
            yield conversation, kind, perturb(conversation, kind, rng)
