"""Crash-safe BFCL result files for live model runs.

Live runs write every finished conversation where ``bfcl generate`` would, in
the form it would, so ``bfcl evaluate`` and :func:`pytest_careful.data.result_files.read_result_file`
read the file unchanged:

    <result_dir>/<registry name, "/" -> "_">/multi_turn/BFCL_v4_<category>_result.json

one ``json.dumps(entry, ensure_ascii=False)`` object per line (as bfcl's
``write_list_of_dicts_to_file``).  The layout mirrors ``BaseHandler.write``
(``registry_dir_name``) and ``utils.get_directory_structure_by_category``; it is
spelled out here rather than imported because importing ``bfcl_eval.utils``
creates directories under ``BFCL_PROJECT_ROOT`` (see :mod:`pytest_careful.common.bfcl`),
and the tests check it against bfcl's own code.

The file is an append-only log so a killed run loses at most the conversation
in flight: a rerun appends what is not yet :meth:`ResultStore.completed`, readers
keep the last entry per id (BFCL's rule), and :meth:`ResultStore.compact` rewrites the
log into the duplicate-free, id-sorted file ``bfcl evaluate`` expects.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from ..common.bfcl import CATEGORIES, GROUP_DIR
from .result_files import read_result_file

if TYPE_CHECKING:
    from .result_files import InputProblem, LoggedEntry

VERSION_PREFIX = "BFCL_v4"  # bfcl_eval.constants.category_mapping.VERSION_PREFIX


def sort_key(entry_id: str) -> int:
    """BFCL's id order (``utils.sort_key`` for multi-turn ids): the index after the last "_"."""
    return int(entry_id.split(":")[0].rsplit("_", 1)[1].split("-")[0])


def is_complete(entry: Mapping[str, object]) -> bool:
    """A finished conversation: ``result`` is a list of turns.

    A string ``result`` is BFCL's inference-error form and an ``error`` key is
    our own marker; both must be retried, never served as a cached answer.
    """
    return isinstance(entry.get("result"), list) and not entry.get("error")


class ResultStore:
    """Append-only, crash-safe BFCL result files of one model under ``result_dir``."""

    def __init__(self, result_dir: Path, registry_name: str) -> None:
        self.result_dir = Path(result_dir)
        self.registry_name = registry_name
        # BaseHandler.__init__: registry_dir_name = registry_name.replace("/", "_")
        self.model_dir = self.result_dir / registry_name.replace("/", "_")

    def path(self, category: str) -> Path:
        """The result file of ``category``, where ``bfcl generate`` writes it."""
        if category not in CATEGORIES:
            raise ValueError(f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}")
        return self.model_dir / GROUP_DIR / f"{VERSION_PREFIX}_{category}_result.json"

    # -- reading -----------------------------------------------------------

    def read(self, category: str) -> tuple[dict[str, LoggedEntry], list[InputProblem]]:
        """The category's entries by id, and the problems of its other lines.

        Read exactly as ``--careful-results`` reads a file
        (:func:`pytest_careful.data.result_files.read_result_file`): a torn line (what a
        killed writer leaves behind), a line of another category or no
        conversation, one with more turns than its conversation has or that
        cannot be read at all is a problem with its line, never an entry, so
        its conversation is retried, not served. Of several entries of an id
        the last one counts, as everywhere (:func:`~pytest_careful.data.result_files.keep_last`).
        """
        path = self.path(category)
        if not os.path.lexists(path):
            return {}, []
        entries, problems = read_result_file(path, category)
        return {e.id: e for e in entries}, problems

    def completed(self, category: str) -> dict[str, dict[str, object]]:
        """Finished conversations already on disk, by id (an id's last entry, when complete)."""
        return {i: e.raw for i, e in self.read(category)[0].items() if is_complete(e.raw)}

    # -- writing -----------------------------------------------------------

    def append(self, category: str, entry: dict[str, object]) -> None:
        """Append ``entry`` as one line, durably, safe against concurrent writers.

        The line is serialised before the file is touched (a bad entry never
        leaves half a line) and written with ``os.write`` on an O_APPEND file
        under an exclusive ``flock``: lines can exceed the size the kernel
        writes atomically (inference logs), so the lock, not O_APPEND alone,
        keeps xdist workers' lines from interleaving.
        """
        entry_id = entry.get("id")
        if not isinstance(entry_id, str) or entry_id.rsplit("_", 1)[0] != category:
            raise ValueError(f"entry id {entry_id!r} does not belong to {category}")
        line = serialise(entry)
        path = self.path(category)
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            # O_RDWR: the torn-line check below reads the last byte.
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError(f"{path} is not a regular file; the result is not written")
                fcntl.flock(fd, fcntl.LOCK_EX)
                # compact() may have replaced the file while we waited for the
                # lock; appending to the old inode would lose the line.
                try:
                    current = os.stat(path).st_ino
                except FileNotFoundError:
                    current = None
                if current != os.fstat(fd).st_ino:
                    continue
                size = os.fstat(fd).st_size
                try:
                    if size and os.pread(fd, 1, size - 1) != b"\n":
                        # A killed writer left a torn line: end it, so it stays a
                        # line of its own that readers skip.
                        _write_all(fd, b"\n")
                    _write_all(fd, line)
                    os.fsync(fd)
                except OSError:
                    # A full disk took part of the line: take it back, so that no half line stays.
                    with contextlib.suppress(OSError):
                        os.ftruncate(fd, size)
                    raise
                return
            finally:
                os.close(fd)  # also releases the flock

    def compact(self, category: str) -> None:
        """Rewrite the file atomically as ``bfcl evaluate`` wants it.

        One entry per id (its last, as :meth:`read` reads it: an id that never
        completed keeps its errored entry, which BFCL scores as a failure), in
        BFCL's id order; lines that are no entry of this category (torn,
        foreign, unreadable) are dropped. Holds the append lock so no line
        lands in the file being replaced. Anything but a regular file is left
        alone (opening a FIFO would block).
        """
        path = self.path(category)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except FileNotFoundError:
            return
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return
            fcntl.flock(fd, fcntl.LOCK_EX)
            entries, _ = self.read(category)
            data = b"".join(serialise(entries[i].raw) for i in sorted(entries, key=sort_key))
            # Temp file in the same directory so os.replace is an atomic rename.
            tmp_fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
            try:
                with os.fdopen(tmp_fd, "wb") as tmp:
                    tmp.write(data)
                    tmp.flush()
                    os.fsync(tmp.fileno())
                os.chmod(tmp_name, 0o644)
                os.replace(tmp_name, path)
            except BaseException:
                Path(tmp_name).unlink(missing_ok=True)
                raise
            fsync_dir(path.parent)  # make the rename itself durable
        finally:
            os.close(fd)


def serialise(entry: dict[str, object]) -> bytes:
    """``entry`` as one line, as bfcl's ``write_list_of_dicts_to_file`` writes it.

    ``ensure_ascii=False`` as bfcl writes, except where the text cannot be
    UTF-8 (a lone surrogate in model text): then escaped, so the line is still
    written and reads back to the same entry. A value JSON cannot hold becomes
    its ``str``, as bfcl's ``make_json_serializable`` does.
    """
    try:
        return (json.dumps(entry, ensure_ascii=False, default=str) + "\n").encode("utf-8")
    except UnicodeEncodeError:
        return (json.dumps(entry, ensure_ascii=True, default=str) + "\n").encode("ascii")


def _write_all(fd: int, data: bytes) -> None:
    """``os.write`` until done: one call in practice, but a short write must not tear a line."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
