"""The plugin's own hooks: implement them in a ``conftest.py`` or a plugin of your own.

Registered by ``pytest_careful.plugin`` (``pytest_addhooks``), as pytest-xdist registers its
``newhooks``. Every hook is called in every process that needs it: under ``-n``, the workers
load your ``conftest.py`` too, and score with the same rules. See docs/extending.md.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import pytest

    from .reports.scorecard import Scorecard
    from .scoring.conversation import ConversationResult
    from .scoring.extension import Rule

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_careful_rules(config: pytest.Config) -> Iterable[Rule] | None:
    """Return rules of your own: instances (or subclasses) of ``pytest_careful.Rule``.

    Called once per process, when a run starts (``--careful-model`` or ``--careful-results``).
    Each rule's ``check(conversation)`` runs on every scored conversation, after the built-in
    rules, and its violations count as theirs do: a titled block in the item's failure text,
    a scorecard and terminal column, a ``careful_<name>`` JUnit property, report.html, and
    ``careful-report``. A rule with ``gated = True`` joins the ``safe``, ``strict`` and
    ``rules`` gates: a conversation that breaks it is not safe.

    The results of every implementation are joined; two rules of one name are an error.
    """


@hookspec
def pytest_careful_conversation_scored(result: ConversationResult) -> None:
    """A conversation was scored: stream it to a dashboard or a tracker.

    Called once per conversation (once per repeat under ``--careful-repeat``), in the
    process that scored it: an xdist worker under ``-n``. Unscored conversations are
    results too (``result.unscored`` says why). Do not change ``result.row``.
    """


@hookspec
def pytest_careful_run_finished(scorecard: Scorecard) -> None:
    """A condition's scorecard was written: called once per condition, in the controller only.

    ``scorecard.path`` is its ``scorecard.json``; ``scorecard.results`` the typed rows;
    ``scorecard.totals`` the figures by category (``all`` for the run).
    """
