"""Where a live run files its results, under what settings, and what it finds filed.

Each condition's results are BFCL result files (``<output>/<condition>/<model>/multi_turn/...``;
repeat ``k`` of ``--careful-repeat K`` under ``<output>/repeat-<k>/<condition>/...``), with
``careful_settings.json`` beside them: how they were made. A rerun resumes what is complete
in them when its session started, and only if it was made under the same settings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..data.result_files import InputProblem, LoggedEntry
from ..data.result_store import ResultStore, is_complete
from ..data.run_settings import DECODER_KEY, SETTINGS_FILE, RunSettings
from . import inflight
from .handles import ModelHandle
from .stops import session_dir

FILED_FILE = "filed.json"  # in the session's folder: the entries complete when it started


@dataclass
class ResultFolders:
    """The run's result folders: one per condition (and repeat), and what is complete in them."""

    output: Path
    handle: ModelHandle | None = None
    repeats: int = 1  # --careful-repeat
    _completed: dict[tuple[str, str, int], dict[str, LoggedEntry]] = field(default_factory=dict)
    _before: set[str] | None = None  # key names complete when the session started (``snapshot_filed``)

    def store(self, condition: str, repeat: int = 1) -> ResultStore:
        """The condition's result files (of one repeat: ``<output>/repeat-<k>/<condition>`` when K > 1)."""
        assert self.handle is not None
        root = self.output / f"repeat-{repeat}" if self.repeats > 1 else self.output
        return ResultStore(root / condition, self.handle.result_name)

    def repeat_indices(self) -> range:
        return range(1, self.repeats + 1)

    def settings_file(self, condition: str, repeat: int = 1) -> Path:
        """Beside the condition's result files: how they were made (BFCL's files stay BFCL's)."""
        return self.store(condition, repeat).model_dir / SETTINGS_FILE

    def claim(self, condition: str, categories: tuple[str, ...], settings: RunSettings, repeat: int = 1) -> str | None:
        """Record this run's ``settings`` for ``condition``; a problem if finished results differ.

        Entries made under other settings (another user script, boundary, output
        limit...) must not be resumed into this run; with none finished, the
        folder is simply taken over.
        """
        path = self.settings_file(condition, repeat)
        wanted = settings.to_json()
        try:  # whatever bytes the folder holds (open_live refused anything but a regular file)
            made = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None
        except (OSError, ValueError, RecursionError):
            made = None
        store = self.store(condition, repeat)
        if isinstance(made, dict) and DECODER_KEY not in made:  # written before the decoder was recorded
            made = {**made, DECODER_KEY: wanted[DECODER_KEY]}
        finished = any(store.completed(c) for c in categories) if made not in (None, wanted) else False
        if finished and isinstance(made, dict):
            differ = sorted(k for k in set(made) | set(wanted) if made.get(k) != wanted.get(k))
            return (
                f"{store.model_dir} holds results made with "
                + ", ".join(f"{k}={made.get(k)!r}" for k in differ)
                + "; this run has "
                + ", ".join(f"{k}={wanted.get(k)!r}" for k in differ)
            )
        path.parent.mkdir(parents=True, exist_ok=True)
        settings.write(path)
        return None

    def filed(self, key: inflight.Key) -> bool:
        """Whether ``key``'s conversation is complete in its result file (a rerun resumes it)."""
        condition, conversation_id, repeat = key
        return conversation_id in self.done(condition, conversation_id.rsplit("_", 1)[0], repeat)

    def done(self, condition: str, category: str, repeat: int = 1) -> dict[str, LoggedEntry]:
        """The conversations this session resumes: complete in the file when the session started.

        Read once per process, after other processes may have filed some of this session's
        (``inflight``): those are this session's runs, not resumed ones.
        """
        key = (condition, category, repeat)
        if key not in self._completed:  # read once per process
            entries, _ = self.store(condition, repeat).read(category)  # the controller reports the problems (open_live)
            before = self._filed_before()
            self._completed[key] = {
                i: e
                for i, e in entries.items()
                if is_complete(e.raw) and (before is None or inflight.key_name((condition, i, repeat)) in before)
            }
        return self._completed[key]

    def snapshot_filed(self, categories: tuple[str, ...], conditions: tuple[str, ...]) -> None:
        """Controller, before any worker starts: what is complete in the files (``done``)."""
        names = [
            inflight.key_name((c, i, r))
            for c in conditions
            for r in self.repeat_indices()
            for category in categories
            for i in self.store(c, r).completed(category)
        ]
        path = session_dir(self.output) / FILED_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(names), encoding="utf-8")

    def _filed_before(self) -> set[str] | None:
        if self._before is None:
            try:
                self._before = set(json.loads((session_dir(self.output) / FILED_FILE).read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError):
                return None  # no session snapshot (a source used outside a pytest session)
        return self._before

    def stored_problems(self, categories: tuple[str, ...], conditions: tuple[str, ...]) -> list[InputProblem]:
        """The lines of the output folder's result files that resuming does not read back.

        Their conversations are run again; the lines are reported once, by the
        controller, with file and line, and dropped when the file is compacted.
        """
        return [
            p
            for c in conditions
            for r in self.repeat_indices()
            for category in categories
            for p in self.store(c, r).read(category)[1]
        ]
