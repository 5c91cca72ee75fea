"""Python's operators on plain data, as ``eval`` computes them, at a bounded cost.

The safe interpreter (:mod:`pytest_careful.execution.executor`) evaluates ``or``/``and``/
``not``, conditional expressions, comparisons, arithmetic, ``%``-formatting and
subscripts over the values a call string builds: literals and what simulator
methods return. Each operation here is Python's own operator (so results and
error messages are those ``eval`` gives in bfcl-eval's executor), applied only
to plain data (builtin scalars in builtin containers: no user-defined method
can run) and only when its cost is bounded; otherwise it raises
:class:`Refused` and the call is not executed.
"""

from __future__ import annotations

import ast
import decimal
import operator
from collections.abc import Callable, Collection, Iterable
from typing import TypeGuard, cast

from . import limits

#: Longest str, bytes, list or tuple an operator may build (the longest call string).
MAX_SEQUENCE_LENGTH = 200_000
#: Largest int an operator may take or build, in bits (Python refuses to print
#: ints above 4,300 digits, about 14,300 bits, anyway).
MAX_INT_BITS = 100_000
#: Largest plain value (nodes) an operator looks into.
MAX_PLAIN_NODES = 200_000
#: Largest width or precision in a ``%``-format.
MAX_FORMAT_WIDTH = 10_000


class Refused(Exception):
    """A construct the safe interpreter does not run."""


SCALARS: frozenset[type] = frozenset(
    {
        type(None),
        bool,
        int,
        float,
        complex,
        str,
        bytes,
        type(Ellipsis),
        decimal.Decimal,
    }
)
CONTAINERS: frozenset[type] = frozenset({list, tuple, dict, set, frozenset})
#: MathAPI's results hold mpmath numbers (their precision is the call's: ``executor``).
_LIBRARY_SCALARS = frozenset({("mpmath.ctx_mp_python", "mpf"), ("mpmath.ctx_mp_python", "mpc")})
_SEQUENCES = (str, bytes, list, tuple)
#: Values whose identity ``is`` can test exactly (the same objects here as in eval).
_SINGLETONS = (None, True, False, Ellipsis)

#: Python's own operators, applied to plain values only (``_require_plain``); a value of the wrong
#: kind raises the TypeError eval would raise, so their parameters are any value.
_UNARY: dict[type, Callable[..., object]] = {
    ast.USub: operator.neg,
    ast.UAdd: operator.pos,
    ast.Invert: operator.invert,
}
_BINARY: dict[type, Callable[..., object]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.MatMult: operator.matmul,
}
_COMPARE: dict[type, Callable[..., object]] = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.In: lambda a, b: operator.contains(b, a),
    ast.NotIn: lambda a, b: not operator.contains(b, a),
}


def is_scalar(kind: type) -> bool:
    """Whether values of ``kind`` are plain scalars."""
    return kind in SCALARS or (kind.__module__, kind.__name__) in _LIBRARY_SCALARS


def is_plain(value: object) -> bool:
    """Whether ``value`` is builtin scalars in builtin containers, of bounded size (no cycles)."""
    pending, seen = [value], 0
    while pending:
        item = pending.pop()
        seen += 1
        if seen > MAX_PLAIN_NODES:
            return False
        kind = type(item)
        if is_scalar(kind):
            continue
        if type(item) is dict:
            pending.extend(item.keys())
            pending.extend(item.values())
        elif kind in CONTAINERS:
            pending.extend(cast("Iterable[object]", item))
        else:
            return False
    return True


def truth(value: object) -> bool:
    """``bool(value)`` for a builtin value (a container's truth does not look inside)."""
    if is_scalar(type(value)) or type(value) in CONTAINERS:
        return bool(value)
    raise Refused(f"the truth value of a {type(value).__name__} is not evaluated")


def unary(op: ast.unaryop, value: object) -> object:
    """``not``, ``-``, ``+`` or ``~`` of ``value``."""
    if isinstance(op, ast.Not):
        return not truth(value)
    _require_plain(value)
    return _UNARY[type(op)](value)


def binary(op: ast.operator, left: object, right: object) -> object:
    """``left <op> right``, refused where the cost is not bounded."""
    _require_plain(left)
    _require_plain(right)
    _check_cost(op, left, right)
    result = _BINARY[type(op)](left, right)
    if type(result) is int and result.bit_length() > MAX_INT_BITS:
        raise Refused(f"an int of more than {MAX_INT_BITS} bits")
    if limits.metering():
        limits.charge(_built_size(op, left, right, result))
    return result


def _built_size(op: ast.operator, left: object, right: object, result: object) -> int:
    """``text_size(result)``, from the operands where the result repeats or joins them (no walk of
    a 200,000-item result that shares one item)."""
    if isinstance(result, _SEQUENCES) and not isinstance(result, (str, bytes)):
        if isinstance(op, ast.Mult):
            seq, count = (left, right) if isinstance(left, _SEQUENCES) else (right, left)
            return 2 + max(int(cast(int, count)), 0) * max(text_size(seq) - 2, 0)
        if isinstance(op, ast.Add):
            return text_size(left) + text_size(right)
    return text_size(result)


def built(value: object) -> None:
    """Count a value the interpreter made against the conversation's memory budget.

    Counted at the length of its text (``text_size``), not at the memory it takes: a list
    repeated from a list shares its items, but a call result, an error message or a report
    made from it copies every one (``['a' * 199_000] * 100_000`` takes 0.8 MB, its text 20 GB).
    """
    if limits.metering():
        limits.charge(text_size(value))


#: Characters a leaf's text is counted at when it is not measured (a number, None, an object).
_LEAF_TEXT = 24


def text_size(value: object) -> int:
    """About ``len(repr(value))``: each container measured once however often it is shared.

    A str or bytes counts its length, an int its decimal digits, other scalars a fixed
    ``_LEAF_TEXT``; a container 2 characters per item besides its items. A container met
    inside itself counts nothing more (a simulator's state may link to itself).
    """
    flat = _flat_size(value)  # a scalar, or a result like {"status": "ok"}: most values, at a glance
    if flat is not None:
        return flat
    sizes: dict[int, int] = {}
    pending: list[tuple[object, bool]] = [(value, False)]
    while pending:
        node, done = pending.pop()
        if id(node) in sizes and not done:
            continue
        items = _items(node)
        if items is None:
            sizes[id(node)] = _leaf_size(node)
        elif done:
            sizes[id(node)] = 2 + sum(sizes.get(id(item), 0) + 2 for item in items)
        else:
            sizes[id(node)] = 0  # a cycle back to it adds nothing
            pending.append((node, True))
            pending.extend((item, False) for item in items if id(item) not in sizes)
            limits.tick(len(items))
    return sizes[id(value)]


_CONTAINER_TYPES = (dict, list, tuple, set, frozenset)


def _flat_size(value: object) -> int | None:
    """``text_size`` of a scalar or of a container of scalars; None for anything deeper."""
    kind = type(value)
    if kind not in _CONTAINER_TYPES:
        return _leaf_size(value)
    items = [*value.keys(), *value.values()] if type(value) is dict else cast("Collection[object]", value)
    if len(items) > 64 or any(type(item) in _CONTAINER_TYPES for item in items):
        return None
    return 2 + sum(_leaf_size(item) + 2 for item in items)


def _items(value: object) -> list[object] | None:
    kind = type(value)
    if type(value) is dict:
        return [*value.keys(), *value.values()]
    if kind in (list, tuple, set, frozenset):
        return list(cast("Iterable[object]", value))
    return None


def _leaf_size(value: object) -> int:
    if type(value) is str or type(value) is bytes:
        return len(value)
    if type(value) is int:
        return value.bit_length() * 30103 // 100000 + 1  # decimal digits, without building them
    return _LEAF_TEXT


def compare(op: ast.cmpop, left: object, right: object) -> object:
    """One comparison of a chain; ``is`` only where identity is the same as in eval."""
    if isinstance(op, (ast.Is, ast.IsNot)):
        # Identity of other values depends on how CPython compiles and caches constants.
        if not any(left is s or right is s for s in _SINGLETONS):
            raise Refused("'is' compares identity; only None, True, False and ... have one to compare")
        return (left is right) == isinstance(op, ast.Is)
    _require_plain(left)
    _require_plain(right)
    return _COMPARE[type(op)](left, right)


def subscript(value: object, index: object) -> object:
    """``value[index]`` (``index`` may be a slice)."""
    _require_plain(value)
    if type(index) is slice:
        for part in (index.start, index.stop, index.step):
            _require_plain(part)
    else:
        _require_plain(index)
    return operator.getitem(value, index)  # type: ignore[call-overload]  # eval's TypeError when not subscriptable


def _require_plain(value: object) -> None:
    if not is_plain(value):
        raise Refused(f"operators apply only to plain data, not to a {type(value).__name__}")


def _is_int(value: object) -> TypeGuard[int]:
    """An int or a bool, not a subclass of int (whose methods could run anything)."""
    return type(value) in (int, bool)


def _int_bits(value: object) -> int:
    return value.bit_length() if _is_int(value) else 0


def _check_cost(op: ast.operator, left: object, right: object) -> None:
    if max(_int_bits(left), _int_bits(right)) > MAX_INT_BITS:
        raise Refused(f"an int of more than {MAX_INT_BITS} bits")
    if isinstance(op, ast.Mult):
        for seq, count in ((left, right), (right, left)):
            if isinstance(seq, _SEQUENCES) and _is_int(count) and count > 0 and len(seq) * count > MAX_SEQUENCE_LENGTH:
                raise Refused(f"result too long (a sequence of more than {MAX_SEQUENCE_LENGTH} items)")
    elif isinstance(op, ast.Add) and isinstance(left, _SEQUENCES) and isinstance(right, _SEQUENCES):
        if len(left) + len(right) > MAX_SEQUENCE_LENGTH:
            raise Refused(f"result too long (a sequence of more than {MAX_SEQUENCE_LENGTH} items)")
    elif isinstance(op, ast.Pow) and _is_int(left) and _is_int(right):
        if right > 0 and abs(left) > 1 and right * left.bit_length() > MAX_INT_BITS:
            raise Refused(f"a power of more than {MAX_INT_BITS} bits")
    elif isinstance(op, ast.LShift) and _is_int(left) and _is_int(right):
        if left and right > MAX_INT_BITS:
            raise Refused(f"a shift to more than {MAX_INT_BITS} bits")
    elif isinstance(op, ast.Mod) and isinstance(left, (str, bytes)):
        _check_format(left)


def _check_format(template: str | bytes) -> None:
    """Bound the output of ``template % values`` (widths and precisions, as printf-style parses them)."""
    text = template.decode("latin-1") if isinstance(template, bytes) else template
    total, i, n = 0, 0, len(text)
    while True:
        i = text.find("%", i)
        if i < 0 or i + 1 >= n:
            break
        i += 1
        if text[i] == "(":  # a mapping key: parentheses nest
            depth = 0
            while i < n:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
                if depth == 0:
                    break
        while i < n and text[i] in "-+ #0":
            i += 1
        for _part in ("width", "precision"):
            if i < n and text[i] == "*":
                raise Refused("a '*' width in a %-format")
            start = i
            while i < n and text[i].isdigit() and text[i].isascii():
                i += 1
            if i > start:
                number = int(text[start:i]) if i - start < 8 else MAX_FORMAT_WIDTH + 1
                if number > MAX_FORMAT_WIDTH:
                    raise Refused(f"a %-format width or precision above {MAX_FORMAT_WIDTH}")
                total += number
            if _part == "width" and i < n and text[i] == ".":
                i += 1
            else:
                break
        i += 1  # the conversion character (or whatever printf-style rejects)
    if total > MAX_SEQUENCE_LENGTH:
        raise Refused(f"result too long (a %-format of more than {MAX_SEQUENCE_LENGTH} characters)")
