"""Cheap state snapshots of simulator instances, and diffs between them.

A snapshot holds, per class and per attribute, the attribute's value pickled
(C speed; immutable bytes). Only the classes a call touched are re-pickled, the
others are shared with the previous snapshot. Equal bytes mean equal state, so a
read is recognised without decoding anything; only attributes whose bytes
differ are unpickled and compared, to produce a diff or a BFCL state verdict.

Left out, because they are artefacts rather than state (found in
``bfcl_eval/eval_checker/multi_turn_eval/func_source_code``):
"""

from __future__ import annotations

import functools
import io
import pickle
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TypedDict, TypeGuard

from ..common.text import shorten
from . import dag, limits

#: Attributes that are not state, with the reason. Everything else is kept,
#: public and private (``GorillaFileSystem._current_dir`` is hidden state).
ARTEFACT_ATTRIBUTES: Mapping[str, str] = {
    "_random": "random.Random of MessageAPI, TradingBot, TravelAPI, VehicleControlAPI",
    "_api_description": "the constant description string every class sets",
    "_flight_cost_lookup": "TravelAPI price-quote memo: get_flight_cost fills it, book_flight consumes it",
}
#: ``gorilla_file_system.File._last_modified`` is a wall-clock stamp
#: (``datetime.now()``); it is dropped when a file tree is normalised.
WALL_CLOCK_ATTRIBUTE = "_last_modified"

_PROTOCOL = pickle.HIGHEST_PROTOCOL


def _is_directory(value: object) -> TypeGuard[dag.Directory]:
    return type(value) is dag.directory_class()


def _directory_path(directory: dag.Directory | None) -> str:
    parts = []
    while directory is not None:
        parts.append(directory.name)
        directory = directory.parent
    return "/".join(reversed(parts))


def _loads(data: bytes) -> dict[str, object]:
    """An attribute table pickled by ``capture_class``."""
    # Unpickled objects take several times their pickled size (limits.UNPICKLED_FACTOR).
    limits.charge(len(data) * limits.UNPICKLED_FACTOR)
    return pickle.loads(data)


@dataclass(frozen=True, eq=False)
class ClassState:
    """One instance's state: public and private attributes, each pickled in one go.

    Equal bytes are equal state (files are pickled without their wall-clock
    stamp); only when bytes differ are the attributes unpickled and compared.
    """

    public: bytes
    private: bytes

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClassState) and self.public == other.public and self.private == other.private

    __hash__ = None  # type: ignore[assignment]

    @functools.cached_property
    def public_values(self) -> dict[str, object]:
        return _loads(self.public)

    @functools.cached_property
    def values(self) -> dict[str, object]:
        """All attributes, unpickled once (do not mutate)."""
        return {**self.public_values, **_loads(self.private)}

    def __iter__(self) -> Iterator[str]:
        return iter(self.values)

    def __getitem__(self, attr: str) -> object:
        return self.values[attr]


def capture_class(instance: object) -> ClassState:
    """Pickle every state attribute of one instance (artefacts left out).

    A directory held outside ``root`` (the current directory) is stored as its
    path, so a snapshot never duplicates the tree. The tree itself is stored as a
    flat table (``dag.FlatTree``): pickling it costs one visit per distinct folder
    or file, however many paths reach it and however deep it nests.
    """
    public: dict[str, object] = {}
    private: dict[str, object] = {}
    tree = False
    for attr, value in vars(instance).items():
        if attr in ARTEFACT_ATTRIBUTES:
            continue
        if _is_directory(value):
            if attr != "root":
                value = _directory_path(value)
            else:
                tree = True
        (private if attr.startswith("_") else public)[attr] = value
    dumps = _dumps_tree if tree else _dumps_plain
    state = ClassState(dumps(public), dumps(private))
    limits.charge(len(state.public) + len(state.private))
    return state


def _dumps_plain(value: object) -> bytes:
    return pickle.dumps(value, _PROTOCOL)


def _dumps_tree(value: Mapping[str, object]) -> bytes:
    """Pickle attributes holding a file tree; files without their wall-clock stamp.

    The C pickler visits each distinct folder once (its memo), but recurses: a tree
    nested a few hundred folders deep exceeds the recursion limit. Such a tree is
    stored as a flat table instead (``dag.FlatTree``), which unpickles into the
    same folders and files.
    """
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, _PROTOCOL)
    pickler.dispatch_table = {dag.file_class(): lambda f: (_rebuild_file, (f.name, f.content))}
    try:
        pickler.dump(value)
        return buffer.getvalue()
    except RecursionError:
        flat = {attr: dag.flatten(v) if _is_directory(v) else v for attr, v in value.items()}
        return pickle.dumps(flat, _PROTOCOL)


def _rebuild_file(name: str, content: str) -> dag.File:
    return dag.file_class()(name, content)


@dataclass(frozen=True)
class Snapshot:
    """State of all instances of a conversation at one point."""

    classes: Mapping[str, ClassState]

    @classmethod
    def capture(cls, instances: Mapping[str, object]) -> Snapshot:
        return cls({name: capture_class(inst) for name, inst in instances.items()})

    def updated(self, instances: Mapping[str, object], touched: Iterable[str]) -> Snapshot:
        """A new snapshot re-capturing only the ``touched`` classes."""
        if not touched:
            return self
        return Snapshot(
            {name: capture_class(instances[name]) if name in touched else state for name, state in self.classes.items()}
        )

    def value(self, class_name: str, attr: str) -> object:
        return self.classes[class_name].values[attr]

    def normalised(self) -> dict[str, dict[str, object]]:
        """Plain JSON-like state: files and directories become dicts."""
        return {
            name: {attr: normalise(value) for attr, value in state.values.items()}
            for name, state in self.classes.items()
        }


class StateDifference(TypedDict):
    """One public attribute whose values differ, as BFCL's ``_compare_instances`` reports it."""

    model: object
    ground_truth: object


class ChangeJson(TypedDict):
    """A change as rows and reports quote it: long values clipped (``clip_value``)."""

    path: list[str]
    before: object  # a normalised value (``Change``), clipped
    after: object


@dataclass(frozen=True)
class Change:
    """One changed leaf of the state: ``path`` from class and attribute down."""

    path: tuple[str, ...]
    before: object  # a normalised value (``normalise``), or ``MISSING``
    after: object
    MISSING = "<absent>"

    @property
    def class_name(self) -> str:
        return self.path[0]

    @property
    def attribute(self) -> str:
        return self.path[1]

    @property
    def hidden(self) -> bool:
        return self.attribute.startswith("_")

    @property
    def kind(self) -> str:
        if self.before == Change.MISSING:
            return "added"
        if self.after == Change.MISSING:
            return "removed"
        return "changed"

    def to_json(self) -> ChangeJson:
        return {"path": list(self.path), "before": clip_value(self.before), "after": clip_value(self.after)}


#: Evidence is for people: a value longer than this is cut in rows and reports.
MAX_EVIDENCE_CHARS = 2_000


def clip_value(value: object) -> object:
    """Long strings cut, long containers summarised (the full state stays in the snapshot).

    A container's text is measured and cut without being built: a state whose folders are
    shared by many paths has a text far longer than the state itself.
    """
    if isinstance(value, str):  # as every long value is quoted (``_text.shorten``)
        return shorten(value, MAX_EVIDENCE_CHARS)
    if isinstance(value, (dict, list)):
        size = dag.text_size(value)
        if size > MAX_EVIDENCE_CHARS:
            return dag.text_prefix(value, MAX_EVIDENCE_CHARS) + f"… ({size:,} chars)"
    return value


def normalise(value: object) -> object:
    """Files and directories as plain dicts (no parent links, no wall clock).

    The file system can be driven into a cycle (``mv`` of a directory into
    itself shares the contents dict); a directory met again below itself
    becomes ``"<cycle>"``. A directory reachable through several paths
    (``cp`` copies contents shallowly) is normalised once (``dag.normalise``).
    """
    return dag.normalise(value)


def diff(before: Snapshot, after: Snapshot) -> list[Change]:
    """Leaf-level changes from ``before`` to ``after``; empty when equal.

    Shared sub-trees are compared and expanded once: a change below a folder that
    several paths reach is reported at the first of them.
    """
    changes: list[Change] = []
    for class_name, state in after.classes.items():
        old = before.classes.get(class_name)
        if old is state or old == state:
            continue
        a = old.values if old is not None else {}
        b = state.values
        for attr in sorted(set(a) | set(b)):
            va = normalise(a[attr]) if attr in a else Change.MISSING
            vb = normalise(b[attr]) if attr in b else Change.MISSING
            for path, x, y in dag.changed_leaves(va, vb, Change.MISSING):
                changes.append(Change((class_name, attr) + path, x, y))
    return changes


def states_equal_public(
    model: Snapshot, reference: Snapshot, class_name: str
) -> tuple[bool, dict[str, StateDifference]]:
    """BFCL's ``_compare_instances`` on snapshots: public attributes with ``!=``.

    Equal bytes are equal values; otherwise the public attributes are unpickled
    and compared with the simulators' own ``__eq__``, attribute by attribute,
    in the reference's order.
    """
    model_state, ref_state = model.classes[class_name], reference.classes[class_name]
    if model_state.public == ref_state.public:
        return True, {}
    differences: dict[str, StateDifference] = {}
    model_values = model_state.public_values
    for attr, ref_value in ref_state.public_values.items():
        model_value = model_values.get(attr)
        try:
            unequal = model_value != ref_value
        except RecursionError:  # a cyclic file tree; bfcl-eval's own __eq__ overflows too
            unequal = True
        if unequal:
            differences[attr] = {"model": model_value, "ground_truth": ref_value}
    return not differences, differences
