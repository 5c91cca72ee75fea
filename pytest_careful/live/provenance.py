"""A live run in its scorecard's provenance (``provenance.live``): JSON that leaves the process.

One TypedDict per object, its optional keys ``NotRequired`` (``common.json_types``: no
``from __future__ import annotations`` here, so the marks are read at run time too).
"""

from ..common.json_types import NotRequired, TypedDict
from .backend_setup import Sent
from .backends.vllm.fleet import FleetProvenance
from .backends.vllm.server import ServerProvenance


class Resolution(TypedDict):
    """What ``--careful-model`` resolved to (``provenance.live.resolution``, the run's first line):
    the name as typed, the registry key, the handler's dotted class (None: a scripted policy), FC or
    prompting, the backend; ``model_path``: a local model's weights."""

    typed: str
    registry_key: str
    handler_class: str | None
    mode: str
    backend: str
    model_path: NotRequired[str]


class SessionProvenance(TypedDict):
    """``provenance.live.session``: the header each request carried its conversation's session key in,
    how keys are made (``session_key.MADE_OF``), their ``<run>`` part, and the key each conversation of
    the scorecard sent (``id@repeat-k`` for repeat k > 1, as ``backends.vllm.fleet.served_by`` names them)."""

    header: str
    made_of: str
    run: str
    keys: dict[str, str]


class LiveProvenance(TypedDict):
    """A live run in its scorecard's provenance (``live``); ``server``: a vLLM server's; ``fleet``:
    the servers of ``--careful-endpoint=URL,URL,...`` and which one served each conversation; ``session``:
    the header that carried each conversation's session key, and the keys (``session_key``)."""

    resolution: Resolution
    sent: Sent
    differs_from_bfcl: list[str]
    server: NotRequired[ServerProvenance]
    fleet: NotRequired[FleetProvenance]
    session: NotRequired[SessionProvenance]
