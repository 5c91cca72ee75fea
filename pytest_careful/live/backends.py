"""Per-backend set-up of a live source: what each process does to its new handler."""

from __future__ import annotations

from typing import Any


def configure(source: Any, options: Any) -> None:
    """Attach the backend's per-process set-up (``source.setup``) for ``source.handle``."""
    kind = source.handle.kind
    if kind == "vllm":
        from .vllm_server import configure_source

        configure_source(source, options)
    elif kind == "claude":
        from .claude import configure_source as configure_claude

        configure_claude(source, options)
