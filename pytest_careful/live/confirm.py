"""The confirm protocol: BFCL's loops, patched at their two exit points only.

BFCL's multi-turn loops (``inference_multi_turn_FC`` and ``_prompting``) end a
turn in two places: a step that decodes to no call, and a step that fails to
decode. :func:`patched_loop` takes bfcl-eval's own source of a loop, replaces
exactly those two ``break`` statements with

.. code-block:: python

    _careful_reply = self._careful_exit(turn_idx, model_responses,
                                        current_turn_inference_log, current_step_inference_log)
    if _careful_reply is not None:
        inference_data = self._add_next_turn_user_message_FC(inference_data, _careful_reply)
        count += 1
        continue
    break

and compiles the result in ``base_handler``'s own namespace. Nothing else
changes, which :func:`exit_points` lets the tests prove on the source itself;
a scripted model that never asks writes the same result file under both
protocols. The function is bound to one handler copy per conversation, never
to bfcl-eval's classes (``OSSHandler`` forbids overriding ``@final`` methods, and
other runs in the process keep the stock loop).
"""

from __future__ import annotations

import ast
import copy
import functools
import inspect
import textwrap
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..data.dataset import Conversation
from ..protocols import scripted_user
from ..protocols.confirm_log import ANSWER_LOG_KEY, executed_calls, model_text, request_text
from .handler import BfclDict, Handler

LOOPS = {
    "inference_multi_turn_FC": "_add_next_turn_user_message_FC",
    "inference_multi_turn_prompting": "_add_next_turn_user_message_prompting",
}

_HOOK = """
_careful_reply = self._careful_exit(turn_idx, model_responses, current_turn_inference_log,
                                    current_step_inference_log)
if _careful_reply is not None:
    inference_data = self.{add_user}(inference_data, _careful_reply)
    count += 1
    continue
break
"""


class LoopChanged(RuntimeError):
    """bfcl-eval's loop no longer has the two exit points this patch expects."""


def exit_points(function: ast.FunctionDef) -> list[tuple[list[ast.stmt], int]]:
    """The two ``break`` statements that end a turn: (statement list, index) each.

    The first is in ``if is_empty_execute_response(...)`` inside the ``try``
    around decoding, the second ends that ``try``'s ``except`` handler.
    """
    loops = [
        n
        for n in ast.walk(function)
        if isinstance(n, ast.While) and isinstance(n.test, ast.Constant) and n.test.value is True
    ]
    if len(loops) != 1:
        raise LoopChanged(f"expected one 'while True' loop in {function.name}, found {len(loops)}")
    tries = [n for n in loops[0].body if isinstance(n, ast.Try)]
    points: list[tuple[list[ast.stmt], int]] = []
    for node in tries:
        for stmt in node.body:
            if (
                isinstance(stmt, ast.If)
                and isinstance(stmt.test, ast.Call)
                and isinstance(stmt.test.func, ast.Name)
                and stmt.test.func.id == "is_empty_execute_response"
                and isinstance(stmt.body[-1], ast.Break)
            ):
                points.append((stmt.body, len(stmt.body) - 1))
        for handler in node.handlers:
            if handler.body and isinstance(handler.body[-1], ast.Break):
                points.append((handler.body, len(handler.body) - 1))
    if len(points) != 2:
        raise LoopChanged(f"expected 2 exit points in {function.name}, found {len(points)}")
    return points


def loop_tree(name: str) -> ast.FunctionDef:
    """bfcl-eval's own source of a loop, parsed (decorators dropped)."""
    # bfcl-eval on first use: a session that runs no model imports none of it (start-up time)
    from bfcl_eval.model_handler.base_handler import BaseHandler

    source = textwrap.dedent(inspect.getsource(getattr(BaseHandler, name)))
    function = ast.parse(source).body[0]
    assert isinstance(function, ast.FunctionDef)
    function.decorator_list = []  # @final is a marker; the copy is bound per instance
    return function


def patch_tree(function: ast.FunctionDef, add_user: str) -> ast.FunctionDef:
    """``function`` with its two exit points replaced by the hook (a new tree)."""
    patched = copy.deepcopy(function)
    for body, index in exit_points(patched):
        body[index : index + 1] = ast.parse(_HOOK.format(add_user=add_user)).body
    return ast.fix_missing_locations(patched)


@functools.cache
def patched_loop(name: str) -> Callable[..., Any]:
    """The patched loop ``name``, compiled in ``base_handler``'s globals."""
    # bfcl-eval on first use: a session that runs no model imports none of it (start-up time)
    from bfcl_eval.model_handler import base_handler

    module = ast.Module(body=[patch_tree(loop_tree(name), LOOPS[name])], type_ignores=[])
    code = compile(module, filename=f"<pytest-careful confirm: {inspect.getsourcefile(base_handler)}>", mode="exec")
    # The function's own code object, made into a function directly (nothing is executed
    # at definition time). Its globals are the module's own dict: the loop sees the same
    # names (and our executor bridge) as the stock one.
    [function_code] = [c for c in code.co_consts if isinstance(c, types.CodeType) and c.co_name == name]
    return types.FunctionType(function_code, base_handler.__dict__, name)


@dataclass
class ConfirmUser:
    """The scripted user of one conversation (answers counted per turn)."""

    conversation: Conversation
    boundary: frozenset[str]
    script: str = "default"
    detector_mode: str = "strict"
    answers: dict[int, list[scripted_user.Answer]] = field(default_factory=dict)

    def reply(
        self, turn: int, model_responses: Any, turn_log: Mapping[str, Any], step_log: list[BfclDict]
    ) -> list[dict[str, str]] | None:
        """The user message(s) to continue the turn with, or None to end it."""
        given = self.answers.setdefault(turn, [])
        answer = scripted_user.answer(
            model_text(model_responses),
            reference_calls=self.conversation.ground_truth[turn] if turn < self.conversation.n_turns else (),
            executed_calls=executed_calls(turn_log),
            answers_given=len(given),
            restated=any(a.kind == scripted_user.RESTATE for a in given),
            request=request_text(self.conversation, turn),
            boundary=self.boundary,
            script=self.script,
            detector_mode=self.detector_mode,
        )
        if answer is None:
            return None
        given.append(answer)
        step_log.append({"role": "user", "content": answer.message, ANSWER_LOG_KEY: answer.kind})
        return [{"role": "user", "content": answer.message}]


def bind(handler: Handler, user: ConfirmUser) -> Handler:
    """A shallow copy of ``handler`` whose loops stop at the user's answers."""
    confirmed = copy.copy(handler)
    for name in LOOPS:
        setattr(confirmed, name, types.MethodType(patched_loop(name), confirmed))

    def exit_hook(
        turn: int, responses: Any, turn_log: Mapping[str, Any], step_log: list[BfclDict]
    ) -> list[dict[str, str]] | None:
        messages = user.reply(turn, responses, turn_log, step_log)
        if messages is not None:
            # Tells a scripted handler that this user message answers, not a new turn.
            confirmed._careful_answering = user.answers[turn][-1].kind
        return messages

    confirmed._careful_exit = exit_hook
    return confirmed
