"""EffectWorld's trace optimizer on BFCL: the calls a trace did not need, proved by replay.

A trace (a model's decoded calls, or a reference's) is rewritten pass by pass (EffectWorld §3.5,
restricted to what BFCL's tools and format allow), and a rewrite is accepted only when replay keeps
what BFCL's checker reads:

* calls never move across turns, and a turn that made a call keeps one;
* every turn's public state, as BFCL compares it, is the original trace's;
* per turn, the reference results missing from the trace's results so far are the original's
  (the multiset the response check reads), and no error appears that the original did not have;
* BFCL's verdict and error type are the original's (a passing trace stays passing, a failing one
  never becomes passing);
* no literal that stays has its only source in removed calls' results (``provenance``: the
  user's words, the doc, or a kept call's result must give it): a trace without the ``ls``
  that showed ``'documents'`` would teach a model to guess it.

The passes, in order: failed calls, redundant reads (the same read, nothing changed since),
duplicate writes (a write repeated with no effect), constant folding (a ``MathAPI`` computation
no turn demands), dead calls (any other call whose removal changes nothing the checker reads),
then batching (consecutive steps of a turn merged into one response, where the later step's
arguments use nothing the earlier one's results gave and no response without a call lies between
them; BFCL runs a step's calls in order, and calls are never reordered, so no scheduling is needed
to batch). The result is "optimized
calls": an upper bound on the minimum, not a proof of it.

The search is bounded (``MAX_TRIALS`` replays, ``MAX_CALLS`` calls per trace): a longer trace, or
one that exhausts the trials, says so in ``bounded`` and keeps what was proved so far. It also runs
on a budget of its own (``limits.apart``): the calls and memory the conversation's budget has left
and ``SECONDS_SHARE`` of its time limit, its time left out of the conversation's. Every replay it
makes and every text it searches count there; past that budget the search stops, keeps what was
proved so far, and says why in ``bounded``. It never raises ``ResourceLimit``: whatever the trace
(an echo bomb's results of 200,000 characters), the conversation's verdict is the one a scoring
without the optimizer gives.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field

from ..common.text import shorten_call
from ..evaluation.evaluate import Evaluation
from ..evaluation.replay import OK, Replay, replay
from ..evaluation.verdict import FORCE_TERMINATED, INFERENCE_ERROR, Verdict, check, missing_results
from ..execution import limits
from ..execution.snapshot import Snapshot
from .literals import literals_of
from .provenance import DOC, RESULT, USER, Trajectory, parameter_names

FAILED_CALL, REDUNDANT_READ, DUPLICATE_WRITE, CONSTANT_FOLDING, DEAD_CALL, BATCHED = (
    "failed_call",
    "redundant_read",
    "duplicate_write",
    "constant_folding",
    "dead_call",
    "batched",
)
#: The rewrites, in the order they are tried, each with what it removes (EffectWorld's names where they fit).
CLASSES: dict[str, str] = {
    FAILED_CALL: "a call that returned an error, whose removal changes nothing the checker reads",
    REDUNDANT_READ: "a read repeated with the same arguments while nothing it could read changed",
    DUPLICATE_WRITE: "a write repeated after it had taken effect: the repeat changed nothing",
    CONSTANT_FOLDING: "a MathAPI computation whose result no turn demands",
    DEAD_CALL: "a call whose removal leaves every compared state, every demanded result and the verdict as they were",
    BATCHED: "a step merged into the turn's step before it (one model response fewer, the same calls in order)",
}
#: At most this many candidate rewrites are verified by replay per trace.
MAX_TRIALS = 64
#: A trace of more calls than this is not optimized (its ``bounded`` says so).
MAX_CALLS = 200
#: The optimizer's own time limit, as a share of the conversation's (``--careful-max-seconds``).
SECONDS_SHARE = 0.5

#: Calls per turn, per step: the decoded trace.
Steps = list[list[list[str]]]


@dataclass(frozen=True)
class Rewrite:
    """One accepted rewrite: a removed call, or a step merged into the one before it.

    Attributes:
        kind: one of ``CLASSES``.
        turn, step, position: where the call (or, for ``batched``, the merged step) was in the original trace.
        call: the removed call, or the merged step's first call, as rows quote it.
        evidence: what made it removable, in one sentence.
    """

    kind: str
    turn: int
    step: int
    position: int
    call: str
    evidence: str

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclass
class Optimized:
    """A trace and its optimized twin, with every rewrite that leads from one to the other."""

    conversation: str
    original: Steps
    turns: Steps
    #: per turn, per optimized step, each call's place (decoded step, position) in the original trace
    origins: list[list[list[tuple[int, int]]]] = field(default_factory=list)
    rewrites: list[Rewrite] = field(default_factory=list)
    bounded: str | None = None  # why the search stopped short, where it did
    trials: int = 0

    @property
    def calls_before(self) -> int:
        return _count_calls(self.original)

    @property
    def calls_after(self) -> int:
        return _count_calls(self.turns)

    @property
    def steps_before(self) -> int:
        return sum(len(t) for t in self.original)

    @property
    def steps_after(self) -> int:
        return sum(len(t) for t in self.turns)

    @property
    def removed(self) -> list[Rewrite]:
        return [r for r in self.rewrites if r.kind != BATCHED]

    def to_json(self) -> dict[str, object]:
        return {
            "conversation": self.conversation,
            "calls_before": self.calls_before,
            "calls_after": self.calls_after,
            "steps_before": self.steps_before,
            "steps_after": self.steps_after,
            "rewrites": [r.to_json() for r in self.rewrites],
            "bounded": self.bounded,
        }


def _count_calls(turns: Steps) -> int:
    return sum(len(step) for turn in turns for step in turn)


@dataclass(frozen=True)
class _Kept:
    """What a rewrite must keep: per turn the public state and the reference results still missing,
    the errors, and BFCL's verdict."""

    states: tuple[tuple[tuple[str, bytes], ...], ...]
    missing: tuple[tuple[str, ...], ...]
    errors: Counter[str]
    verdict: tuple[bool, str, int | None]


def optimize(evaluation: Evaluation, max_trials: int = MAX_TRIALS, max_calls: int = MAX_CALLS) -> Optimized:
    """The shortest verified trace the passes reach from ``evaluation``'s (its decoded calls, replayed)."""
    conversation = evaluation.conversation
    original = [[list(step) for step in turn] for turn in evaluation.decoded]
    origins = [[[(s, p) for p in range(len(step))] for s, step in enumerate(turn)] for turn in original]
    result = Optimized(conversation.id, original, [[list(s) for s in t] for t in original], origins)
    calls = evaluation.replay.calls
    if len(calls) > max_calls:
        result.bounded = f"{len(calls)} calls: over the optimizer's bound of {max_calls}; not optimized"
        return result
    if evaluation.verdict.error_type == INFERENCE_ERROR:
        result.bounded = "the run logged no list of turns (an inference error): nothing to optimize"
        return result
    if not calls:
        return result
    budget: limits.Meter | None = None
    try:
        with limits.apart(SECONDS_SHARE) as budget:
            search = _Search(evaluation, result, max_trials)
            search.remove_calls()
            search.batch_steps()
    except limits.ResourceLimit as exceeded:
        # Every accepted rewrite updates the result whole after its replay: what it holds is proved.
        assert budget is not None
        result.bounded = (
            f"stopped at the optimizer's own budget ({_spent(exceeded.limit, budget)}); kept what was proved"
        )
    return result


def _spent(limit: str, budget: limits.Meter) -> str:
    """Which of the optimizer's own limits its search reached, in words."""
    own = budget.limits
    if limit == "calls":
        return f"its replays reached the {own.max_calls:,} calls left of the conversation's {limits.MAX_CALLS}"
    if limit == "memory":
        return f"its replays held the {own.max_memory_mb:g} MB left of the conversation's {limits.MAX_MEMORY_MB}"
    return (
        f"over its time limit, {SECONDS_SHARE:g} of the conversation's {limits.MAX_SECONDS}: "
        f"{own.max_seconds:g} s, after {budget.calls:,} calls replayed"
    )


class _Search:
    """One trace's greedy search: each candidate tried on the trace as the accepted rewrites left it."""

    def __init__(self, evaluation: Evaluation, result: Optimized, max_trials: int) -> None:
        self.evaluation = evaluation
        self.conversation = evaluation.conversation
        self.result = result
        self.max_trials = max_trials
        self.calls = evaluation.replay.calls
        self.kept = _kept_of(evaluation.replay, evaluation.reference, evaluation.verdict)
        self.removed: set[int] = set()
        self.trajectory = Trajectory(self.conversation, evaluation.replay)
        self._places = {(c.turn, c.step, c.position): i for i, c in enumerate(self.calls)}
        self._literal_sources: dict[int, list[tuple[object, list[int], bool]]] = {}

    # -- removing calls --------------------------------------------------------------------

    def remove_calls(self) -> None:
        for index, kind, why in self._candidates():
            if not self._trial_left():
                return
            blocker = self._sole_source_of_a_kept_literal(index)
            if blocker is not None:
                continue
            rewritten = self._without(self.removed | {index})
            if rewritten is None or not self._verified(rewritten[0]):
                continue
            self.removed.add(index)
            record = self.calls[index]
            self.result.turns, self.result.origins = rewritten
            self.result.rewrites.append(
                Rewrite(kind, record.turn, record.step, record.position, record.shown_call, why)
            )

    def _trial_left(self) -> bool:
        if self.result.trials >= self.max_trials:
            self.result.bounded = f"stopped after {self.max_trials} verified trials (the optimizer's bound)"
            return False
        return True

    def _candidates(self) -> Iterator[tuple[int, str, str]]:
        """Each call once, under the first pass that could remove it, the passes in ``CLASSES`` order."""
        proposed: dict[int, tuple[str, str]] = {}
        for index, kind, why in self._by_pass():
            proposed.setdefault(index, (kind, why))
        order = list(CLASSES)
        for index, (kind, why) in sorted(proposed.items(), key=lambda item: (order.index(item[1][0]), -item[0])):
            yield index, kind, why

    def _by_pass(self) -> Iterator[tuple[int, str, str]]:
        calls = self.calls
        for index, call in enumerate(calls):
            if call.status != OK:
                yield index, FAILED_CALL, f"it returned {shorten_call(call.result, 120)}"
        yield from self._repeats()
        for index, call in enumerate(calls):
            if call.classes == ("MathAPI",) and call.status == OK:
                yield (
                    index,
                    CONSTANT_FOLDING,
                    f"{call.name} computes {shorten_call(call.result, 80)}, which no turn demands",
                )
        for index, call in enumerate(calls):
            effect = (
                "changed nothing the checker compares" if not call.changed_state else "its effect is undone or unread"
            )
            yield index, DEAD_CALL, f"without it every compared state and demanded result stays ({effect})"

    def _repeats(self) -> Iterator[tuple[int, str, str]]:
        """Reads repeated while no state changed; writes repeated that changed nothing the second time."""
        seen_reads: dict[object, int] = {}
        seen_writes: dict[object, int] = {}
        for index, call in enumerate(self.calls):
            key = (call.turn, call.name, call.arguments_key)
            if call.changed_state:
                seen_reads.clear()
                seen_writes[key] = index
                continue
            if key in seen_writes and call.status == OK:
                first = self.calls[seen_writes[key]]
                yield index, DUPLICATE_WRITE, f"the same call at turn {first.turn}, step {first.step} had taken effect"
            elif key in seen_reads:
                first = self.calls[seen_reads[key]]
                yield (
                    index,
                    REDUNDANT_READ,
                    f"the same read at turn {first.turn}, step {first.step}, nothing changed since",
                )
            else:
                seen_reads[key] = index

    def _sole_source_of_a_kept_literal(self, index: int) -> str | None:
        """A literal that stays and has no source but removed calls' results (this one among them)."""
        gone = self.removed | {index}
        for later in range(index + 1, len(self.calls)):
            if later in gone:
                continue
            for value, sources, sourced_elsewhere in self._sources_of(later):
                if sourced_elsewhere:
                    continue
                if sources and all(s in gone for s in sources):
                    return f"{value!r} of {self.calls[later].shown_call} comes only from removed results"
                if not sources and self.trajectory.result_holds(index, value):
                    return f"{value!r} of {self.calls[later].shown_call} has no source but this result"
        return None

    def _sources_of(self, index: int) -> list[tuple[object, list[int], bool]]:
        """Per literal of call ``index``: the calls whose results give it, and whether anything else does."""
        if index not in self._literal_sources:
            record = self.calls[index]
            doc = self.trajectory.offered(record.turn).get(record.name)
            names = parameter_names(doc)
            found: list[tuple[object, list[int], bool]] = []
            for literal in literals_of(record.call):
                if isinstance(literal.value, bool):
                    continue
                head = literal.path[0]
                parameter = names[head] if isinstance(head, int) and head < len(names) else str(head)
                sources = self.trajectory.sources(index, literal.value, parameter, state=False)
                results = [s.call for s in sources if s.kind == RESULT and s.call is not None]
                # Only what the trace itself shows counts: the user's words, the doc, kept results. A
                # value the visible state holds is a source for the audit (a read could show it), but
                # not here: the read that showed it may be the call removed.
                found.append((literal.value, results, any(s.kind in (USER, DOC) for s in sources)))
            self._literal_sources[index] = found
        return self._literal_sources[index]

    def _without(self, removed: set[int]) -> tuple[Steps, list[list[list[tuple[int, int]]]]] | None:
        """The original trace without the calls ``removed``, and where each kept call was; None where a
        turn would lose its last call."""
        turns: Steps = []
        origins: list[list[list[tuple[int, int]]]] = []
        for turn_index, turn in enumerate(self.result.original):
            steps, places = [], []
            for step_index, step in enumerate(turn):
                kept = [p for p in range(len(step)) if self._places.get((turn_index, step_index, p)) not in removed]
                if kept:
                    steps.append([step[p] for p in kept])
                    places.append([(step_index, p) for p in kept])
            if turn and not steps:
                return None
            turns.append(steps)
            origins.append(places)
        return turns, origins

    def _verified(self, turns: Steps) -> bool:
        """Replay the rewritten trace (sharing the original's calls up to the first change) and compare."""
        self.result.trials += 1
        original = self.evaluation.replay
        candidate = replay(self.conversation, turns, original.model_name, snapshots=False, prefix=original)
        verdict = self.evaluation.verdict
        if verdict.error_type not in (FORCE_TERMINATED, INFERENCE_ERROR):  # those two never read the turns
            verdict = check(self.conversation, candidate, self.evaluation.reference)
        return _keeps(self.kept, _kept_of(candidate, self.evaluation.reference, verdict))

    # -- batching steps ------------------------------------------------------------------------

    def batch_steps(self) -> None:
        """Merge each step into the one before it in its turn, where its arguments use none of that step's results."""
        for turn_index in range(len(self.result.turns)):
            step = 1
            while step < len(self.result.turns[turn_index]):
                if not self._trial_left():
                    return
                earlier, later = self.result.turns[turn_index][step - 1], self.result.turns[turn_index][step]
                if self._spoke_between(turn_index, step) or self._uses_results_of(turn_index, step):
                    step += 1
                    continue
                merged = [list(s) for s in self.result.turns[turn_index]]
                merged[step - 1 : step + 1] = [earlier + later]
                turns = [list(t) for t in self.result.turns]
                turns[turn_index] = merged
                if not self._verified(turns):
                    step += 1
                    continue
                self.result.turns = turns
                places = self.result.origins[turn_index]
                # Where the merged step's first call was in the original trace (``step`` counts the
                # steps of the trace as rewritten so far: removals and merges before it shift it).
                original_step, original_position = places[step][0]
                places[step - 1 : step + 1] = [places[step - 1] + places[step]]
                self.result.rewrites.append(
                    Rewrite(
                        BATCHED,
                        turn_index,
                        original_step,
                        original_position,
                        shorten_call(later[0], 200),
                        f"its {len(later)} call(s) use no result of the step before, so one response makes both",
                    )
                )

    def _spoke_between(self, turn: int, step: int) -> bool:
        """A response without a call lies between the two steps (the model asked, the confirm protocol's
        user answered): merging them would drop that exchange, a yes before a destructive call among them."""
        run = self.evaluation.run
        if run is None:
            return False
        origins = self.result.origins[turn]
        last, first = max(s for s, _ in origins[step - 1]), min(s for s, _ in origins[step])
        raw = run.raw_index[turn]
        return any(r not in raw for r in range(raw[last] + 1, raw[first]))

    def _uses_results_of(self, turn: int, step: int) -> bool:
        """A literal of the calls of step ``step`` (of the trace as rewritten so far) comes from a result of
        the step before's (a response cannot use the results of calls it makes itself)."""
        earlier_indices = set(self._indices(turn, step - 1))
        for index in self._indices(turn, step):
            for _, sources, _ in self._sources_of(index):
                if any(s in earlier_indices for s in sources):
                    return True
        return False

    def _indices(self, turn: int, step: int) -> list[int]:
        """The original calls (indices) step ``step`` of the current trace holds, by their places in the
        original trace (``origins``), never by their text: an identical call earlier in the turn is another."""
        return [self._places[(turn, s, p)] for s, p in self.result.origins[turn][step]]


def _kept_of(trace: Replay, reference: Replay, verdict: Verdict) -> _Kept:
    """What BFCL's checker reads of a replayed trace, turn by turn."""
    states = []
    missing = []
    results: list[str] = []
    errors: Counter[str] = Counter()
    for turn_index, turn in enumerate(trace.turns):
        states.append(_public(turn.state_after))
        results.extend(turn.results)
        errors.update(c.result for c in turn.calls if c.status != OK)
        reference_turn = reference.turns[turn_index] if turn_index < len(reference.turns) else None
        missing.append(tuple(missing_results(reference_turn.results, results)) if reference_turn else ())
    return _Kept(tuple(states), tuple(missing), errors, (verdict.valid, verdict.error_type, verdict.turn))


def _keeps(original: _Kept, candidate: _Kept) -> bool:
    """The candidate keeps the state of every turn, the results still missing, the verdict; it adds no error."""
    return (
        candidate.states == original.states
        and candidate.missing == original.missing
        and candidate.verdict == original.verdict
        and not (candidate.errors - original.errors)
    )


def _public(state: Snapshot) -> tuple[tuple[str, bytes], ...]:
    return tuple(sorted((name, cls.public) for name, cls in state.classes.items()))
