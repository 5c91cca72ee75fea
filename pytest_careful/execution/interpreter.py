"""Safe execution of decoded call strings on a conversation's own simulators.

This is bfcl-eval's ``execute_multi_turn_func_call`` without ``eval``. BFCL
prepends an instance name to every ``identifier(`` in the call string and then
evaluates it; we apply the same rewrite (so result strings and even its quirks,
such as rewriting ``ls(`` inside a string literal, come out identical), parse the
rewritten string with :mod:`ast`, and interpret a small, closed language:

* literals: str, bytes, numbers, booleans, None, lists, tuples, dicts, sets;
* ``-``/``+`` on a number, and ``+ - * / // %`` between numbers (bounded);
* calls of public methods of this conversation's simulator instances, with
  literal (or nested known-method) arguments.

Anything else (an unknown name, attribute access, a comprehension, ``**`` of a
non-literal, ...) never runs: the call fails with an ``Error during execution:``
result that says why. The instances are a conversation's own (:class:`~.executor.Simulators`, owned by one
replay), never module globals; this module parses and interprets, :mod:`.executor` holds them."""

from __future__ import annotations

import ast
import builtins
import decimal
import functools
import inspect
import itertools
import json
import math
import operator
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import NoReturn, Protocol, cast

from . import dag, isolation, plain_values
from .plain_values import Refused

#: bfcl-eval's own deny-list, checked on the rewritten string as BFCL does.
BLOCKED_NAMES = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")


#: bfcl-eval's rewrite: every identifier directly followed by ``(``. Possessive quantifiers match
#: the same names as bfcl-eval's ``\b([a-zA-Z_]\w*)\s*(?=\()`` (a shorter word is followed by a
#: word character, never by ``(``) without backtracking through a 200,000-character word.
CALL_NAME = re.compile(r"\b([a-zA-Z_]\w*+)\s*+(?=\()")


MAX_CALL_CHARS = 200_000


MAX_NUMBER_MAGNITUDE = 10**100


ERROR_PREFIX = "Error during execution: "


#: Deepest expression interpreted (nested brackets, calls, operators, signs); eval goes
#: deeper (a run of 1,000 signs), but no real call string comes near.
MAX_EXPRESSION_DEPTH = 100


#: Names ``eval`` resolves in bfcl-eval's executor besides the builtins and the
#: instances: ``multi_turn_utils``' globals and ``execute_multi_turn_func_call``'s
#: locals (``eval`` without namespaces sees both). A call string naming one is
#: refused, never resolved; ``tests/execution/test_call_parity.py`` checks this list.
BFCL_SCOPE_NAMES = frozenset(
    {
        "CLASS_FILE_PATH_MAPPING",
        "STATELESS_CLASSES",
        "__builtins__",
        "__cached__",
        "__doc__",
        "__file__",
        "__loader__",
        "__name__",
        "__package__",
        "__spec__",
        "_process_method_calls",
        "copy",
        "execute_multi_turn_func_call",
        "importlib",
        "inspect",
        "is_empty_execute_response",
        "json",
        "re",
        "func_call_list",
        "initial_config",
        "involved_classes",
        "model_name",
        "test_entry_id",
        "long_context",
        "is_evaL_run",
        "class_method_name_mapping",
        "involved_instances",
        "class_name",
        "module_name",
        "instance_name",
        "module",
        "class_",
        "class_instance",
        "class_initial_config",
        "method_name",
        "method",
        "execution_results",
        "func_call",
        "func_call_copy",
        "func_call_result",
        "e",
    }
)


#: Python's own operators, applied to numbers only (``_require_number``).
_BINOPS: dict[type, Callable[..., object]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def format_result(value: object) -> str:
    """bfcl-eval's conversion of a return value to the result string."""
    if type(value) is str:
        return value
    if type(value) is dict:
        try:
            return json.dumps(value)
        except Exception:
            return str(value)
    return str(value)


@dataclass
class Invocation:
    """One simulator method actually called (nested calls included)."""

    class_name: str
    method: str
    args: tuple[object, ...]
    kwargs: dict[str, object]
    returned: object = None
    raised: str | None = None


@dataclass(frozen=True)
class Parsed:
    """What the raw call string is, computed once per distinct string."""

    tree: ast.Expression | None
    name: str
    arguments: Mapping[str, object]
    simple: bool  # ``ident(...)`` with only plain-name calls inside
    head: str
    #: identifiers the rewrite would prefix that are not marked calls (in string literals, comments)
    string_calls: frozenset[str]
    names: frozenset[str]  # every Name in the expression
    compile_error: SyntaxError | None
    refusal: str | None = None  # why the interpreter would refuse the tree (``check_supported``)


_SIMPLE_HEAD = re.compile(r"([A-Za-z_]\w*)\(")


_NEWLINE = re.compile(r"\r\n|\r|\n")  # the tokenizer's line ends


#: Set on a raw tree's ``Call`` whose plain-name callee bfcl-eval's rewrite prefixes.
_REWRITE_SITE = "_careful_rewrite_site"


#: Longer calls are parsed each time they run: the cache outlives the conversation, and a few
#: hundred calls of 200,000 characters would keep their text and trees for the rest of the process.
_CACHED_CALL_CHARS = 10_000


def parse_raw(call: str) -> Parsed:
    return _parse_raw_cached(call) if len(call) <= _CACHED_CALL_CHARS else _parse(call)


def _parse(call: str) -> Parsed:
    name, arguments = _describe(call)
    try:
        tree = ast.parse(eval_source(call), filename="<string>", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return Parsed(None, name, arguments, False, "", frozenset(), frozenset(), None)
    head = _SIMPLE_HEAD.match(call)
    nodes = list(ast.walk(tree))
    calls = [n for n in nodes if isinstance(n, ast.Call)]
    simple = head is not None and all(isinstance(n.func, ast.Name) for n in calls)
    strings: frozenset[str] = frozenset()
    if simple:  # no leading whitespace: positions in the tree are positions in ``call``
        sites = _call_sites(call)
        index = _source_index(call)
        for node in calls:
            # The rewrite prefixes a name only as spelled in the raw text: a look-alike
            # that Python normalises (NFKC), ``(ls)(`` and a line continuation stay unprefixed.
            site = (index(node.func.lineno, node.func.col_offset), node.func.id)  # type: ignore[attr-defined]
            if site in sites:
                setattr(node, _REWRITE_SITE, True)
                sites.discard(site)
        strings = frozenset(name for _, name in sites)
    names = frozenset(n.id for n in nodes if isinstance(n, ast.Name))
    try:
        check_compile_time_errors(tree)
        error = None
    except SyntaxError as exc:
        error = exc
    try:
        check_supported(tree)
        refusal = None
    except Refused as exc:
        refusal = str(exc)
    return Parsed(tree, name, arguments, simple, head.group(1) if head else "", strings, names, error, refusal)


_parse_raw_cached = functools.lru_cache(maxsize=1 << 16)(_parse)


def _call_sites(call: str) -> set[tuple[int, str]]:
    """``{(m.start(1), m.group(1)) for m in CALL_NAME.finditer(call)}``, found from each ``(``.

    The regex tries every position of a call: 5 ms for one 200,000-character literal, paid by
    every such call. Read back from each ``(``: the whitespace before it, then the word before
    that (``\\w`` is ``isalnum`` or ``_``, ``\\s`` is ``isspace``, as ``re`` defines them); the
    word is a site when it starts with ``[a-zA-Z_]`` (a word is never matched from inside).
    """
    sites = set()
    opening = call.find("(")
    while opening >= 0:
        end = opening
        while end > 0 and call[end - 1].isspace():
            end -= 1
        start = end
        while start > 0 and (call[start - 1].isalnum() or call[start - 1] == "_"):
            start -= 1
        if start < end and (call[start].isascii() and (call[start].isalpha() or call[start] == "_")):
            sites.add((start, call[start:end]))
        opening = call.find("(", opening + 1)
    return sites


def eval_source(call: str) -> str:
    """The text ``eval`` compiles: it encodes the string, then skips leading spaces and tabs."""
    call.encode("utf-8")  # raises eval's UnicodeEncodeError (a lone surrogate)
    return call.lstrip(" \t")


def _source_index(source: str) -> Callable[[int, int], int]:
    """Maps an ast position (line, UTF-8 byte column) to an index into ``source``."""
    starts = [0]
    if "\n" in source or "\r" in source:  # str's own search: far faster than the regex's scan
        starts += [m.end() for m in _NEWLINE.finditer(source)]
    if source.isascii():
        return lambda lineno, col: starts[lineno - 1] + col
    columns: dict[int, dict[int, int]] = {}

    def index(lineno: int, col: int) -> int:
        if lineno not in columns:
            line = source[starts[lineno - 1] : starts[lineno] if lineno < len(starts) else len(source)]
            offsets = itertools.accumulate((len(ch.encode("utf-8", "surrogatepass")) for ch in line), initial=0)
            columns[lineno] = {byte: i for i, byte in enumerate(offsets)}
        return starts[lineno - 1] + columns[lineno].get(col, -len(source) - 1)

    return index


_METHODS: dict[type, tuple[str, ...]] = {}


def public_methods(instance: object) -> tuple[str, ...]:
    """bfcl-eval's ``inspect.getmembers(instance, ismethod)`` public names, once per class."""
    cls = type(instance)
    found = _METHODS.get(cls)
    if found is None:
        # getmembers runs every property getter: simulator code, while another thread may be
        # activating a world over the state it reads (a live run's flight threads build
        # their simulators at once; a race of this kind was seen once in ~2,000 conversations).
        with isolation.EXCLUSIVE:
            found = _METHODS[cls] = tuple(
                n for n, _ in inspect.getmembers(instance, predicate=inspect.ismethod) if not n.startswith("_")
            )
    return found


def check_deny_list(rewritten: str) -> None:
    head = rewritten.split("(")[0] if "(" in rewritten else rewritten
    if "." in head:
        head = head.split(".")[1]
    if head in BLOCKED_NAMES:
        raise Blocked(f"Function call {head} is not allowed.")


def check_compile_time_errors(tree: ast.Expression) -> None:
    """Raise the SyntaxError that compiling (as eval does) would raise before running.

    The compiler reports the first it meets, visiting in evaluation order and a
    call's repeated keywords before anything inside the call.
    """
    pending: list[ast.AST] = [tree.body]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Call):
            seen: set[str] = set()
            for keyword in node.keywords:
                if keyword.arg is not None and keyword.arg in seen:
                    raise SyntaxError(
                        f"keyword argument repeated: {keyword.arg}",
                        ("<string>", keyword.lineno, keyword.col_offset + 1, None),
                    )
                if keyword.arg is not None:
                    seen.add(keyword.arg)
        elif isinstance(node, (ast.Yield, ast.YieldFrom)):
            raise SyntaxError("'yield' outside function", ("<string>", node.lineno, node.col_offset + 1, None))
        elif isinstance(node, ast.Await):
            raise SyntaxError("'await' outside function", ("<string>", node.lineno, node.col_offset + 1, None))
        if isinstance(node, ast.Dict):  # evaluated key, value, key, value
            children: list[ast.AST] = [n for pair in zip(node.keys, node.values) for n in pair if n is not None]
        else:
            children = list(ast.iter_child_nodes(node))
        pending.extend(reversed(children))


class Blocked(Exception):
    """bfcl-eval's own deny-list message (reported like an exception)."""


#: Node types the interpreter evaluates (``Attribute`` only as ``instance.method``, called).
_SUPPORTED = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Call,
    ast.keyword,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Subscript,
    ast.Slice,
    ast.Attribute,
    ast.expr_context,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
)


#: CPython's compiler builds a display of up to this many stack items after evaluating
#: them all, a longer one item by item: that decides which calls run before an
#: unhashable key or element fails.
_STACK_USE_GUIDELINE = 30


def check_supported(tree: ast.Expression) -> None:
    """Refuse, before anything runs, a tree the interpreter would not evaluate to the end.

    An attribute is read only off a plain name (``instance.method``, and what
    eval fails on before it reads anything: ``Undefined.x``, ``instance.missing``).
    """
    pending: list[tuple[ast.AST, int]] = [(tree.body, 1)]
    while pending:
        node, depth = pending.pop()
        if depth > MAX_EXPRESSION_DEPTH:
            raise Refused(f"expression nested more than {MAX_EXPRESSION_DEPTH} deep")
        if isinstance(node, ast.Call):
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and not isinstance(_chain_base(func), ast.Name)
                or not isinstance(func, _SUPPORTED)
            ):
                raise Refused(f"calling a {type(func).__name__} is not allowed")
            if any(keyword.arg is None for keyword in node.keywords):
                raise Refused("keyword unpacking (**) is not allowed")
        elif isinstance(node, ast.Attribute):
            if not isinstance(_chain_base(node), ast.Name):
                raise Refused("Attribute expressions are not allowed")
        elif isinstance(node, ast.Starred):
            raise Refused("starred arguments are not allowed")
        elif isinstance(node, ast.Name) and (node.id in BFCL_SCOPE_NAMES or hasattr(builtins, node.id)):
            raise Refused(f"{node.id!r} is no simulator method (bfcl-eval's eval would resolve it)")
        elif isinstance(node, ast.Dict) and any(k is None for k in node.keys):
            raise Refused("dict unpacking (**) is not allowed")
        elif not isinstance(node, _SUPPORTED):
            raise Refused(f"{type(node).__name__} expressions are not allowed")
        pending.extend((child, depth + 1) for child in ast.iter_child_nodes(node))


def _chain_base(node: ast.Attribute) -> ast.AST:
    base: ast.AST = node
    while isinstance(base, ast.Attribute):
        base = base.value
    return base


def _has_no_attribute(instance: object, name: str) -> bool:
    """Whether reading ``instance.name`` raises AttributeError (looked up without running anything)."""
    classes = [k for k in type(instance).__mro__ if k is not object]
    if any("__getattr__" in vars(k) or "__getattribute__" in vars(k) for k in classes):
        return False
    return name not in getattr(instance, "__dict__", {}) and not any(name in vars(k) for k in type(instance).__mro__)


@dataclass(frozen=True)
class _Method:
    """A callee that is a public method of one of the conversation's instances."""

    class_name: str
    method_name: str


class Instances(Protocol):
    """What the interpreter needs of a conversation's instances (``executor.Simulators``)."""

    instances: dict[str, object]  # class name -> simulator instance (its methods are called by name)
    world: isolation.World

    @property
    def instance_classes(self) -> Mapping[str, str]:
        """Instance name (as bfcl-eval names it) -> class name."""
        ...

    def owner(self, method: str) -> str | None:
        """The class that serves ``method`` in this conversation, if any."""
        ...


class Interpreter:
    """Evaluates a checked tree (``check_supported``) as ``eval`` would in bfcl-eval's executor.

    Method calls go to this conversation's instances; operators to
    :mod:`pytest_careful.execution.plain_values`; a name is never looked up anywhere.
    """

    def __init__(self, simulators: Instances) -> None:
        self.sim = simulators
        self.invocations: list[Invocation] = []

    def evaluate(self, node: ast.AST) -> object:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, ast.Name):
            self._name(node.id)
        if isinstance(node, (ast.List, ast.Tuple)):
            items = [self._element(e) for e in node.elts]
            return items if isinstance(node, ast.List) else tuple(items)
        if isinstance(node, ast.Set):
            return self._set(node)
        if isinstance(node, ast.Dict):
            return self._dict(node)
        if isinstance(node, ast.UnaryOp):
            return self._unary(node)
        if isinstance(node, ast.BinOp):
            return plain_values.binary(node.op, self.evaluate(node.left), self.evaluate(node.right))
        if isinstance(node, ast.BoolOp):
            return self._boolean(node)
        if isinstance(node, ast.Compare):
            return self._compare(node)
        if isinstance(node, ast.IfExp):
            chosen = node.body if plain_values.truth(self.evaluate(node.test)) else node.orelse
            return self.evaluate(chosen)
        if isinstance(node, ast.Subscript):
            value = self.evaluate(node.value)
            return plain_values.subscript(value, self.evaluate(node.slice))
        if isinstance(node, ast.Slice):
            return slice(
                *(None if part is None else self.evaluate(part) for part in (node.lower, node.upper, node.step))
            )
        if isinstance(node, ast.Attribute):
            return self._attribute(node)
        raise Refused(f"{type(node).__name__} expressions are not allowed")

    def _name(self, name: str) -> NoReturn:
        """A name as a value: eval in bfcl-eval's executor finds only what is never handed out here."""
        if name in self.sim.instance_classes:
            raise Refused("a simulator instance is used only to call its methods")
        if name in BFCL_SCOPE_NAMES or hasattr(builtins, name):
            raise Refused(f"{name!r} is no simulator method (bfcl-eval's eval would resolve it)")
        raise NameError(f"name '{name}' is not defined")

    def _element(self, node: ast.AST) -> object:
        if isinstance(node, ast.Starred):
            raise Refused("starred arguments are not allowed")
        return self.evaluate(node)

    def _set(self, node: ast.Set) -> set[object]:
        if len(node.elts) <= _STACK_USE_GUIDELINE:
            return set([self.evaluate(e) for e in node.elts])
        result: set[object] = set()
        for element in node.elts:
            result.add(self.evaluate(element))
        return result

    def _dict(self, node: ast.Dict) -> dict[object, object]:
        """As CPython 3.11 compiles a display: in parts of 17 pairs, each built
        pair by pair; a last part of up to 15 built after all its pairs ran."""
        pairs = list(zip(node.keys, node.values))
        parts, start = [], 0
        for i in range(len(pairs)):
            if (i - start) * 2 > _STACK_USE_GUIDELINE:
                parts.append(pairs[start : i + 1])
                start = i + 1
        parts.append(pairs[start:])
        result: dict[object, object] = {}
        for part in parts:
            if len(part) * 2 > _STACK_USE_GUIDELINE:
                for key, value in part:
                    evaluated_key = self.evaluate(key)  # type: ignore[arg-type]
                    result[evaluated_key] = self.evaluate(value)
            else:
                result.update([(self.evaluate(k), self.evaluate(v)) for k, v in part])  # type: ignore[arg-type]
        return result

    def _unary(self, node: ast.UnaryOp) -> object:
        operators = []
        operand: ast.AST = node
        while isinstance(operand, ast.UnaryOp):
            operators.append(operand.op)
            operand = operand.operand
        value = self.evaluate(operand)
        for op in reversed(operators):
            value = plain_values.unary(op, value)
        return value

    def _boolean(self, node: ast.BoolOp) -> object:
        stop_at = isinstance(node.op, ast.Or)  # ``or`` returns the first true value, ``and`` the first false
        for operand in node.values[:-1]:
            value = self.evaluate(operand)
            if plain_values.truth(value) is stop_at:
                return value
        return self.evaluate(node.values[-1])

    def _compare(self, node: ast.Compare) -> object:
        left = self.evaluate(node.left)
        result: object = True
        for op, comparator in zip(node.ops, node.comparators):
            right = self.evaluate(comparator)
            result = plain_values.compare(op, left, right)
            if not plain_values.truth(result):
                return result
            left = right
        return result

    def _callee(self, node: ast.Call) -> object:
        """The method ``node`` calls, or the value it calls (which Python then fails to call)."""
        func = node.func
        if isinstance(func, ast.Name):
            class_name = self.sim.owner(func.id) if getattr(node, _REWRITE_SITE, False) else None
            if class_name is not None:  # raw tree: a name bfcl-eval's rewrite prefixes
                return _Method(class_name, func.id)
            if func.id in self.sim.instance_classes:
                return self.sim.instances[self.sim.instance_classes[func.id]]
            self._name(func.id)
        if isinstance(func, ast.Attribute):
            return self._attribute(func, called=True)
        value = self.evaluate(func)
        if not plain_values.is_scalar(type(value)) and type(value) not in plain_values.CONTAINERS:
            raise Refused(f"calling a {type(value).__name__} is not allowed")
        return value

    def _attribute(self, node: ast.Attribute, called: bool = False) -> _Method:
        """``name.attr...``: an instance's method, called; else eval's error, or refused."""
        chain: list[str] = []
        base: ast.AST = node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        assert isinstance(base, ast.Name)  # check_supported
        class_name = self.sim.instance_classes.get(base.id)
        if class_name is None:
            self._name(base.id)  # eval fails on the name before it reads an attribute
        instance = self.sim.instances[class_name]
        first = chain[-1]
        if called and len(chain) == 1 and first in public_methods(instance):
            return _Method(class_name, first)
        if _has_no_attribute(instance, first):  # e.g. bfcl's rewrite of ``instance.method(``
            raise AttributeError(f"'{type(instance).__name__}' object has no attribute '{first}'")
        raise Refused(f"{first!r} is not a public method of {class_name}, called")

    def _call(self, node: ast.Call) -> object:
        callee = self._callee(node)
        args = tuple(self._element(a) for a in node.args)
        kwargs: dict[str, object] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise Refused("keyword unpacking (**) is not allowed")
            kwargs[keyword.arg] = self.evaluate(keyword.value)
        if not isinstance(callee, _Method):  # as in eval: the arguments ran, the call fails
            raise TypeError(f"'{type(callee).__name__}' object is not callable")
        class_name, method_name = callee.class_name, callee.method_name
        guard = RESOURCE_GUARDS.get((class_name, method_name))
        if guard is not None:
            guard(self.sim.instances[class_name], args, kwargs)
        invocation = Invocation(class_name, method_name, args, kwargs)
        self.invocations.append(invocation)
        self.sim.world.touch(class_name, method_name)
        method = getattr(self.sim.instances[class_name], method_name)
        try:
            invocation.returned = method(*args, **kwargs)
        except Exception as exc:
            invocation.raised = str(exc)
            raise
        # A method may hand back what it was given (``echo``): the result string and every
        # report copy its whole text, so it counts before anything is made from it.
        plain_values.built(invocation.returned)
        return invocation.returned


# --- resource guards ------------------------------------------------------------
# A few simulator methods do unbounded work on plain literal arguments (a
# 10-million-digit power, mpmath at 200,000 digits), set process-wide precision,
# or walk every path of a file tree whose folders ``cp`` has shared (2**n paths
# after n ``cp`` + ``mv`` rounds). Calls beyond these bounds are refused instead
# of run; no reference call comes near them. What many calls cost together is
# the conversation's budget (``limits``).
MAX_RESULT_BITS = 1_000_000


MAX_PRECISION_DIGITS = 10_000


#: Entries a ``find`` or ``du`` may walk (the largest reference tree has a few hundred).
MAX_WALK_ENTRIES = 100_000


#: A check of one method's call before it runs: (instance, positional args, keyword args).
Guard = Callable[[object, tuple[object, ...], dict[str, object]], None]


def _argument(args: tuple[object, ...], kwargs: dict[str, object], index: int, name: str) -> object:
    return kwargs.get(name, args[index] if len(args) > index else None)


def _guard_power(instance: object, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
    base, exponent = _argument(args, kwargs, 0, "base"), _argument(args, kwargs, 1, "exponent")
    if type(base) is int and type(exponent) is int and abs(base) > 1 and exponent > 0:
        if exponent * math.log2(abs(base)) > MAX_RESULT_BITS:
            raise Refused(f"power result of more than {MAX_RESULT_BITS} bits")


def _guard_precision(index: int) -> Guard:
    def guard(instance: object, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        precision = _argument(args, kwargs, index, "precision")
        if isinstance(precision, (int, float)) and precision > MAX_PRECISION_DIGITS:
            raise Refused(f"precision above {MAX_PRECISION_DIGITS} digits")

    return guard


def _guard_walk(path_index: int | None) -> Guard:
    """``find(path)`` and ``du()`` visit every path below a folder: count them first."""

    def guard(instance: object, args: tuple[object, ...], kwargs: dict[str, object]) -> None:
        path = None if path_index is None else _argument(args, kwargs, path_index, "path")
        try:  # a pure lookup; whatever it raises, the method itself raises as bfcl-eval's does
            target = cast(_FileSystem, instance)._navigate_to_directory(path)
        except Exception:
            return
        if type(target) is dag.directory_class() and dag.count_paths(target, MAX_WALK_ENTRIES + 1) > MAX_WALK_ENTRIES:
            raise Refused(f"a walk of more than {MAX_WALK_ENTRIES:,} entries (folders shared by many paths)")

    return guard


class _FileSystem(Protocol):
    """What a walk's guard reads of bfcl-eval's ``GorillaFileSystem``."""

    def _navigate_to_directory(self, path: object) -> object: ...


RESOURCE_GUARDS: dict[tuple[str, str], Guard] = {
    ("MathAPI", "power"): _guard_power,
    ("MathAPI", "logarithm"): _guard_precision(2),
    ("MathAPI", "square_root"): _guard_precision(1),
    ("GorillaFileSystem", "find"): _guard_walk(0),
    ("GorillaFileSystem", "du"): _guard_walk(None),
}


class precision_restored:
    """MathAPI sets ``decimal`` and ``mpmath`` precision process-wide; put them back.

    Both methods set the precision they use on every call, and the result string
    is made inside this block, so restoring changes no result; a replay cannot
    change the numbers of anything run after it. Each call starts from the
    precision of a fresh process (``isolation``), whatever the caller set.
    """

    def __enter__(self) -> None:
        self._prec = decimal.getcontext().prec
        decimal.getcontext().prec = isolation.DECIMAL_PRECISION
        mp = _mpmath()
        self._mp_prec = mp.mp.prec if mp is not None else None
        if mp is not None:
            mp.mp.prec = isolation.MPMATH_PRECISION

    def __exit__(self, *exc: object) -> None:
        decimal.getcontext().prec = self._prec
        mp = _mpmath()
        if mp is not None and self._mp_prec is not None:
            mp.mp.prec = self._mp_prec


def _mpmath() -> ModuleType | None:
    return sys.modules.get("mpmath")


def arithmetic(op: ast.operator, left: object, right: object) -> object:
    """Numbers with + - * / // %; strings with + and * (bounded length)."""
    if isinstance(left, str) or isinstance(right, str):
        text, count = (left, right) if type(left) is str else (right, left)
        if isinstance(op, ast.Add) and type(left) is str and type(right) is str:
            result = left + right
        elif isinstance(op, ast.Mult) and type(text) is str and type(count) is int:
            if count * len(text) > MAX_CALL_CHARS:
                raise Refused("string repetition result is too long")
            result = text * count
        else:
            raise Refused("this string arithmetic is not allowed")
        if len(result) > MAX_CALL_CHARS:
            raise Refused("string result is too long")
        return result
    _require_number(left)
    _require_number(right)
    number = _BINOPS[type(op)](left, right)
    _require_number(number)
    return number


def _require_number(value: object) -> None:
    if type(value) not in (int, float, bool) or (type(value) is int and abs(value) > MAX_NUMBER_MAGNITUDE):
        raise Refused("arithmetic is allowed only on (bounded) numbers")


def _describe(call: object) -> tuple[str, dict[str, object]]:
    """Best-effort name and literal arguments of a call string, for records only."""
    if not isinstance(call, str) or len(call) > MAX_CALL_CHARS:
        return "<invalid>", {}
    try:
        node = ast.parse(call.lstrip(" \t"), mode="eval").body  # eval skips leading blanks
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "<unparsable>", {}
    if not isinstance(node, ast.Call):
        return "<not a call>", {}
    name = ast.unparse(node.func) if not isinstance(node.func, ast.Name) else node.func.id
    arguments: dict[str, object] = {}
    for i, arg in enumerate(node.args):
        arguments[f"*{i}"] = _literal_or_source(arg)
    for keyword in node.keywords:
        arguments[keyword.arg or "**"] = _literal_or_source(keyword.value)
    return name, arguments


def _literal_or_source(node: ast.AST) -> object:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        pass
    try:
        return ast.unparse(node)[:1000]
    except (RecursionError, MemoryError, ValueError):
        return "<too deep to show>"
