"""The executor behind BFCL's inference loop: this conversation's own simulators.

``BaseHandler.inference_multi_turn_*`` calls ``execute_multi_turn_func_call``,
which keeps simulator instances in module globals keyed by model and entry id
(so two runs of one conversation in a process share state) and ``eval``s the
decoded calls. The loop looks that name up in ``base_handler``'s globals at
call time, so replacing it there puts :class:`~pytest_careful.execution.executor.Simulators`
behind the unchanged loop. Which simulators serve a call is a context
variable, set by :func:`conversation` around one run: nothing is shared between
conversations, runs or threads, and a call outside any run is refused rather
than handed to bfcl-eval's ``eval``.

Several conversations of one process run at once (``inflight``), each on its
own thread. What the loop does with the simulators is therefore done under
:data:`~pytest_careful.execution.isolation.EXCLUSIVE` with the conversation's world active:
the calls (``Simulators.execute``) and the copies BFCL's loop makes of the
instances for its state log (:class:`InstancesView`); and what the loop prints
goes to the conversation's own log (:func:`printing_to`), not to whatever
``sys.stdout`` another thread has set.
"""

from __future__ import annotations

import builtins
import contextlib
import contextvars
import copy
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO, Any

from ..execution import isolation
from ..execution.executor import Simulators

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
    func_call_list: list[str],
    initial_config: dict,
    involved_classes: list,
    model_name: str,
    test_entry_id: str,
    long_context: bool = False,
    is_evaL_run: bool = False,
) -> tuple[list[str], Mapping[str, Any]]:
    """Drop-in for bfcl-eval's function of that name, same arguments and return."""
    live = _CURRENT.get()
    if live is None:
        raise OutsideConversation(
            "careful: bfcl-eval's multi-turn executor was called outside a pytest-careful "
            "conversation; refusing to evaluate model output"
        )
    results = [live.simulators.execute(call).result for call in func_call_list]
    return results, InstancesView(live.simulators)


class InstancesView(Mapping[str, Any]):
    """The instances as the loop reads them: each a copy made with their world active.

    BFCL's loop deep-copies the instances for its state log after a turn. An
    instance can hold an object that bfcl-eval's modules share (a mutable
    default argument), whose contents are this conversation's only while its
    world is active; another thread's conversation may be active by then. The
    copy made here, under the lock, is this conversation's own.
    """

    def __init__(self, simulators: Simulators) -> None:
        self._simulators = simulators

    def __getitem__(self, class_name: str) -> Any:
        with isolation.EXCLUSIVE:
            isolation.activate(self._simulators.world)
            return copy.deepcopy(self._simulators.instances[class_name])

    def __iter__(self) -> Iterator[str]:
        return iter(self._simulators.instances)

    def __len__(self) -> int:
        return len(self._simulators.instances)


def install() -> None:
    """Replace the loop's executor and ``print`` once per process (idempotent, thread-safe)."""
    global _INSTALLED
    with _LOCK:
        if _INSTALLED:
            return
        # bfcl-eval on first use: a session that runs no model imports none of it (start-up time)
        from bfcl_eval.model_handler import base_handler

        base_handler.execute_multi_turn_func_call = careful_execute_multi_turn_func_call  # type: ignore[assignment]
        # The loop's module looks ``print`` up in its globals before the builtins.
        base_handler.print = _print  # type: ignore[attr-defined]
        _INSTALLED = True


_PRINTED: contextvars.ContextVar[IO[str] | None] = contextvars.ContextVar("careful_printed", default=None)


def _print(*args: object, file: IO[str] | None = None, **kwargs: Any) -> None:
    """``print`` for bfcl-eval's loop: to the running conversation's log, else as ``print``."""
    target = _PRINTED.get()
    if target is not None and (file is None or file is sys.stdout):
        builtins.print(*args, file=target, **kwargs)
    else:
        builtins.print(*args, file=file, **kwargs)


@contextlib.contextmanager
def printing_to(log: IO[str]) -> Iterator[None]:
    """What bfcl-eval's loop prints inside the block goes to ``log`` (this thread only)."""
    install()
    token = _PRINTED.set(log)
    try:
        yield
    finally:
        _PRINTED.reset(token)


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
