"""Where the controller shows a live run's progress line: pytest's terminal.

``live.progress.Display`` says what the line is and when it is due; it is shown through a
``sources.reference_logged.ShowProgress``, which the session builds here and hands to the source
(``Source.run_ahead``). What needs pytest's objects stays on this side: the terminal reporter that
writes the line, and the capture manager that lets a line written while an item runs reach it.
"""

from __future__ import annotations

import contextlib

import pytest
from _pytest.capture import CaptureManager


class TerminalLine:
    """The progress line on pytest's terminal (a ``ShowProgress``)."""

    def __init__(self, reporter: pytest.TerminalReporter, capture: CaptureManager | None) -> None:
        self.reporter = reporter
        self.capture = capture  # a line written while an item runs is not captured

    @property
    def isatty(self) -> bool:
        return bool(self.reporter.isatty)

    def write_line(self, line: str) -> None:
        """A line of its own, even after a row of progress dots (which ``write_line`` may not end)."""
        # Without xdist the main thread is inside an item, with output captured: suspend it for the line,
        # as pytest's own live logging does for a record logged on any thread.
        disabled = getattr(self.capture, "global_and_fixture_disabled", None)
        with disabled() if disabled is not None else contextlib.nullcontext():
            writer = getattr(self.reporter, "_tw", None)
            if writer is not None and getattr(writer, "width_of_current_line", False):
                writer.line()
            self.reporter.write_line(line)


def terminal_line(config: pytest.Config) -> TerminalLine | None:
    """The controller's progress line on pytest's terminal; None: no terminal reporter (``-p no:terminal``)."""
    plugins = config.pluginmanager
    reporter = plugins.get_plugin("terminalreporter")
    return TerminalLine(reporter, plugins.get_plugin("capturemanager")) if reporter is not None else None
