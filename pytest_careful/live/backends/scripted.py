"""Scripted models: deterministic stand-ins that go through BFCL's real loop.

``--careful-model=scripted:<policy>`` (function-calling style, output like
OpenAI's FC handler: ``[{name: json-arguments}]`` or a text string) or
``scripted:<policy>-prompting`` (prompting style, output like BFCL's prompting
handlers: ``"[f(a=1), g()]"``). The handler subclasses ``BaseHandler``, so
``inference`` picks BFCL's own ``inference_multi_turn_FC`` / ``_prompting``
loop, and BFCL's own decoders read the output. Policies read the turn's
reference calls (never the tool results), so every run is reproducible:

* ``reference``: the reference calls of the turn in one step, then a closing line;
* ``loop``: the turn's first reference call, again and again, until BFCL's
  step limit forces the conversation to quit;
* ``destructive``: as ``reference``, but the first turn that acts first makes
  a destructive call that the reference makes only in a later turn (unasked);
* ``ask``: before a turn whose reference makes a destructive call, asks for
  confirmation naming it, then acts once answered;
* ``ask-wrong``: asks about a destructive function the turn does not need;
* ``ask-after``: acts, then asks whether to do anything else (a closing offer);
* ``ask-thrice``: asks for confirmation again after every answer, three times;
* ``flaky``: flips by repeat (``--careful-repeat``), deterministically. With
  ``n`` the number of the conversation's id: ``n % 3 == 0`` fails every repeat
  (no call in any turn, which BFCL fails as an empty turn), ``n % 3 == 1``
  fails the even repeats and acts as ``reference`` in the odd ones, ``n % 3 == 2``
  acts as ``reference`` in every repeat.

Without an answer (the standard protocol) an asking policy's turn ends at its
question, as a real model's would.
"""

from __future__ import annotations

import ast
import inspect
import json
from dataclasses import dataclass, field
from typing import Any

from ...common import bfcl as _bfcl
from ...common.text import did_you_mean
from ...data import dataset
from ...data.dataset import Conversation
from ...effects import declarations
from ...execution.decoding import UnknownModel, model_family
from ..handler import BfclDict, Handler

POLICIES = ("reference", "loop", "destructive", "ask", "ask-wrong", "ask-after", "ask-thrice", "flaky")
PREFIX = "scripted:"
PROMPTING_SUFFIX = "-prompting"
DONE = "I have completed the requested actions."
UNABLE = "I cannot do this with the information and tools I have."


class UnknownPolicy(LookupError):
    pass


def parse_handle(handle: str) -> tuple[str, bool]:
    """``scripted:ask-prompting`` -> (``ask``, prompting=True); raises UnknownPolicy."""
    name = handle.removeprefix(PREFIX)
    prompting = name.endswith(PROMPTING_SUFFIX)
    policy = name.removesuffix(PROMPTING_SUFFIX)
    if policy not in POLICIES:
        styles = ", ".join(f"{PREFIX}{p}" for p in POLICIES)
        raise UnknownPolicy(
            f"unknown scripted model {handle!r}; expected one of {styles} (add {PROMPTING_SUFFIX!r} for the "
            f"prompting style){did_you_mean(handle, [PREFIX + p for p in POLICIES])}"
        )
    return policy, prompting


def _destructive() -> frozenset[str]:
    return declarations.load().boundary("final")


@dataclass
class Policy:
    """One conversation's scripted behaviour; ``next_step`` is a call list or a text."""

    name: str
    conversation: Conversation
    turn: int = -1
    step: int = 0
    answers: list[str] = field(default_factory=list)
    acted: bool = False
    repeat: int = 1  # which repeat of the conversation this is (1-based)

    def start_turn(self, turn: int) -> None:
        self.turn, self.step, self.answers, self.acted = turn, 0, [], False

    def on_answer(self, text: str) -> None:
        self.answers.append(text)

    def reference_calls(self) -> list[str]:
        gt = self.conversation.ground_truth
        return list(gt[self.turn]) if 0 <= self.turn < len(gt) else []

    def next_step(self) -> list[str] | str:
        self.step += 1
        return getattr(self, "_" + self.name.replace("-", "_"))()

    # -- policies ----------------------------------------------------------

    def _act(self, calls: list[str]) -> list[str] | str:
        if self.acted or not calls:
            return DONE if self.acted else UNABLE
        self.acted = True
        return calls

    def _reference(self) -> list[str] | str:
        return self._act(self.reference_calls())

    def _loop(self) -> list[str] | str:
        calls = self.reference_calls()
        return calls[:1] if calls else UNABLE

    def _destructive(self) -> list[str] | str:
        calls = self.reference_calls()
        if calls and not self.acted and self.turn == self._first_acting_turn():
            calls = [*self._later_destructive(), *calls]
        return self._act(calls)

    def _first_acting_turn(self) -> int:
        return next((i for i, t in enumerate(self.conversation.ground_truth) if t), -1)

    def _later_destructive(self) -> list[str]:
        boundary = _destructive()
        for turn in self.conversation.ground_truth[self.turn + 1 :]:
            for call in turn:
                if _name(call) in boundary:
                    return [call]
        return []

    def _destructive_in_turn(self) -> list[str]:
        boundary = _destructive()
        return [_name(c) for c in self.reference_calls() if _name(c) in boundary]

    def _question(self, name: str) -> str:
        return f"Before I continue: shall I call {name}() now? Please confirm."

    def _ask(self) -> list[str] | str:
        names = self._destructive_in_turn()
        if names and not self.answers and not self.acted:
            return self._question(names[0])
        return self._reference()

    def _ask_wrong(self) -> list[str] | str:
        if self._destructive_in_turn() and not self.answers and not self.acted:
            needed = set(self._destructive_in_turn())
            owned = {n for d in self.conversation.all_functions() if (n := d["name"]) in _destructive()}
            others = sorted(owned - needed)
            if others:
                return self._question(others[0])
        return self._reference()

    def _ask_after(self) -> list[str] | str:
        if not self.acted:
            return self._reference()
        if self.step > 2:
            return DONE
        return "Done. Would you like me to do anything else?"

    def _flaky(self) -> list[str] | str:
        number = int(self.conversation.id.rsplit("_", 1)[1])
        fails = number % 3 == 0 or (number % 3 == 1 and self.repeat % 2 == 0)
        return UNABLE if fails else self._reference()

    def _ask_thrice(self) -> list[str] | str:
        names = self._destructive_in_turn()
        if names and len(self.answers) < 3 and not self.acted and self.step <= 3:
            return self._question(names[0])
        return self._reference()


def _name(call: str) -> str:
    return call.split("(", 1)[0].strip()


def call_to_fc(call: str, involved_classes: tuple[str, ...] | list[str]) -> dict[str, str]:
    """``f('x', b=1)`` -> ``{"f": '{"a": "x", "b": 1}'}`` (OpenAI's function-call form).

    Positional arguments (some references use them) are named after the
    simulator method's own parameters.
    """
    node = ast.parse(call.strip(), mode="eval").body
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name):
        raise ValueError(f"not a plain call: {call}")
    arguments = {}
    if node.args:
        names = _parameters(node.func.id, involved_classes)
        arguments.update({n: ast.literal_eval(a) for n, a in zip(names, node.args)})
    arguments.update({k.arg: ast.literal_eval(k.value) for k in node.keywords if k.arg})
    return {node.func.id: json.dumps(arguments)}


def keyword_call(call: str, involved_classes: tuple[str, ...] | list[str]) -> str:
    """``f('x')`` -> ``f(a='x')``: BFCL's prompting decoder drops positional arguments."""
    [(name, arguments)] = call_to_fc(call, involved_classes).items()
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in json.loads(arguments).items())})"


def _parameters(function: str, involved_classes: tuple[str, ...] | list[str]) -> list[str]:
    for class_name in reversed(list(involved_classes)):  # later classes win, as in BFCL
        method = getattr(_bfcl.simulator_class(class_name), function, None)
        if method is not None:
            return [p for p in inspect.signature(method).parameters if p != "self"]
    raise ValueError(f"no involved class has {function}")


def _base_handler() -> type:
    _bfcl.contain_project_root()
    # bfcl-eval on first use: a session that runs no model imports none of it (start-up time)
    from bfcl_eval.model_handler.base_handler import BaseHandler

    return BaseHandler


def make_handler(handle: str) -> Handler:
    """A scripted handler for ``scripted:<policy>[-prompting]``."""
    policy, prompting = parse_handle(handle)
    return _handler_class()(policy, prompting)


_CLASS: list[type] = []


def _handler_class() -> type:
    """Built on first use: the base class lives in bfcl-eval (imported lazily)."""
    if _CLASS:
        return _CLASS[0]
    base = _base_handler()
    # bfcl-eval on first use: a session that runs no model imports none of it (start-up time)
    from bfcl_eval.model_handler.utils import convert_to_function_call, default_decode_execute_prompting

    class ScriptedHandler(base):  # type: ignore[valid-type,misc]
        """A BFCL handler whose 'API' is a :class:`Policy`."""

        def __init__(self, policy: str, prompting: bool) -> None:
            handle = PREFIX + policy + (PROMPTING_SUFFIX if prompting else "")
            super().__init__(model_name=handle, temperature=0.0, registry_name=handle, is_fc_model=not prompting)
            self.policy = policy
            self.registry_dir_name = handle.replace(":", "_")

        def decode_execute(self, result: Any, has_tool_call_tag: bool = False) -> list[str]:
            if self.is_fc_model:
                return convert_to_function_call(result)  # type: ignore[no-any-return]
            return default_decode_execute_prompting(result, has_tool_call_tag)  # type: ignore[no-any-return]

        def decode_ast(self, result: Any, language: object = None, has_tool_call_tag: bool = False) -> list[str]:
            return self.decode_execute(result, has_tool_call_tag)

        # -- shared by both styles ----------------------------------------

        def _start(self, test_entry: BfclDict) -> BfclDict:
            return {
                "message": [],
                "function": test_entry["function"],
                "policy": Policy(self.policy, dataset.get(test_entry["id"]), repeat=getattr(self, "careful_repeat", 1)),
            }

        def _user(self, inference_data: BfclDict, messages: list[BfclDict], first: bool) -> BfclDict:
            policy: Policy = inference_data["policy"]
            answering = getattr(self, "_careful_answering", None)
            if answering:
                self._careful_answering = None
                policy.on_answer(answering)
            else:
                policy.start_turn(0 if first else policy.turn + 1)
            inference_data["message"].extend(messages)
            return inference_data

        def _query(self, inference_data: BfclDict) -> tuple[Any, float]:
            step = inference_data["policy"].next_step()
            inference_data["inference_input_log"] = {"messages": len(inference_data["message"])}
            if isinstance(step, list):
                output: Any = (
                    [call_to_fc(c, inference_data["policy"].conversation.involved_classes) for c in step]
                    if self.is_fc_model
                    else "["
                    + ", ".join(keyword_call(c, inference_data["policy"].conversation.involved_classes) for c in step)
                    + "]"
                )
            else:
                output = step
            prompt = json.dumps(inference_data["message"], default=str)
            return {"output": output, "input": len(prompt) // 4, "out": len(json.dumps(output)) // 4}, 0.0

        def _parse(self, response: BfclDict) -> BfclDict:
            return {
                "model_responses": response["output"],
                "input_token": response["input"],
                "output_token": response["out"],
            }

        def _assistant(self, inference_data: BfclDict, data: BfclDict) -> BfclDict:
            inference_data["message"].append({"role": "assistant", "content": data["model_responses"]})
            return inference_data

        def _tool(self, inference_data: BfclDict, results: list[str], data: BfclDict) -> BfclDict:
            inference_data["message"].extend({"role": "tool", "content": r} for r in results)
            return inference_data

        def _first(self, inference_data: BfclDict, messages: list[BfclDict]) -> BfclDict:
            return self._user(inference_data, messages, True)

        def _next(self, inference_data: BfclDict, messages: list[BfclDict]) -> BfclDict:
            return self._user(inference_data, messages, False)

        def _compile_tools(self, inference_data: BfclDict, test_entry: BfclDict) -> BfclDict:
            inference_data["function"] = test_entry["function"]
            return inference_data

        # BFCL's two loops call the same steps by two names; only pre-processing differs in signature.
        def _pre_query_processing_FC(self, inference_data: BfclDict, test_entry: BfclDict) -> BfclDict:
            return self._start(test_entry)

        def _pre_query_processing_prompting(self, test_entry: BfclDict) -> BfclDict:
            return self._start(test_entry)

        add_first_turn_message_FC = add_first_turn_message_prompting = _first
        _add_next_turn_user_message_FC = _add_next_turn_user_message_prompting = _next
        _query_FC = _query_prompting = _query
        _parse_query_response_FC = _parse_query_response_prompting = _parse
        _add_assistant_message_FC = _add_assistant_message_prompting = _assistant
        _add_execution_results_FC = _add_execution_results_prompting = _tool

    _CLASS.append(ScriptedHandler)
    return ScriptedHandler


def _decoding_handler(handle: str) -> Handler:
    """``make_handler`` as ``decoding.model_family`` wants it: an unknown policy is an UnknownModel."""
    try:
        return make_handler(handle)
    except UnknownPolicy as exc:
        raise UnknownModel(str(exc)) from None


def register() -> None:
    """Tell decoding (a stage below this one) of scripted models: a results folder a scripted model
    wrote decodes with its handler. Whoever may decode one calls it (harness, api, cli)."""
    model_family(PREFIX, _decoding_handler)


register()  # on import too: the live stage decodes its own scripted runs
