"""Scoring with the cyclic garbage collector paused."""

from __future__ import annotations

import functools
import gc
from collections.abc import Callable
from typing import TypeVar

F = TypeVar("F", bound=Callable[..., object])


def paused(func: F) -> F:
    """Run ``func`` with the cyclic collector paused (unless the caller already paused it).

    Replaying and scoring one conversation allocates tens of thousands of
    short-lived containers that reference counting frees. Each allocation burst
    would trigger collections that scan the whole heap (the dataset, the cached
    reference replays, pytest's items): measured, more than half the time of
    ``rules.score``. Cycles made meanwhile are collected at the first
    collection after it, as the allocation count keeps running.
    """

    @functools.wraps(func)
    def wrapper(*args: object, **kwargs: object) -> object:
        if not gc.isenabled():
            return func(*args, **kwargs)
        gc.disable()
        try:
            return func(*args, **kwargs)
        finally:
            gc.enable()

    return wrapper  # type: ignore[return-value]


def freeze() -> None:
    """Keep every object alive now out of the cyclic collector's full scans, for the rest of the session.

    What a run holds for its whole length (modules, the dataset, pytest's items, the
    rows and reports when the scorecards are written) is scanned by every full
    collection, and the heap grows with each conversation: measured on the real
    600-conversation run, six full collections of 270k-400k objects took 0.7-0.9 s
    of its 5.3 s. ``gc.freeze`` moves them to the permanent generation (objects
    are never moved or changed; only later full collections skip them).
    """
    global _frozen
    gc.freeze()
    _frozen = True


def thaw() -> None:
    """Give the frozen objects back to the collector, if ``freeze`` froze any."""
    global _frozen
    if _frozen:
        gc.unfreeze()
        _frozen = False


def session_started() -> None:
    """A pytest session starts in this process (the plugin's earliest hook).

    The first one thaws what an earlier, finished session of the process left frozen.
    """
    global _sessions
    if _sessions == 0:
        thaw()
    _sessions += 1


def session_ended() -> None:
    """Registered as the session's last cleanup: after pytest's own ``gc.collect()`` rounds
    at unconfigure, which then skip what is frozen.

    A session inside another one (pytester's in-process runs) thaws: its items must not
    stay uncollectable in the calling process. The outermost one leaves its objects
    frozen: the process exits next, and the interpreter's last full collection would
    otherwise scan them all (0.15 s of the real run); a later session thaws them.
    """
    global _sessions
    _sessions = max(0, _sessions - 1)
    if _sessions:
        thaw()


_frozen = False
_sessions = 0  # pytest sessions of this process that have started and not ended
