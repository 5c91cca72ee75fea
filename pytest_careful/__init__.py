"""pytest-careful: effect-aware scoring of BFCL multi-turn function calling.

The public names are written once, in ``__init__.pyi``: a type checker reads them there, and this
module imports each on first use (PEP 562). pytest imports this package in every session where it
is installed, through the plugin, and ``executor`` captures bfcl-eval's simulator state at import:
a session that does not ask for a run must not pay for that.
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path
from typing import Any


def _public() -> dict[str, str]:
    """Each public name and the module it comes from, as ``__init__.pyi`` imports them."""
    stub = ast.parse(Path(__file__).with_suffix(".pyi").read_text(encoding="utf-8"))
    return {
        alias.asname or alias.name: node.module or ""
        for node in stub.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }


_PUBLIC = _public()
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))
