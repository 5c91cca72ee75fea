"""Stopping a live run in every process: the marks in the session's own folder.

A run's processes (the controller and its xdist workers) share no memory, only the
output folder. The first one to meet a problem that ends the run writes the stop file
(first process wins); the controller marks an interrupt; a conversation left for the
next run is a line of the not-run file. Every process reads these marks before it sends
anything, and the controller's summary reads them at the end.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

STOP_FILE = "stopped.json"  # in the session's folder: the reason the run stopped, first process wins
NOT_RUN_FILE = "not-run.jsonl"  # in the session's folder: what this session left for the next one
INTERRUPTED_FILE = "interrupted"  # in the session's folder: the controller was interrupted; nothing new is sent
#: The session's id, made by the controller and sent to its xdist workers: a rerun on the same
#: output folder (one run at a time: ``take_output``) neither inherits an earlier stop nor skip.
SESSION_ENV = "CAREFUL_SESSION_ID"


def session_dir(output: Path) -> Path:
    """This session's own files (stop reason, what was not run), under the output folder."""
    return output / ".careful" / "sessions" / os.environ.get(SESSION_ENV, "local")


def unwritable(path: Path, exc: OSError) -> str:
    """One line naming what could not be written, and why."""
    return f"cannot write {exc.filename or path}: {exc.strerror or exc}; the run stopped, nothing more is sent"


@dataclass
class Stops:
    """Whether the session's run stopped, and why, as every process of it reads it.

    ``stopped`` is this process's copy of the reason, once it is known here.
    """

    output: Path
    stopped: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def session_dir(self) -> Path:
        """This session's own files (stop reason, what was not run), under the output folder."""
        return session_dir(self.output)

    @staticmethod
    def start_session() -> None:
        """Controller: a fresh session id (its workers inherit it); an earlier stop does not carry over."""
        os.environ[SESSION_ENV] = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"

    def is_stopped(self) -> str | None:
        """Why the run stopped, if it did: here, or in another process (the stop file, even unreadable)."""
        if self.stopped:
            return self.stopped
        if any(path.exists() for path in self._marks()):
            self.stopped = self.stop_reason() or "the run stopped (its reason could not be written)"
        return self.stopped

    def _marks(self) -> list[Path]:
        """Where a stop is recorded: the session folder, and, for an output that cannot take even an
        empty file (read-only), the temporary folder, so that the other processes still stop at once."""
        marks = [self.session_dir() / STOP_FILE]
        session = os.environ.get(SESSION_ENV)
        if session:
            marks.append(Path(tempfile.gettempdir()) / f"careful-stopped-{session}")
        return marks

    def interrupted(self) -> None:
        """Controller, interrupted or cut short: no process of the session sends anything new."""
        try:
            path = self.session_dir() / INTERRUPTED_FILE
            path.parent.mkdir(parents=True, exist_ok=True)
            path.touch()
        except OSError:
            pass  # the workers stop when xdist shuts them down

    def was_interrupted(self) -> bool:
        """Whether the controller was interrupted (SIGINT to it alone): its workers send nothing new."""
        return (self.session_dir() / INTERRUPTED_FILE).exists()

    def cannot_file(self, exc: OSError) -> None:
        """The session's own folder cannot be written (a full disk): the run stops, nothing more is sent."""
        self.first_to_stop(unwritable(self.session_dir(), exc), None)

    def first_to_stop(self, reason: str, conversation_id: str | None) -> bool:
        """Record why the run stops, once per session; False when it had already stopped.

        The stop file exists even where its reason cannot be written (a full disk): the
        other processes read its existence.
        """
        with self._lock:  # the flight's threads meet one problem together
            if self.stopped:
                return False
            self.stopped = reason
        for path in self._marks():
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "x", encoding="utf-8") as handle:  # exclusive: the first one wins
                    handle.write(json.dumps({"reason": reason, "id": conversation_id}))
            except FileExistsError:
                self.stopped = self.stop_reason() or self.stopped
                return False
            except OSError:
                continue  # an empty stop file, or none here: the next place, and this process stops anyway
            break
        return True

    def stop_reason(self) -> str | None:
        """Why the run stopped, if a process of this session stopped it."""
        for path in self._marks():
            try:
                return str(json.loads(path.read_text(encoding="utf-8"))["reason"])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return None

    def mark_not_run(self, conversation_id: str, condition: str, reason: str) -> None:
        """Left for the next run (the controller counts these lines for the summary)."""
        path = self.session_dir() / NOT_RUN_FILE
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a", encoding="utf-8") as handle:  # one short line per write: appends do not mix
                handle.write(json.dumps({"id": conversation_id, "condition": condition, "reason": reason}) + "\n")
        except OSError:
            pass  # a full disk: the summary counts it among the selected but not run

    def summary_lines(self) -> list[str]:
        """The summary's lines about the stop: why the run stopped, what was not run."""
        lines = []
        stopped = self.is_stopped()
        if stopped:
            lines.append(f"run stopped: {stopped}")
        try:
            rows = [json.loads(x) for x in (self.session_dir() / NOT_RUN_FILE).read_text().splitlines()]
        except (OSError, ValueError):
            rows = []
        if rows:
            lines.append(
                f"{len(rows)} conversation(s) not run and skipped (not scored): "
                f"{str(rows[0]['reason']).removeprefix('not run: ')}; a rerun of the same command runs them"
            )
        return lines

    def release(self) -> None:
        """Controller, at the end: the marks outside the output folder go (they are this session's alone)."""
        for mark in self._marks()[1:]:
            mark.unlink(missing_ok=True)
