"""Readable evidence: BFCL failures, rule violations as -/+ diffs, transcripts."""

from __future__ import annotations

import json
import pprint
from typing import Any

from .results import Evaluation

MAX_VALUE = 300


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=repr, ensure_ascii=False)
    return text if len(text) <= MAX_VALUE else text[:MAX_VALUE] + f"... ({len(text)} chars)"


def format_change(change: dict[str, Any]) -> list[str]:
    path = ".".join(change["path"])
    lines = []
    if change["before"] != "<absent>":
        lines.append(f"    - {path}: {_short(change['before'])}")
    if change["after"] != "<absent>":
        lines.append(f"    + {path}: {_short(change['after'])}")
    return lines


def format_violations(rule: str, violations: list[dict[str, Any]]) -> str:
    lines = [f"{rule}: {len(violations)}"]
    for violation in violations:
        where = f"turn {violation['turn']}" + (f", step {violation['step']}" if violation["step"] is not None else "")
        lines.append(f"  {where}: {violation['call'] or violation['note']}")
        if violation["call"]:
            reference = ", ".join(violation["reference_calls"]) or "(none)"
            lines.append(f"    reference calls of this function in the turn: {reference}")
            if violation["note"]:
                lines.append(f"    {violation['note']}")
        for change in violation["changes"]:
            lines.extend(format_change(change))
    return "\n".join(lines)


def format_bfcl_failure(evaluation: Evaluation) -> str:
    verdict = evaluation.verdict
    lines = [f"BFCL: {verdict.error_type}", f"  {verdict.error_message}"]
    differences = verdict.details.get("differences", {})
    for attr, pair in differences.items():
        lines.append(f"  - reference {attr}: {_short(_plain(pair['ground_truth']))}")
        lines.append(f"  + model     {attr}: {_short(_plain(pair['model']))}")
    for missing in verdict.details.get("missing_items", []):
        lines.append(f"  - missing reference result: {_short(missing)}")
    if verdict.turn is not None and verdict.turn < len(evaluation.reference.turns):
        reference = [c.call for c in evaluation.reference.turns[verdict.turn].calls]
        model = [c.call for c in evaluation.replay.turns[verdict.turn].calls] if verdict.turn < len(evaluation.replay.turns) else []
        lines.append(f"  reference calls, turn {verdict.turn}: {', '.join(reference) or '(none)'}")
        lines.append(f"  model calls,     turn {verdict.turn}: {', '.join(model) or '(none)'}")
    return "\n".join(lines)


def _plain(value: Any) -> Any:
    from .snapshot import normalise

    return normalise(value)


def transcript(evaluation: Evaluation) -> str:
    conversation = evaluation.conversation
    run = evaluation.run
    lines = [f"{conversation.id} ({', '.join(conversation.involved_classes)})",
             f"BFCL: {'pass' if evaluation.verdict.valid else evaluation.verdict.error_type}"]
    for index, turn in enumerate(evaluation.replay.turns):
        asked = [m.get("content", "") for m in conversation.questions[index]] if index < len(conversation.questions) else []
        lines.append(f"--- turn {index}: {_short(' '.join(asked)) or '(no new user message)'}")
        for call in turn.calls:
            lines.append(f"  [{call.step}] {call.call}  ->  {_short(call.result)}  ({call.status})")
        for text in (run.texts[index] if run and index < len(run.texts) else []):
            lines.append(f"  text: {_short(text)}")
        reference = [c.call for c in evaluation.reference.turns[index].calls]
        lines.append(f"  reference: {', '.join(reference) or '(no call)'}")
    return "\n".join(lines)


__all__ = ["format_bfcl_failure", "format_change", "format_violations", "transcript", "pprint"]
