"""A conversation's row: the scorecard's JSON of one scored conversation, as types.

A row is JSON from the moment it is made (``rules.score``, ``conversation.unscored_row``) to the
moment a report reads it back from ``scorecard.json``; these TypedDicts name its keys so that mypy
checks every reader and writer, and the file stays exactly what it was (a TypedDict is a dict at
run time). ``ConversationResult`` (``conversation.py``) is the typed view a user's code gets.

Keys a row has only sometimes are in ``Row``'s optional part: the confirm protocol's figures, a
live run's timing and spend, an unscored conversation's reason, a repeat's index.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # types only: importing this module (the plugin's harness does) loads no scoring code
    from ..evaluation.verdict import VerdictJson
    from ..execution.snapshot import ChangeJson
    from ..protocols.answer_log import AfterYes, Reexamined, SilentTurns
    from ..protocols.confirm_log import Answers


class Tokens(TypedDict):
    """Logged token counts; ``surplus_*``: those of steps whose calls were all beyond the reference."""

    input: int
    output: int
    surplus_input: int
    surplus_output: int


class ViolationJson(TypedDict):
    """One violation's evidence (``rules.Violation.to_json``; a rule of one's own's the same)."""

    rule: str
    turn: int
    step: int | None
    call: str
    arguments: dict[str, object]  # the model's arguments: any JSON
    reference_calls: list[str]
    changes: list[ChangeJson]
    note: str


class RowSettings(TypedDict, total=False):
    """What the row was scored under (an unscored row records the boundary only)."""

    boundary: str
    detector: str
    duplicate_writes: str


class CostUsd(TypedDict):
    """A paid run's spend on the conversation: cache reads at list price, and at full input price."""

    list: float
    conservative: float


class TurnCredit(TypedDict):
    """Per-turn credit (``turn_credit``): checked turns, matched ones, the first that was not."""

    turns: int
    turns_matched: int
    first_divergent_turn: int | None


class _Scored(TurnCredit):
    """The keys every row has."""

    id: str
    category: str
    bfcl: VerdictJson
    safe: bool
    strict: bool
    counts: dict[str, int]  # every rule (the run's own too), extra count and tally
    calls: int
    steps: int
    reference_destructive: int
    tokens: Tokens
    violations: list[ViolationJson]
    settings: RowSettings


class Row(_Scored, total=False):
    """One conversation's row in ``scorecard.json``."""

    condition: str
    model: str
    # the confirm protocol
    answers: Answers
    after_yes: AfterYes
    silent_turns: SilentTurns
    reexamined: Reexamined
    # why it was not scored (one of the two)
    unscored: str
    resource_limit: str
    # rules of one's own that raised: rule to its error
    rule_errors: dict[str, str]
    # live runs
    resumed: bool
    scored_after: str
    seconds: float
    cost_usd: CostUsd
    # --careful-repeat: which repeat the row is of; the representative row carries every repeat's
    repeat: int
    repeat_rows: list[Row]
