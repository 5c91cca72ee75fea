"""A row's token figures: the logged counts summed, and those of steps spent beyond the reference."""

from __future__ import annotations

import math

from ..evaluation.evaluate import DecodedRun, Evaluation
from ..evaluation.replay import TurnReplay
from .row import Tokens
from .rules.beyond_reference import surplus


def of_evaluation(evaluation: Evaluation) -> Tokens:
    """Input and output tokens as logged, and the surplus ones: of steps whose calls are all beyond the reference."""
    entry = evaluation.entry
    figures: Tokens = {"input": 0, "output": 0, "surplus_input": 0, "surplus_output": 0}
    if entry is None:
        return figures
    steps = surplus_steps(evaluation)
    figures["input"], figures["surplus_input"] = _logged_tokens(entry.input_token_count, steps)
    figures["output"], figures["surplus_output"] = _logged_tokens(entry.output_token_count, steps)
    return figures


def surplus_steps(evaluation: Evaluation) -> set[tuple[int, int]]:
    """Raw (turn, step) indices of steps whose calls are all beyond the reference."""
    steps: set[tuple[int, int]] = set()
    reference = evaluation.reference.turns
    for turn in evaluation.replay.turns:
        ref_calls = reference[turn.index].calls if turn.index < len(reference) else []
        steps.update(_steps(turn, {id(c) for c in surplus(turn.calls, ref_calls)}, evaluation.run))
    return steps


def _steps(turn: TurnReplay, surplus_ids: set[int], run: DecodedRun | None) -> list[tuple[int, int]]:
    by_step: dict[int, list[int]] = {}
    for call in turn.calls:
        by_step.setdefault(call.step, []).append(id(call))
    return [
        (turn.index, run.raw_index[turn.index][step] if run else step)
        for step, ids in sorted(by_step.items())
        if ids and all(i in surplus_ids for i in ids)
    ]


def _logged_tokens(logged: object, surplus_steps: set[tuple[int, int]]) -> tuple[int, int]:
    """A logged per-turn, per-step count summed: all steps, and the surplus ones."""
    total = surplus_total = 0
    for turn_index, turn in enumerate(logged if isinstance(logged, list) else []):
        for step_index, value in enumerate(turn if isinstance(turn, list) else []):
            # NaN and +-Infinity pass Python's json reader; they count no tokens
            if isinstance(value, int) or (isinstance(value, float) and math.isfinite(value)):
                total += int(value)
                if (turn_index, step_index) in surplus_steps:
                    surplus_total += int(value)
    return total, surplus_total
