"""Each conversation's scoring budget: calls, wall time and memory.

One conversation is scored inside ``metered(limits)``. The replay charges every call it
makes and the bytes it keeps (state snapshots, call strings, results); walks over state
(snapshots, diffs, evidence) ``tick``. The first limit crossed raises ``ResourceLimit``,
which fails that conversation with a ``resource_limit`` reason and nothing else
(``item.py``). Outside ``metered`` (reference replays, a project's own fixtures) nothing is
counted.

Memory is counted, not measured: the bytes a conversation's scoring holds are the pickled
snapshots it captures, the snapshots it unpickles (at ``UNPICKLED_FACTOR`` times their
pickled size, the largest ratio measured), per call its call string, its
result string and ``CALL_OVERHEAD``, and every value the evaluators build (an operator's
result, a method's return value, a string the decoder repeats or joins: ``plain_values.built``)
at the length of its text, each shared part counted every time it is reached: the result
strings and reports made from ``['a' * 199_999] * 100_000`` would copy 20 GB of it. Past the
budget, the reason names the step, and the call, being scored (``at``). A count is
deterministic: the same result file gives the same verdict on any machine, in any order,
with or without xdist. The process's RSS
is not: freed memory of an earlier conversation is reused without showing, and what the
allocator keeps differs by platform; tracemalloc would triple the cost of every conversation.
``bench/hostile.py`` prints the count next to the measured peak for each hostile payload.

Wall time is the backstop for work no count sees (a slow machine, a costly simulator
method). It is read at checkpoints: every call replayed and every ``TICKS_PER_CLOCK`` steps
of a walk. The promise is that scoring stops at the first checkpoint past ``max_seconds`` of
scoring time, never at one before, where scoring time leaves out the blocks run
``unmetered`` (the references, shared by every conversation). A conversation therefore stops
within ``max_seconds`` plus the work up to the next checkpoint (one call, or 2,048 steps of
a walk), plus the unwinding of what it built; on a busy machine that can be seconds more.
The limit bounds the scoring only: an item's time in JUnit also holds its setup, the
references, the reports. ``tests/execution/test_limits_clock.py`` checks the promise with a
controlled clock (``Meter``'s ``now``), never with wall time.

Work beside the scoring that must never decide a verdict (the optimizer's search, under
``--careful-optimize``) runs ``apart``: on a meter of its own, its time left out of the
conversation's; its ``ResourceLimit`` is caught by the caller, which keeps what it had.

The meter of the scoring in progress is a ``ContextVar``, not ``config.stash``
state: it belongs to one conversation's scoring, deep inside walks that never see a config. A budget exhausted derives from ``BaseException``: the catch-alls that mirror
bfcl-eval (a failing call, a failing decoder) must not turn it into a failed call.
"""

from __future__ import annotations

import contextlib
import contextvars
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..common.options import Option, positive_int, positive_number
from ..common.text import escape, shorten_call

#: Real runs stay over 100x below (``bench/hostile.py --real``): at most 49 calls, 0.08 s and
#: 0.2 MB per conversation over the 800 references and a 600-conversation gpt-oss-20b run.
DEFAULT_MAX_CALLS = 10_000
DEFAULT_MAX_SECONDS = 10.0
DEFAULT_MAX_MEMORY_MB = 512.0

#: Bytes a replayed call holds besides its strings: its record, execution and invocation
#: objects and argument dict (measured with tracemalloc: 300,000 ``pwd()`` calls stopped at
#: 10,000 hold 15.5 MB, counted 14.7 MB).
CALL_OVERHEAD = 1_000
#: Unpickled state takes up to this many times its pickled size (measured with tracemalloc:
#: 3 for long-context file trees, 4 to 6 for the other classes, 10 to 11 for thousands of
#: empty files or folders).
UNPICKLED_FACTOR = 10
#: Walks check the clock every this many steps.
TICKS_PER_CLOCK = 2_048
#: A text search ticks one step per this many characters it scans (``scanned``).
CHARS_PER_TICK = 1_024

MAX_CALLS = Option(
    "--careful-max-calls",
    default=DEFAULT_MAX_CALLS,
    type=positive_int,
    metavar="N",
    help=f"Budget of each conversation's scoring: calls replayed (default {DEFAULT_MAX_CALLS:,}); "
    "over it, that conversation fails with a resource_limit reason",
)
MAX_SECONDS = Option(
    "--careful-max-seconds",
    default=DEFAULT_MAX_SECONDS,
    type=positive_number,
    metavar="S",
    help=f"Budget of each conversation's scoring: its time, the references left out; it stops at the first "
    f"check past S, each call replayed or 2,048 steps of a walk (default {DEFAULT_MAX_SECONDS:g} s)",
)
MAX_MEMORY_MB = Option(
    "--careful-max-memory-mb",
    default=DEFAULT_MAX_MEMORY_MB,
    type=positive_number,
    metavar="MB",
    help=f"Budget of each conversation's scoring: state snapshots, calls and results held, and every "
    f"value the decoder or a call builds ('a' * 199999, [x] * 100000) at the length of its text, "
    f"counted (default {DEFAULT_MAX_MEMORY_MB:g} MB)",
)
#: Each conversation's scoring budget, in the order ``--help`` lists them.
OPTIONS = (MAX_CALLS, MAX_SECONDS, MAX_MEMORY_MB)
#: The option of each limit a ``ResourceLimit`` names.
OPTION_OF = {"calls": MAX_CALLS, "seconds": MAX_SECONDS, "memory": MAX_MEMORY_MB}


@dataclass(frozen=True)
class Limits:
    """One conversation's budget (options ``--careful-max-calls`` and the like)."""

    max_calls: int = DEFAULT_MAX_CALLS
    max_seconds: float = DEFAULT_MAX_SECONDS
    max_memory_mb: float = DEFAULT_MAX_MEMORY_MB


class ResourceLimit(BaseException):
    """A conversation's scoring went over its budget.

    Attributes:
        limit: ``calls``, ``seconds`` or ``memory``.
        reason: one line naming what was exceeded, the limit, and the option that sets it.
    """

    def __init__(self, limit: str, reason: str) -> None:
        super().__init__(reason)
        self.limit = limit
        self.reason = reason


#: Where the scoring is: (turn, step, position of the call or None while decoding, the call as
#: replayed: a string, or whatever a step held instead).
Place = tuple[int, int, "int | None", object]


class Meter:
    """What one conversation's scoring has used so far.

    Args:
        limits: the budget.
        now: the clock, read at each checkpoint (``time.monotonic``; a test passes its own).
    """

    def __init__(self, limits: Limits, now: Callable[[], float] = time.monotonic) -> None:
        self.limits = limits
        self.now = now
        self.started = now()
        self.calls = 0
        self.bytes = 0
        self.steps = 0  # walk steps over state: the work no call count sees
        self._ticks = 0
        self._deadline = self.started + limits.max_seconds
        self._max_bytes = int(limits.max_memory_mb * 1024 * 1024)
        #: Where the scoring is (``at``): a reason names the step and call that crossed the limit.
        self.where: Place | None = None
        self.expression: str | None = None  # what the decoder evaluates there (``evaluating``)

    @property
    def seconds(self) -> float:
        return self.now() - self.started

    def exceeded(self, limit: str, reason: str) -> ResourceLimit:
        """The limit crossed, its reason naming the place (``at``) where one is set."""
        if self.where is None:
            return ResourceLimit(limit, reason)
        return ResourceLimit(limit, f"{reason} at {place(self.where, self.expression)}")

    def call(self, nbytes: int) -> None:
        self.calls += 1
        if self.calls > self.limits.max_calls:
            raise self.exceeded(
                "calls",
                f"more than {self.limits.max_calls:,} calls: over the call limit ({MAX_CALLS}={self.limits.max_calls})",
            )
        self.charge(nbytes + CALL_OVERHEAD)
        self.clock()

    def charge(self, nbytes: int) -> None:
        self.bytes += nbytes
        if self.bytes > self._max_bytes:
            raise self.exceeded(
                "memory",
                f"more than {self.limits.max_memory_mb:g} MB of state, calls and results "
                f"held after {self.calls:,} calls: over the memory limit "
                f"({MAX_MEMORY_MB}={self.limits.max_memory_mb:g})",
            )

    def pause(self, seconds: float) -> None:
        """Leave ``seconds`` out of the time limit (work done for every conversation alike)."""
        self._deadline += seconds

    def tick(self, steps: int) -> None:
        self.steps += steps
        self._ticks += steps
        if self._ticks >= TICKS_PER_CLOCK:
            self._ticks = 0
            self.clock()

    def clock(self) -> None:
        """A checkpoint: past the deadline, the time limit is crossed."""
        if self.now() > self._deadline:
            raise self.exceeded(
                "seconds",
                f"scoring took more than {self.limits.max_seconds:g} s "
                f"(after {self.calls:,} calls): over the time limit "
                f"({MAX_SECONDS}={self.limits.max_seconds:g})",
            )


# The conversation being scored in this thread/task: set by ``metered`` only.
_CURRENT: contextvars.ContextVar[Meter | None] = contextvars.ContextVar("careful_meter", default=None)


@contextlib.contextmanager
def metered(limits: Limits, now: Callable[[], float] = time.monotonic) -> Iterator[Meter]:
    """Count everything scored inside the block against ``limits`` (time by the clock ``now``)."""
    meter = Meter(limits, now)
    token = _CURRENT.set(meter)
    try:
        yield meter
    finally:
        _CURRENT.reset(token)


@contextlib.contextmanager
def unmetered() -> Iterator[None]:
    """Nothing inside the block counts (work shared by every conversation, such as references)."""
    outer = _CURRENT.get()
    token = _CURRENT.set(None)
    started = outer.now() if outer is not None else 0.0
    try:
        yield
    finally:
        _CURRENT.reset(token)
        if outer is not None:
            outer.pause(outer.now() - started)


@contextlib.contextmanager
def apart(seconds_share: float) -> Iterator[Meter]:
    """Work beside the conversation's scoring, on a budget of its own (the optimizer's search).

    Inside the block a meter of its own counts: the calls and memory the conversation's budget has
    left, and ``seconds_share`` of its time limit, read on the same clock. The block's time is left
    out of the conversation's (as ``unmetered`` leaves it out) and nothing it counts reaches the
    conversation's meter, so a ``ResourceLimit`` raised inside is the block's own: the caller catches
    it and keeps what it had, and the conversation's scoring goes on as without the block. Outside any
    budget, the block gets the default limits.
    """
    outer = _CURRENT.get()
    now = outer.now if outer is not None else time.monotonic
    base = outer.limits if outer is not None else Limits()
    spent_calls, spent_bytes = (outer.calls, outer.bytes) if outer is not None else (0, 0)
    budget = Limits(
        max_calls=max(base.max_calls - spent_calls, 1),
        max_seconds=base.max_seconds * seconds_share,
        max_memory_mb=max(base.max_memory_mb - spent_bytes / (1024 * 1024), 1 / 1024),
    )
    meter = Meter(budget, now)
    token = _CURRENT.set(meter)
    try:
        yield meter
    finally:
        _CURRENT.reset(token)
        if outer is not None:
            outer.pause(now() - meter.started)


def tick(steps: int = 1) -> None:
    """One step of a walk over state (cheap: the clock is read every few thousand)."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.tick(steps)


def scanned(text: str) -> None:
    """A search through ``text``: one step per ``CHARS_PER_TICK`` characters (a search through a
    result of 200,000 characters is 196 steps of a walk, not one)."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.tick(1 + len(text) // CHARS_PER_TICK)


def charge(nbytes: int) -> None:
    """Bytes the conversation's scoring now holds."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.charge(nbytes)


def call(nbytes: int) -> None:
    """One replayed call holding ``nbytes`` of strings."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.call(nbytes)


def metering() -> bool:
    """Whether a budget counts here (a caller skips measuring what nothing would count)."""
    return _CURRENT.get() is not None


def at(turn: int | None, step: int = 0, position: int | None = None, call: object = None) -> None:
    """Where the scoring now is: a step being decoded, or (``position``, ``call``) a call being
    replayed; ``None`` for nothing in particular. Kept as it is and put into words only when a
    limit is crossed there (``place``): every call of every conversation passes here."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.where = None if turn is None else (turn, step, position, call)
        meter.expression = None


def evaluating(expression: str) -> None:
    """The decoder is evaluating ``expression`` where the scoring is (named if a limit is crossed)."""
    meter = _CURRENT.get()
    if meter is not None:
        meter.expression = expression


def place(where: Place, expression: str | None = None) -> str:
    """A place of ``at`` as a reason names it, on one line, long calls and literals cut."""
    turn, step, position, call = where
    if position is None:
        what = f": {escape(shorten_call(expression, 200))}" if expression is not None else ""
        return f"turn {turn}, step {step} (decoding{what})"
    shown = escape(shorten_call(call, 200)) if isinstance(call, str) else type(call).__name__
    return f"turn {turn}, step {step}, call {position}: {shown}"
