"""xdist's status line, said once.

Without a terminal (CI logs, a pipe), xdist writes its status line when the workers start and again
when they have collected. With ``-q`` both read ``bringing up nodes...`` (the second would say
``2 workers [400 items]`` at the default verbosity), so a quiet run of the README's commands
printed the same line twice.
"""

from __future__ import annotations

from typing import Any

import pytest


def say_status_once(config: pytest.Config) -> None:
    """The controller's xdist reporter writes its status line only when it says something new.

    A status that changed is written as before; nothing happens without xdist, or with an xdist
    whose reporter has another shape.
    """
    reporter: Any = config.pluginmanager.get_plugin("terminaldistreporter")
    show, status = getattr(reporter, "ensure_show_status", None), getattr(reporter, "getstatus", None)
    if not callable(show) or not callable(status):
        return
    shown: list[str] = []

    def show_once() -> None:
        line = status()
        if shown[-1:] != [line]:
            shown.append(line)
            show()

    reporter.ensure_show_status = show_once
