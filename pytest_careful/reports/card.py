"""A scorecard's JSON, as types: provenance, totals and the card itself; and the detail of each
conversation that the workers write beside it for report.html.

``scorecard.json`` is written with ``json.dumps`` of a ``Card`` and read back by
``scorecard.load`` into the typed ``Scorecard``; these TypedDicts name what the file holds (the
rows are ``scoring.row.Row``) so that mypy checks every writer and reader. At run time they are
dicts: the file is what it was. (No ``from __future__ import annotations`` here, and the types
imported for checking only are quoted: see ``common.json_types``.)
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..common.json_types import NotRequired, TypedDict

if TYPE_CHECKING:  # types only: the harness imports this module before any scoring code is needed
    from ..live.provenance import LiveProvenance
    from ..protocols.answer_log import AfterYes, SilentTurns
    from ..protocols.confirm_log import Answers
    from ..scoring.row import CostUsd, Row, Tokens
    from ..scoring.rules.checking import RuleInfo
    from .repeat_stats import RepeatStats


class Narrowed(TypedDict, total=False):
    """What narrowed a run (``selection.describe``), where something did."""

    node_ids: list[str]
    keyword: str
    markexpr: str
    deselect: list[str]
    last_failed: bool
    stepwise: bool
    exitfirst_or_maxfail: int


class EntriesJson(TypedDict, total=False):
    """A logged run's ``provenance.selection``: of the conversations of the categories read, those its
    result files hold an entry (or an unreadable line) for, and those they hold nothing of."""

    present: int
    missing: int


class SelectionJson(Narrowed, EntriesJson, total=False):
    """``provenance.selection``: what the run scored of what it could have, and what narrowed it
    (the conversations named on the command line are ``harness.selection.Selection``)."""

    complete: bool
    conversations: int
    rows: int
    scored: int
    unscored: int
    not_run: int
    categories: list[str]


class AuditProvenance(TypedDict):
    """``provenance.audit``: the item audit the run carried (absent: ``--careful-audit=off``, or an older scorecard)."""

    mode: str  # mark or exclude
    sha256: str  # of the audit.json the rows were marked from
    bfcl_eval: str  # the version it audited


class Provenance(TypedDict):
    """How the scorecard was made (``scorecard.provenance``); what the session adds is optional
    (``scorecard_files.finish``)."""

    plugin_version: str
    git_sha: str
    bfcl_eval_version: str
    dataset: str
    declarations: str
    boundary: str
    detector: str
    protocol: str
    model: str
    handler: str
    sampling: str
    date: str
    label: NotRequired[str]
    source: NotRequired[dict[str, str]]  # what identifies the run (``scorecard_files.run_identity``)
    duplicate_writes: NotRequired[str]
    selection: NotRequired[SelectionJson]
    #: with a baseline: the verdict its comparison paired (``--careful-regression-verdict``; before
    #: that option, BFCL's: a scorecard without the key compared ``bfcl``)
    regression_verdict: NotRequired[str]
    custom_rules: NotRequired[list["RuleInfo"]]
    rules_off: NotRequired[list[str]]  # built-in rules the run did not have (turned off or replaced)
    user_script: NotRequired[str]
    reexamined_under: NotRequired[str]
    result_files: NotRequired[str]
    live: NotRequired["LiveProvenance"]  # a live run's resolution, requests and server
    repeat: NotRequired[int]
    repeats: NotRequired[int]
    audit: NotRequired[AuditProvenance]


class ReexaminedTotals(TypedDict, total=False):
    """A re-examined confirm run's answers, summed; the gained/lost figures only against a baseline."""

    script: str
    yes: int
    withheld_yes: int
    conversations_with_withheld: int
    gained: int
    lost: int
    gained_with_withheld: int
    lost_with_withheld: int


class AuditFigures(TypedDict):
    """BFCL accuracy and success under effect safety over a set of conversations."""

    conversations: int
    bfcl_pass: int
    safe_pass: int
    bfcl_accuracy: float
    safe_accuracy: float


class AuditTotals(TypedDict):
    """The figures twice: on every conversation, and on those whose reference has no defect (``audit.json``)."""

    defect_items: int
    all: AuditFigures
    no_defect: AuditFigures


class Totals(TypedDict):
    """One category's totals (``all``: the whole run's); the confirm protocol's and a paid run's optional."""

    conversations: int
    unscored: int
    bfcl_pass: int
    safe_pass: int
    strict_pass: int
    strict_pass_needing_destructive: int
    needing_destructive: int
    bfcl_accuracy: float
    safe_accuracy: float
    counts: dict[str, int]
    calls: int
    steps_per_conversation: float
    tokens: "Tokens"
    surplus_output_share: float
    surplus_input_share: float
    turn_credit: float
    answers: NotRequired["Answers"]
    destructive_preceded_by_yes_share: NotRequired[float]
    after_yes: NotRequired["AfterYes"]
    silent_turns: NotRequired["SilentTurns"]
    reexamined: NotRequired[ReexaminedTotals]
    cost_usd: NotRequired["CostUsd"]
    audit: NotRequired[AuditTotals]  # the item audit on (under exclude, the figures above leave the defects out)


#: ``--careful-repeat``'s figures: per category (``all`` too), per verdict (``bfcl``, ``safe``).
RepeatFigures = dict[str, dict[str, "RepeatStats"]]


class Card(TypedDict):
    """``scorecard.json``; ``repeat``: ``--careful-repeat``'s pooled card's statistics (``repeat_runs.section``)."""

    provenance: Provenance
    totals: dict[str, Totals]
    rows: list["Row"]
    repeat: NotRequired[RepeatFigures]


# --- report.html's detail of each conversation (the sidecar files) -------------------------


class Step(TypedDict, total=False):
    """One entry of a turn's model or reference column: a ``call``, a ``text`` step without a call,
    or ``more`` (the calls left out); ``order``: where the model made it among the turn's steps."""

    kind: str
    order: int
    step: int | None
    call: str
    result: str
    status: str
    text: str | None
    error: str | None


class StateChange(TypedDict):
    """Where the model's state after a turn differs from the reference's (None: absent on that side)."""

    path: str
    reference: str | None
    model: str | None


class TurnDetail(TypedDict):
    index: int
    request: str
    model: list[Step]
    model_ran: bool
    reference: list[Step]
    state_diff: list[StateChange]


class Detail(TypedDict):
    """One conversation's turn-by-turn detail, as a worker writes it to the sidecar
    (``html_report.DetailSink``); ``error``: why it could not be made (the page says so, the score
    is unaffected)."""

    classes: list[str]
    turns: list[TurnDetail]
    inference_error: str | None
    error: NotRequired[str]


@dataclass(frozen=True)
class Page:
    """What report.html shows beyond the card (``scorecard.write``): each conversation's turn-by-turn
    ``details`` and ``reruns`` command by node id, and the ``baseline``'s name. It never leaves the
    process: a dataclass, not a JSON contract."""

    details: dict[str, Detail] | None = None
    reruns: dict[str, str] | None = None
    baseline: str | None = None
