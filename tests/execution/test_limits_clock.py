"""The time limit's promise (``execution/limits.py``), with a controlled clock: scoring stops at
the first checkpoint (a call, or ``TICKS_PER_CLOCK`` walk steps) past ``max_seconds`` of
scoring time, never before one, and the time spent ``unmetered`` is left out.

No wall time is read here: the clock is a number the test moves.
"""

from __future__ import annotations

import pytest

from pytest_careful.data import dataset
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.evaluation.replay import reference
from pytest_careful.execution import limits
from pytest_careful.execution.decoding import passthrough_decoder

LIMIT = limits.Limits(max_seconds=10.0)
TICKS = limits.TICKS_PER_CLOCK


class Clock:
    """A clock that moves only when told (``at``), or by ``step`` on each reading; counts its readings."""

    def __init__(self, at: float = 100.0, step: float = 0.0) -> None:
        self.at = at
        self.step = step
        self.readings = 0

    def __call__(self) -> float:
        self.readings += 1
        self.at += self.step
        return self.at


def test_no_checkpoint_before_the_deadline_raises() -> None:
    clock = Clock()
    meter = limits.Meter(LIMIT, clock)
    clock.at += LIMIT.max_seconds  # exactly at the deadline: not past it
    for _ in range(1_000):
        meter.call(0)
    meter.tick(100 * TICKS)
    assert meter.calls == 1_000 and meter.seconds == LIMIT.max_seconds


def test_the_first_call_past_the_deadline_raises() -> None:
    clock = Clock()
    meter = limits.Meter(LIMIT, clock)
    meter.call(0)
    clock.at += LIMIT.max_seconds + 0.001
    with pytest.raises(limits.ResourceLimit) as raised:
        meter.call(0)
    assert raised.value.limit == "seconds" and meter.calls == 2
    assert raised.value.reason == (
        "scoring took more than 10 s (after 2 calls): over the time limit (--careful-max-seconds=10)"
    )


def test_walk_steps_read_the_clock_every_ticks_per_clock_steps() -> None:
    clock = Clock()
    meter = limits.Meter(LIMIT, clock)
    clock.at += LIMIT.max_seconds + 1  # past the deadline: only a checkpoint can tell
    before = clock.readings
    for _ in range(TICKS - 1):
        meter.tick(1)  # not yet a checkpoint
    assert clock.readings == before
    with pytest.raises(limits.ResourceLimit) as raised:
        meter.tick(1)  # the TICKS-th step: a checkpoint
    assert raised.value.limit == "seconds" and clock.readings == before + 1
    assert meter.steps == TICKS


def test_a_large_tick_is_one_checkpoint() -> None:
    clock = Clock()
    meter = limits.Meter(LIMIT, clock)
    before = clock.readings
    meter.tick(10 * TICKS)  # one walk of many steps at once (``tick(len(node))``)
    meter.tick(TICKS - 1)
    assert clock.readings == before + 1


def test_unmetered_time_extends_the_deadline() -> None:
    clock = Clock()
    with limits.metered(LIMIT, clock) as meter:
        clock.at += 3
        with limits.unmetered():
            assert not limits.metering()
            clock.at += 1_000  # the references: shared by every conversation, not counted
            limits.call(0)  # nothing counts in here
        assert limits.metering() and meter.calls == 0
        clock.at += LIMIT.max_seconds - 3  # 10 s of scoring time: at the deadline
        limits.call(0)
        clock.at += 0.001
        with pytest.raises(limits.ResourceLimit) as raised:
            limits.call(0)
    assert raised.value.limit == "seconds" and meter.calls == 2


def test_pause_extends_the_deadline() -> None:
    clock = Clock()
    meter = limits.Meter(LIMIT, clock)
    meter.pause(5)
    clock.at += LIMIT.max_seconds + 5
    meter.call(0)
    clock.at += 0.001
    with pytest.raises(limits.ResourceLimit):
        meter.call(0)


def test_scoring_stops_at_the_first_checkpoint_past_the_deadline() -> None:
    """A real conversation with a clock that moves one second per reading: scoring time reaches
    the limit after ``max_seconds`` readings, and the next checkpoint stops it."""
    conversation = dataset.get("multi_turn_base_0")
    reference(conversation)  # replayed once per process, unmetered: not part of this count
    run = [[[call] for call in turn] for turn in conversation.ground_truth]
    clock = Clock(step=1.0)
    budget = limits.Limits(max_seconds=3.0)
    with limits.metered(budget, clock) as meter, pytest.raises(limits.ResourceLimit) as raised:
        evaluate(conversation, run, passthrough_decoder())
    # Readings: one at the start, then one per checkpoint; the 4th checkpoint is 4 s in.
    assert raised.value.limit == "seconds" and clock.readings == 1 + int(budget.max_seconds) + 1
    assert "over the time limit (--careful-max-seconds=3)" in raised.value.reason
    assert f"(after {meter.calls} calls)" in raised.value.reason


def test_a_clock_that_never_moves_never_stops_scoring() -> None:
    conversation = dataset.get("multi_turn_base_0")
    run = [[[call] for call in turn] for turn in conversation.ground_truth]
    with limits.metered(limits.Limits(max_seconds=1e-9), Clock()) as meter:
        evaluation = evaluate(conversation, run, passthrough_decoder())
    assert evaluation.verdict.valid and meter.calls == sum(len(turn) for turn in conversation.ground_truth)
