"""Walks over state whose sub-trees are shared: each distinct node is visited once.

GorillaFileSystem's ``cp`` copies a folder's contents dict shallowly, so after ``cp d c;
mv c d`` the old children of ``d`` are reachable twice, and ``n`` such rounds make ``2**n``
paths through ``n + 1`` folders. ``mkdir`` + ``cd`` nest folders as deep as a model likes.
Everything here is iterative (no recursion limit is reached however deep a tree is) and
memoised by object identity, so its cost grows with the number of distinct nodes, never
with the number of paths:

* ``flatten`` / ``FlatTree``: a file tree as one flat table that pickles without recursion
  and unpickles into the same objects (sharing and parent links kept);
* ``normalise``: files and folders as plain dicts, a shared folder as one shared dict;
* ``equal``: ``==`` on normalised values, each pair of nodes compared once;
* ``changed_leaves``: the leaf-level differences, each pair of shared nodes expanded once;
* ``text_size`` / ``text_prefix``: the exact length, and a bounded prefix, of ``repr`` or
  ``json.dumps`` of a normalised value, without building the text;
* ``count_paths``: how many paths a file-system walk (``find``, ``du``) would take.

Every loop calls ``limits.tick`` so that a conversation's time budget is checked inside
walks too.
"""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Literal, Protocol, TypeGuard, cast

from ..common import bfcl as _bfcl
from ..common.text import MAX_SHOWN, shorten
from . import limits

CYCLE = "<cycle>"


class Directory(Protocol):
    """What the walks read and write of bfcl-eval's ``gorilla_file_system.Directory``."""

    name: str
    parent: Directory | None
    contents: dict[str, object]  # name -> Directory or File

    def __init__(self, name: str, parent: Directory | None = None) -> None: ...


class File(Protocol):
    """What the walks read of bfcl-eval's ``gorilla_file_system.File``."""

    name: str
    content: str

    def __init__(self, name: str, content: str = "") -> None: ...


@functools.cache
def _file_system_module() -> ModuleType:
    return sys.modules[_bfcl.simulator_class("GorillaFileSystem").__module__]


def directory_class() -> type[Directory]:
    """bfcl-eval's ``gorilla_file_system.Directory``."""
    return _file_system_module().Directory


def file_class() -> type[File]:
    """bfcl-eval's ``gorilla_file_system.File``."""
    return _file_system_module().File


# --- a file tree as a flat table ---------------------------------------------------------

#: Node rows: ``("d", name, parent_row, ((key, child_row), ...))`` for a folder (``-1``: no
#: parent), ``("f", name, content)`` for a file (its wall-clock stamp is not state), and
#: ``("o", value)`` for anything else found in a folder.
NodeRow = (
    tuple[Literal["d"], str, int, tuple[tuple[str, int], ...]]
    | tuple[Literal["f"], str, str]
    | tuple[Literal["o"], object]
)


@dataclass(frozen=True, eq=False)
class FlatTree:
    """A file tree as rows, in breadth-first order of first discovery (row 0 is the root).

    Pickling it stores the rows (a flat list: no recursion however deep the tree is);
    unpickling rebuilds the folders and files, shared where they were shared.
    """

    rows: tuple[NodeRow, ...]

    def __reduce__(self) -> tuple[Callable[[tuple[NodeRow, ...]], object], tuple[tuple[NodeRow, ...]]]:
        return rebuild, (self.rows,)


def flatten(root: Directory) -> FlatTree:
    """``root`` and everything reachable from it (contents and parent links), once each."""
    directory, file = directory_class(), file_class()
    order: list[object] = [root]
    index = {id(root): 0}

    def row_of(node: object) -> int:
        row = index.get(id(node))
        if row is None:
            row = index[id(node)] = len(order)
            order.append(node)
        return row

    rows: list[NodeRow] = []
    position = 0
    while position < len(order):
        node = order[position]
        position += 1
        limits.tick()
        if type(node) is directory:
            children = tuple((key, row_of(child)) for key, child in node.contents.items())
            parent = -1 if node.parent is None else row_of(node.parent)
            rows.append(("d", node.name, parent, children))
        elif type(node) is file:
            rows.append(("f", node.name, node.content))
        else:
            rows.append(("o", node))
    return FlatTree(tuple(rows))


def rebuild(rows: tuple[NodeRow, ...]) -> object:
    """The objects of ``flatten``'s rows; returns the root."""
    directory, file = directory_class(), file_class()
    nodes: list[object] = []
    folders: dict[int, Directory] = {}  # row -> its folder
    for row in rows:
        if row[0] == "d":
            folder = folders[len(nodes)] = directory(row[1], None)
            nodes.append(folder)
        elif row[0] == "f":
            nodes.append(file(row[1], row[2]))
        else:
            nodes.append(row[1])
    for position, row in enumerate(rows):
        if row[0] == "d":
            folder = folders[position]
            folder.parent = cast(Directory, nodes[row[2]]) if row[2] >= 0 else None  # a folder's row
            folder.contents = {key: nodes[child] for key, child in row[3]}
    return nodes[0]


# --- normalised values ---------------------------------------------------------------------


#: A normalised container: files and folders as dicts, tuples as lists.
Normal = dict[object, object] | list[object]
#: Child pairs: (key, child) of a dict or folder, (index, item) of a list or tuple.
Pairs = Iterator[tuple[object, object]]


def _open(value: object) -> tuple[Normal, Pairs] | None:
    """An empty output container and the (key, child) pairs to fill it with; None for a leaf."""
    if type(value) is directory_class():
        return {}, iter(value.contents.items())
    if isinstance(value, dict):
        return {}, iter(value.items())
    if isinstance(value, (list, tuple)):
        return [], iter(enumerate(value))
    return None


def _leaf(value: object) -> object:
    if type(value) is file_class():
        return {"<file>": value.content}
    return value


def _put(out: Normal, key: object, value: object) -> None:
    if isinstance(out, list):  # made here: exactly a list or a dict
        out.append(value)
    else:
        out[key] = value


def normalise(value: object) -> object:
    """Files and folders as plain dicts (no parent links, no wall clock), lists for tuples.

    A folder or file reached through several paths becomes one dict shared by them (the
    result is as large as the state, not as its number of paths). A container met again below itself
    (``mv d d`` makes a folder contain its own contents dict) becomes ``"<cycle>"``.
    """
    opened = _open(value)
    if opened is None:
        return _leaf(value)
    memo: dict[int, object] = {id(value): opened[0]}
    active = {id(value)}
    stack = [(value, opened[0], opened[1])]
    while stack:
        node, out, items = stack[-1]
        for key, child in items:
            limits.tick()
            ident = id(child)
            if ident in active:
                _put(out, key, CYCLE)
            elif ident in memo:
                _put(out, key, memo[ident])
            else:
                inner = _open(child)
                if inner is None:
                    leaf = _leaf(child)
                    if leaf is not child:  # a file's dict: shared where the file is
                        memo[ident] = leaf
                    _put(out, key, leaf)
                    continue
                memo[ident] = inner[0]
                active.add(ident)
                _put(out, key, inner[0])
                stack.append((child, inner[0], inner[1]))
                break
        else:
            active.discard(id(node))
            stack.pop()
    return memo[id(value)]


def _kind(value: object) -> type | None:
    if isinstance(value, dict):
        return dict
    if isinstance(value, list):
        return list
    return None


def equal(a: object, b: object, memo: dict[tuple[int, int], bool] | None = None) -> bool:
    """``a == b`` for normalised (acyclic) values, each pair of nodes compared once.

    ``memo`` (pairs of ids -> result) may be shared by calls on the same two values.
    """
    if a is b:
        return True
    kind = _kind(a)
    if kind is None or kind is not _kind(b):
        return bool(a == b)
    memo = {} if memo is None else memo
    found = memo.get((id(a), id(b)))
    if found is not None:
        return found
    stack: list[tuple[object, object, Pairs | None]] = [(a, b, _pairs(a, b))]
    while stack:
        x, y, pairs = stack[-1]
        verdict: bool | None = None if pairs is not None else False
        if pairs is not None:
            for u, v in pairs:
                limits.tick()
                if u is v:
                    continue
                inner = _kind(u)
                if inner is None or inner is not _kind(v):
                    if not u == v:
                        verdict = False
                        break
                    continue
                known = memo.get((id(u), id(v)))
                if known is True:
                    continue
                if known is False:
                    verdict = False
                    break
                stack.append((u, v, _pairs(u, v)))
                break
            else:
                verdict = True
        if verdict is None:
            continue  # descended into a child pair
        if verdict:
            memo[(id(x), id(y))] = True
            stack.pop()
        else:  # a difference below every pair still open
            for x, y, _ in stack:
                memo[(id(x), id(y))] = False
            return False
    return True


def _pairs(a: object, b: object) -> Pairs | None:
    """Child pairs to compare (two lists or two dicts), or None when they already differ."""
    if isinstance(a, list) and isinstance(b, list):
        return zip(a, b) if len(a) == len(b) else None
    if not (isinstance(a, dict) and isinstance(b, dict)) or len(a) != len(b) or a.keys() != b.keys():
        return None
    return ((a[key], b[key]) for key in a)


#: A path as a linked list: (the path to the parent, the last key); None is the root.
Link = tuple["Link", str] | None


def changed_leaves(a: object, b: object, missing: object) -> list[tuple[tuple[str, ...], object, object]]:
    """Paths (keys as strings) where ``a`` and ``b`` differ, with the two values there.

    Dicts are compared key by key (``a``'s keys first, then ``b``'s new ones), in the order a
    recursive walk would report them; a key absent on one side has ``missing`` there. A pair of
    shared nodes met again through another path is not expanded again: each difference is
    reported once, at the first path that reaches it.
    """
    memo: dict[tuple[int, int], bool] = {}
    expanded: set[tuple[int, int]] = set()
    found: list[tuple[tuple[str, ...], object, object]] = []
    # A path is a linked list (parent link, key): a deep chain costs O(depth), not O(depth**2).
    stack: list[tuple[Link, object, object]] = [(None, a, b)]
    while stack:
        link, x, y = stack.pop()
        limits.tick()
        if equal(x, y, memo):
            continue
        if isinstance(x, dict) and isinstance(y, dict):
            pair = (id(x), id(y))
            if pair in expanded:
                continue
            expanded.add(pair)
            keys = list(x) + [k for k in y if k not in x]
            stack.extend(((link, str(key)), x.get(key, missing), y.get(key, missing)) for key in reversed(keys))
            continue
        found.append((_path(link), x, y))
    return found


def _path(link: Link) -> tuple[str, ...]:
    keys = []
    while link is not None:
        link, key = link
        keys.append(key)
    return tuple(reversed(keys))


# --- text of normalised values, bounded ----------------------------------------------------

#: ``repr``: Python's own ``repr``; ``json``: ``json.dumps(value, default=repr, ensure_ascii=False)``.
STYLES = ("repr", "json")


def _leaf_text(value: object, style: str) -> str:
    if style == "repr":
        return repr(value)
    return json.dumps(value, default=repr, ensure_ascii=False)


def _key_text(key: object, style: str) -> str:
    if style == "repr":
        return repr(key)
    if not isinstance(key, str):
        key = json.dumps(key) if key is None or isinstance(key, (bool, int, float)) else repr(key)
    return json.dumps(key, ensure_ascii=False)


#: A container as text: a dict or a list (and, in JSON, a tuple, written as a list).
Shown = dict[object, object] | list[object] | tuple[object, ...]


def _is_container(value: object, style: str) -> TypeGuard[Shown]:
    return isinstance(value, (dict, list)) or (style == "json" and isinstance(value, tuple))


def text_size(value: object, style: str = "repr") -> int:
    """``len(repr(value))`` (or of its JSON), computed once per distinct node."""
    if not _is_container(value, style):
        return len(_leaf_text(value, style))
    sizes: dict[int, int] = {}
    opened: set[int] = set()
    stack: list[Shown] = [value]
    while stack:
        node = stack[-1]
        if id(node) in sizes:
            stack.pop()
            continue
        children = node.values() if isinstance(node, dict) else node
        pending = [c for c in children if _is_container(c, style) and id(c) not in sizes]
        if pending and id(node) in opened:
            raise ValueError("a value that contains itself has no finite text")
        opened.add(id(node))
        if pending:
            stack.extend(pending)
            continue
        limits.tick(len(node))
        size = 2 + 2 * max(len(node) - 1, 0)
        for child in children:
            size += sizes[id(child)] if _is_container(child, style) else len(_leaf_text(child, style))
        if isinstance(node, dict):
            size += sum(len(_key_text(k, style)) + 2 for k in node)
        sizes[id(node)] = size
        stack.pop()
    return sizes[id(value)]


def text_prefix(value: object, limit: int, style: str = "repr") -> str:
    """The first ``limit`` characters of ``repr(value)`` (or of its JSON), built lazily."""
    out: list[str] = []
    length = 0
    for piece in _pieces(value, style):
        out.append(piece)
        length += len(piece)
        if length >= limit:
            break
    return "".join(out)[:limit]


def _pieces(value: object, style: str) -> Iterator[str]:
    stack: list[object] = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, _Text):
            yield item.text
            continue
        limits.tick()
        if not _is_container(item, style):
            yield _leaf_text(item, style)
            continue
        if isinstance(item, dict):
            opening, closing = "{", "}"
            parts: list[object] = []
            for index, (key, child) in enumerate(item.items()):
                parts += [_Text((", " if index else "") + _key_text(key, style) + ": "), child]
        else:
            opening, closing = "[", "]"
            parts = []
            for index, child in enumerate(item):
                parts += ([_Text(", ")] if index else []) + [child]
        yield opening
        stack.append(_Text(closing))
        stack.extend(reversed(parts))


@dataclass(frozen=True)
class _Text:
    text: str


# --- walks of the live file system -------------------------------------------------------


def count_paths(directory: Directory, cap: int) -> int:
    """Entries a recursive walk of ``directory`` visits (``find``, ``du``), up to ``cap``.

    Counted once per distinct folder; a folder inside itself counts as ``cap`` (a
    recursive walk would not end).
    """
    folder = directory_class()
    counts: dict[int, int] = {}
    active: set[int] = set()
    stack = [directory]
    while stack:
        node = stack[-1]
        if id(node) in counts:  # a shared folder, pushed twice before it was counted
            stack.pop()
            continue
        limits.tick()
        active.add(id(node))
        pending = [c for c in node.contents.values() if type(c) is folder and id(c) not in counts]
        if any(id(c) in active for c in pending):
            return cap
        if pending:
            stack.extend(pending)
            continue
        total = 0
        for child in node.contents.values():
            total += 1 + (counts[id(child)] if type(child) is folder else 0)
        counts[id(node)] = min(total, cap)
        active.discard(id(node))
        stack.pop()
    return counts[id(directory)]


def shorten_value(value: object, limit: int = MAX_SHOWN) -> object:
    """``value`` when its text is short; else its text's first ``limit`` characters and length.

    A container's text is measured and cut without being built (this module's walks): a value made by
    repetition shares its parts, and its text is far longer than the memory it takes.
    """
    if isinstance(value, str):
        return shorten(value, limit)
    if not isinstance(value, (dict, list, tuple, set, frozenset)):
        return value
    if isinstance(value, (set, frozenset)):
        value = list(value)
    size = text_size(value, "json")
    if size <= limit:
        return value
    return f"{text_prefix(value, limit, 'json')}… ({size:,} chars)"
