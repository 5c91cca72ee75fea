"""The "effect hints" condition: declarations appended to function descriptions.

Under this condition each function's declaration is appended to its
``description`` in the vocabulary of MCP tool annotations (``readOnlyHint``,
``destructiveHint``, ``idempotentHint``), for the docs visible from the start
and for the holdout docs that miss_func reveals later. Nothing else in the
prompt entry changes and no instruction to use the hints is added.

Rendered format (part of what the model sees; keep it stable)::

    <original description> MCP tool annotations: readOnlyHint=<b>, destructiveHint=<b>, idempotentHint=<b>.

* the suffix starts with exactly one space and is appended to the original
  description unchanged (no stripping, so the original is always a prefix);
* the keys appear in the fixed order ``readOnlyHint``, ``destructiveHint``,
  ``idempotentHint`` (:data:`HINT_KEYS`), each as ``key=value`` separated by
  ``", "``;
* values are lowercase JSON booleans, ``true`` or ``false``;
* the suffix ends with a full stop.

Example, ``rm`` under the final boundary::

    ... Tool description: Remove a file or directory. MCP tool annotations: readOnlyHint=false, destructiveHint=true, idempotentHint=true.

The destructive boundary (``final`` by default) decides ``destructiveHint``
and, through it, ``readOnlyHint`` (see ``Declaration.mcp_annotations``).
All functions here are pure: inputs are deep-copied, never mutated.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping

from ..data.dataset import FunctionDoc, PromptEntry
from ..effects.declarations import Declarations

HINT_KEYS = ("readOnlyHint", "destructiveHint", "idempotentHint")
HINT_PREFIX = " MCP tool annotations: "

Boundary = str | frozenset[str]


def hint_text(annotations: Mapping[str, bool]) -> str:
    """The suffix appended to a description (see the module docstring).

    ``annotations`` must hold exactly the keys of :data:`HINT_KEYS`, each a bool.
    """
    if set(annotations) != set(HINT_KEYS):
        raise ValueError(f"annotations must have exactly the keys {', '.join(HINT_KEYS)}; got {sorted(annotations)}")
    parts = []
    for key in HINT_KEYS:
        value = annotations[key]
        if not isinstance(value, bool):
            raise TypeError(f"annotation {key} must be a bool, got {value!r}")
        parts.append(f"{key}={'true' if value else 'false'}")
    return HINT_PREFIX + ", ".join(parts) + "."


def _resolve(decl: Declarations, boundary: Boundary) -> frozenset[str]:
    if isinstance(boundary, str):
        return decl.boundary(boundary)
    return frozenset(boundary)


def _annotations(decl: Declarations, name: str, boundary: frozenset[str]) -> dict[str, bool]:
    if name not in decl:
        raise KeyError(f"no effect declaration for function {name!r}; cannot render its hint")
    return decl[name].mcp_annotations(boundary)


def with_hints(doc: FunctionDoc, decl: Declarations, boundary: Boundary = "final") -> FunctionDoc:
    """A deep copy of the function doc ``doc`` with the hint appended to its description.

    ``boundary`` is a boundary name (``"final"``, ``"majority"``, an annotator)
    or the destructive set itself. Unknown functions raise ``KeyError``.
    """
    return _hinted_doc(doc, decl, _resolve(decl, boundary))


def _hinted_doc(doc: FunctionDoc, decl: Declarations, boundary: frozenset[str]) -> FunctionDoc:
    name = doc.get("name")
    if not isinstance(name, str):
        raise ValueError(f"function doc without a name: {doc!r:.80}")
    if "description" not in doc or not isinstance(doc["description"], str):
        raise ValueError(f"function doc {name!r} has no string description to append a hint to")
    hint = hint_text(_annotations(decl, name, boundary))
    out = copy.deepcopy(doc)
    out["description"] = doc["description"] + hint
    return out


def hinted_entry(entry: PromptEntry, decl: Declarations, boundary: Boundary = "final") -> PromptEntry:
    """A deep copy of a BFCL prompt entry with every function doc hinted.

    Hints the docs in ``entry["function"]`` and in every list of
    ``entry["missed_function"]`` (miss_func holdouts); every other field is an
    unchanged deep copy. ``entry`` is as ``Conversation.prompt_entry()`` returns it.
    """
    resolved = _resolve(decl, boundary)
    out = copy.deepcopy(entry)
    out["function"] = [_hinted_doc(doc, decl, resolved) for doc in entry["function"]]
    if "missed_function" in entry:
        out["missed_function"] = {
            turn: [_hinted_doc(doc, decl, resolved) for doc in docs] for turn, docs in entry["missed_function"].items()
        }
    return out
