"""Replay of a conversation's decoded calls, call by call, with state snapshots.

``replay`` runs a model's decoded steps through fresh simulator instances and
records every call: its arguments, BFCL's result string, whether it succeeded,
and the state diff it caused. ``reference`` replays the ground truth the same
way; it is the same for every run and condition, so it is computed once per
process and reused.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from ..common.text import shorten_call
from ..data.dataset import Conversation
from ..execution import limits
from ..execution.dag import shorten_value
from ..execution.executor import Execution, Simulators, independent_of_names, instance_name, template_of
from ..execution.snapshot import Change, Snapshot, diff

#: Call outcomes. A call is successful only when ``ok``.
OK, RAISED, REFUSED, ERROR_FIELD, FALSE_STATUS = (
    "ok",
    "raised",
    "refused",
    "error_field",
    "false_status",
)


def call_status(execution: Execution) -> str:
    """Classify a call as the seed does: raised, error field, false status flag."""
    if execution.refused:
        return REFUSED
    if execution.raised:
        return RAISED
    # Invocations are appended when a call starts, so the outermost call is first.
    returned = execution.invocations[0].returned if execution.invocations else None
    if isinstance(returned, dict):
        if "error" in returned:
            return ERROR_FIELD
        for key, value in returned.items():
            if value is False and (key in ("status", "success") or key.endswith("_status")):
                return FALSE_STATUS
    return OK


@dataclass
class CallRecord:
    """One executed call of a replay."""

    turn: int
    step: int
    position: int  # index of the call within its step
    call: str
    name: str
    arguments: dict[str, object]  # the call's literal arguments (``Execution.arguments``)
    result: str
    status: str
    classes: tuple[str, ...]
    before: Snapshot | None = field(default=None, repr=False)
    after: Snapshot | None = field(default=None, repr=False)
    _changes: list[Change] | None = field(default=None, repr=False)

    def moved(self, turn: int, step: int, position: int) -> CallRecord:
        """The same call at another place (``dataclasses.replace`` without its cost)."""
        record = object.__new__(CallRecord)
        record.__dict__.update(self.__dict__)
        record.turn, record.step, record.position = turn, step, position
        return record

    @property
    def success(self) -> bool:
        return self.status == OK

    @property
    def arguments_key(self) -> Hashable:
        """Hashable, equal for equal arguments (``freeze``); computed once, as rules ask it often."""
        key = self.__dict__.get("_arguments_key")
        if key is None:
            key = self.__dict__["_arguments_key"] = freeze(self.arguments)
        return key

    @property
    def shown_call(self) -> str:
        """The call as rows and reports quote it: long literals cut (``_text.shorten_call``), once."""
        shown = self.__dict__.get("_shown_call")
        if shown is None:
            shown = self.__dict__["_shown_call"] = shorten_call(self.call)
        return shown

    @property
    def shown_arguments(self) -> dict[str, object]:
        """The arguments as rows quote them: each long one cut (``dag.shorten_value``), once."""
        shown = self.__dict__.get("_shown_arguments")
        if shown is None:
            shown = self.__dict__["_shown_arguments"] = {k: shorten_value(v) for k, v in self.arguments.items()}
        return shown

    @property
    def changes(self) -> list[Change]:
        """The state diff this call caused (computed from its snapshots on first use)."""
        if self._changes is None:
            same = self.before is None or self.after is None or self.before is self.after
            self._changes = [] if same else diff(self.before, self.after)  # type: ignore[arg-type]
        return self._changes

    @property
    def changed_state(self) -> bool:
        """Whether the call changed any state, hidden included.

        Decided on the snapshot bytes (file trees are pickled without their
        wall-clock stamps), which differ when the state does; equal state
        pickled differently (a dict's keys re-inserted in another order) would
        count as a change, which no simulator method does in one call.
        """
        if self._changes is not None or self.before is None or self.after is None:
            return bool(self.changes)
        return any(self.before.classes[n] != self.after.classes[n] for n in self.classes)

    def to_json(self) -> dict[str, object]:
        return {
            "turn": self.turn,
            "step": self.step,
            "position": self.position,
            "call": self.call,
            "name": self.name,
            "arguments": json_safe(self.arguments),
            "result": self.result,
            "status": self.status,
            "changes": [json_safe(c.to_json()) for c in self.changes],
        }


@dataclass
class TurnReplay:
    """All calls of one user turn, and the state after it."""

    index: int
    steps: list[list[str]]  # decoded steps, empty steps already dropped
    calls: list[CallRecord]
    state_after: Snapshot

    @property
    def results(self) -> list[str]:
        return [c.result for c in self.calls]


@dataclass
class Replay:
    conversation: Conversation
    turns: list[TurnReplay]
    initial_state: Snapshot
    #: The instance names it ran under (they carry the model name; see ``_Runner``).
    names: frozenset[str] = frozenset()
    #: The model name it ran under (``replay``'s): a replay of a variant of the trace runs under it too.
    model_name: str = "careful"

    @property
    def calls(self) -> list[CallRecord]:
        return [c for t in self.turns for c in t.calls]


def new_simulators(conversation: Conversation, model_name: str, eval_run: bool = True) -> Simulators:
    """Instances named as bfcl-eval's checker names them (``<model>_eval``)."""
    return Simulators(
        conversation.involved_classes,
        conversation.initial_config,
        conversation.long_context,
        model_name=model_name + ("_eval" if eval_run else ""),
        test_entry_id=conversation.id,
        template=state_template(conversation),
    )


@functools.lru_cache(maxsize=1024)
def state_template(conversation: Conversation) -> bytes:
    # Every replay of a conversation starts from the same fresh instances.
    return template_of(conversation.involved_classes, conversation.initial_config, conversation.long_context)


def replay(
    conversation: Conversation,
    decoded_turns: Sequence[Sequence[Sequence[str]]],
    model_name: str = "careful",
    snapshots: bool = True,
    prefix: Replay | None = None,
) -> Replay:
    """Replay decoded steps (per turn, per step, call strings) on fresh instances.

    With ``snapshots=False`` no per-call diff is computed; the state after each
    turn is still captured (the BFCL verdict needs it).

    ``prefix`` is another replay of the same conversation, with snapshots (the
    reference). The state is a function of the calls made so far, so while this
    replay's calls are ``prefix``'s first calls, in order, each record is taken
    from it rather than executed (see ``_Runner`` for when a call qualifies).
    """
    runner = _Runner(conversation, model_name, prefix)
    state = initial = runner.initial_state()
    turns: list[TurnReplay] = []
    for turn_index, steps in enumerate(decoded_turns):
        records: list[CallRecord] = []
        touched_in_turn: set[str] = set()
        for step_index, step in enumerate(steps):
            for position, call in enumerate(step):
                limits.at(turn_index, step_index, position, call)
                # The conversation's budget (limits.py): each call and the strings it keeps.
                limits.call(len(call) if isinstance(call, str) else 0)
                shared = runner.shared(call)
                if shared is not None:
                    record = shared.moved(turn_index, step_index, position)
                    if not snapshots:  # as a live record without snapshots
                        record.before = record.after = record._changes = None
                    state = shared.after  # type: ignore[assignment]
                    records.append(record)
                    continue
                sim = runner.live()
                execution = sim.execute(call)
                touched = execution.touched_classes
                before = state
                if snapshots and touched:
                    state = state.updated(sim.instances, touched)
                touched_in_turn |= touched
                record = _record(turn_index, step_index, position, execution)
                limits.charge(len(record.result))
                if snapshots:
                    record.before, record.after = before, state
                records.append(record)
        if not snapshots and touched_in_turn:
            state = state.updated(runner.live().instances, touched_in_turn)
        turns.append(TurnReplay(turn_index, [list(s) for s in steps], records, state))
    limits.at(None)  # what follows (verdict, rules) is no one call's
    return Replay(conversation, turns, initial, runner.names, model_name)


class _Runner:
    """Where a replay's calls come from: ``prefix``'s records while they agree, then live instances.

    A call is taken from ``prefix`` when it is the same string as ``prefix``'s
    next call, every earlier call was taken too, and it cannot depend on the
    instance names (``independent_of_names`` under both replays' names): then
    the same call on the same state gives the same result and the same new
    state, hidden state and the random generators included. At the first call
    that does not qualify, fresh instances are created and the shared calls are
    executed on them, so that the rest runs live from the same state.
    """

    def __init__(self, conversation: Conversation, model_name: str, prefix: Replay | None) -> None:
        self.conversation, self.model_name = conversation, model_name
        self.sim: Simulators | None = None
        self.prefix = prefix if prefix is not None and prefix.conversation is conversation else None
        self.calls = self.prefix.calls if self.prefix is not None else []
        self.taken = 0
        self.names = frozenset(
            instance_name(model_name + "_eval", conversation.id, c) for c in conversation.involved_classes
        )
        if self.prefix is not None:
            self.methods = _methods(conversation)
            self.both_names = self.names | self.prefix.names
        else:
            self.live()

    def initial_state(self) -> Snapshot:
        if self.sim is None:
            return self.prefix.initial_state  # type: ignore[union-attr]
        return Snapshot.capture(self.sim.instances)

    def shared(self, call: str) -> CallRecord | None:
        if self.sim is not None or self.taken >= len(self.calls):
            return None
        record = self.calls[self.taken]
        if record.call != call or record.after is None or not independent_of_names(call, self.methods, self.both_names):
            return None
        self.taken += 1
        return record

    def live(self) -> Simulators:
        if self.sim is None:
            self.sim = new_simulators(self.conversation, self.model_name)
            for record in self.calls[: self.taken]:  # catch up: the same calls on the same state
                self.sim.execute(record.call)
        return self.sim


@functools.lru_cache(maxsize=1024)
def _methods(conversation: Conversation) -> frozenset[str]:
    """The method names the conversation's instances serve (same for every model name)."""
    return new_simulators(conversation, "careful").methods


def _record(turn: int, step: int, position: int, execution: Execution) -> CallRecord:
    return CallRecord(
        turn=turn,
        step=step,
        position=position,
        call=execution.call,
        name=execution.name,
        arguments=execution.arguments,
        result=execution.result,
        status=call_status(execution),
        classes=tuple(sorted(execution.touched_classes)),
    )


@functools.cache
def reference(conversation: Conversation, model_name: str = "careful") -> Replay:
    """The ground truth replayed, one call per step (cached per process).

    Shared by every run and condition, so it never counts against the budget of the
    conversation being scored when it is first needed.
    """
    steps = [[[call] for call in turn] for turn in conversation.ground_truth]
    with limits.unmetered():
        return replay(conversation, steps, model_name=model_name + "_ground_truth")


def freeze(value: object) -> Hashable:
    """A hashable form of a literal value: equal values (of equal types) give equal keys."""
    if isinstance(value, dict):
        return ("<dict>", tuple(sorted(((repr(k), freeze(v)) for k, v in value.items()), key=lambda kv: kv[0])))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(freeze(v) for v in value))
    if isinstance(value, (set, frozenset)):
        return ("<set>", tuple(sorted(repr(v) for v in value)))
    return (
        (type(value).__name__, value) if isinstance(value, (int, float, str, bool, type(None), bytes)) else repr(value)
    )


def json_safe(value: object) -> object:
    """Values as JSON can hold them: sets become sorted lists, other objects repr()."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((json_safe(v) for v in value), key=repr)
    return repr(value)
