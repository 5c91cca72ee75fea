"""What a backend is given and what it gives back: the seam between the live source and the backends.

A backend (:mod:`.backends.registry`) sets up a run from a model handle (:class:`ModelSpec`), the run's
settings (``RunConfig``) and its concurrency, and returns a :class:`BackendSetup`: the live source
(:mod:`.source`) takes it in. No backend sees the source, so none imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, TypedDict

from .backends.claude.budget import SpendLedger
from .backends.vllm.fleet import Placement
from .backends.vllm.server import ServerPlan
from .handler import Handler
from .progress import ServerProbe

#: What each new OpenAI client of a handler goes through: the run's rate-limit pause and each
#: attempt's deadline (``pacing.share``). The source passes it: the backends never import the SDK.
Share = Callable[[Handler], None]


class ModelSpec(Protocol):
    """What a backend reads of a model handle (``handles.ModelHandle``)."""

    @property
    def kind(self) -> str: ...

    @property
    def model(self) -> str: ...

    @property
    def registry_key(self) -> str: ...

    @property
    def model_path(self) -> str | None: ...

    @property
    def temperature(self) -> float: ...

    def probe(self) -> Handler:
        """A handler built to read what it would send, its clients closed."""
        ...


class BackendSettings(TypedDict, total=False):
    """What a backend adds to ``careful_settings.json``: a resume under other values is refused."""

    max_output_tokens: int
    temperature: float | None  # None: the backend sends none (Claude)


class Sent(TypedDict, total=False):
    """What each request of the run carries, as the backend records it for the provenance."""

    model: str
    temperature: float | None
    max_tokens: int | str  # a number, or how BFCL's handler sizes it (vLLM), in words
    timeout_s: float


@dataclass
class BackendSetup:
    """A backend's per-process set-up of a run (``Backend.configure``), taken in by the live source."""

    #: called once per process with the new handler
    setup: Callable[[Handler], None] | None = None
    #: exception -> the exception that ends the run or moves the conversation (StopRun, RunAgain), or None
    classify_error: Callable[[BaseException], BaseException | None] | None = None
    #: (url) -> whether that server still answers (vLLM: its /models); None: the source's own check
    alive: Callable[[str | None], bool] | None = None
    server_plan: ServerPlan | None = None  # vLLM: the session's server
    placement: Placement | None = None  # several servers: where each conversation runs (backends.vllm.fleet_client)
    backend_settings: BackendSettings = field(default_factory=lambda: BackendSettings())  # careful_settings.json
    sent: Sent = field(default_factory=lambda: Sent())  # what each request carries (provenance)
    differences: list[str] = field(default_factory=list)  # settings that differ from BFCL's own run
    spend_ledger: SpendLedger | None = None  # Claude: the session's ledger (the summary reads its totals)
    #: what the servers say they are doing (vLLM: /metrics), for the progress line; None: they do not say
    server_work: ServerProbe | None = None
