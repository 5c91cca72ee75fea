"""The run's rules: gathered and checked before anything is scored, then run on each conversation.

``collect`` takes what ``pytest_careful_rules`` implementations returned (the plugin's own gives
the built-in rules) and refuses, in one line, a rule that cannot be used. ``run`` checks every
rule on one conversation; a rule that raises costs the conversation nothing else.
"""

from __future__ import annotations

import re
import traceback
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict, cast

from ...evaluation.replay import json_safe
from ..row import ViolationJson
from .rule import ModelCall, Rule, ScoredConversation, Violation

if TYPE_CHECKING:
    from ...evaluation.evaluate import Evaluation

#: Words the row, the scorecard, JUnit and the report already use for other things.
RESERVED = frozenset({"bfcl", "safe", "strict", "rules", "none", "turns", "model", "id"})
_NAME = re.compile(r"[a-z][a-z0-9_]{0,47}")
#: Violations a rule may file per conversation beyond one per call and per turn: more is a runaway
#: rule, not evidence (a rule that flags every call of a 5,000-call conversation is not).
MAX_VIOLATIONS = 1_000


class RuleError(Exception):
    """A rule that cannot be used (its name, its type, a clash): a user's mistake, said in one line."""


def collect(
    returned: Iterable[Iterable[object] | Rule | type | None],
    where: str = "pytest_careful_rules",
    built_in: Sequence[Rule] = (),
) -> tuple[Rule, ...]:
    """The rules the hook returned (lists of rules or of Rule subclasses), checked; RuleError otherwise.

    ``built_in``: the plugin's own rules among them, named apart when a rule clashes with one.
    """
    found: list[Rule] = []
    for result in returned:
        if result is None:
            continue
        for rule in [result] if isinstance(result, (Rule, type)) else result:
            found.append(_instance(rule, where))
    return check_names(found, where, built_in)


def check_names(rules: Sequence[Rule], where: str, built_in: Sequence[Rule] = ()) -> tuple[Rule, ...]:
    """``rules`` if each name and tally is taken once; RuleError naming the clash otherwise."""
    taken: dict[str, Rule] = {}
    for rule in rules:
        for name in (rule.name, *rule.tallies):
            other = taken.get(name)
            if other is not None:
                raise RuleError(_clash(where, name, other, rule, built_in))
            taken[name] = rule
    return tuple(rules)


def _clash(where: str, name: str, first: Rule, second: Rule, built_in: Sequence[Rule]) -> str:
    ours = next((r for r in (first, second) if any(r is b for b in built_in)), None)
    if ours is None:
        return f"{where}: two rules are named {name} ({_origin(first)}, {_origin(second)})"
    theirs = second if ours is first else first
    return (
        f"{where}: rule {_origin(theirs)} is named {name}, as the built-in rule {type(ours).__name__} is: "
        "choose another name, or replace the built-in one in pytest_careful_modify_rules (docs/extending.md)"
    )


def _origin(rule: Rule) -> str:
    return f"{type(rule).__name__} ({type(rule).__module__})"


def _instance(rule: object, where: str) -> Rule:
    if isinstance(rule, type) and issubclass(rule, Rule):
        rule = rule()
    if not isinstance(rule, Rule):
        raise RuleError(f"{where} returned {rule!r}, not a pytest_careful.Rule")
    label = f"{where}: rule {type(rule).__name__}"
    for name in (rule.name, *_tallies(rule, label)):
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise RuleError(f"{label}: name {name!r} is not snake_case (a-z, 0-9, _; at most 48 characters)")
        if name in RESERVED:
            raise RuleError(f"{label}: name {name!r} is a built-in count or verdict")
    for flag in ("gated", "strict", "evidence"):
        if not isinstance(getattr(rule, flag), bool):
            raise RuleError(f"{label}: {flag} must be True or False, not {getattr(rule, flag)!r}")
    if not isinstance(rule.description, str):
        raise RuleError(f"{label}: description must be a string")
    if type(rule).check is Rule.check:
        raise RuleError(f"{label}: no check(conversation) method")
    return rule


def _tallies(rule: Rule, label: str) -> tuple[str, ...]:
    if not isinstance(rule.tallies, tuple):
        raise RuleError(f"{label}: tallies must be a tuple of names, not {rule.tallies!r}")
    return rule.tallies


def gate_names(gate: str, rules: Sequence[Rule]) -> tuple[str, ...]:
    """The rules an item fails on under ``gate``: ``safe`` the gated ones, ``strict`` those and the
    strict ones, ``rules`` every one; ``bfcl`` and ``none`` none."""
    if gate == "safe":
        return tuple(r.name for r in rules if r.gated)
    if gate == "strict":
        return tuple(r.name for r in rules if r.gated or r.strict)
    return tuple(r.name for r in rules) if gate == "rules" else ()


class RuleInfo(TypedDict):
    """A rule of one's own as a scorecard's provenance lists it (``custom_rules``)."""

    name: str
    description: str
    gated: bool


def describe(rules: Sequence[Rule]) -> list[RuleInfo]:
    """What a scorecard's provenance says of the run's rules of its own (``custom_rules``)."""
    return [{"name": r.name, "description": r.description, "gated": r.gated} for r in rules]


@dataclass
class Found:
    """What one rule found in one conversation."""

    rule: Rule
    violations: list[Violation] = field(default_factory=list)
    tallies: Mapping[str, int] = field(default_factory=dict)
    error: str | None = None

    @property
    def broken(self) -> bool:
        """Broken, or could not tell (a rule that raised fails closed)."""
        return bool(self.violations) or self.error is not None


def run(rules: Sequence[Rule], conversation: ScoredConversation) -> list[Found]:
    """Every rule on one conversation, in order."""
    return [_run_one(rule, conversation) for rule in rules]


def _run_one(rule: Rule, conversation: ScoredConversation) -> Found:
    try:
        violations = _violations(rule, conversation)
        return Found(rule, violations, _tally(rule, conversation, violations))
    except Exception as exc:  # noqa: BLE001 -- a rule's error is reported on its row, not raised
        return Found(rule, error=_error_text(exc))


def _violations(rule: Rule, conversation: ScoredConversation) -> list[Violation]:
    found = rule.check(conversation)
    if found is None:
        return []
    out = []
    most = MAX_VIOLATIONS + len(conversation.calls) + conversation.turns
    for violation in found:
        if not isinstance(violation, Violation):
            raise TypeError(f"check yielded {type(violation).__name__}, not a pytest_careful.Violation")
        if violation.call is not None and not isinstance(violation.call, ModelCall):
            raise TypeError(
                f"a Violation's call is a {type(violation.call).__name__}, not one of the conversation's calls"
            )
        out.append(violation)
        if len(out) > most:
            raise ValueError(
                f"more than {most} violations in one conversation ({MAX_VIOLATIONS} beyond its calls and turns)"
            )
    return out


def _tally(rule: Rule, conversation: ScoredConversation, violations: Sequence[Violation]) -> dict[str, int]:
    figures = dict(rule.tally(conversation, violations) or {})
    unknown = sorted(set(figures) - set(rule.tallies))
    if unknown:
        raise ValueError(f"tally gave {', '.join(map(str, unknown))}, not among the rule's tallies")
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in figures.values()):
        raise TypeError("tally gave a figure that is not an int")
    return figures


def zero(rules: Sequence[Rule], conversation: ScoredConversation) -> dict[str, int]:
    """An unscored row's counts: each rule at zero, and the tallies each counts on an empty conversation."""
    counts: dict[str, int] = {}
    for rule in rules:
        counts[rule.name] = 0
        try:
            counts.update(_tally(rule, conversation, []))
        except Exception:  # noqa: BLE001,S112 -- an unscored row has no figure to lose
            continue
    return counts


def _error_text(exc: BaseException) -> str:
    """``TypeError: ... (conftest.py:12, in check)``: the rule's own line, not the plugin's."""
    frames = _own_frames(exc)
    where = f" ({frames[-1].filename}:{frames[-1].lineno}, in {frames[-1].name})" if frames else ""
    return f"{type(exc).__name__}: {str(exc)[:300]}{where}"


def _own_frames(exc: BaseException) -> list[traceback.FrameSummary]:
    here = __file__.rsplit(".", 1)[0]
    return [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(here)]


def _violation_json(fields: dict[str, object]) -> ViolationJson:
    """``fields`` as JSON holds them (``json_safe``): the same keys, each value made JSON-safe."""
    return cast(ViolationJson, json_safe(fields))


def entry(rule: str, violation: Violation, evaluation: Evaluation) -> ViolationJson:
    """A violation as the row holds it: the call, the reference's calls of its function, the state diff.

    A violation without a call names its turn, and the reference's calls of that turn.
    """
    message = str(violation.message)[:2_000]
    reference = evaluation.reference.turns
    if violation.call is None:
        turn = violation.turn
        in_turn = reference[turn].calls if isinstance(turn, int) and 0 <= turn < len(reference) else []
        return _violation_json(
            {
                "rule": rule,
                "turn": turn,
                "step": None,
                "call": "",
                "arguments": {},
                "reference_calls": [c.call for c in in_turn],
                "changes": [],
                "note": message,
            }
        )
    record = violation.call.record
    in_turn = reference[record.turn].calls if record.turn < len(reference) else []
    return _violation_json(
        {
            "rule": rule,
            "turn": record.turn,
            "step": record.step,
            "call": record.shown_call,
            "arguments": record.shown_arguments,
            "reference_calls": [c.call for c in in_turn if c.name == record.name],
            "changes": [c.to_json() for c in record.changes],
            "note": message,
        }
    )
