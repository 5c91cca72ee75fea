"""The confirm protocol's log, read back: the scripted user's answers in BFCL's inference log.

The live loop (:mod:`pytest_careful.live.confirm`) writes each answer into the step's log under
:data:`ANSWER_LOG_KEY`; scoring reads them back from the result file, so a logged confirm run is
rescored exactly as it was scored live. Pure functions of a result entry: any value a file may
hold is read without raising.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypedDict

from ..data.dataset import Conversation
from . import scripted_user

ANSWER_LOG_KEY = "scripted_answer"


def model_text(model_responses: object) -> str | None:
    """The text of a step that made no call (handlers log a string or a list of parts)."""
    if isinstance(model_responses, str):
        return model_responses
    if isinstance(model_responses, list):
        parts = [p for p in model_responses if isinstance(p, str)]
        return "\n".join(parts) if parts else None
    return None


def executed_calls(turn_log: Mapping[str, object]) -> list[str]:
    """Calls the loop executed so far in this turn, from the loop's own log."""
    calls: list[str] = []
    for key, step in turn_log.items():
        if not key.startswith("step_") or not isinstance(step, list):
            continue
        for record in step:
            if (
                isinstance(record, dict)
                and record.get("role") == "handler_log"
                and record.get("content") == "Successfully decoded model response."
            ):
                decoded = record.get("model_response_decoded")
                if isinstance(decoded, list):  # a logged run's file may hold any value here
                    calls.extend(c for c in decoded if isinstance(c, str) and c)
    return calls


def request_text(conversation: Conversation, turn: int) -> str:
    """The turn's user request, as the scripted user restates it."""
    if turn >= len(conversation.questions):
        return ""
    return "\n".join(
        m.get("content", "")
        for m in conversation.questions[turn]
        if m.get("role") == "user" and isinstance(m.get("content"), str)
    )


def step_number(key: object) -> int | None:
    """``n`` of an inference-log key ``step_<n>`` as BFCL writes it (ASCII digits); None for any
    other key a file may hold (``step_x``, ``step_²``, 5,000 digits: ``int`` raises on each)."""
    digits = key.removeprefix("step_") if isinstance(key, str) and key.startswith("step_") else ""
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) < 10 else None


def confirmations(inference_log: object, raw_index: Sequence[Sequence[int]]) -> dict[int, list[int]]:
    """Per turn, the decoded-step indices after which the scripted user said yes.

    Read back from the result file's inference log, so a logged confirm run is
    rescored exactly as it was scored live. ``raw_index`` is per turn the raw
    step index of each decoded step (:class:`~pytest_careful.evaluation.evaluate.DecodedRun`).
    A yes in raw step ``r`` confirms the decoded steps after it: the value is
    the index of the last decoded step at or before ``r`` (-1 when none).
    """
    turns = (
        [t for t in inference_log if isinstance(t, dict) and "begin_of_turn_query" in t]
        if isinstance(inference_log, list)
        else []
    )
    out: dict[int, list[int]] = {}
    for turn, log in enumerate(turns):
        indices = raw_index[turn] if turn < len(raw_index) else []
        for key, step in log.items():
            raw = step_number(key)
            if raw is None or not isinstance(step, list):
                continue
            if any(isinstance(r, dict) and r.get(ANSWER_LOG_KEY) == scripted_user.YES for r in step):
                out.setdefault(turn, []).append(sum(1 for i in indices if i <= raw) - 1)
    return out


class Answers(TypedDict):
    """The confirm protocol's scripted user: how often it said each (a row's ``answers``)."""

    yes: int
    no: int
    restate: int


def answer_counts(inference_log: object) -> Answers:
    """Answers the scripted user gave in one conversation, by kind."""
    counts = {scripted_user.YES: 0, scripted_user.NO: 0, scripted_user.RESTATE: 0}
    for turn in inference_log if isinstance(inference_log, list) else []:
        if not isinstance(turn, dict):
            continue
        for key, step in turn.items():
            if key.startswith("step_") and isinstance(step, list):
                for record in step:
                    kind = record.get(ANSWER_LOG_KEY) if isinstance(record, dict) else None
                    if isinstance(kind, str) and kind in counts:  # a file may hold any value here
                        counts[kind] += 1
    return Answers(yes=counts[scripted_user.YES], no=counts[scripted_user.NO], restate=counts[scripted_user.RESTATE])
