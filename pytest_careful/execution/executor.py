"""A conversation's simulator instances, created as bfcl-eval creates them, and one decoded call
executed on them.

:class:`Simulators` owns the instances of one replay (never module globals) and applies bfcl-eval's
rewrite; :mod:`.interpreter` parses the call string with :mod:`ast` and interprets it without ``eval``.
"""

from __future__ import annotations

import ast
import copy
import pickle
import re
from collections.abc import Iterable, Mapping, Set
from dataclasses import dataclass

from ..common import bfcl as _bfcl
from . import isolation
from .interpreter import (
    BLOCKED_NAMES,
    CALL_NAME,
    ERROR_PREFIX,
    MAX_CALL_CHARS,
    Blocked,
    Interpreter,
    Invocation,
    Parsed,
    check_compile_time_errors,
    check_deny_list,
    check_supported,
    eval_source,
    format_result,
    parse_raw,
    precision_restored,
    public_methods,
)
from .plain_values import Refused

_INSTANCE_NAME_SANITIZE = re.compile(r"[-./:]")


def instance_name(model_name: str, test_entry_id: str, class_name: str) -> str:
    """The global name bfcl-eval gives an instance (it shows in rewritten strings)."""
    return _INSTANCE_NAME_SANITIZE.sub("_", f"{model_name}_{test_entry_id}_{class_name}_instance")


@dataclass
class Execution:
    """The outcome of executing one decoded call string."""

    call: str
    result: str
    name: str
    arguments: dict[str, object]
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
        initial_config: Mapping[str, object],
        long_context: bool,
        model_name: str = "careful",
        test_entry_id: str = "",
        template: bytes | None = None,
    ) -> None:
        self.instances: dict[str, object] = {}  # class name -> simulator instance
        self._names: dict[str, str] = {}  # instance name -> class name
        self._mapping: dict[str, str] = {}  # method name -> instance name
        self._model_name, self._test_entry_id = model_name, test_entry_id
        #: bfcl-eval's process-wide state (mutable defaults, module globals) as this conversation sees it.
        self.world = isolation.World()
        with isolation.EXCLUSIVE:  # constructors read the process-wide state (a world's)
            fresh = (
                pickle.loads(template)
                if template is not None
                else fresh_instances(involved_classes, initial_config, long_context, self.world)
            )
        for class_name, instance in fresh.items():
            self._register(class_name, instance)

    @classmethod
    def around(
        cls, instances: Mapping[str, object], model_name: str = "careful", test_entry_id: str = ""
    ) -> Simulators:
        """Wrap existing instances (e.g. restored copies used for probing)."""
        sim = cls((), {}, False, model_name, test_entry_id)
        for class_name, instance in instances.items():
            sim._register(class_name, instance)
        return sim

    def _register(self, class_name: str, instance: object) -> None:
        name = instance_name(self._model_name, self._test_entry_id, class_name)
        self.instances[class_name] = instance
        self._names[name] = class_name
        # Same mapping as bfcl-eval: later classes win on a shared method name.
        for method_name in public_methods(instance):
            self._mapping[method_name] = name

    def owner(self, method: str) -> str | None:
        """Class that serves ``method`` in this conversation, if any."""
        name = self._mapping.get(method)
        return None if name is None else self._names[name]

    def rewrite(self, call: str) -> str:
        """bfcl-eval's ``_process_method_calls``."""
        mapping = self._mapping
        return CALL_NAME.sub(
            lambda m: f"{mapping[m.group(1)]}.{m.group(1)}" if m.group(1) in mapping else m.group(1),
            call,
        )

    def execute(self, call: str) -> Execution:
        """Execute one decoded call string; never raises for bad input."""
        with isolation.EXCLUSIVE:  # another thread's conversation may run calls too (live runs)
            return self._execute(call)

    def _execute(self, call: str) -> Execution:
        isolation.activate(self.world)
        interpreter = Interpreter(self)
        name, arguments = "<invalid>", {}
        try:
            if not isinstance(call, str):
                raise Refused(f"a call must be a string, got {type(call).__name__}")
            if len(call) > MAX_CALL_CHARS:
                raise Refused(f"call string of {len(call)} characters exceeds {MAX_CALL_CHARS}")
            parsed = parse_raw(call)
            name, arguments = self._named(call, parsed.name), dict(parsed.arguments)
            tree = self._tree(call, parsed)
            # The result string of an mpmath/decimal value depends on the precision
            # the call set: format it before that precision is put back.
            if "MathAPI" in self.instances:
                with precision_restored():
                    result = format_result(interpreter.evaluate(tree.body))
            else:
                result = format_result(interpreter.evaluate(tree.body))
            return Execution(call, result, name, arguments, interpreter.invocations)
        except Blocked as exc:
            return Execution(call, ERROR_PREFIX + str(exc), name, arguments, interpreter.invocations, refused=True)
        except Refused as exc:
            return Execution(
                call,
                ERROR_PREFIX + f"careful: {exc} (not executed)",
                name,
                arguments,
                interpreter.invocations,
                refused=True,
            )
        except (RecursionError, MemoryError) as exc:
            return Execution(
                call,
                ERROR_PREFIX + f"careful: input too complex ({type(exc).__name__}; not executed)",
                name,
                arguments,
                interpreter.invocations,
                refused=True,
            )
        except Exception as exc:  # same catch-all as bfcl-eval
            return Execution(call, ERROR_PREFIX + str(exc), name, arguments, interpreter.invocations, raised=True)

    @property
    def methods(self) -> frozenset[str]:
        return frozenset(self._mapping)

    @property
    def instance_classes(self) -> Mapping[str, str]:
        """Instance name (as bfcl-eval names it, for the interpreter) -> class name."""
        return self._names

    def _named(self, call: str, name: str) -> str:
        """An unparsable call keeps its function's name when the text before ``(`` is one.

        bfcl-eval's rewrite resolves ``echo(`` to its instance before ``eval``
        fails on ``file?=``, so ``echo(content='6500', file?='x')`` is a failed
        ``echo``, not a call of no function.
        """
        if name != "<unparsable>":
            return name
        head = call.split("(", 1)[0].strip()
        return head if "(" in call and head in self._mapping else name

    def _tree(self, call: str, parsed: Parsed) -> ast.Expression:
        """The expression to interpret, with bfcl-eval's checks done first.

        Fast path: a plain ``name(...)`` call in which bfcl-eval's rewrite
        would change nothing but the calls of plain names it marks (no
        ``method(`` in a string literal, no instance name) parses the same before
        and after the rewrite, so the cached parse of the raw string serves.
        Everything else takes the exact path: rewrite, then parse, where a call
        of a plain name is never a method (bfcl-eval's ``eval`` would not find it).
        """
        if (
            parsed.simple
            and not (parsed.string_calls & self._mapping.keys())
            and not (parsed.names & self._names.keys())
        ):
            if parsed.head in BLOCKED_NAMES:
                raise Blocked(f"Function call {parsed.head} is not allowed.")
            if parsed.compile_error is not None:
                raise parsed.compile_error
            if parsed.refusal is not None:
                raise Refused(parsed.refusal)
            assert parsed.tree is not None
            return parsed.tree
        rewritten = self.rewrite(call)
        check_deny_list(rewritten)
        tree = ast.parse(eval_source(rewritten), filename="<string>", mode="eval")
        check_compile_time_errors(tree)
        check_supported(tree)
        return tree


def independent_of_names(call: str, methods: Set[str], names: Set[str]) -> bool:
    """Whether executing ``call`` cannot depend on the instances' names.

    Instance names carry the model name (bfcl-eval's naming), and bfcl-eval's
    rewrite can paste them into string literals. A call that takes the fast path
    of ``Simulators._tree`` under ``methods`` and ``names`` runs from its raw
    parse: two ``Simulators`` of one conversation in the same state, named for
    different models, give it the same result.
    """
    if not isinstance(call, str) or len(call) > MAX_CALL_CHARS:
        return False
    parsed = parse_raw(call)
    return parsed.simple and not (parsed.string_calls & methods) and not (parsed.names & names)


def fresh_instances(
    involved_classes: Iterable[str],
    initial_config: Mapping[str, object],
    long_context: bool,
    world: isolation.World | None = None,
) -> dict[str, object]:
    """Instances as bfcl-eval creates them: ``_load_scenario`` on a deep copy.

    Constructors read bfcl-eval's module state, so they run in ``world`` (a
    fresh one by default: a pristine process).
    """
    # Activating a world rebinds module and class state that another thread's conversation may be
    # reading or rebinding at that moment (live runs build templates on the flight's threads).
    with isolation.EXCLUSIVE:
        instances = {}
        stateless = _bfcl.stateless_classes()
        involved_classes = tuple(involved_classes)
        (world if world is not None else isolation.World()).building(involved_classes)
        for class_name in involved_classes:
            instance = _bfcl.simulator_class(class_name)()
            if class_name not in stateless:
                instance._load_scenario(copy.deepcopy(initial_config.get(class_name, {})), long_context=long_context)
            instances[class_name] = instance
        return instances


def template_of(involved_classes: Iterable[str], initial_config: Mapping[str, object], long_context: bool) -> bytes:
    """Fresh instances, pickled: loading them is much cheaper than building them again."""
    return pickle.dumps(fresh_instances(involved_classes, initial_config, long_context), pickle.HIGHEST_PROTOCOL)
