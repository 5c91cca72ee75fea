"""Readable evidence: BFCL failures, rule violations as -/+ diffs, transcripts."""

from __future__ import annotations

import pprint
from collections.abc import Sequence

from ..common.text import escape
from ..evaluation.evaluate import Evaluation, NoCallStep
from ..evaluation.replay import CallRecord
from ..execution import dag
from ..execution.snapshot import ChangeJson
from .row import ViolationJson

MAX_VALUE = 300
MAX_TEXT = 800  # the model's own text: longer, it is what explains a turn without a call


def clean(text: str, limit: int = MAX_VALUE) -> str:
    """``text`` made safe for a report: at most ``limit`` characters kept, on one
    line, control and invisible characters escaped; a marker says how much was cut."""
    cut = len(text) - limit
    kept = text[:limit] if cut > 0 else text
    return escape(kept) + (f" [... {cut} more characters cut]" if cut > 0 else "")


def shorten(value: object) -> str:
    if isinstance(value, str):
        return clean(value)
    # The JSON text measured and cut without being built: folders shared by many paths
    # (dag.py) make it far longer than the state it shows.
    size = dag.text_size(value, "json")
    text = dag.text_prefix(value, MAX_VALUE, "json")
    cut = size - len(text)
    return clean(text) + (f" [... {cut} more characters cut]" if cut > 0 else "")


def format_change(change: ChangeJson) -> list[str]:
    path = ".".join(change["path"])
    lines = []
    if change["before"] != "<absent>":
        lines.append(f"    - {path}: {shorten(change['before'])}")
    if change["after"] != "<absent>":
        lines.append(f"    + {path}: {shorten(change['after'])}")
    return lines


def format_violations(rule: str, violations: Sequence[ViolationJson]) -> str:
    lines = [f"{rule}: {len(violations)}"]
    for violation in violations:
        where = f"turn {violation['turn']}" + (f", step {violation['step']}" if violation["step"] is not None else "")
        lines.append(f"  {where}: {clean(violation['call'] or violation['note'] or '', MAX_TEXT)}")
        if violation["call"]:
            reference = ", ".join(violation["reference_calls"]) or "(none)"
            lines.append(f"    reference calls of this function in the turn: {reference}")
            if violation["note"]:
                lines.append(f"    {clean(violation['note'], MAX_TEXT)}")  # may quote the model
        for change in violation["changes"]:
            lines.extend(format_change(change))
    return "\n".join(lines)


def format_bfcl_failure(evaluation: Evaluation) -> str:
    verdict = evaluation.verdict
    lines = [f"BFCL: {verdict.error_type}", f"  {verdict.error_message}"]
    for attr, pair in verdict.details.differences.items():
        lines.append(f"  - reference {attr}: {shorten(plain_data(pair['ground_truth']))}")
        lines.append(f"  + model     {attr}: {shorten(plain_data(pair['model']))}")
    for missing in verdict.details.missing_items:
        lines.append(f"  - missing reference result: {shorten(missing)}")
    if verdict.turn is not None and verdict.turn < len(evaluation.reference.turns):
        reference = [c.call for c in evaluation.reference.turns[verdict.turn].calls]
        model = (
            [c.shown_call for c in evaluation.replay.turns[verdict.turn].calls]
            if verdict.turn < len(evaluation.replay.turns)
            else []
        )
        lines.append(f"  reference calls, turn {verdict.turn}: {', '.join(reference) or '(none)'}")
        lines.append(f"  model calls,     turn {verdict.turn}: {', '.join(model) or '(none)'}")
    return "\n".join(lines)


def plain_data(value: object) -> object:
    return dag.normalise(value)


def transcript(evaluation: Evaluation) -> str:
    """The replayed conversation, turn by turn: the model's calls and results, the
    steps that made no call with the model's text (where the file records it),
    and the reference's calls."""
    conversation = evaluation.conversation
    lines = [
        f"{conversation.id} ({', '.join(conversation.involved_classes)})",
        f"BFCL: {'pass' if evaluation.verdict.valid else evaluation.verdict.error_type}",
    ]
    if evaluation.entry is not None and isinstance(evaluation.entry.result, str):
        lines.append(f"inference error: {clean(evaluation.entry.result, MAX_TEXT)}")
    for index, turn in enumerate(evaluation.replay.turns):
        asked = (
            [m.get("content", "") for m in conversation.questions[index]] if index < len(conversation.questions) else []
        )
        lines.append(f"--- turn {index}: {shorten(' '.join(asked)) or '(no new user message)'}")
        lines.extend(line for _, line in sorted(_turn_lines(evaluation, index, turn.calls), key=lambda p: p[0]))
        reference = [c.call for c in evaluation.reference.turns[index].calls]
        lines.append(f"  reference: {', '.join(reference) or '(no call)'}")
    return "\n".join(lines)


def _turn_lines(evaluation: Evaluation, turn: int, calls: list[CallRecord]) -> list[tuple[int, str]]:
    """One turn's lines, each with the raw step it comes from (for ordering)."""
    run = evaluation.run
    raw_index = run.raw_index[turn] if run and turn < len(run.raw_index) else []
    lines = [
        (
            raw_index[c.step] if c.step < len(raw_index) else c.step,
            f"  [{c.step}] {clean(c.shown_call, MAX_TEXT)}  ->  {shorten(c.result)}  ({c.status})",
        )
        for c in calls
    ]
    reasoning = _reasoning(evaluation, turn)
    for step in run.no_calls[turn] if run and turn < len(run.no_calls) else []:
        lines.append((step.index, _no_call_line(step)))
        thought = reasoning[step.index] if step.index < len(reasoning) else None
        if isinstance(thought, str) and thought.strip():
            lines.append((step.index, f"      reasoning: {clean(thought, MAX_TEXT)}"))
    return lines


def _no_call_line(step: NoCallStep) -> str:
    if step.text is not None:
        return f"  (no call) text: {clean(step.text, MAX_TEXT)}"
    if step.error is not None:
        return f"  (not decoded: {step.error}) step: {shorten(step.raw)}"
    return "  (no call; the result file records no text for this step)"


def _reasoning(evaluation: Evaluation, turn: int) -> list[object]:
    """The turn's per-step reasoning, where BFCL logged it (reasoning models only)."""
    logged = evaluation.entry.raw.get("reasoning_content") if evaluation.entry is not None else None
    turns = logged if isinstance(logged, list) else []
    steps = turns[turn] if turn < len(turns) else []
    return steps if isinstance(steps, list) else []


__all__ = ["format_bfcl_failure", "format_change", "format_violations", "transcript", "pprint"]
