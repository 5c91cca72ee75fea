"""Per-backend set-up of a live source: what each process does to its new handler.

The controller also checks, once and before any item runs, what would fail every
conversation alike (:func:`preflight`): a missing engine or library, a missing API
key. Such a problem is one ``pytest.UsageError`` (printed once, exit 4), not a
failure per item. ``--collect-only`` runs nothing, so it is not checked there (a
Claude cost estimate needs no key).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..sources.run_config import RunConfig, SourceError

if TYPE_CHECKING:
    from .source import LiveSource


def configure(source: LiveSource, options: RunConfig) -> None:
    """Attach the backend's per-process set-up (``source.setup``) for ``source.model_handle``."""
    kind = source.model_handle.kind
    if kind == "vllm":
        from .vllm_client import configure_source

        configure_source(source, options)
    elif kind == "claude":
        from .claude import configure_source as configure_claude

        configure_claude(source, options)
    if not options.worker and not options.collect_only:
        problem = preflight(source)
        if problem:
            raise SourceError(f"--careful-model={options.model}: {problem}")


def preflight(source: LiveSource) -> str | None:
    """Controller: what would fail every conversation of this backend, or None."""
    kind = source.model_handle.kind
    if kind == "vllm":
        from .vllm_server import missing_message, missing_modules

        missing = missing_modules(source.server_plan)
        return missing_message(source.server_plan, missing) if missing else None
    if kind == "claude":
        from .claude import missing_credentials

        return missing_credentials()
    if kind == "api":
        return _unbuildable(source.model_handle)
    return None


def _unbuildable(handle: Any) -> str | None:
    """Other API handlers build their client, key included, when constructed (no request is sent)."""
    try:
        handle.build()
    except Exception as exc:  # any handler's own complaint, e.g. the SDK's "no api_key"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        return f"cannot set up {handle.registry_key}'s handler: {type(exc).__name__}: {first}"
    return None
