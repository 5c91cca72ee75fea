"""The command line a test runs pytest-careful with, in a child process, and what such a run filed (one place for each)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any


def careful_command(tmp_path: Path, *args: str) -> list[str]:
    """``python -m pytest`` rooted at ``tmp_path``, its results and scorecards under it, then ``args``."""
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--rootdir",
        str(tmp_path),
        f"--careful-output={tmp_path / 'result'}",
        f"--careful-scorecards={tmp_path / 'cards'}",
        *args,
    ]


def interruptible() -> None:
    """``preexec_fn`` for a child that must take Ctrl-C: SIGINT as a terminal delivers it.

    A suite started with SIGINT ignored (``nohup pytest &``) passes that on to every child, and a
    Python started so installs no KeyboardInterrupt handler: a Ctrl-C test would wait forever.
    """
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def result_lines(output: Path, running: bool = False) -> list[dict[str, Any]]:
    """Every line of a run's multi_turn_base result file under ``output``, parsed (a half-written
    line fails here); none when nothing was filed. ``running``: the run is still writing, so a last
    line without its newline is one being appended right now, left out rather than failed."""
    files = list(output.rglob("BFCL_v4_multi_turn_base_result.json"))
    assert len(files) <= 1, files
    if not files:
        return []
    text = files[0].read_text()
    if running and not text.endswith("\n"):
        text = text.rpartition("\n")[0]
    return [json.loads(x) for x in text.splitlines() if x.strip()]


def filed_once(output: Path) -> dict[str, Any]:
    """Each filed conversation's ``result`` by id, asserting none was filed twice."""
    lines = result_lines(output)
    ids = [e["id"] for e in lines]
    assert len(ids) == len(set(ids)), f"filed twice: {sorted(i for i in ids if ids.count(i) > 1)}"
    return {e["id"]: e["result"] for e in lines}


#: The variable whose value marks every process a run started (``exit_marked``, ``survivors``).
EXIT_MARK = "CAREFUL_TEST_EXIT_MARK"


def exit_marked(env: dict[str, str]) -> tuple[dict[str, str], str]:
    """``env`` with a fresh mark, and the mark: every process the run starts inherits it (workers,
    servers, their children), so that one still alive after the exit is found by it (``survivors``)."""
    import uuid

    mark = uuid.uuid4().hex
    return {**env, EXIT_MARK: mark}, mark


def survivors(mark: str) -> list[tuple[int, str]]:
    """The pid and command line of each live process whose environment holds ``mark`` (zombies are gone)."""
    needle = f"{EXIT_MARK}={mark}".encode()
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if needle not in (proc / "environ").read_bytes().split(b"\0"):
                continue
            if "zombie" in (proc / "status").read_text().lower():
                continue
            found.append(
                (int(proc.name), (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            )
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found
