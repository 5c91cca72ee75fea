"""The backends a live model runs on, as objects behind one Protocol: what each one is and does.

A model handle's ``kind`` (``handles.ModelHandle``) names one of ``BACKENDS``; every stage asks the
backend (``backend(kind).guarded``) instead of comparing its name. Each backend sets up a run in
every process (``configure``: from the model handle, the run's settings and its concurrency, a
``backend_setup.BackendSetup`` that the live source takes in; no backend sees the source) and, on
the controller, checks once, before any item runs, what would fail every conversation alike
(``preflight``): a missing engine or library, a missing API key. Such a problem is one ``SourceError`` (the harness prints it once, exit 4), not a failure per
item. ``--collect-only`` runs nothing, so it is not checked there (a Claude cost estimate needs no key).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from ...execution.decoding import import_handler_class, registry_entry
from ...sources.live_options import (
    BUDGET_USD,
    DTYPE,
    ENDPOINT,
    MAX_MODEL_LEN,
    MAX_OUTPUT_TOKENS,
    REQUEST_TIMEOUT,
    SERVER_TIMEOUT,
    SESSION_HEADER,
    VLLM_ARG,
)
from ...sources.options import HANDLER
from ...sources.run_config import RunConfig
from ..backend_setup import BackendSetup, ModelSpec, Share
from ..handler import Handler
from . import scripted
from .claude import client as claude
from .vllm import client as vllm_client
from .vllm.server import missing_message, missing_modules

#: Conversations in flight by default, all processes together, for backends other than
#: vLLM (BFCL's own count for a local server) and Claude (under the shared rate limiter).
DEFAULT_CONCURRENCY = 8
CLAUDE_CONCURRENCY = 16


class Backend(Protocol):
    """What the rest of the plugin needs of a backend (read-only: each one is a frozen dataclass)."""

    @property
    def name(self) -> str: ...

    @property
    def label(self) -> str:
        """What it is, for the resolution line (``handles.describe``)."""
        ...

    @property
    def remote(self) -> bool:
        """A model behind a network (all but scripted ones): more xdist workers than CPUs only cost memory."""
        ...

    @property
    def guarded(self) -> bool:
        """Requests go to a server (vLLM, an OpenAI-compatible API): its faults are never the model's
        (``faults.ServerGuard``), and one rate limit pauses every conversation in flight (``pacing``)."""
        ...

    @property
    def single_driver(self) -> bool:
        """One process drives every conversation of the run against its server(s) (``inflight.one_driver``)."""
        ...

    @property
    def priced(self) -> bool:
        """Paid per token under the spend guard (``--careful-budget-usd``, the ``--collect-only`` estimate)."""
        ...

    @property
    def options(self) -> frozenset[str]:
        """The backend-specific options that apply to it (``source.inapplicable`` refuses the others)."""
        ...

    @property
    def local_weights(self) -> bool:
        """It prompts weights on this side (an ``OSSHandler``): the only handlers ``--careful-handler`` may name."""
        ...

    @property
    def registered(self) -> bool:
        """Its handles are keys of BFCL's model registry (scripted ones are policies of the plugin's own)."""
        ...

    def default_concurrency(self, options: RunConfig) -> int:
        """Conversations in flight when ``--careful-concurrency`` is not given, all processes together."""
        ...

    def build(self, handle: ModelSpec) -> Handler:
        """A fresh BFCL handler for ``handle``, in this process (``ModelHandle.build``)."""
        ...

    def configure(self, handle: ModelSpec, options: RunConfig, concurrency: int, share: Share) -> BackendSetup:
        """This process's set-up of a run of ``handle`` with ``concurrency`` conversations in flight;
        ``share``: what each new OpenAI client of a handler goes through (``pacing.share``)."""
        ...

    def preflight(self, handle: ModelSpec, made: BackendSetup) -> str | None:
        """Controller: what would fail every conversation of the run, or None."""
        ...


def _registered_handler(handle: ModelSpec, wrap: Callable[[type], type] | None = None) -> Handler:
    """The handler BFCL's registry names for ``handle``, built as ``bfcl generate`` builds it."""
    entry = registry_entry(handle.registry_key)
    cls = import_handler_class(entry)
    if wrap is not None:
        cls = wrap(cls)
    return cls(
        model_name=entry.model_name,
        temperature=handle.temperature,
        registry_name=handle.registry_key,
        is_fc_model=entry.is_fc_model,
    )


#: Options of the server the plugin starts for a vLLM model.
SERVER_OPTIONS = (VLLM_ARG.flag, DTYPE.flag, MAX_MODEL_LEN.flag, SERVER_TIMEOUT.flag)


@dataclass(frozen=True)
class Scripted:
    """Deterministic test models (``scripted:<policy>``): no server, nothing to check."""

    name: str = "scripted"
    label: str = "scripted policy (no model)"
    remote: bool = False
    guarded: bool = False
    single_driver: bool = False
    priced: bool = False
    options: frozenset[str] = frozenset()
    local_weights: bool = False
    registered: bool = False

    def default_concurrency(self, options: RunConfig) -> int:
        return DEFAULT_CONCURRENCY

    def build(self, handle: ModelSpec) -> Handler:
        return scripted.make_handler(handle.registry_key)

    def configure(self, handle: ModelSpec, options: RunConfig, concurrency: int, share: Share) -> BackendSetup:
        return BackendSetup()

    def preflight(self, handle: ModelSpec, made: BackendSetup) -> str | None:
        return None


@dataclass(frozen=True)
class Vllm:
    """A registry key whose handler is an ``OSSHandler`` (or a local model folder), on one or more vLLM servers."""

    name: str = "vllm"
    label: str = "vLLM (local weights)"
    remote: bool = True
    guarded: bool = True
    single_driver: bool = True
    priced: bool = False
    options: frozenset[str] = frozenset(
        {
            MAX_OUTPUT_TOKENS.flag,
            REQUEST_TIMEOUT.flag,
            SESSION_HEADER.flag,
            ENDPOINT.flag,
            HANDLER.flag,
            *SERVER_OPTIONS,
        }
    )
    local_weights: bool = True
    registered: bool = True

    def default_concurrency(self, options: RunConfig) -> int:
        """What ``bfcl generate`` keeps in flight against a local server, for each server of the run."""
        # bfcl-eval on first use: a session that runs no model imports none of it (start-up time)
        from bfcl_eval.constants.eval_config import LOCAL_SERVER_MAX_CONCURRENT_REQUEST

        return int(LOCAL_SERVER_MAX_CONCURRENT_REQUEST) * max(1, len(options.endpoint or ()))

    def build(self, handle: ModelSpec) -> Handler:
        return _registered_handler(handle)

    def configure(self, handle: ModelSpec, options: RunConfig, concurrency: int, share: Share) -> BackendSetup:
        return vllm_client.configure(handle, options, concurrency, share)

    def preflight(self, handle: ModelSpec, made: BackendSetup) -> str | None:
        assert made.server_plan is not None  # configure plans it
        missing = missing_modules(made.server_plan)
        return missing_message(made.server_plan, missing) if missing else None


@dataclass(frozen=True)
class Claude:
    """BFCL's Claude handler, with the fixes of :mod:`.claude` and the spend guard."""

    name: str = "claude"
    label: str = "Anthropic Messages API"
    remote: bool = True
    guarded: bool = False
    single_driver: bool = False
    priced: bool = True
    options: frozenset[str] = frozenset({BUDGET_USD.flag, MAX_OUTPUT_TOKENS.flag})
    local_weights: bool = False
    registered: bool = True

    def default_concurrency(self, options: RunConfig) -> int:
        return CLAUDE_CONCURRENCY

    def build(self, handle: ModelSpec) -> Handler:
        return _registered_handler(handle, wrap=claude.careful_claude_class)

    def configure(self, handle: ModelSpec, options: RunConfig, concurrency: int, share: Share) -> BackendSetup:
        return claude.configure(handle, options, concurrency)

    def preflight(self, handle: ModelSpec, made: BackendSetup) -> str | None:
        return claude.missing_credentials()


@dataclass(frozen=True)
class Api:
    """Every other registered API handler, as BFCL builds it (an OpenAI-compatible gateway too)."""

    name: str = "api"
    label: str = "the vendor's hosted API"
    remote: bool = True
    guarded: bool = True
    single_driver: bool = False
    priced: bool = False
    options: frozenset[str] = frozenset({REQUEST_TIMEOUT.flag, SESSION_HEADER.flag})
    local_weights: bool = False
    registered: bool = True

    def default_concurrency(self, options: RunConfig) -> int:
        return DEFAULT_CONCURRENCY

    def build(self, handle: ModelSpec) -> Handler:
        return _registered_handler(handle)

    def configure(self, handle: ModelSpec, options: RunConfig, concurrency: int, share: Share) -> BackendSetup:
        return BackendSetup()

    def preflight(self, handle: ModelSpec, made: BackendSetup) -> str | None:
        return _unbuildable(handle)


BACKENDS: dict[str, Backend] = {b.name: b for b in (Vllm(), Claude(), Api(), Scripted())}


def backend(kind: str) -> Backend:
    """The backend a model handle's ``kind`` names."""
    return BACKENDS[kind]


def _unbuildable(handle: ModelSpec) -> str | None:
    """Other API handlers build their client, key included, when constructed (no request is sent)."""
    try:
        handle.probe()
    except Exception as exc:  # any handler's own complaint, e.g. the SDK's "no api_key"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"cannot set up {handle.registry_key}'s handler: {type(exc).__name__}: {first}"
    return None
