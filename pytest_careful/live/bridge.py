"""The executor behind BFCL's inference loop: this conversation's own simulators.

``BaseHandler.inference_multi_turn_*`` calls ``execute_multi_turn_func_call``,
which keeps simulator instances in module globals keyed by model and entry id
(so two runs of one conversation in a process share state) and ``eval``s the
decoded calls. The loop looks that name up in ``base_handler``'s globals at
call time, so replacing it there puts :class:`~pytest_careful.executor.Simulators`
behind the unchanged loop. Which simulators serve a call is a context
variable, set by :func:`conversation` around one run: nothing is shared between
conversations, runs or threads, and a call outside any run is refused rather
than handed to bfcl-eval's ``eval``.
"""

from __future__ import annotations

import contextlib
import contextvars
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..executor import Simulators

_LOCK = threading.Lock()
_INSTALLED = False


@dataclass
class LiveConversation:
    """The simulators of one run."""

    simulators: Simulators


_CURRENT: contextvars.ContextVar[LiveConversation | None] = contextvars.ContextVar("careful_live", default=None)


class OutsideConversation(RuntimeError):
    """BFCL's executor was reached with no conversation to serve it."""


def careful_execute_multi_turn_func_call(
    func_call_list: list[str], initial_config: dict, involved_classes: list, model_name: str,
    test_entry_id: str, long_context: bool = False, is_evaL_run: bool = False,
) -> tuple[list[str], dict[str, Any]]:
    """Drop-in for bfcl-eval's function of that name, same arguments and return."""
    live = _CURRENT.get()
    if live is None:
        raise OutsideConversation(
            "careful: bfcl-eval's multi-turn executor was called outside a pytest-careful "
            "conversation; refusing to evaluate model output")
    results = [live.simulators.execute(call).result for call in func_call_list]
    return results, live.simulators.instances


def install() -> None:
    """Replace the loop's executor once per process (idempotent, thread-safe)."""
    global _INSTALLED
    with _LOCK:
        if _INSTALLED:
            return
        from bfcl_eval.model_handler import base_handler

        base_handler.execute_multi_turn_func_call = careful_execute_multi_turn_func_call  # type: ignore[assignment]
        _INSTALLED = True


@contextlib.contextmanager
def conversation(simulators: Simulators) -> Iterator[LiveConversation]:
    """Serve the loop's executor calls from ``simulators`` inside the block."""
    install()
    live = LiveConversation(simulators)
    token = _CURRENT.set(live)
    try:
        yield live
    finally:
        _CURRENT.reset(token)
