"""The command line a test runs pytest-careful with, in a child process (one place for it)."""

from __future__ import annotations

import sys
from pathlib import Path


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
