"""Scoring with the cyclic garbage collector paused."""

from __future__ import annotations

import functools
import gc
from typing import Callable, TypeVar

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
