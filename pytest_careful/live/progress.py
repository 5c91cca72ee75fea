"""What a live run shows while it runs: conversations done, in flight and failed, requests per second, ETA.

Each process with conversations in flight writes its counts every second
(``inflight.Flight``, to ``<session>/flight/progress/<pid>.json``); the controller
(the only process without xdist) adds them up.

* On a terminal the line stays on the screen's last row, redrawn every second while
  pytest's own output scrolls above it: a scroll region that leaves that row out, as
  apt draws its progress bar. It is written to ``/dev/tty``, so neither pytest's
  output capture nor its terminal writer's idea of the current line is disturbed.
* Elsewhere (CI logs, output piped to a file) it is a plain line every
  :data:`PLAIN_SECONDS`, written where the harness shows it (``ShowProgress``: pytest's
  terminal reporter, around its output capture, ``harness.progress_display``): between
  items, and by a thread of its own when no item reports (a silent server, a long wait).

While requests are in flight and none has been answered for :data:`QUIET_SECONDS`,
the line says so; once the run stopped it says that, and no ETA. A non-streamed request
says nothing until it is answered, so a long generation and a silent server look alike
from the client: where the backend can ask its servers (vLLM's ``/metrics``, a
:data:`ServerProbe`), the line tells them apart (``1 request generating (312 tokens so
far, no answer for 2m40s)``), from the servers' generated-token counter read every second.

The ETA is estimated when a conversation ends (the time so far, per conversation ended,
times those left) and counts down from there until the next one ends; a wait longer than
the estimate says ``ETA overdue by ...`` rather than push the estimate up each second.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from ..sources.reference_logged import ShowProgress

#: Between two plain progress lines (CI logs).
PLAIN_SECONDS = 30.0
#: Between two redraws of the terminal's status row.
TTY_SECONDS = 1.0
#: Requests per second are measured over this window.
RATE_WINDOW = 10.0
#: Requests in flight and no answer for this long: the line says so.
QUIET_SECONDS = 15.0
#: The servers' generated tokens unchanged this long: no longer "generating" (a hung engine).
STALL_SECONDS = QUIET_SECONDS


class ServerWork(Protocol):
    """What the model servers say they are doing, all of them together (vLLM: ``backends.vllm.metrics``)."""

    @property
    def running(self) -> int:
        """Requests being generated."""
        ...

    @property
    def generated(self) -> float:
        """Tokens generated since the servers started (a counter)."""
        ...


#: Asks the servers what they are doing; None: they do not say now (no metrics, not answering).
ServerProbe = Callable[[], ServerWork | None]


@dataclass(frozen=True)
class ProgressCounts:
    """The run's counts, all processes together."""

    total: int = 0
    done: int = 0
    failed: int = 0
    running: int = 0
    requests: int = 0
    last_answer: float = 0.0  # time.time() of the server's last answer to any process (0: none yet)
    started: float = 0.0  # time.time() when the first process took off


def read_totals(folder: Path) -> ProgressCounts:
    """The sum of the processes' progress files in ``folder`` (a file being replaced is skipped)."""
    found: list[dict[str, Any]] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return ProgressCounts()
    for name in names:
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            found.append(json.loads((folder / name).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue

    def total(field: str) -> int:
        return sum(int(f.get(field, 0)) for f in found)

    # Every process counts the same conversations to run; each counts its own done and failed.
    return ProgressCounts(
        max((int(f.get("total", 0)) for f in found), default=0),
        total("done"),
        total("failed"),
        total("running"),
        total("requests"),
        max((float(f.get("last_answer", 0.0)) for f in found), default=0.0),
        min((float(f["started"]) for f in found if f.get("started")), default=0.0),
    )


@dataclass(frozen=True)
class Generating:
    """Requests the servers are generating while none has been answered (``GenerationWatch``)."""

    requests: int
    tokens: int  # generated since the last answer (all requests together)


class GenerationWatch:
    """The servers' generated tokens since the last answer, from successive readings of their counter.

    Read every second while requests are in flight: the counter's value when an answer is first
    seen is the base, and tokens past it are what the requests in flight generated since. Until
    the counter grows past the base (a prompt being read) and once it has not grown for
    :data:`STALL_SECONDS` (a stalled engine), nothing is said to be generating.
    """

    def __init__(self, probe: ServerProbe) -> None:
        self.probe = probe
        self._answer: float | None = None  # the last answer's time the base was taken at
        self._base = 0.0
        self._last: ServerWork | None = None
        self._grew: float | None = None  # wall time the counter last grew past the base (None: not yet)

    def observe(self, totals: ProgressCounts, wall: float) -> None:
        """One reading of the servers (none while nothing is in flight: nothing to tell)."""
        work = self.probe() if totals.running else None
        last, self._last = self._last, work
        if work is None:
            return
        if self._answer != totals.last_answer or last is None or work.generated < self._base:
            # A new answer, the first reading, or a restarted server: count from here (nothing seen yet).
            self._answer, self._base, self._grew = totals.last_answer, work.generated, None
        elif work.generated > last.generated:
            self._grew = wall

    def generating(self, wall: float) -> Generating | None:
        """What the servers generate now, or None: they do not say, run nothing, or stalled."""
        work = self._last
        if work is None or work.running <= 0 or self._grew is None or wall - self._grew >= STALL_SECONDS:
            return None
        return Generating(work.running, int(work.generated - self._base))


class ProgressMeter:
    """Rates and the ETA from successive totals."""

    def __init__(self) -> None:
        self.started = time.monotonic()
        self._history: collections.deque[tuple[float, int]] = collections.deque()
        self._ended = 0  # conversations ended when the ETA was last estimated
        self._estimate: tuple[float, float] | None = None  # (when, seconds left then)

    def line(
        self,
        totals: ProgressCounts,
        now: float | None = None,
        stopped: str | None = None,
        wall: float | None = None,
        generating: Generating | None = None,
    ) -> str:
        """The progress line; ``stopped``: why the run stopped (then no ETA); ``wall``: time.time() now;
        ``generating``: what the servers say they generate (else a quiet server is "no answer")."""
        now = time.monotonic() if now is None else now
        self._history.append((now, totals.requests))
        while len(self._history) > 2 and now - self._history[0][0] > RATE_WINDOW:
            self._history.popleft()
        first_time, first_requests = self._history[0]
        rate = (totals.requests - first_requests) / (now - first_time) if now > first_time else 0.0
        if not totals.total:
            return "careful: live run starting (no conversation in flight yet)"
        finished = totals.done + totals.failed
        text = (
            f"careful: {finished}/{totals.total} conversations done, {totals.running} in flight, "
            f"{totals.failed} failed, {rate:.1f} requests/s"
        )
        if stopped:  # no ETA: nothing more is sent (the reason is the summary's "run stopped" line)
            return text + "; the run stopped"
        quiet = _quiet(totals, time.time() if wall is None else wall)
        if quiet is not None and generating is not None:
            requests = f"{generating.requests} request{'s' if generating.requests != 1 else ''}"
            text += f", {requests} generating ({generating.tokens} tokens so far, no answer for {_duration(quiet)})"
        elif quiet is not None:
            text += f", no answer from the server for {_duration(quiet)}"
        return text + self._eta(finished, totals.total - finished, now)

    def _eta(self, finished: int, remaining: int, now: float) -> str:
        """Estimated when a conversation ends, counted down until the next one ends."""
        elapsed = now - self.started
        if finished != self._ended and finished and elapsed > 0:
            self._ended, self._estimate = finished, (now, remaining * elapsed / finished)
        if self._estimate is None or remaining <= 0:
            return ""
        when, estimate = self._estimate
        left = estimate - (now - when)
        return f", ETA {_duration(max(left, 0.0))}" if left > -0.5 else f", ETA overdue by {_duration(-left)}"


def _quiet(totals: ProgressCounts, wall: float) -> float | None:
    """How long requests have waited with no answer from the server, if long enough to say."""
    if not totals.running or not totals.requests:
        return None
    since = max(totals.last_answer, totals.started)
    quiet = wall - since if since else 0.0
    return quiet if quiet >= QUIET_SECONDS else None


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class Display:
    """The controller's progress display of one live run (:meth:`start`, :meth:`between_items`, :meth:`stop`)."""

    def __init__(
        self,
        folder: Path,
        show: ShowProgress | None,
        stopped: Callable[[], str | None] | None = None,
        probe: ServerProbe | None = None,
    ) -> None:
        self.folder = folder
        self.show = show  # where the line is shown (None: nowhere)
        self.stopped = stopped or (lambda: None)  # why the run stopped, if it did
        self.meter = ProgressMeter()
        self.watch = GenerationWatch(probe) if probe is not None else None  # the servers' own word, if any
        self._watch_lock = threading.Lock()  # the display's thread and the main thread, between items
        self._tty = _open_tty() if show is not None and show.isatty else None
        self._last_plain = time.monotonic()
        self._plain_lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._tty is not None:
            self._write(f"\n\0337\033[1;{self._rows() - 1}r\0338\033[1A")  # a last row of its own
            self._thread = threading.Thread(target=self._redraw, name="careful-progress", daemon=True)
        elif self.show is not None:  # a line every PLAIN_SECONDS even while no item reports
            self._thread = threading.Thread(target=self._plain, name="careful-progress", daemon=True)
        if self._thread is not None:
            self._thread.start()

    def _line(self, observe: bool = False) -> str:
        """The line now; ``observe``: ask the servers first (else their last reading, a second old at most)."""
        totals, wall = read_totals(self.folder), time.time()
        if observe:
            self._observe(totals, wall)
        return self.meter.line(totals, stopped=self.stopped(), wall=wall, generating=self._generating(wall))

    def _observe(self, totals: ProgressCounts, wall: float) -> None:
        """The servers asked what they generate: every second, from the display's thread (the
        counter's base is its value at the last answer)."""
        if self.watch is not None:
            with self._watch_lock:
                self.watch.observe(totals, wall)

    def _generating(self, wall: float) -> Generating | None:
        if self.watch is None:
            return None
        with self._watch_lock:
            return self.watch.generating(wall)

    def _redraw(self) -> None:
        while not self._stopped.wait(TTY_SECONDS):
            line = self._line(observe=True)[: self._size().columns - 1]
            self._write(f"\0337\033[{self._rows()};1H\033[2K{line}\0338")

    def _plain(self) -> None:
        while not self._stopped.wait(TTY_SECONDS):
            if self.watch is not None:  # read every second, though a line comes every PLAIN_SECONDS
                self._observe(read_totals(self.folder), time.time())
            self.between_items()

    def between_items(self) -> None:
        """Plain mode: a line when one is due (the controller's main thread, between items, or
        the display's own thread)."""
        if self._tty is not None or self.show is None:
            return
        with self._plain_lock:
            now = time.monotonic()
            if now - self._last_plain < PLAIN_SECONDS or self._stopped.is_set():
                return
            self._last_plain = now
            self._write_plain(self._line())

    def _write_plain(self, line: str) -> None:
        if self.show is not None:  # nowhere to write it otherwise (the callers check first)
            self.show.write_line(line)

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout=2 * TTY_SECONDS)
        if self._tty is None and self.show is not None:
            # A CI log ends on the final counts, however long since the last line.
            with self._plain_lock:
                self._write_plain(self._line())
        if self._tty is not None:
            # Give the row back: the whole screen scrolls again, the status row is cleared.
            self._write(f"\0337\033[r\033[{self._rows()};1H\033[2K\0338")
            os.close(self._tty)
            self._tty = None

    def _rows(self) -> int:
        return max(3, self._size().lines)

    def _size(self) -> os.terminal_size:
        try:  # the terminal's own (fd 1 may be pytest's capture file)
            return os.get_terminal_size(self._tty) if self._tty is not None else shutil.get_terminal_size()
        except OSError:
            return shutil.get_terminal_size()

    def _write(self, text: str) -> None:
        if self._tty is None:
            return
        try:
            os.write(self._tty, text.encode("utf-8", "replace"))  # one write: whole escape sequences
        except OSError:
            pass


def _open_tty() -> int | None:
    try:
        return os.open("/dev/tty", os.O_WRONLY | os.O_NOCTTY)
    except OSError:
        return None
