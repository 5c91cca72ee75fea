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
result that says why. Instances live in a :class:`Simulators` object owned by
one replay, never in module globals.
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import json
import operator
import pickle
import re
from dataclasses import dataclass
from typing import AbstractSet, Any, Callable, Iterable, Mapping

from . import _bfcl

#: bfcl-eval's own deny-list, checked on the rewritten string as BFCL does.
BLOCKED_NAMES = ("kill", "exit", "quit", "remove", "unlink", "popen", "Popen", "run")
#: bfcl-eval's rewrite: every identifier directly followed by ``(``.
_CALL_NAME = re.compile(r"\b([a-zA-Z_]\w*)\s*(?=\()")
_INSTANCE_NAME_SANITIZE = re.compile(r"[-./:]")

MAX_CALL_CHARS = 200_000
MAX_NUMBER_MAGNITUDE = 10**100
ERROR_PREFIX = "Error during execution: "

_BINOPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


class Refused(Exception):
    """A construct the safe interpreter does not run."""


def instance_name(model_name: str, test_entry_id: str, class_name: str) -> str:
    """The global name bfcl-eval gives an instance (it shows in rewritten strings)."""
    return _INSTANCE_NAME_SANITIZE.sub("_", f"{model_name}_{test_entry_id}_{class_name}_instance")


def format_result(value: Any) -> str:
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
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    returned: Any = None
    raised: str | None = None


@dataclass
class Execution:
    """The outcome of executing one decoded call string."""

    call: str
    result: str
    name: str
    arguments: dict[str, Any]
    invocations: list[Invocation]
    refused: bool = False
    raised: bool = False

    @property
    def touched_classes(self) -> set[str]:
        return {inv.class_name for inv in self.invocations}


class Simulators:
    """The simulator instances of one conversation, created as bfcl-eval does.

    Args:
        involved_classes: class names in dataset order.
        initial_config: the conversation's ``initial_config`` (deep-copied here).
        long_context: bfcl-eval's long-context flag.
        model_name: the name bfcl-eval builds instance names from; it only
            matters for BFCL's rewrite quirk inside string literals.
        test_entry_id: the conversation id (same reason).
    """

    def __init__(
        self,
        involved_classes: Iterable[str],
        initial_config: Mapping[str, Any],
        long_context: bool,
        model_name: str = "careful",
        test_entry_id: str = "",
        template: bytes | None = None,
    ) -> None:
        self.instances: dict[str, Any] = {}
        self._names: dict[str, str] = {}  # instance name -> class name
        self._mapping: dict[str, str] = {}  # method name -> instance name
        self._model_name, self._test_entry_id = model_name, test_entry_id
        fresh = pickle.loads(template) if template is not None else \
            fresh_instances(involved_classes, initial_config, long_context)
        for class_name, instance in fresh.items():
            self._register(class_name, instance)

    @classmethod
    def around(cls, instances: Mapping[str, Any], model_name: str = "careful",
               test_entry_id: str = "") -> "Simulators":
        """Wrap existing instances (e.g. restored copies used for probing)."""
        sim = cls((), {}, False, model_name, test_entry_id)
        for class_name, instance in instances.items():
            sim._register(class_name, instance)
        return sim

    def _register(self, class_name: str, instance: Any) -> None:
        name = instance_name(self._model_name, self._test_entry_id, class_name)
        self.instances[class_name] = instance
        self._names[name] = class_name
        # Same mapping as bfcl-eval: later classes win on a shared method name.
        for method_name in _public_methods(instance):
            self._mapping[method_name] = name

    def owner(self, method: str) -> str | None:
        """Class that serves ``method`` in this conversation, if any."""
        name = self._mapping.get(method)
        return None if name is None else self._names[name]

    def rewrite(self, call: str) -> str:
        """bfcl-eval's ``_process_method_calls``."""
        mapping = self._mapping
        return _CALL_NAME.sub(
            lambda m: f"{mapping[m.group(1)]}.{m.group(1)}" if m.group(1) in mapping else m.group(1),
            call,
        )

    def execute(self, call: str) -> Execution:
        """Execute one decoded call string; never raises for bad input."""
        interpreter = _Interpreter(self)
        name, arguments = "<invalid>", {}
        try:
            if not isinstance(call, str):
                raise Refused(f"a call must be a string, got {type(call).__name__}")
            if len(call) > MAX_CALL_CHARS:
                raise Refused(f"call string of {len(call)} characters exceeds {MAX_CALL_CHARS}")
            parsed = _parse_raw(call)
            name, arguments = parsed.name, dict(parsed.arguments)
            tree = self._tree(call, parsed)
            # The result string of an mpmath/decimal value depends on the precision
            # the call set: format it before that precision is put back.
            if "MathAPI" in self.instances:
                with _process_precision_restored():
                    result = format_result(interpreter.evaluate(tree.body))
            else:
                result = format_result(interpreter.evaluate(tree.body))
            return Execution(call, result, name, arguments, interpreter.invocations)
        except _Blocked as exc:
            return Execution(call, ERROR_PREFIX + str(exc), name, arguments,
                             interpreter.invocations, refused=True)
        except Refused as exc:
            return Execution(
                call, ERROR_PREFIX + f"careful: {exc} (not executed)", name, arguments,
                interpreter.invocations, refused=True,
            )
        except (RecursionError, MemoryError) as exc:
            return Execution(
                call, ERROR_PREFIX + f"careful: input too complex ({type(exc).__name__}; not executed)",
                name, arguments, interpreter.invocations, refused=True,
            )
        except Exception as exc:  # same catch-all as bfcl-eval
            return Execution(call, ERROR_PREFIX + str(exc), name, arguments,
                             interpreter.invocations, raised=True)

    @property
    def methods(self) -> frozenset[str]:
        return frozenset(self._mapping)

    def _tree(self, call: str, parsed: "_Parsed") -> ast.Expression:
        """The expression to interpret, with bfcl-eval's checks done first.

        Fast path: a plain ``name(...)`` call whose string literals hold no
        ``method(`` that bfcl-eval's rewrite would change parses the same before
        and after the rewrite, so the cached parse of the raw string serves.
        Everything else takes the exact path: rewrite, then parse.
        """
        if parsed.simple and not (parsed.string_calls & self._mapping.keys()) \
                and not (parsed.names & self._names.keys()):
            if parsed.head in BLOCKED_NAMES:
                raise _Blocked(f"Function call {parsed.head} is not allowed.")
            if parsed.compile_error is not None:
                raise parsed.compile_error
            assert parsed.tree is not None
            return parsed.tree
        rewritten = self.rewrite(call)
        _check_deny_list(rewritten)
        tree = ast.parse(rewritten, filename="<string>", mode="eval")
        _check_compile_time_errors(tree)
        return tree


@dataclass(frozen=True)
class _Parsed:
    """What the raw call string is, computed once per distinct string."""

    tree: ast.Expression | None
    name: str
    arguments: Mapping[str, Any]
    simple: bool  # ``ident(...)`` with only plain-name calls inside
    head: str
    string_calls: frozenset[str]  # identifiers followed by ``(`` inside string literals
    names: frozenset[str]  # every Name in the expression
    compile_error: SyntaxError | None


_SIMPLE_HEAD = re.compile(r"([A-Za-z_]\w*)\(")


@functools.lru_cache(maxsize=1 << 16)
def _parse_raw(call: str) -> _Parsed:
    name, arguments = _describe(call)
    try:
        tree = ast.parse(call, filename="<string>", mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return _Parsed(None, name, arguments, False, "", frozenset(), frozenset(), None)
    head = _SIMPLE_HEAD.match(call)
    nodes = list(ast.walk(tree))
    simple = head is not None and all(
        isinstance(n.func, ast.Name) for n in nodes if isinstance(n, ast.Call))
    strings = frozenset(
        m.group(1) for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, (str, bytes))
        for m in _CALL_NAME.finditer(n.value if isinstance(n.value, str) else n.value.decode("latin-1")))
    names = frozenset(n.id for n in nodes if isinstance(n, ast.Name))
    try:
        _check_compile_time_errors(tree)
        error = None
    except SyntaxError as exc:
        error = exc
    return _Parsed(tree, name, arguments, simple, head.group(1) if head else "", strings, names, error)


def independent_of_names(call: str, methods: AbstractSet[str], names: AbstractSet[str]) -> bool:
    """Whether executing ``call`` cannot depend on the instances' names.

    Instance names carry the model name (bfcl-eval's naming), and bfcl-eval's
    rewrite can paste them into string literals. A call that takes the fast path
    of ``Simulators._tree`` under ``methods`` and ``names`` runs from its raw
    parse: two ``Simulators`` of one conversation in the same state, named for
    different models, give it the same result.
    """
    if not isinstance(call, str) or len(call) > MAX_CALL_CHARS:
        return False
    parsed = _parse_raw(call)
    return parsed.simple and not (parsed.string_calls & methods) and not (parsed.names & names)


def fresh_instances(involved_classes: Iterable[str], initial_config: Mapping[str, Any],
                    long_context: bool) -> dict[str, Any]:
    """Instances as bfcl-eval creates them: ``_load_scenario`` on a deep copy."""
    instances = {}
    stateless = _bfcl.stateless_classes()
    for class_name in involved_classes:
        instance = _bfcl.simulator_class(class_name)()
        if class_name not in stateless:
            instance._load_scenario(copy.deepcopy(initial_config.get(class_name, {})), long_context=long_context)
        instances[class_name] = instance
    return instances


def template_of(involved_classes: Iterable[str], initial_config: Mapping[str, Any], long_context: bool) -> bytes:
    """Fresh instances, pickled: loading them is much cheaper than building them again."""
    return pickle.dumps(fresh_instances(involved_classes, initial_config, long_context), pickle.HIGHEST_PROTOCOL)


_METHODS: dict[type, tuple[str, ...]] = {}


def _public_methods(instance: Any) -> tuple[str, ...]:
    """bfcl-eval's ``inspect.getmembers(instance, ismethod)`` public names, once per class."""
    cls = type(instance)
    if cls not in _METHODS:
        _METHODS[cls] = tuple(n for n, _ in inspect.getmembers(instance, predicate=inspect.ismethod)
                              if not n.startswith("_"))
    return _METHODS[cls]


def _check_deny_list(rewritten: str) -> None:
    head = rewritten.split("(")[0] if "(" in rewritten else rewritten
    if "." in head:
        head = head.split(".")[1]
    if head in BLOCKED_NAMES:
        raise _Blocked(f"Function call {head} is not allowed.")


def _check_compile_time_errors(tree: ast.Expression) -> None:
    """Raise the SyntaxError that compiling (as eval does) would raise before running."""
    for node in ast.walk(tree):
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


class _Blocked(Exception):
    """bfcl-eval's own deny-list message (reported like an exception)."""


class _Interpreter:
    def __init__(self, simulators: Simulators) -> None:
        self.sim = simulators
        self.invocations: list[Invocation] = []

    def evaluate(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Call):
            return self._call(node)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = [self._element(e) for e in node.elts]
            return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
        if isinstance(node, ast.Dict):
            if any(k is None for k in node.keys):
                raise Refused("dict unpacking (**) is not allowed")
            return {self.evaluate(k): self.evaluate(v) for k, v in zip(node.keys, node.values) if k is not None}
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            if isinstance(node.operand, ast.UnaryOp) and isinstance(node.operand.operand, ast.UnaryOp):
                raise Refused("more than two signs in a row")
            operand = self.evaluate(node.operand)
            _require_number(operand)
            return -operand if isinstance(node.op, ast.USub) else +operand
        if isinstance(node, ast.BinOp) and type(node.op) in _BINOPS:
            return _arithmetic(node.op, self.evaluate(node.left), self.evaluate(node.right))
        if isinstance(node, ast.Name):
            # What eval would say for a name it cannot resolve; never resolved here.
            raise NameError(f"name '{node.id}' is not defined")
        raise Refused(f"{type(node).__name__} expressions are not allowed")

    def _element(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Starred):
            raise Refused("starred arguments are not allowed")
        return self.evaluate(node)

    def _call(self, node: ast.Call) -> Any:
        func = node.func
        if isinstance(func, ast.Name):
            # Fast path only: a method name bfcl-eval's rewrite would have prefixed.
            class_name = self.sim.owner(func.id)
            if class_name is None:
                raise NameError(f"name '{func.id}' is not defined")
            method_name = func.id
        elif isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            class_name = self.sim._names.get(func.value.id)
            if class_name is None:
                raise NameError(f"name '{func.value.id}' is not defined")
            if self.sim.owner(func.attr) != class_name:
                raise Refused(f"{func.attr!r} is not a public method of {class_name}")
            method_name = func.attr
        else:
            raise Refused(f"calling a {type(func).__name__} is not allowed")
        args = tuple(self._element(a) for a in node.args)
        kwargs: dict[str, Any] = {}
        for keyword in node.keywords:
            if keyword.arg is None:
                raise Refused("keyword unpacking (**) is not allowed")
            kwargs[keyword.arg] = self.evaluate(keyword.value)
        guard = RESOURCE_GUARDS.get((class_name, method_name))
        if guard is not None:
            guard(args, kwargs)
        invocation = Invocation(class_name, method_name, args, kwargs)
        self.invocations.append(invocation)
        method = getattr(self.sim.instances[class_name], method_name)
        try:
            invocation.returned = method(*args, **kwargs)
        except Exception as exc:
            invocation.raised = str(exc)
            raise
        return invocation.returned


# --- resource guards ------------------------------------------------------------
# A few simulator methods do unbounded work on plain literal arguments (a
# 10-million-digit power, mpmath at 200,000 digits) or set process-wide
# precision. Calls beyond these bounds are refused instead of run; no reference
# call comes near them.
MAX_RESULT_BITS = 1_000_000
MAX_PRECISION_DIGITS = 10_000


def _argument(args: tuple[Any, ...], kwargs: dict[str, Any], index: int, name: str) -> Any:
    return kwargs.get(name, args[index] if len(args) > index else None)


def _guard_power(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    import math

    base, exponent = _argument(args, kwargs, 0, "base"), _argument(args, kwargs, 1, "exponent")
    if type(base) is int and type(exponent) is int and abs(base) > 1 and exponent > 0:
        if exponent * math.log2(abs(base)) > MAX_RESULT_BITS:
            raise Refused(f"power result of more than {MAX_RESULT_BITS} bits")


def _guard_precision(index: int) -> Callable[[tuple[Any, ...], dict[str, Any]], None]:
    def guard(args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        precision = _argument(args, kwargs, index, "precision")
        if isinstance(precision, (int, float)) and precision > MAX_PRECISION_DIGITS:
            raise Refused(f"precision above {MAX_PRECISION_DIGITS} digits")
    return guard


RESOURCE_GUARDS: dict[tuple[str, str], Callable[[tuple[Any, ...], dict[str, Any]], None]] = {
    ("MathAPI", "power"): _guard_power,
    ("MathAPI", "logarithm"): _guard_precision(2),
    ("MathAPI", "square_root"): _guard_precision(1),
}


class _process_precision_restored:
    """MathAPI sets ``decimal`` and ``mpmath`` precision process-wide; put them back.

    Both methods set the precision they use on every call, and the result string
    is made inside this block, so restoring changes no result; a replay cannot
    change the numbers of anything run after it.
    """

    def __enter__(self) -> None:
        import decimal

        self._prec = decimal.getcontext().prec
        mp = _mpmath()
        self._dps = mp.mp.dps if mp is not None else None

    def __exit__(self, *exc: Any) -> None:
        import decimal

        decimal.getcontext().prec = self._prec
        mp = _mpmath()
        if mp is not None and self._dps is not None:
            mp.mp.dps = self._dps


def _mpmath() -> Any:
    import sys

    return sys.modules.get("mpmath")


def _arithmetic(op: ast.operator, left: Any, right: Any) -> Any:
    """Numbers with + - * / // %; strings with + and * (bounded length)."""
    if isinstance(left, str) or isinstance(right, str):
        if isinstance(op, ast.Add) and type(left) is str and type(right) is str:
            result: Any = left + right
        elif isinstance(op, ast.Mult) and {type(left), type(right)} == {str, int}:
            count = right if type(right) is int else left
            text = left if type(left) is str else right
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
    result = _BINOPS[type(op)](left, right)
    _require_number(result)
    return result


def _require_number(value: Any) -> None:
    if type(value) not in (int, float, bool) or (
        type(value) is int and abs(value) > MAX_NUMBER_MAGNITUDE
    ):
        raise Refused("arithmetic is allowed only on (bounded) numbers")


def _describe(call: Any) -> tuple[str, dict[str, Any]]:
    """Best-effort name and literal arguments of a call string, for records only."""
    if not isinstance(call, str) or len(call) > MAX_CALL_CHARS:
        return "<invalid>", {}
    try:
        node = ast.parse(call, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return "<unparsable>", {}
    if not isinstance(node, ast.Call):
        return "<not a call>", {}
    name = ast.unparse(node.func) if not isinstance(node.func, ast.Name) else node.func.id
    arguments: dict[str, Any] = {}
    for i, arg in enumerate(node.args):
        arguments[f"*{i}"] = _literal_or_source(arg)
    for keyword in node.keywords:
        arguments[keyword.arg or "**"] = _literal_or_source(keyword.value)
    return name, arguments


def _literal_or_source(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        pass
    try:
        return ast.unparse(node)[:1000]
    except (RecursionError, MemoryError, ValueError):
        return "<too deep to show>"
