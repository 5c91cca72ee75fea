"""bfcl-eval's multi-turn verdict, computed on top of a replay.

Same order of checks, same ``error_type`` strings and messages as
``bfcl_eval.eval_checker.eval_runner._evaluate_single_multi_turn_entry`` and
``multi_turn_checker``: inference error (result is not a list), force
termination (turn count differs), then per turn: empty model turn where the
reference calls, public state of every instance, and the reference results as
an unordered sub-multiset of all model results so far. The first failing turn
decides. ``tests/evaluation/test_parity.py`` compares this with bfcl-eval's own checker.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypedDict

from ..data.dataset import Conversation
from ..execution.snapshot import StateDifference, states_equal_public
from .replay import Replay

INFERENCE_ERROR = "multi_turn:inference_error"
FORCE_TERMINATED = "multi_turn:force_terminated"
EMPTY_TURN = "multi_turn:empty_turn_model_response"
STATE_MISMATCH = "multi_turn:instance_state_mismatch"
RESPONSE_MISMATCH = "multi_turn:execution_response_mismatch"


@dataclass(frozen=True)
class VerdictDetails:
    """The evidence of a failing verdict: the state's differences, or the reference results missing."""

    differences: Mapping[str, StateDifference] = field(default_factory=dict)
    missing_items: tuple[str, ...] = ()


class VerdictJson(TypedDict):
    """A verdict as rows carry it (``Verdict.to_json``; the details stay out)."""

    valid: bool
    error_type: str
    error_message: str
    turn: int | None


@dataclass
class Verdict:
    """BFCL's verdict on one conversation.

    Attributes:
        valid: BFCL accepts the conversation.
        error_type: BFCL's ``error_type``; empty when valid.
        error_message: BFCL's message.
        turn: the failing turn, when a turn failed.
        details: evidence (state differences or missing results).
    """

    valid: bool
    error_type: str = ""
    error_message: str = ""
    turn: int | None = None
    details: VerdictDetails = field(default_factory=VerdictDetails)

    def to_json(self) -> VerdictJson:
        return {
            "valid": self.valid,
            "error_type": self.error_type,
            "error_message": self.error_message,
            "turn": self.turn,
        }


def inference_error() -> Verdict:
    return Verdict(
        False,
        INFERENCE_ERROR,
        "Error during inference phase. Model did not output a list of model responses.",
    )


def force_terminated(model_turns: int, reference_turns: int) -> Verdict:
    return Verdict(
        False,
        FORCE_TERMINATED,
        "Model was force-terminated during inference phase. The length of the model result "
        f"turns ({model_turns}) does not match the length of the ground truth turns "
        f"({reference_turns}).",
    )


def check(conversation: Conversation, model: Replay, reference: Replay, turns: int | None = None) -> Verdict:
    """Turn-by-turn check of a replayed model against the replayed reference.

    ``turns``: check only the first ``turns`` turns (``model`` may hold only those): the
    audit asks whether a change fails its own turn before it replays the rest.
    """
    all_model_results: list[str] = []
    for turn_index, ground_truth in enumerate(conversation.ground_truth[:turns]):
        model_turn = model.turns[turn_index]
        all_model_results.extend(model_turn.results)
        if ground_truth and not model_turn.steps:
            return Verdict(False, EMPTY_TURN, f"Model response list is empty for turn {turn_index}", turn_index)
        if not ground_truth:
            continue
        ref_turn = reference.turns[turn_index]
        for class_name in conversation.involved_classes:
            equal, differences = states_equal_public(model_turn.state_after, ref_turn.state_after, class_name)
            if not equal:
                return Verdict(
                    False,
                    STATE_MISMATCH,
                    f"Model instance for {class_name} does not match the state with ground truth instance.",
                    turn_index,
                    VerdictDetails(differences=differences),
                )
        missing = missing_results(ref_turn.results, all_model_results)
        if missing:
            return Verdict(
                False,
                RESPONSE_MISMATCH,
                "Model response execution results so far does not contain all the ground truth "
                f"response execution results for turn {turn_index}.",
                turn_index,
                VerdictDetails(missing_items=tuple(missing)),
            )
    return Verdict(True)


def missing_results(reference_results: list[str], model_results: list[str]) -> list[str]:
    """Reference results not found in the model's, as a multiset (BFCL's order)."""
    pool = list(model_results)
    missing = []
    for item in reference_results:
        try:
            pool.remove(item)
        except ValueError:
            missing.append(item)
    return missing
