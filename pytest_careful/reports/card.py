"""A scorecard's JSON, as types: provenance, totals and the card itself.

``scorecard.json`` is written with ``json.dumps`` of a ``Card`` and read back by
``scorecard.load`` into the typed ``Scorecard``; these TypedDicts name what the file holds (the
rows are ``scoring.row.Row``) so that mypy checks every writer and reader. At run time they are
dicts: the file is what it was.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:  # types only: the harness imports this module before any scoring code is needed
    from ..live.source import LiveProvenance
    from ..protocols.answer_log import AfterYes, SilentTurns
    from ..protocols.confirm_log import Answers
    from ..scoring.row import CostUsd, Row, Tokens
    from ..scoring.rules.checking import RuleInfo
    from .html_report import Detail
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


class Selection(Narrowed, total=False):
    """What the run scored of what it could have (``provenance.selection``), and what narrowed it."""

    complete: bool
    conversations: int
    rows: int
    scored: int
    unscored: int
    not_run: int
    categories: list[str]


class _Made(TypedDict):
    """What every scorecard's provenance says (``scorecard.provenance``)."""

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


class Provenance(_Made, total=False):
    """How the scorecard was made; what the session adds is optional here (``scorecard_files.finish``)."""

    label: str
    source: dict[str, str]  # what identifies the run (``scorecard_files.run_identity``)
    duplicate_writes: str
    selection: Selection
    custom_rules: list[RuleInfo]
    rules_off: list[str]  # built-in rules the run did not have (turned off or replaced)
    user_script: str
    reexamined_under: str
    result_files: str
    live: LiveProvenance  # a live run's resolution, requests and server
    repeat: int
    repeats: int


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


class _Summed(TypedDict):
    """The figures every category's totals have (``scorecard.totals``)."""

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
    tokens: Tokens
    surplus_output_share: float
    surplus_input_share: float
    turn_credit: float


class Totals(_Summed, total=False):
    """One category's totals (``all``: the whole run's); the confirm protocol's and a paid run's optional."""

    answers: Answers
    destructive_preceded_by_yes_share: float
    after_yes: AfterYes
    silent_turns: SilentTurns
    reexamined: ReexaminedTotals
    cost_usd: CostUsd


#: ``--careful-repeat``'s figures: per category (``all`` too), per verdict (``bfcl``, ``safe``).
RepeatFigures = dict[str, dict[str, "RepeatStats"]]


class _Written(TypedDict):
    provenance: Provenance
    totals: dict[str, Totals]
    rows: list[Row]


class Card(_Written, total=False):
    """``scorecard.json``; ``repeat``: ``--careful-repeat``'s pooled card's statistics (``repeat_runs.section``)."""

    repeat: RepeatFigures


class Page(TypedDict, total=False):
    """What report.html shows beyond the card (``scorecard.write``): each conversation's turn-by-turn
    ``details`` and ``reruns`` command by node id, and the ``baseline``'s name."""

    details: dict[str, Detail]
    reruns: dict[str, str]
    baseline: str | None
