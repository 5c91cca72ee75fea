"""Process-wide state of bfcl-eval's simulators, pristine for every conversation.

bfcl-eval's simulator modules hold state that outlives an instance: mutable
default arguments (``TwitterAPI.post_tweet(tags=[], mentions=[])``: a tweet
keeps the default list and ``mention`` extends it), module globals a method
writes (``LONG_WEATHER_EXTENSION``) or hands out (the long-context extensions,
which a nested call can pass to a method that stores and later mutates its
argument). Run in one process, a call of one conversation would change what
every later conversation sees, the reference's included.

Each :class:`World` (one per :class:`~pytest_careful.execution.executor.Simulators`) sees
that state as a process that has just imported bfcl-eval does. It is captured
once, when this module is imported (before any simulator code runs): every
mutable object reachable from the simulator modules' globals, their classes'
attributes and their functions' defaults, with its shallow contents, and every
such binding. When another world starts executing, what the outgoing one may
have changed is put back: the objects its functions can reach, found from their
bytecode (the globals, class attributes, defaults and functions they name,
transitively; :func:`exposure`). Only those are restored, so the cost follows
what a conversation ran (a few microseconds; the long-context trading history,
a thousand dictionaries, when ``get_transaction_history`` ran). A world that
is still alive when another takes over has its contents saved and given back
when it runs again, so interleaved conversations (a live run whose scripted
model replays a reference) stay apart.

``decimal`` and ``mpmath`` precision is per call (``executor``); the global
``random`` generator is never drawn from (the simulators seed their own), which
``tests/execution/test_isolation.py`` checks from the bytecode along with the rest.
"""

from __future__ import annotations

import ast
import datetime
import decimal
import dis
import functools
import inspect
import sys
import threading
import types
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TypeGuard, cast

from ..common import bfcl as _bfcl

PACKAGE = "bfcl_eval.eval_checker.multi_turn_eval.func_source_code"

#: Values that cannot change in place (a tuple or frozenset is walked into).
IMMUTABLE_LEAVES: tuple[type, ...] = (
    int,
    float,
    complex,
    str,
    bytes,
    bool,
    type(None),
    type(Ellipsis),
    type(NotImplemented),
    range,
)
_CONTAINERS = (list, dict, set, bytearray)
#: A mutable object of bfcl-eval's modules, captured and put back in place (one of ``_CONTAINERS``).
Container = list[object] | dict[object, object] | set[object] | bytearray
#: Bytecode that rebinds a module global, and one that rebinds an attribute (a class's, a function's).
_GLOBAL_STORES = frozenset({"STORE_GLOBAL", "DELETE_GLOBAL"})
_ATTRIBUTE_STORES = frozenset({"STORE_ATTR", "DELETE_ATTR"})
#: Names through which code could rebind anything: seen in a function, it may change every binding.
#: (``vars(self)`` is an instance's own namespace; no simulator function holds a module or class.)
REBINDING_NAMES = frozenset(
    {
        "globals",
        "setattr",
        "delattr",
        "exec",
        "eval",
        "compile",
        "__import__",
        "__setattr__",
        "__delattr__",
        "__defaults__",
        "__kwdefaults__",
        "__code__",
        "__globals__",
        "__closure__",
        "cell_contents",
        "__builtins__",
        "sys",
        "importlib",
        "inspect",
        "gc",
    }
)


def simulator_modules() -> tuple[types.ModuleType, ...]:
    """The modules of the eight classes and the bfcl-eval modules they import from."""
    pending = [_bfcl.simulator_class(c).__module__ for c in _bfcl.SIMULATOR_CLASSES]
    found: dict[str, types.ModuleType] = {}
    while pending:
        name = pending.pop()
        if name in found:
            continue
        found[name] = sys.modules[name]
        pending.extend(m for m in imported_module_names(found[name]) if m.startswith(PACKAGE + "."))
    return tuple(found[n] for n in sorted(found))


def imported_module_names(module: types.ModuleType) -> set[str]:
    """Every module ``module`` imports by absolute name (``import x``, ``from x import y``).

    Read from its compiled code, which the import system keeps in ``__pycache__`` and
    checks against the source: parsing the source instead cost 60-100 ms in every
    process that scores (the long-context modules are large), this about 4 ms. Each
    import compiles to ``LOAD_CONST level; LOAD_CONST fromlist; IMPORT_NAME name``;
    level 0 is an absolute import, as ``source_imports`` reads it from the source.
    """
    code = _compiled(module)
    if code is None:
        return source_imports(module)
    names: set[str] = set()
    pending = [code]
    while pending:
        code = pending.pop()
        pending.extend(c for c in code.co_consts if isinstance(c, types.CodeType))
        if _IMPORT_NAME not in code.co_code[::2]:  # opcodes sit at even offsets: skip most code cheaply
            continue
        instructions = list(dis.get_instructions(code))
        for index, instruction in enumerate(instructions):
            if instruction.opname != "IMPORT_NAME":
                continue
            level = instructions[index - 2] if index >= 2 else None
            if level is None or level.opname not in _LEVEL_LOADS:  # a compiler this was not written for
                return source_imports(module)
            if level.argval == 0:
                names.add(instruction.argval)
    return names


_IMPORT_NAME = dis.opmap["IMPORT_NAME"]
#: How the import's level is loaded (3.10-3.13: LOAD_CONST; 3.14 loads small ints apart).
_LEVEL_LOADS = frozenset({"LOAD_CONST", "LOAD_SMALL_INT"})


def _compiled(module: types.ModuleType) -> types.CodeType | None:
    """The module's code object as its loader has it (from ``__pycache__`` when that is current)."""
    loader = getattr(getattr(module, "__spec__", None), "loader", None)
    try:
        return loader.get_code(module.__name__) if loader is not None and hasattr(loader, "get_code") else None
    except (ImportError, OSError, SyntaxError, EOFError, ValueError, TypeError):
        return None  # e.g. a .pyc cut short behind a valid header (marshal raises): read the source


def source_imports(module: types.ModuleType) -> set[str]:
    """Every module ``module``'s source imports (``import x``, ``from x import y``), from its syntax tree."""
    names: set[str] = set()
    try:
        source = inspect.getsource(module)
    except (OSError, TypeError):  # no source installed: every loaded module of the package
        return {n for n in sys.modules if n.startswith(PACKAGE + ".")}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def defined_here(value: object, modules: Iterable[types.ModuleType]) -> bool:
    """A function or class defined in one of ``modules``."""
    names = {m.__name__ for m in modules}
    return isinstance(value, (types.FunctionType, type)) and value.__module__ in names


def functions_in(value: object) -> list[types.FunctionType]:
    """The plain functions behind a class attribute (a method, static/class method, property)."""
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, property):
        return [f for f in (value.fget, value.fset, value.fdel) if isinstance(f, types.FunctionType)]
    return [value] if isinstance(value, types.FunctionType) else []


def functions_of(cls: type) -> Iterator[tuple[str, types.FunctionType]]:
    """The plain functions in a class's namespace, with the attribute name."""
    for name, value in vars(cls).items():
        yield from ((name, f) for f in functions_in(value))


def code_names(code: types.CodeType) -> tuple[set[str], set[str], set[str]]:
    """Names a code object (nested ones included) uses, its opcodes, and the attribute names it stores."""
    instructions = list(dis.get_instructions(code))
    names, ops = set(code.co_names) | set(code.co_freevars), {i.opname for i in instructions}
    stored = {i.argval for i in instructions if i.opname in _ATTRIBUTE_STORES}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            inner_names, inner_ops, inner_stored = code_names(const)
            names |= inner_names
            ops |= inner_ops
            stored |= inner_stored
    return names, ops, stored


# --- the captured state ---------------------------------------------------------


@dataclass(frozen=True)
class Binding:
    """A name bound to an object: a module global, a class attribute, a function's defaults."""

    owner: object  # a module's dict, a class, a function, a cell
    name: str
    value: object
    label: str

    def current(self) -> object:
        if isinstance(self.owner, dict):
            return self.owner.get(self.name, _MISSING)
        if isinstance(self.owner, type):  # getattr would unwrap a staticmethod
            return vars(self.owner).get(self.name, _MISSING)
        return getattr(self.owner, self.name, _MISSING)

    def put(self, value: object) -> None:
        if isinstance(self.owner, dict):
            if value is _MISSING:
                self.owner.pop(self.name, None)
            else:
                self.owner[self.name] = value
        elif value is _MISSING:
            if hasattr(self.owner, self.name):
                delattr(self.owner, self.name)
        else:
            setattr(self.owner, self.name, value)


_MISSING = object()


@dataclass
class Pristine:
    """Everything captured: containers (with their contents) and bindings, with where they were found."""

    modules: tuple[types.ModuleType, ...]
    containers: dict[int, tuple[Container, Container]] = field(default_factory=dict)  # id -> (object, shallow copy)
    labels: dict[int, str] = field(default_factory=dict)  # id -> first path found
    bindings: dict[tuple[int, str], Binding] = field(default_factory=dict)
    module_names: dict[int, set[str]] = field(default_factory=dict)  # id(module dict) -> names bound
    unknown: list[str] = field(default_factory=list)  # objects of a kind this module cannot restore
    #: per bound object: the container ids reachable from it
    _reach: dict[int, frozenset[int]] = field(default_factory=dict)

    def reach(self, value: object) -> frozenset[int]:
        """Ids of the captured containers reachable from ``value``."""
        key = id(value)
        if key not in self._reach:
            found: set[int] = set()
            stack, seen = [value], set()
            while stack:
                obj = stack.pop()
                if id(obj) in seen:
                    continue
                seen.add(id(obj))
                if id(obj) in self.containers:
                    found.add(id(obj))
                stack.extend(_children(obj, self.modules))
            self._reach[key] = frozenset(found)
        return self._reach[key]


def _children(obj: object, modules: tuple[types.ModuleType, ...]) -> list[object]:
    kind = type(obj)
    if kind in (list, tuple, set, frozenset):  # exactly these: a subclass's items are not walked
        return list(cast("Iterable[object]", obj))
    if type(obj) is dict:
        return [*obj.keys(), *obj.values()]
    if (
        hasattr(obj, "__dict__")
        and kind.__module__ in {m.__name__ for m in modules}
        and not isinstance(obj, (type, types.FunctionType))
    ):
        return [vars(obj)]
    return []


def capture() -> Pristine:
    """Walk the simulator modules once and keep a shallow copy of every mutable object found."""
    modules = simulator_modules()
    pristine = Pristine(modules)
    for module in modules:
        namespace = vars(module)
        pristine.module_names[id(namespace)] = set(namespace)
        for name, value in namespace.items():
            label = f"{module.__name__}.{name}"
            _bind(pristine, namespace, name, value, label)
            if defined_here(value, modules) and value.__module__ == module.__name__:
                if isinstance(value, type):
                    _capture_class(pristine, value, label)
                else:
                    _capture_function(pristine, value, label)
            elif not isinstance(value, (types.ModuleType, types.FunctionType, type)) and not name.startswith("__"):
                _walk(pristine, value, label)
    return pristine


def _capture_class(pristine: Pristine, cls: type, label: str) -> None:
    for name, value in vars(cls).items():
        if name in ("__dict__", "__weakref__", "__doc__", "__module__", "__qualname__"):
            continue
        _bind(pristine, cls, name, value, f"{label}.{name}")
        for function in functions_in(value):
            _capture_function(pristine, function, f"{label}.{name}")
        if not functions_in(value) and not isinstance(
            value, (types.ModuleType, type, property, staticmethod, classmethod)
        ):
            _walk(pristine, value, f"{label}.{name}")


def _capture_function(pristine: Pristine, function: types.FunctionType, label: str) -> None:
    _bind(pristine, function, "__defaults__", function.__defaults__, f"{label}.__defaults__")
    _bind(pristine, function, "__kwdefaults__", function.__kwdefaults__, f"{label}.__kwdefaults__")
    _walk(pristine, function.__defaults__, f"{label}.__defaults__")
    _walk(pristine, function.__kwdefaults__, f"{label}.__kwdefaults__")
    if function.__dict__:  # none has attributes; reading it made an empty one
        _walk(pristine, function.__dict__, f"{label}.__dict__")
    for name, cell in zip(function.__code__.co_freevars, function.__closure__ or ()):
        _bind(pristine, cell, "cell_contents", cell.cell_contents, f"{label}.<closure {name}>")
        _walk(pristine, cell.cell_contents, f"{label}.<closure {name}>")


def _bind(pristine: Pristine, owner: object, name: str, value: object, label: str) -> None:
    pristine.bindings[(id(owner), name)] = Binding(owner, name, value, label)


def _is_container(obj: object) -> TypeGuard[Container]:
    """One of ``_CONTAINERS`` exactly (a subclass may hold more than its items)."""
    return type(obj) in _CONTAINERS


def _walk(pristine: Pristine, root: object, label: str) -> None:
    stack: list[tuple[object, str]] = [(root, label)]
    seen: set[int] = set()
    names = {m.__name__ for m in pristine.modules}
    while stack:
        obj, path = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        kind = type(obj)
        if _is_container(obj):
            if id(obj) not in pristine.containers:
                pristine.containers[id(obj)] = (obj, obj.copy())
                pristine.labels[id(obj)] = path
        elif kind.__module__ in names and hasattr(obj, "__dict__") and not isinstance(obj, type):
            stack.append((vars(obj), f"{path}.__dict__"))
            continue
        elif not (isinstance(obj, IMMUTABLE_LEAVES + (tuple, frozenset)) or _foreign_constant(obj)):
            pristine.unknown.append(f"{path}: {kind.__module__}.{kind.__qualname__}")
            continue
        if kind in (list, tuple, set, frozenset):
            stack.extend((item, f"{path}[{i}]") for i, item in enumerate(cast("Iterable[object]", obj)))
        elif type(obj) is dict:
            for key, value in obj.items():
                stack.append((key, f"{path}<key>"))
                stack.append((value, f"{path}[{key!r}]"))


def _foreign_constant(obj: object) -> bool:
    """Objects of other modules the simulators only read: dates, functions, typing aliases."""
    return (
        isinstance(
            obj,
            (
                datetime.date,
                datetime.time,
                datetime.timedelta,
                decimal.Decimal,
                types.FunctionType,
                types.BuiltinFunctionType,
                type,
                types.ModuleType,
            ),
        )
        or type(obj).__module__ == "typing"
    )


def restore_container(obj: Container, contents: Container) -> None:
    """Put ``contents`` (a shallow copy of ``obj``, of its type) back into ``obj``, keeping its identity."""
    if isinstance(obj, dict):  # the exact types of ``_CONTAINERS``: ``_is_container``
        obj.clear()
        obj.update(cast("dict[object, object]", contents))
    elif isinstance(obj, set):
        obj.clear()
        obj.update(cast("set[object]", contents))
    elif isinstance(obj, bytearray):
        obj[:] = cast(bytearray, contents)
    else:
        obj[:] = cast("list[object]", contents)


# --- exposure: what running a function can reach -----------------------------------


@dataclass(frozen=True)
class Plan:
    """What to put back after a world ran some functions."""

    containers: tuple[int, ...]
    bindings: tuple[tuple[int, str], ...]


class Exposure:
    """The captured state each simulator function can reach, from its bytecode."""

    def __init__(self, pristine: Pristine) -> None:
        self.pristine = pristine
        self.classes: list[type] = [
            v for m in pristine.modules for v in vars(m).values() if isinstance(v, type) and v.__module__ == m.__name__
        ]
        self._memo: dict[int, tuple[frozenset[int], frozenset[tuple[int, str]]]] = {}
        self._by_name: dict[str, set[tuple[int, str]]] = {}  # attribute bindings, by attribute name
        for key, binding in pristine.bindings.items():
            if not isinstance(binding.owner, dict):
                self._by_name.setdefault(binding.name, set()).add(key)

    def of_function(self, function: types.FunctionType) -> tuple[frozenset[int], frozenset[tuple[int, str]]]:
        """Container ids and bindings ``function`` (and all it calls by name) can reach."""
        key = id(function)
        if key in self._memo:
            return self._memo[key]
        self._memo[key] = (frozenset(), frozenset())  # a recursive call reaches nothing more
        containers: set[int] = set()
        bindings: set[tuple[int, str]] = set()
        self._own(function, containers, bindings)
        names, ops, stored = code_names(function.__code__)
        namespace = function.__globals__
        # A binding changes only through a store of its name (or a way around the bytecode).
        if names & REBINDING_NAMES:
            bindings.update(self.pristine.bindings)
        if ops & _GLOBAL_STORES:
            bindings.update((id(namespace), n) for n in self.pristine.module_names.get(id(namespace), ()))
        for name in stored:
            bindings |= self._by_name.get(name, set())
        for name in names:
            if name in namespace:
                self._value(namespace, name, namespace[name], containers, bindings)
            for cls in self.classes:
                if name in vars(cls):
                    self._value(cls, name, vars(cls)[name], containers, bindings)
        self._memo[key] = (frozenset(containers), frozenset(bindings))
        return self._memo[key]

    def _own(self, function: types.FunctionType, containers: set[int], bindings: set[tuple[int, str]]) -> None:
        p = self.pristine
        for name in ("__defaults__", "__kwdefaults__"):
            containers |= p.reach(getattr(function, name))
        if function.__dict__:
            containers |= p.reach(function.__dict__)
        for cell in function.__closure__ or ():
            bindings.add((id(cell), "cell_contents"))
            containers |= p.reach(cell.cell_contents)

    def _value(
        self, owner: object, name: str, value: object, containers: set[int], bindings: set[tuple[int, str]]
    ) -> None:
        functions = functions_in(value)
        for function in functions:
            if defined_here(function, self.pristine.modules):
                more, more_bindings = self.of_function(function)
                containers |= more
                bindings |= more_bindings
        if isinstance(value, type) and defined_here(value, self.pristine.modules):
            for attribute, member in vars(value).items():  # constructing runs __init__, and more implicitly
                self._value(value, attribute, member, containers, bindings)
        elif not functions and not isinstance(value, (types.ModuleType, type, property)):
            containers |= self.pristine.reach(value)

    @functools.cache  # per class: ``plan`` asks for each (class, method) of ~500 sets
    def of_class_presence(self, cls: type) -> tuple[frozenset[int], frozenset[tuple[int, str]]]:
        """What an instance's implicit calls can reach: dunder methods of its module's classes."""
        containers: set[int] = set()
        bindings: set[tuple[int, str]] = set()
        for other in self.classes:
            if other.__module__ == cls.__module__:
                for name, member in vars(other).items():
                    if name.startswith("__") and functions_in(member):
                        self._value(other, name, member, containers, bindings)
        return frozenset(containers), frozenset(bindings)

    @functools.cache
    def of_method(self, class_name: str, method: str) -> tuple[frozenset[int], frozenset[tuple[int, str]]]:
        """What calling ``class_name.method`` on an instance can reach."""
        cls = _bfcl.simulator_class(class_name)
        presence = self.of_class_presence(cls)
        containers, bindings = set(presence[0]), set(presence[1])
        for klass in cls.__mro__:
            if method in vars(klass):
                self._value(klass, method, vars(klass)[method], containers, bindings)
                break
        return frozenset(containers), frozenset(bindings)


@functools.lru_cache(maxsize=4096)
def plan(touched: frozenset[tuple[str, str]]) -> Plan:
    """What a world that called ``touched`` (class, method) pairs may have changed."""
    containers: set[int] = set()
    bindings: set[tuple[int, str]] = set()
    for class_name, method in touched:
        more, more_bindings = EXPOSURE.of_method(class_name, method)
        containers |= more
        bindings |= more_bindings
    return Plan(tuple(sorted(containers)), tuple(sorted(bindings)))


# --- worlds ---------------------------------------------------------------------


class World:
    """The process-wide state as one conversation sees it."""

    __slots__ = ("touched", "saved", "__weakref__")

    def __init__(self) -> None:
        self.touched: set[tuple[str, str]] = set()
        self.saved: tuple[list[tuple[Container, Container]], list[tuple[Binding, object]]] | None = None

    def touch(self, class_name: str, method: str) -> None:
        """Record that ``class_name.method`` is about to run in this world (it must be active)."""
        self.touched.add((class_name, method))

    def building(self, class_names: Iterable[str]) -> None:
        """Activate this world to create instances of ``class_names`` (their constructors run)."""
        activate(self)
        for class_name in class_names:
            self.touch(class_name, "__init__")
            self.touch(class_name, "_load_scenario")


#: Held while any thread uses the simulators: one world is active at a time per process,
#: and a live run's conversations run on several threads (``live.inflight``). Re-entrant:
#: an item's scoring holds it throughout, and its replay's calls take it again.
EXCLUSIVE = threading.RLock()

_active: weakref.ref[World] | None = None
_dirty: set[tuple[str, str]] = set()  # what the active world touched (kept after it is gone)


def activate(world: World) -> None:
    """Make ``world``'s view of the process-wide state the current one.

    One view at a time per process: replays run on one thread (a default
    argument cannot hold two conversations' values at once).
    """
    global _active, _dirty
    current = _active() if _active is not None else None
    if current is world:
        return
    outgoing = plan(frozenset(_dirty))
    if current is not None:
        current.saved = (
            [(PRISTINE.containers[i][0], PRISTINE.containers[i][0].copy()) for i in outgoing.containers],
            [(PRISTINE.bindings[b], PRISTINE.bindings[b].current()) for b in outgoing.bindings],
        )
    _put_back(outgoing)
    if world.saved is not None:
        containers, bindings = world.saved
        for obj, contents in containers:
            restore_container(obj, contents)
        for binding, value in bindings:
            binding.put(value)
        world.saved = None
    _active, _dirty = weakref.ref(world), world.touched


def _put_back(outgoing: Plan) -> None:
    containers, bindings = PRISTINE.containers, PRISTINE.bindings
    for binding_key in outgoing.bindings:
        binding = bindings[binding_key]
        if binding.current() is not binding.value:
            binding.put(binding.value)
    for key in outgoing.containers:
        obj, contents = containers[key]
        restore_container(obj, contents)


def reset_all() -> None:
    """Put every captured object and binding back (tests; nothing in a replay needs it)."""
    global _active, _dirty
    for binding in PRISTINE.bindings.values():
        if binding.current() is not binding.value:
            binding.put(binding.value)
    for obj, contents in PRISTINE.containers.values():
        restore_container(obj, contents)
    _active, _dirty = None, set()


def differences() -> list[str]:
    """Where the process-wide state differs from the captured one (tests)."""
    found = [b.label for b in PRISTINE.bindings.values() if b.current() is not b.value]
    for key, (obj, contents) in PRISTINE.containers.items():
        if not _same_contents(obj, contents):
            found.append(PRISTINE.labels[key])
    return found


def _same_contents(obj: Container, contents: Container) -> bool:
    if type(obj) is dict and type(contents) is dict:
        return (
            list(obj) == list(contents)
            and all(a is b for a, b in zip(obj.values(), contents.values()))
            and all(a is b for a, b in zip(obj, contents))
        )
    if type(obj) is set:
        return obj == contents and {id(x) for x in obj} == {id(x) for x in contents}
    return len(obj) == len(contents) and all(a is b for a, b in zip(obj, contents))


def _check(pristine: Pristine) -> Pristine:
    if pristine.unknown:
        raise TypeError(
            "careful: bfcl-eval simulator state of a kind that cannot be restored: " + "; ".join(pristine.unknown[:5])
        )
    return pristine


PRISTINE: Pristine = _check(capture())
#: ``decimal`` and ``mpmath`` precision as the process had them before any simulator call.
DECIMAL_PRECISION: int = __import__("decimal").getcontext().prec
MPMATH_PRECISION: int = __import__("mpmath").mp.prec
EXPOSURE = Exposure(PRISTINE)
