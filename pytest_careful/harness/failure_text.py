"""A failing conversation's text in the terminal: bounded at the default verbosity.

A failing conversation's text is the gate's line, then one block per failing
sub-assertion ([bfcl], each gated rule), then the sections (rules reported but not
gated, the transcript, BFCL's loop log). On a run where most conversations fail
(a small model, a new protocol) that is 50-60 lines each: 700 failures, 38,000
lines. So at the default verbosity the terminal shows each failure's blocks cut at
``SHOWN_LINES`` and one line that says where the rest is: ``-v``, the conversation's
anchor in ``report.html``, the JUnit file. JUnit and ``report.html`` keep everything:
the cut is made after they have read the report, just before pytest prints its
failures (``Bounder.pytest_terminal_summary``, a wrapper that runs first).
"""

from __future__ import annotations

from collections.abc import Generator
from pathlib import Path

import pytest
from _pytest._code.code import ReprFileLocation
from _pytest._io import TerminalWriter

from .junit import SECTION_PREFIX
from .selection import NODE_ID
from .state import CarefulState

#: Lines of a failure's blocks shown at the default verbosity (the cut line included).
SHOWN_LINES = 28


class Bounded:
    """A report's failure text as the terminal shows it, cut; the crash line kept for pytest's short summary."""

    def __init__(self, lines: list[str], reprcrash: ReprFileLocation | None) -> None:
        self.lines = lines
        self.reprcrash = reprcrash

    def toterminal(self, out: TerminalWriter) -> None:
        for line in self.lines:
            out.line(line)

    def __str__(self) -> str:
        return "\n".join(self.lines)


def cut(text: str, pointer: str) -> list[str]:
    """``text`` in at most ``SHOWN_LINES`` lines, then ``pointer`` (where the rest is)."""
    lines = text.splitlines()
    if len(lines) > SHOWN_LINES:
        hidden = len(lines) - (SHOWN_LINES - 1)
        lines = [*lines[: SHOWN_LINES - 1], f"... {hidden} more line{'s' if hidden != 1 else ''}"]
    return [*lines, pointer]


def pointer(nodeid: str, report_html: str | None, junit: str | None) -> str:
    """Where a conversation's whole text is: -v, its report.html anchor, the JUnit file."""
    places = [f"{report_html}#{nodeid}"] if report_html else []
    places += [f"{junit} (<system-out>)"] if junit else []
    return "full text, transcript and reported rules: -v" + "".join(f", {p}" for p in places)


class Bounder:
    """Registered on the controller where failures are printed at the default verbosity."""

    def __init__(self, config: pytest.Config, state: CarefulState) -> None:
        self.config = config
        self.state = state

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> Generator[None, None, None]:
        if self.config.get_verbosity() <= 0 and self.config.getoption("tbstyle", "auto") not in ("no", "line"):
            junit, pages = self._junit(), self._report_pages()  # once, not per failure
            for report in terminalreporter.stats.get("failed", []):
                match = NODE_ID.match(report.nodeid)
                if report.when == "call" and match:
                    self._bound(report, pointer(report.nodeid, pages.get(match["condition"]), junit))
        return (yield)

    def _bound(self, report: pytest.TestReport, here: str) -> None:
        # str() of the repr itself: report.longreprtext would carry xdist's "[gw0] linux ..." line,
        # which the terminal prints again above it.
        text = str(report.longrepr)
        report.longrepr = Bounded(cut(text, here), getattr(report.longrepr, "reprcrash", None))  # type: ignore[assignment]
        report.sections = [s for s in report.sections if not s[0].startswith(SECTION_PREFIX)]

    def _report_pages(self) -> dict[str, str]:
        """Each protocol's report.html (``<label>/<protocol>[/partial or /repeat-<k>]/report.html``), as shown."""
        pages: dict[str, str] = {}
        for written in self.state.written:
            page = Path(written)
            if page.name == "report.html":
                below = page.parent.name == "partial" or page.parent.name.startswith("repeat-")
                protocol = page.parent.parent.name if below else page.parent.name
                pages.setdefault(protocol, _shown_path(page, self.config.invocation_params.dir))
        return pages

    def _junit(self) -> str | None:
        path = self.config.getoption("xmlpath", None)
        return _shown_path(Path(path), self.config.invocation_params.dir) if path else None


def _shown_path(path: Path, cwd: Path) -> str:
    """Relative to the working directory when under it (shorter, and the same on every machine)."""
    try:
        return str(path.resolve().relative_to(cwd.resolve()))
    except ValueError:
        return str(path)
