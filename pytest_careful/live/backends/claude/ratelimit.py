"""Adaptive concurrency of API requests, shared by every process of a run.

xdist workers are separate processes, each sending its own requests; a rate
limit (429, 529 overloaded) is the account's, not one worker's. So they share
one state file in the output folder (``<output>/.careful/ratelimit.json``, under
an ``flock``, like the spend ledger): how many requests may be in flight at once
(``limit``), which are (``in_flight``), and until when nobody sends
(``paused_until``).

* before each attempt a process waits for a free slot and for the pause to end;
* a rate-limited answer halves the limit (at least 1) and pauses everyone for
  the wait the server asked for (``retry-after``), capped at :data:`MAX_WAIT`;
* after ``limit`` answered requests in a row the limit grows by one, up to the
  number of workers: everyone backs off together and resumes together (AIMD).

Slots of processes that died are swept (this host's, by pid), as the ledger does.
"""

from __future__ import annotations

import contextlib
import email.utils
import json
import os
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TypedDict

from .budget import flocked, write_json

#: A response's headers (httpx's, the SDKs'): read by name, case-insensitively where they are httpx's.
Headers = Mapping[str, str]

#: The longest one wait may last, whatever ``retry-after`` says: the worker holds its
#: conversation meanwhile, and a longer outage is better left to the next run.
MAX_WAIT = 60.0
POLL = 0.2  # seconds between looks at a full or paused state


def retry_after(headers: Headers, cap: float = MAX_WAIT) -> float | None:
    """The wait a rate-limited answer asks for (``retry-after-ms``, else ``retry-after`` in seconds
    or as an HTTP date), at most ``cap``; None when it asks for none."""
    seconds = None
    in_ms, later = headers.get("retry-after-ms"), headers.get("retry-after")
    with contextlib.suppress(TypeError, ValueError):
        seconds = float(in_ms) / 1000 if in_ms is not None else None
    if seconds is None and later is not None:
        try:
            seconds = float(later)
        except ValueError:
            date = email.utils.parsedate_tz(later)
            seconds = email.utils.mktime_tz(date) - time.time() if date else None
    return min(seconds, cap) if seconds is not None and seconds > 0 else None


def limiter_file(output: Path) -> Path:
    return Path(output) / ".careful" / "ratelimit.json"


def workers() -> int:
    """How many processes send requests at once (xdist's worker count, else 1)."""
    try:
        return max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))
    except ValueError:
        return 1


class Holder(TypedDict):
    """A slot in use: the process holding it."""

    pid: int
    host: str


class Shared(TypedDict):
    """The limiter's file: the current limit, its streak of successes, the pause, the slots in use."""

    limit: int
    streak: int
    paused_until: float
    in_flight: dict[str, Holder]
    throttles: int


class SharedLimiter:
    """The run's concurrency: :meth:`slot` around each attempt, :meth:`throttled` on a 429."""

    def __init__(self, path: Path, maximum: int | None = None) -> None:
        self.path = Path(path)
        self.maximum = maximum or workers()

    @contextlib.contextmanager
    def slot(self) -> Iterator[str]:
        """Wait for a free slot (and the end of any pause); hold it for one attempt."""
        token = self._acquire()
        try:
            yield token
        finally:
            self._release(token)

    def answered(self) -> None:
        """An attempt got an answer that is not a rate limit: grow the limit by one every ``limit`` of them."""
        with self._state() as state:
            state["streak"] += 1
            if state["streak"] >= state["limit"] and state["limit"] < self.maximum:
                state["limit"] += 1
                state["streak"] = 0

    def throttled(self, wait: float) -> float:
        """A rate-limited answer: halve the limit, pause everyone; returns the (capped) wait."""
        wait = min(max(wait, 0.0), MAX_WAIT)
        with self._state() as state:
            state["limit"] = max(1, state["limit"] // 2)
            state["streak"] = 0
            state["paused_until"] = max(state["paused_until"], time.time() + wait)
            state["throttles"] += 1
        return wait

    def snapshot(self) -> Shared:
        with self._state(write=False) as state:
            return state.copy()

    # -- internals ---------------------------------------------------------------

    def _acquire(self) -> str:
        token = uuid.uuid4().hex
        while True:
            with self._state() as state:
                _sweep(state)
                now = time.time()
                if now >= state["paused_until"] and len(state["in_flight"]) < state["limit"]:
                    state["in_flight"][token] = {"pid": os.getpid(), "host": socket.gethostname()}
                    return token
                wait = max(state["paused_until"] - now, POLL)
            time.sleep(min(wait, MAX_WAIT))

    def _release(self, token: str) -> None:
        with self._state() as state:
            state["in_flight"].pop(token, None)

    @contextlib.contextmanager
    def _state(self, write: bool = True) -> Iterator[Shared]:
        """The shared state under the file's lock; written back atomically on success."""
        with flocked(self.path):
            state = self._read()
            yield state
            if write:
                write_json(self.path, state)

    def _read(self) -> Shared:
        fresh: Shared = {"limit": self.maximum, "streak": 0, "paused_until": 0.0, "in_flight": {}, "throttles": 0}
        try:
            state = json.loads(self.path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return fresh  # absent or torn: concurrency is advisory, starting afresh is safe
        if not isinstance(state, dict) or not all(k in state for k in fresh):
            return fresh
        state["limit"] = max(1, min(int(state["limit"]), self.maximum))
        return state  # type: ignore[return-value]  # a file of the limiter's own, its keys checked


def _sweep(state: Shared) -> None:
    """Slots of this host's processes that died are free again."""
    host = socket.gethostname()
    for token, holder in list(state["in_flight"].items()):
        if holder.get("host") == host and not _alive(holder.get("pid")):
            del state["in_flight"][token]


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
