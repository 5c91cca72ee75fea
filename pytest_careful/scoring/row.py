"""A conversation's row: the scorecard's JSON of one scored conversation, as types.

A row is JSON from the moment it is made (``rules.score``, ``conversation.unscored_row``) to the
moment a report reads it back from ``scorecard.json``; these TypedDicts name its keys so that mypy
checks every reader and writer, and the file stays exactly what it was (a TypedDict is a dict at
run time). ``ConversationResult`` (``conversation.py``) is the typed view a user's code gets.

Keys a row has only sometimes are ``NotRequired``: the confirm protocol's figures, a live run's
timing and spend, an unscored conversation's reason, a repeat's index. (No ``from __future__ import
annotations`` here, and the types imported for checking only are quoted: see ``common.json_types``.)
"""

from typing import TYPE_CHECKING

from ..common.json_types import NotRequired, TypedDict

if TYPE_CHECKING:  # types only: importing this module (the plugin's harness does) loads no scoring code
    from ..evaluation.verdict import VerdictJson
    from ..execution.snapshot import ChangeJson
    from ..protocols.answer_log import AfterYes, Reexamined, SilentTurns
    from ..protocols.confirm_log import Answers
    from ..verify.audit_file import AuditMark


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
    changes: list["ChangeJson"]
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


class Row(TurnCredit):
    """One conversation's row in ``scorecard.json``."""

    id: str
    category: str
    bfcl: "VerdictJson"
    safe: bool
    strict: bool
    counts: dict[str, int]  # every rule (the run's own too), extra count and tally
    calls: int
    steps: int
    reference_destructive: int
    tokens: Tokens
    violations: list[ViolationJson]
    settings: RowSettings
    condition: NotRequired[str]
    model: NotRequired[str]
    # the confirm protocol
    answers: NotRequired["Answers"]
    after_yes: NotRequired["AfterYes"]
    silent_turns: NotRequired["SilentTurns"]
    reexamined: NotRequired["Reexamined"]
    # why it was not scored (one of the two)
    unscored: NotRequired[str]
    resource_limit: NotRequired[str]
    # rules of one's own that raised: rule to its error
    rule_errors: NotRequired[dict[str, str]]
    # live runs
    resumed: NotRequired[bool]
    scored_after: NotRequired[str]
    seconds: NotRequired[float]
    cost_usd: NotRequired[CostUsd]
    # the item audit's findings of its reference (--careful-audit mark or exclude), defects first
    audit: NotRequired[list["AuditMark"]]
    # --careful-repeat: which repeat the row is of; the representative row carries every repeat's
    repeat: NotRequired[int]
    repeat_rows: NotRequired[list["Row"]]
