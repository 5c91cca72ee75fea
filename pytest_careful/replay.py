"""Replay of a conversation's decoded calls, call by call, with state snapshots.

``replay`` runs a model's decoded steps through fresh simulator instances and
records every call: its arguments, BFCL's result string, whether it succeeded,
and the state diff it caused. ``reference`` replays the ground truth the same
way; it is the same for every run and condition, so it is computed once per
process and reused.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any, Sequence

from .dataset import Conversation
from .executor import Execution, Simulators, template_of
from .snapshot import Change, Snapshot, diff

#: Call outcomes. A call is successful only when ``ok``.
OK, RAISED, REFUSED, ERROR_FIELD, FALSE_STATUS = (
    "ok", "raised", "refused", "error_field", "false_status",
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
    arguments: dict[str, Any]
    result: str
    status: str
    classes: tuple[str, ...]
    before: Snapshot | None = field(default=None, repr=False)
    after: Snapshot | None = field(default=None, repr=False)
    _changes: list[Change] | None = field(default=None, repr=False)

    @property
    def success(self) -> bool:
        return self.status == OK

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

    def to_json(self) -> dict[str, Any]:
        return {
            "turn": self.turn, "step": self.step, "position": self.position,
            "call": self.call, "name": self.name, "arguments": _json_safe(self.arguments),
            "result": self.result, "status": self.status,
            "changes": [_json_safe(c.to_json()) for c in self.changes],
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
        template=_template(conversation),
    )


@functools.lru_cache(maxsize=1024)
def _template(conversation: Conversation) -> bytes:
    # Every replay of a conversation starts from the same fresh instances.
    return template_of(conversation.involved_classes, conversation.initial_config, conversation.long_context)


def replay(
    conversation: Conversation,
    decoded_turns: Sequence[Sequence[Sequence[str]]],
    model_name: str = "careful",
    snapshots: bool = True,
) -> Replay:
    """Replay decoded steps (per turn, per step, call strings) on fresh instances.

    With ``snapshots=False`` no per-call diff is computed; the state after each
    turn is still captured (the BFCL verdict needs it).
    """
    sim = new_simulators(conversation, model_name)
    state = Snapshot.capture(sim.instances)
    initial = state
    turns: list[TurnReplay] = []
    for turn_index, steps in enumerate(decoded_turns):
        records: list[CallRecord] = []
        touched_in_turn: set[str] = set()
        for step_index, step in enumerate(steps):
            for position, call in enumerate(step):
                execution = sim.execute(call)
                touched = execution.touched_classes
                before = state
                if snapshots and touched:
                    state = state.updated(sim.instances, touched)
                touched_in_turn |= touched
                record = _record(turn_index, step_index, position, execution)
                if snapshots:
                    record.before, record.after = before, state
                records.append(record)
        if not snapshots:
            state = state.updated(sim.instances, touched_in_turn)
        turns.append(TurnReplay(turn_index, [list(s) for s in steps], records, state))
    return Replay(conversation, turns, initial)


def _record(turn: int, step: int, position: int, execution: Execution) -> CallRecord:
    return CallRecord(
        turn=turn, step=step, position=position, call=execution.call, name=execution.name,
        arguments=execution.arguments, result=execution.result, status=call_status(execution),
        classes=tuple(sorted(execution.touched_classes)),
    )


@functools.lru_cache(maxsize=None)
def reference(conversation: Conversation, model_name: str = "careful") -> Replay:
    """The ground truth replayed, one call per step (cached per process)."""
    steps = [[[call] for call in turn] for turn in conversation.ground_truth]
    return replay(conversation, steps, model_name=model_name + "_ground_truth")


def _json_safe(value: Any) -> Any:
    """Values as JSON can hold them: sets become sorted lists, other objects repr()."""
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (set, frozenset)):
        return sorted((_json_safe(v) for v in value), key=repr)
    return repr(value)
