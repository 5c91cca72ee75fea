"""The literal arguments of a call string, and the same call with one of them replaced.

A literal is a leaf of a call's arguments: a string, a number or a boolean, at the top level
or inside a list, tuple or dict (``tags[1]``, ``updates['priority']``). Calls are parsed with
:mod:`ast` and rebuilt with ``ast.unparse``; nothing is evaluated but literals.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

#: A literal's place inside a call: the argument (a keyword's name, or the position of a
#: positional one), then list indices and dict keys down to the leaf.
Path = tuple[object, ...]

#: What a literal is replaced with to learn whether BFCL's checker reads it: values no
#: simulator holds, of the literal's own type (a boolean is flipped).
SENTINEL_TEXT = "careful_sentinel_9f1c"
SENTINEL_INT = 987_654_321
SENTINEL_FLOAT = 98_765.4321


@dataclass(frozen=True)
class Literal:
    """One literal argument of one call."""

    path: Path
    value: str | int | float | bool

    def argument(self, parameters: Sequence[str] = ()) -> str:
        """The argument as a reader names it: ``tags[1]``, ``updates['priority']``, a
        positional one by its parameter's name where ``parameters`` gives it."""
        head = self.path[0]
        if isinstance(head, int):
            name = parameters[head] if head < len(parameters) else f"*{head}"
        else:
            name = str(head)
        return name + "".join(f"[{step!r}]" for step in self.path[1:])


def literals_of(call: str) -> list[Literal]:
    """The call's literal leaves, in the order they are written; [] for anything but a call."""
    node = _call_node(call)
    if node is None:
        return []
    found: list[Literal] = []
    for index, argument in enumerate(node.args):
        _walk(argument, (index,), found)
    for keyword in node.keywords:
        if keyword.arg is not None:
            _walk(keyword.value, (keyword.arg,), found)
    return found


def function_of(call: str) -> str | None:
    node = _call_node(call)
    return node.func.id if node is not None and isinstance(node.func, ast.Name) else None


def _call_node(call: str) -> ast.Call | None:
    try:
        node = ast.parse(call.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return node if isinstance(node, ast.Call) else None


def _walk(node: ast.expr, path: Path, found: list[Literal]) -> None:
    value = _constant(node)
    if value is not None:
        found.append(Literal(path, value))
    elif isinstance(node, (ast.List, ast.Tuple)):
        for index, element in enumerate(node.elts):
            _walk(element, path + (index,), found)
    elif isinstance(node, ast.Dict):
        for key, element in zip(node.keys, node.values):
            key_value = _constant(key) if key is not None else None
            if key_value is not None:
                _walk(element, path + (key_value,), found)


def _constant(node: ast.expr | None) -> str | int | float | bool | None:
    """A string, number or boolean literal (a signed number included); None otherwise."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        inner = _constant(node.operand)
        if isinstance(inner, (int, float)) and not isinstance(inner, bool):
            return -inner if isinstance(node.op, ast.USub) else inner
        return None
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool)):
        return node.value
    return None


def sentinel(value: object) -> object:
    """A value of ``value``'s type that no simulator's state or user holds."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return SENTINEL_INT
    if isinstance(value, float):
        return SENTINEL_FLOAT
    return SENTINEL_TEXT


def with_value(call: str, path: Path, value: object) -> str:
    """``call`` with the literal at ``path`` replaced by ``value`` (a literal)."""
    tree = ast.parse(call.strip(), mode="eval")
    node = tree.body
    assert isinstance(node, ast.Call)
    head, rest = path[0], path[1:]
    if isinstance(head, int):
        node.args[head] = _replaced(node.args[head], rest, value)
    else:
        for keyword in node.keywords:
            if keyword.arg == head:
                keyword.value = _replaced(keyword.value, rest, value)
    return ast.unparse(tree)


def _replaced(node: ast.expr, rest: Path, value: object) -> ast.expr:
    if not rest:
        return ast.Constant(value)  # type: ignore[arg-type]  # a literal: str, number or boolean
    step, tail = rest[0], rest[1:]
    if isinstance(node, (ast.List, ast.Tuple)) and isinstance(step, int):
        node.elts[step] = _replaced(node.elts[step], tail, value)
    elif isinstance(node, ast.Dict):
        for index, key in enumerate(node.keys):
            if key is not None and _constant(key) == step:
                node.values[index] = _replaced(node.values[index], tail, value)
    return node
