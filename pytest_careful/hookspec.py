"""The plugin's own hooks: implement them in a ``conftest.py`` or a plugin of your own.

Registered by ``pytest_careful.plugin`` (``pytest_addhooks``), as pytest-xdist registers its
``newhooks``. Every hook is called in every process that needs it: under ``-n``, the workers
load your ``conftest.py`` too, and score with the same rules. See docs/extending.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    import pytest

    from .execution.decoding import ModelEntry
    from .reports.scorecard import Scorecard
    from .scoring.conversation import ConversationResult
    from .scoring.rules import Rule

hookspec = pluggy.HookspecMarker("pytest")


@hookspec
def pytest_careful_rules(config: pytest.Config) -> Iterable[Rule] | None:
    """Return rules of your own: instances (or subclasses) of ``pytest_careful.Rule``.

    Called once per process, when a run starts (``--careful-model`` or ``--careful-results``).
    The plugin's own implementation (``careful-rules``) gives the nine built-in rules, which are
    ``Rule`` objects too. Each rule's ``check(conversation)`` runs on every scored conversation,
    after the built-in rules, and its violations count as theirs do: a titled block in the item's
    failure text, a scorecard and terminal column, a ``careful_<name>`` JUnit property,
    report.html, and ``careful-report``. A rule with ``gated = True`` joins the ``safe`` and
    ``strict`` gates: a conversation that breaks it is not safe. Every rule joins the ``rules`` gate.

    The results of every implementation are joined; two rules of one name are an error (to
    replace a built-in rule, see ``pytest_careful_modify_rules``).
    """


@hookspec
def pytest_careful_modify_rules(config: pytest.Config, rules: list[Rule]) -> None:
    """Change the run's rules in place: turn a built-in rule off, or put a variant in its place.

    ``rules`` is every rule ``pytest_careful_rules`` gave, the built-in ones first, as
    ``pytest_collection_modifyitems`` gives the items::

        def pytest_careful_modify_rules(config, rules):
            rules[:] = [r for r in rules if r.name != "redundant_reads"]  # off
            rules[:] = [StricterAsked() if r.name == "asked" else r for r in rules]  # replaced

    Called once per process, after ``pytest_careful_rules``. A rule's name is still taken once.
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


@hookspec
def pytest_careful_model_handlers(config: pytest.Config) -> Mapping[str, ModelEntry] | None:
    """Return models of your own, by name: ``{"acme-large-FC": pytest_careful.ModelEntry(AcmeHandler, ...)}``.

    As BFCL's ``model_config`` maps names to ``ModelConfig(model_handler=..., is_fc_model=...)``: each
    name then works wherever a registry key does (``--careful-model=acme-large-FC`` for a live run,
    ``--careful-decoder=acme-large-FC`` to rescore its logged output). The handler is a subclass of
    BFCL's ``BaseHandler``, built and run as ``bfcl generate`` runs a registered one: an internal
    gateway speaking OpenAI's API subclasses BFCL's OpenAI handler and points its client elsewhere.
    A subclass of BFCL's ``OSSHandler`` is run against a vLLM server.

    Called once per process, before the run's options are read. A name BFCL's registry already
    has, ``reference``, or a ``scripted:``/``bfcl:`` prefix is refused, as is a class that is not a
    BFCL handler (one line, exit 4).
    """
