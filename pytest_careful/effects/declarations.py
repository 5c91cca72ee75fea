"""Effect declarations: what each of the 128 multi-turn functions does.

Everything but the destructive boundary is inferred (``pytest_careful.effects.inference``)
and written to ``declarations/<Class>.yaml``; the boundary is human data in
``declarations/destructive.yaml``. This module loads both, selects a boundary,
and renders a declaration as MCP tool annotations.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..common.bfcl import SIMULATOR_CLASSES

#: The data package that ``declarations/`` is installed as. Not ``pytest_careful.declarations``,
#: the name this module had before the stage layout: installed, a folder of that name beside
#: the module shadowed it (the package wins the import).
DATA_PACKAGE = "pytest_careful.declarations_data"


def _declarations_dir() -> Path:
    # Installed, declarations/ is the data package DATA_PACKAGE; in a source
    # checkout (editable installs included) it is the top-level folder beside the package.
    spec = importlib.util.find_spec(DATA_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    return Path(__file__).resolve().parents[2] / "declarations"


DECLARATIONS_DIR = _declarations_dir()
BOUNDARY_FILE = "destructive.yaml"
#: What each read function's results show (``careful-declare`` infers it; the item audit reads it).
READS_FILE = "reads.yaml"
ANNOTATORS = ("A1", "A2", "A3", "A4")
BOUNDARIES = ("final", "majority") + ANNOTATORS

READ, WRITE = "read", "write"
DESTRUCTIVE, OTHER_WRITE = "destructive", "write"


@dataclass(frozen=True)
class Declaration:
    """The declared effect of one function.

    Attributes:
        name: function name.
        class_name: simulator class.
        effect: ``read`` or ``write`` (inferred).
        idempotent: for writes, whether re-applying a call changed nothing in
            every probe (inferred); ``True`` for reads.
        hidden_only: a write that changed only private state (inferred).
        footprint: state attributes its successful calls changed, entity keys
            generalised (inferred).
        destructive: the human label under the final boundary.
        destructive_reason: why, when destructive.
        signals: consequence signals seen in its diffs.
        evidence: observation counts per source.
    """

    name: str
    class_name: str
    effect: str
    idempotent: bool
    hidden_only: bool
    footprint: tuple[str, ...]
    destructive: bool
    destructive_reason: str = ""
    signals: tuple[str, ...] = ()
    evidence: Mapping[str, Mapping[str, int]] = field(default_factory=dict)

    @property
    def is_write(self) -> bool:
        return self.effect == WRITE

    def mcp_annotations(self, boundary: frozenset[str] | None = None) -> dict[str, bool]:
        """MCP tool annotations: ``readOnlyHint``, ``destructiveHint``, ``idempotentHint``."""
        destructive = self.destructive if boundary is None else self.name in boundary
        return {
            "readOnlyHint": not self.is_write and not destructive,
            "destructiveHint": destructive,
            "idempotentHint": self.idempotent,
        }


@dataclass(frozen=True)
class Declarations:
    """All declarations, with the human boundary data."""

    functions: Mapping[str, Declaration]
    boundary_reasons: Mapping[str, str]
    annotators: Mapping[str, frozenset[str]]
    digest: str

    def __getitem__(self, name: str) -> Declaration:
        return self.functions[name]

    def __contains__(self, name: object) -> bool:
        return name in self.functions

    def boundary(self, which: str = "final") -> frozenset[str]:
        """The destructive set under a boundary name (see ``BOUNDARIES``)."""
        if which == "final":
            return frozenset(self.boundary_reasons)
        if which == "majority":
            return majority(self.annotators, ("A1", "A2", "A3"))
        if which in self.annotators:
            return self.annotators[which]
        raise ValueError(f"unknown boundary {which!r}; expected one of {', '.join(BOUNDARIES)}")

    def kind(self, name: str, boundary: frozenset[str]) -> str:
        """``destructive``, ``write`` or ``read`` for a call to ``name``.

        Unknown functions are reads: they cannot run, so they change nothing.
        A hidden-only write (``cd``) counts as a read here, as in the seed's
        reference statistics (1,142 base calls = 342 + 268 + 532): its only
        effect is state that BFCL never compares.
        """
        if name in boundary:
            return DESTRUCTIVE
        declaration = self.functions.get(name)
        if declaration is not None and declaration.is_write and not declaration.hidden_only:
            return OTHER_WRITE
        return READ

    def by_class(self) -> dict[str, list[Declaration]]:
        grouped: dict[str, list[Declaration]] = {c: [] for c in SIMULATOR_CLASSES}
        for declaration in self.functions.values():
            grouped[declaration.class_name].append(declaration)
        return grouped

    def export_mcp(self, boundary: str = "final") -> dict[str, dict[str, bool]]:
        chosen = self.boundary(boundary)
        return {name: self.functions[name].mcp_annotations(chosen) for name in sorted(self.functions)}


def majority(annotators: Mapping[str, frozenset[str]], names: Iterable[str]) -> frozenset[str]:
    names = list(names)
    counts: dict[str, int] = {}
    for name in names:
        for function in annotators[name]:
            counts[function] = counts.get(function, 0) + 1
    return frozenset(f for f, n in counts.items() if 2 * n > len(names))


def safe_load(text: str) -> Any:
    # libyaml's loader where PyYAML has it: the same data, ~10x faster (about 1 s
    # saved in every process, xdist workers included).
    return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))


def load_boundary_file(directory: Path = DECLARATIONS_DIR) -> tuple[dict[str, str], dict[str, frozenset[str]]]:
    data = safe_load((directory / BOUNDARY_FILE).read_text(encoding="utf-8"))
    reasons = {str(k): str(v) for k, v in data["final"].items()}
    annotators = {str(k): frozenset(map(str, v)) for k, v in data["annotators"].items()}
    return reasons, annotators


@functools.cache
def load(directory: Path = DECLARATIONS_DIR) -> Declarations:
    """Declarations from ``directory`` (the package's own by default)."""
    reasons, annotators = load_boundary_file(directory)
    functions: dict[str, Declaration] = {}
    digest = hashlib.sha256()
    for class_name in SIMULATOR_CLASSES:
        path = directory / f"{class_name}.yaml"
        text = path.read_text(encoding="utf-8")
        digest.update(text.encode())
        for name, entry in safe_load(text)["functions"].items():
            functions[name] = _declaration(class_name, name, entry)
    digest.update((directory / BOUNDARY_FILE).read_bytes())
    return Declarations(functions, reasons, annotators, digest.hexdigest()[:16])


@functools.cache
def reads(directory: Path = DECLARATIONS_DIR) -> Mapping[str, tuple[str, ...]]:
    """Per read function, the public attributes of its class that its results show (``READS_FILE``).

    Kept apart from the declarations and their digest: only the item audit reads it, so a
    scorecard's declarations stay comparable when it is inferred again.
    """
    data = safe_load((directory / READS_FILE).read_text(encoding="utf-8")) or {}
    return {str(f): tuple(map(str, attrs or ())) for functions in data.values() for f, attrs in functions.items()}


def _declaration(class_name: str, name: str, entry: Mapping[str, Any]) -> Declaration:
    return Declaration(
        name=name,
        class_name=class_name,
        effect=entry["effect"],
        idempotent=bool(entry["idempotent"]),
        hidden_only=bool(entry.get("hidden_only", False)),
        footprint=tuple(entry.get("footprint", ())),
        destructive=bool(entry.get("destructive", False)),
        destructive_reason=entry.get("destructive_reason", ""),
        signals=tuple(entry.get("signals", ())),
        evidence=entry.get("evidence", {}),
    )
