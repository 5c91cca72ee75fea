"""``--careful-model`` for live runs: what to build in each process, and how.

A :class:`ModelHandle` is small and picklable-by-value (xdist workers rebuild
it from the same options); :meth:`ModelHandle.handler` builds the BFCL handler
once per process. Kinds:

* ``scripted``: :mod:`.scripted` policies, for tests and demonstrations;
* ``vllm``: a registry key whose handler is an ``OSSHandler`` (or a local model
  directory with ``--careful-handler KEY``), served by one vLLM server;
* ``claude``: a registry key whose handler is BFCL's Claude handler, with the
  fixes of :mod:`.claude` and the spend guard;
* ``api``: any other registered API handler, as BFCL builds it.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import _bfcl
from ..decoding import RegistryEntry, UnknownModel, _registry_source, _shadow_eval, resolve_model
from . import scripted

#: BFCL's default sampling temperature (``bfcl generate --temperature``).
BFCL_TEMPERATURE = 0.001


class HandleError(ValueError):
    """A ``--careful-model`` / ``--careful-handler`` combination that cannot run."""


@dataclass(frozen=True)
class ModelHandle:
    """What ``--careful-model`` names, resolved."""

    kind: str  # scripted | vllm | claude | api
    model: str  # what the user typed, for display
    registry_key: str  # the handler's registry key (or scripted:<policy>)
    model_path: str | None = None  # local model directory (vllm)
    temperature: float = BFCL_TEMPERATURE

    @property
    def result_name(self) -> str:
        """The folder results are filed under (BFCL: ``registry_dir_name``).

        A local model is filed under its own directory name and a hash of its
        path, not its handler's key (a fine-tune is not the model whose prompt
        format it borrows).
        """
        if self.model_path:
            # Two checkpoints both called "final" must not resume each other's results.
            digest = hashlib.sha256(self.model_path.encode()).hexdigest()[:8]
            return f"{Path(self.model_path).name}-{digest}"
        return self.registry_key.replace("/", "_").replace(":", "_")

    def build(self) -> Any:
        """A fresh BFCL handler for this process (model-specific setup is the caller's)."""
        if self.kind == "scripted":
            handler = scripted.make_handler(self.registry_key)
        else:
            entry = _entry(self.registry_key)
            cls = _handler_class(entry)
            if self.kind == "claude":
                from .claude import careful_claude_class

                cls = careful_claude_class(cls)
            handler = cls(model_name=entry.model_name, temperature=self.temperature,
                          registry_name=self.registry_key, is_fc_model=entry.is_fc_model)
        _shadow_eval(type(handler))  # the loop decodes with the handler's own decoder
        return handler


def resolve(model: str, handler_key: str | None) -> ModelHandle:
    """The handle for ``--careful-model`` (and ``--careful-handler``); raises HandleError."""
    if model.startswith(scripted.PREFIX):
        try:
            scripted.parse_handle(model)
        except scripted.UnknownPolicy as exc:
            raise HandleError(str(exc)) from None
        return ModelHandle("scripted", model, model)
    local = Path(model).expanduser()
    if handler_key is not None or local.is_dir():
        return _local_model(model, local, handler_key)
    try:
        key = resolve_model(model)
    except UnknownModel as exc:
        raise HandleError(f"{exc} (or give a local model directory with --careful-handler KEY)") from None
    return ModelHandle(_kind(_entry(key)), model, key)


def _local_model(model: str, local: Path, handler_key: str | None) -> ModelHandle:
    if handler_key is None:
        raise HandleError(f"{model} is a local model directory: name the bfcl-eval handler that "
                          "prompts and decodes it with --careful-handler KEY (e.g. a registry key "
                          "of the same model family)")
    if not local.is_dir():
        raise HandleError(f"--careful-handler is for a local model directory; {model} is not a directory")
    if not (local / "config.json").is_file():
        raise HandleError(f"{local} has no config.json; expected a Hugging Face model directory")
    try:
        key = resolve_model(handler_key)
    except UnknownModel as exc:
        raise HandleError(f"--careful-handler: {exc}") from None
    if _kind(_entry(key)) != "vllm":
        raise HandleError(f"--careful-handler {key}: its handler is not a local-model (OSS) handler")
    return ModelHandle("vllm", model, key, model_path=str(local.resolve()))


def _entry(key: str) -> RegistryEntry:
    entry = _registry_source().get(key)
    if entry is None:
        config = _bfcl.model_registry()[key]
        cls = config.model_handler
        return RegistryEntry(key, config.model_name, config.is_fc_model, cls.__module__, cls.__name__)
    return entry


def _handler_class(entry: RegistryEntry) -> type:
    _bfcl.contain_project_root()
    return getattr(importlib.import_module(entry.handler_module), entry.handler_class)  # type: ignore[no-any-return]


def _kind(entry: RegistryEntry) -> str:
    if entry.handler_module.startswith("bfcl_eval.model_handler.local_inference"):
        return "vllm"
    if entry.handler_module.endswith(".claude"):
        return "claude"
    return "api"
