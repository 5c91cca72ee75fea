"""``TypedDict`` and ``NotRequired`` for the JSON contracts, the same on every supported Python.

A contract with optional keys is one TypedDict, its optional keys marked ``NotRequired[...]``.
Python 3.11's ``typing`` reads that mark; 3.10's does not, and ``typing_extensions``' TypedDict does.

TypedDict reads the mark from the evaluated annotation, so a module that defines such a TypedDict
does without ``from __future__ import annotations``: under it every annotation is a string, and
``__required_keys__`` would list every key (a type checker is right either way; code that reads
the keys at run time is not). Names imported for types only are quoted there instead.
"""

import sys

if sys.version_info >= (3, 11):
    from typing import NotRequired, TypedDict
else:  # pragma: no cover - Python 3.10
    from typing_extensions import NotRequired, TypedDict

__all__ = ["NotRequired", "TypedDict"]
