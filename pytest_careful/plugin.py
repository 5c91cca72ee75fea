"""pytest entry point (``pytest11: careful``).

Installed, the plugin only adds options: it collects nothing unless
``--careful-model`` or ``--careful-results`` asks for a run.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from . import hookspec
from .common import gc_pause as _gc
from .common.bfcl import CATEGORIES
from .data import dataset
from .effects import declarations
from .harness import selection
from .harness.markers import CLASS_MARKERS
from .harness.options import add_options, read_options
from .protocols.options import USER_SCRIPT
from .protocols.registry import NAMES
from .scoring.options import BOUNDARY, DETECTOR
from .sources.options import MODEL, RESULTS

if TYPE_CHECKING:
    from .effects.declarations import Declarations
    from .evaluation.replay import Replay
    from .execution.executor import Simulators
    from .harness.state import CarefulState
    from .live.confirm import ConfirmUser
    from .sources.reference_logged import Source
    from .sources.run_config import RunConfig

#: Set when the options ask for a run: until then nothing imports ``state`` (and the scoring modules it
#: imports), so that a session that only has the plugin installed stays as fast as one without it.
_ACTIVE = pytest.StashKey[bool]()


def _session_state(config: pytest.Config) -> CarefulState | None:
    """The run's ``CarefulState``, or None when this session runs no conversations."""
    if not config.stash.get(_ACTIVE, False):
        return None
    # The run's stages load with the run, as xdist's plugin imports dsession in pytest_configure:
    # pytest imports this module in every session of the venv.
    from .harness.state import SESSION_KEY

    return config.stash.get(SESSION_KEY, None)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    """The plugin's own hooks (``hookspec``), for conftest files and other plugins."""
    pluginmanager.add_hookspecs(hookspec)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


# tryfirst: before pytest's own implementation loads conftests from the rootdir.
@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Conversation ids off the path arguments; rootdir and ini file as if pytest knew our options."""
    # Cleanups run last-in first-out: registered before pytest's own plugins register theirs
    # (at configure), this one runs after them, its gc.collect() rounds included (``_gc.freeze``).
    _gc.session_started()
    early_config.add_cleanup(_gc.session_ended)
    selection.prepare(early_config, parser, args)


def pytest_configure(config: pytest.Config) -> None:
    for marker, text in _markers():
        config.addinivalue_line("markers", f"{marker}: {text}")
    _own_models(config)
    options = read_options(config)
    if not options.active:
        return
    config.stash[_ACTIVE] = True
    # The run's stages load with the run (xdist's plugin imports dsession here too): a session that
    # asks for no run imports none of them. The live stage (and the OpenAI SDK) only for a live run.
    from .harness import session
    from .harness.failure_text import Bounder  # (the run's stages, as above)
    from .harness.last_failed import LastFailed  # (the run's stages)

    open_live: Callable[[RunConfig], Source] | None = None
    if options.live:
        from .live.source import open_live  # the live stage: only a run that calls a model loads it

    if options.worker:
        # What the controller set up for the session (server URL, run id), as it sent it.
        os.environ.update(getattr(config, "workerinput", {}).get("careful_env", {}))
    chosen = config.stash.get(selection.SELECTION_KEY, None)
    if chosen and chosen.node_ids and not options.categories_given:
        # Node ids name their category: a logged run need not hold the others.
        named = {i.rsplit("_", 1)[0] for i in chosen.conversation_ids()}
        options = dataclasses.replace(
            options,
            categories=tuple(c for c in CATEGORIES if c in named),
            categories_given=True,
            categories_from_node_ids=True,
        )
    state = session.start(config, options, open_live)
    kind = state.source.backend_kind
    if kind is not None and not options.worker:
        from .live.inflight import cap_workers  # the live stage: only a run that calls a model loads it

        # Before xdist's own pytest_configure (trylast) starts the workers from ``option.tx``.
        capped = cap_workers(config.option, kind)
        if capped:
            state.start_lines.append(capped)
    _gc.freeze()  # the modules, options and declarations: kept to the end, never garbage
    if chosen:
        selection.check(chosen, state.options.categories, state.options.protocols, {c.id for c in dataset.load()})
    selection.keep_node_ids_as_printed(config)
    config.pluginmanager.register(session.CarefulPlugin(config, state), "careful-session")
    config.pluginmanager.register(LastFailed(config, state), "careful-last-failed")
    if not options.worker:  # the controller prints the failures
        bounder = Bounder(config, state)
        config.pluginmanager.register(bounder, "careful-failure-text")


def _own_models(config: pytest.Config) -> None:
    """``pytest_careful_model_handlers``: models of the user's own, registered for this session only."""
    hook = config.hook.pytest_careful_model_handlers
    if not hook.get_hookimpls() or not (config.getoption(MODEL.dest) or config.getoption(RESULTS.dest)):
        return  # nothing asks for one (and bfcl-eval is not imported for nothing)
    from .execution import decoding  # loaded only when a conftest registers models of its own

    for models in hook(config=config):
        if models is None:
            continue
        if not isinstance(models, Mapping):
            raise pytest.UsageError(
                f"pytest_careful_model_handlers returned a {type(models).__name__}, "
                "not a mapping of model names to pytest_careful.ModelEntry"
            )
        try:
            config.add_cleanup(decoding.own_models(models))
        except decoding.ModelEntryError as problem:
            raise pytest.UsageError(str(problem)) from None


def _markers() -> list[tuple[str, str]]:
    out = [("careful", "a pytest-careful conversation item")]
    out += [
        (c, f"pytest-careful: multi_turn_{c} conversations")
        for c in ("base", "miss_func", "miss_param", "long_context")
    ]
    out += [(p, f"pytest-careful: the {p} protocol") for p in NAMES]
    out += [(m, f"pytest-careful: conversations involving {c}") for c, m in CLASS_MARKERS.items()]
    return out


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """Asked for a run with no paths given, collect only the conversations.

    Otherwise ``pytest --careful-model=reference`` in a project would also run the
    project's own test suite; paths given on the command line are still collected.
    """
    if _session_state(config) is None:
        return None
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return None
    return True


# --- fixtures ---------------------------------------------------------------------


@pytest.fixture(scope="session")
def careful_declarations() -> Declarations:
    """The effect declarations (``pytest_careful.effects.declarations.Declarations``)."""
    return declarations.load()


@pytest.fixture
def careful_conversation(request: pytest.FixtureRequest) -> dataset.Conversation:
    """The conversation of the current pytest-careful item.

    Outside a conversation item, parametrize ``careful_conversation_id``
    (indirectly) with a BFCL id such as ``multi_turn_base_0``.
    """
    conversation_id = getattr(request.node, "conversation_id", None) or getattr(request, "param", None)
    if conversation_id is None:
        pytest.fail(
            "careful_conversation needs a conversation item, or indirect parametrization "
            "with a BFCL id (e.g. multi_turn_base_0)",
            pytrace=False,
        )
    return dataset.get(conversation_id)


@pytest.fixture
def careful_simulators(careful_conversation: dataset.Conversation) -> Simulators:
    """Fresh simulator instances of the conversation, created as BFCL creates them."""
    c = careful_conversation
    from .execution.executor import Simulators  # the scoring stages load with the first fixture that needs them

    return Simulators(c.involved_classes, c.initial_config, c.long_context, test_entry_id=c.id)


@pytest.fixture
def careful_reference(careful_conversation: dataset.Conversation) -> Replay:
    """The conversation's reference trajectory, replayed (``pytest_careful.evaluation.replay.Replay``)."""
    from .evaluation.replay import reference  # loaded by the first fixture that needs it

    return reference(careful_conversation)


@pytest.fixture
def careful_scripted_user(
    request: pytest.FixtureRequest, careful_conversation: dataset.Conversation, careful_declarations: Declarations
) -> ConfirmUser:
    """The confirm protocol's scripted user for the conversation (``live.confirm.ConfirmUser``).

    ``reply(turn, model_text, turn_log, step_log)`` gives the user message(s) it
    would answer with, or None. Boundary, script and detector follow the run's
    options (``--careful-boundary``, ``--careful-user-script``, ``--careful-detector``).
    """
    get = request.config.getoption
    from .live.confirm import ConfirmUser  # loaded by the first fixture that needs it

    return ConfirmUser(
        careful_conversation,
        careful_declarations.boundary(get(BOUNDARY.dest)),
        get(USER_SCRIPT.dest),
        get(DETECTOR.dest),
    )


@pytest.fixture(scope="session")
def careful_model(request: pytest.FixtureRequest) -> object:
    """The model handle of the run (``pytest_careful.sources.reference_logged.Source``)."""
    state = _session_state(request.config)
    if state is None:
        pytest.skip(f"no pytest-careful run selected ({MODEL} / {RESULTS})")
    return state.source
