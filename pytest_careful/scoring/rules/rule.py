"""A rule and what it sees: ``Rule``, ``Violation``, ``ScoredConversation`` and ``ModelCall``.

The built-in rules (one module each in this package) and a user's rules (``pytest_careful_rules``)
are the same kind of object and see the same conversation: the model's calls in order, each
with its effect under the run's boundary and its declared facts, the reference's calls beside
them, each turn's model text and the scripted user's yeses. See docs/extending.md.
"""

from __future__ import annotations

import copy
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ...effects.declarations import DESTRUCTIVE, READ, WRITE, Declaration, Declarations
from ...evaluation.replay import ERROR_FIELD, RAISED, REFUSED, CallRecord
from ...execution.snapshot import ChangeJson

if TYPE_CHECKING:
    from ...evaluation.evaluate import Evaluation

#: Call outcomes a rule calls failed: raised, refused (no such function, not a literal), an error field.
FAILED_STATUSES = (RAISED, REFUSED, ERROR_FIELD)


class ModelCall:
    """One executed call, as a rule sees it.

    Attributes:
        turn: the user turn (0-based).
        step: the model's response within the turn (0-based, as the row's violations count it).
        position: the call's place within its step (0-based).
        name: the function called.
        arguments: the call's arguments (a copy: a rule cannot change what the row shows).
        signature: hashable, equal for two calls of one function with equal arguments.
        result: what the simulator returned, as BFCL's executor records it (a string).
        status: ``ok``, ``raised``, ``refused`` (no such function, or not a literal call),
            ``error_field`` (returned an error) or ``false_status`` (returned a false status flag).
        failed: whether the call raised, was refused or returned an error (a false status flag,
            a failed login say, is an answer, not a failure).
        changed_state: whether the call changed any state, hidden state (the current folder) included.
        changes: its state diff, one ``{"path", "before", "after"}`` per changed leaf.
        effect: ``destructive`` (in the run's boundary), ``write`` (any declared write, the
            hidden-only ``cd`` included) or ``read`` (anything else, undeclared names too).
        declared: whether the declarations know the function (a name that exists in none of the
            conversation's classes does not).
        writes: a declared write (its successful calls may change state; ``cd`` included).
        idempotent: a declared write whose repeat changes nothing (True for reads).
        hidden_only: a declared write that changes only state BFCL never compares (``cd``).
        footprint: the state attributes the function's calls change (declared).
    """

    __slots__ = ("_record", "_effect", "_declaration", "_arguments", "_changes")

    def __init__(self, record: CallRecord, effect: str, declaration: Declaration | None) -> None:
        self._record = record
        self._effect = effect
        self._declaration = declaration
        self._arguments: dict[str, object] | None = None
        self._changes: list[ChangeJson] | None = None

    @property
    def turn(self) -> int:
        return self._record.turn

    @property
    def step(self) -> int:
        return self._record.step

    @property
    def position(self) -> int:
        return self._record.position

    @property
    def name(self) -> str:
        return self._record.name

    @property
    def arguments(self) -> dict[str, object]:
        if self._arguments is None:
            self._arguments = copy.deepcopy(self._record.arguments)
        return self._arguments

    @property
    def signature(self) -> tuple[str, Hashable]:
        return self._record.name, self._record.arguments_key

    @property
    def result(self) -> str:
        return self._record.result

    @property
    def status(self) -> str:
        return self._record.status

    @property
    def failed(self) -> bool:
        return self._record.status in FAILED_STATUSES

    @property
    def changed_state(self) -> bool:
        return self._record.changed_state

    @property
    def changes(self) -> list[ChangeJson]:
        if self._changes is None:  # the diff is computed on first use: most rules never ask
            self._changes = [c.to_json() for c in self._record.changes]
        return self._changes

    @property
    def effect(self) -> str:
        return self._effect

    @property
    def declared(self) -> bool:
        return self._declaration is not None

    @property
    def writes(self) -> bool:
        return self._declaration is not None and self._declaration.is_write

    @property
    def idempotent(self) -> bool:
        return self._declaration.idempotent if self._declaration is not None else True

    @property
    def hidden_only(self) -> bool:
        return self._declaration is not None and self._declaration.hidden_only

    @property
    def footprint(self) -> tuple[str, ...]:
        return self._declaration.footprint if self._declaration is not None else ()

    @property
    def call(self) -> str:
        """The call as the model wrote it (long literals cut, as rows quote it)."""
        return self._record.shown_call

    @property
    def record(self) -> CallRecord:
        """The replay's record of the call (for the row's evidence; a rule reads the properties above)."""
        return self._record

    def __repr__(self) -> str:
        return f"<ModelCall turn {self.turn} step {self.step}: {self.call}>"


@dataclass(frozen=True)
class ScoredConversation:
    """One replayed conversation, as a rule sees it.

    Attributes:
        id: the BFCL id (``multi_turn_base_0``).
        category: ``multi_turn_base`` and so on.
        condition: the protocol it ran under (``standard``, ``hints``, ``confirm``).
        bfcl_pass: BFCL's own verdict.
        calls: the model's calls, in order.
        reference_calls: the reference's calls, in order.
        turns: how many user turns the conversation has.
        texts: per turn, the model's text in each response that made no call (what the question
            detector reads; ``pytest_careful.asking_sentences``).
        confirmations: per turn, the steps after which the scripted user said yes (the ``confirm``
            protocol; empty elsewhere). A call at a later step of the turn was confirmed.
        boundary: the destructive functions under the run's ``--careful-boundary``.
        evaluation: the decoded, replayed, checked conversation itself (None for an unscored one),
            for a rule that replays variants of the trace (``verified_surplus_calls``); a rule that
            only counts reads the fields above.
    """

    id: str
    category: str
    condition: str
    bfcl_pass: bool
    calls: tuple[ModelCall, ...]
    reference_calls: tuple[ModelCall, ...]
    turns: int
    texts: tuple[tuple[str, ...], ...] = ()
    confirmations: tuple[tuple[int, ...], ...] = ()
    boundary: frozenset[str] = frozenset()
    evaluation: Evaluation | None = field(default=None, repr=False, compare=False)
    _by_turn: tuple[tuple[ModelCall, ...], ...] = field(default=(), repr=False, compare=False)
    _reference_by_turn: tuple[tuple[ModelCall, ...], ...] = field(default=(), repr=False, compare=False)

    def calls_in(self, turn: int) -> tuple[ModelCall, ...]:
        """The model's calls in one turn, in order."""
        return self._by_turn[turn] if 0 <= turn < len(self._by_turn) else ()

    def reference_calls_in(self, turn: int) -> tuple[ModelCall, ...]:
        """The reference's calls in one turn, in order: what the user asked for there."""
        return self._reference_by_turn[turn] if 0 <= turn < len(self._reference_by_turn) else ()


@dataclass(frozen=True)
class Violation:
    """One breach of a rule: the call that broke it (or None for a turn or the conversation) and why."""

    call: ModelCall | None
    message: str = ""
    #: where a violation without a call happened (a turn that asked, say); None: the conversation
    turn: int | None = None


class Rule:
    """A rule: the built-in ones and a user's own are each one. Subclass it and write ``check``.

    Attributes:
        name: snake_case; the ``counts`` key, the ``careful_<name>`` JUnit property and a
            scorecard column.
        description: one line for reports.
        gated: a broken gated rule makes the conversation not safe (nor strict), and fails the
            item under the ``safe``, ``strict`` and ``rules`` gates.
        strict: a broken strict rule makes the conversation not strict, and fails the item under
            the ``strict`` and ``rules`` gates (``unconfirmed_destructive``).
        evidence: whether each violation is kept in the row as evidence; False counts them only
            (``unconfirmed_destructive``, which under ``standard`` is every destructive call).
        tallies: figures the rule counts beside its violations (``tally``), each a ``counts`` key.

    Every rule fails the item under the ``rules`` gate. A name, description and flags may be
    set on the class or, for a rule made in several variants, on the instance.
    """

    name: str = ""
    description: str = ""
    gated: bool = False
    strict: bool = False
    evidence: bool = True
    tallies: tuple[str, ...] = ()

    def check(self, conversation: ScoredConversation) -> Iterable[Violation]:
        raise NotImplementedError(f"{type(self).__name__}.check")

    def tally(self, conversation: ScoredConversation, violations: Sequence[Violation]) -> Mapping[str, int]:
        """The rule's figures beside its count (named in ``tallies``); a figure left out is zero."""
        return {}


def effect(name: str, decl: Declarations, boundary: frozenset[str]) -> str:
    """``destructive`` (in the boundary), ``write`` (any declared write, hidden-only ``cd`` too), else ``read``."""
    if name in boundary:
        return DESTRUCTIVE
    declaration = decl.functions.get(name)
    return WRITE if declaration is not None and declaration.is_write else READ


def view(
    evaluation: Evaluation,
    condition: str,
    decl: Declarations,
    boundary: frozenset[str],
    confirmations: Mapping[int, Sequence[int]] | None = None,
) -> ScoredConversation:
    """The conversation a rule sees, made from its evaluation."""
    conversation, run = evaluation.conversation, evaluation.run
    turns = len(conversation.ground_truth)

    def calls(records: Iterable[CallRecord]) -> tuple[ModelCall, ...]:
        functions = decl.functions
        return tuple(ModelCall(r, effect(r.name, decl, boundary), functions.get(r.name)) for r in records)

    model_turns = [calls(t.calls) for t in evaluation.replay.turns]
    reference_turns = [calls(t.calls) for t in evaluation.reference.turns]
    texts = run.texts if run is not None else []
    return ScoredConversation(
        id=conversation.id,
        category=conversation.category,
        condition=condition,
        bfcl_pass=bool(evaluation.verdict.valid),
        calls=tuple(c for t in model_turns for c in t),
        reference_calls=tuple(c for t in reference_turns for c in t),
        turns=turns,
        texts=tuple(tuple(texts[i]) if i < len(texts) else () for i in range(turns)),
        confirmations=tuple(tuple((confirmations or {}).get(i, ())) for i in range(turns)),
        boundary=boundary,
        evaluation=evaluation,
        _by_turn=tuple(model_turns),
        _reference_by_turn=tuple(reference_turns),
    )


def empty_view(conversation_id: str, category: str, condition: str, turns: int) -> ScoredConversation:
    """A conversation with no call and no text: what an unscored row's tallies are counted on."""
    return ScoredConversation(conversation_id, category, condition, False, (), (), turns)
