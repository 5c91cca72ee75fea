"""Run one conversation through BFCL's loop and return its result entry.

The entry is what ``bfcl generate`` writes for it (``id``, ``result``, token
counts, latency, ``inference_log``), so it is scored exactly as a logged run is.
"""

from __future__ import annotations

import copy
import io
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, ParamSpec, TypeVar

from ..data.dataset import Conversation
from ..effects.declarations import Declarations
from ..evaluation.replay import state_template
from ..execution.executor import Simulators
from ..protocols import hints
from ..protocols import registry as protocols
from . import bridge, confirm
from .errors import SetupFailed
from .handler import BfclDict, Handler

P = ParamSpec("P")
R = TypeVar("R")

if TYPE_CHECKING:
    from .faults import ServerGuard


@dataclass(frozen=True)
class RunProtocol:
    """How one condition runs: the scripted user's settings for confirm."""

    condition: str
    declarations: Declarations
    boundary: str = "final"
    script: str = "default"
    detector: str = "strict"

    def settings(self) -> dict[str, str]:
        """What shapes the run besides the model: resumed entries must have been made alike."""
        out = {"condition": self.condition}
        kind = protocols.get(self.condition)
        if kind.uses_boundary:
            out["boundary"] = self.boundary
        if kind.scripted_user:
            out.update(user_script=self.script, detector=self.detector)
        return out


@dataclass
class LiveRun:
    """One conversation's result entry, the loop's printed log and the wall time."""

    entry: BfclDict
    log: str
    seconds: float


def prompt_entry(conversation: Conversation, protocol: RunProtocol) -> BfclDict:
    """The test entry BFCL's loop receives under ``protocol`` (hints: hinted docs only).

    As ``bfcl generate`` loads it: ``load_dataset_entry``'s default adds the
    language hint ("Note that the provided function is in Python 3 syntax.")
    to the docs of ``function`` (not to miss_func's held-out docs), with
    bfcl-eval's own function.
    """
    # bfcl-eval on first use: a session that runs no model imports none of it (start-up time)
    from bfcl_eval.utils import add_language_specific_hint_to_function_doc

    [entry] = add_language_specific_hint_to_function_doc([conversation.prompt_entry()])
    if protocols.get(protocol.condition).hinted_docs:
        entry = hints.hinted_entry(entry, protocol.declarations, protocol.boundary)  # type: ignore[arg-type]
    return entry


#: The handler methods BFCL's loops call once per request to the model.
QUERIES = ("_query_FC", "_query_prompting")


def run(
    handler: Handler,
    conversation: Conversation,
    protocol: RunProtocol,
    repeat: int = 1,
    before_request: Callable[[], None] | None = None,
    guard: ServerGuard | None = None,
    after_answer: Callable[[], None] | None = None,
    place: Callable[[Handler], None] | None = None,
) -> LiveRun:
    """Run ``conversation`` with ``handler`` through BFCL's own loop.

    ``repeat`` (``--careful-repeat``) is set on the run's copy of the handler as
    ``careful_repeat``: real models ignore it; scripted ones may vary by it.
    ``before_request`` is called before each request to the model: it raises to
    end the conversation there (the run stopped, or was interrupted). With a
    ``guard`` (vLLM and OpenAI-compatible servers) each request goes through it:
    a server's fault is sent again or ends the conversation unscored, never
    returned to BFCL's loop as the model's answer (``faults``); ``after_answer``
    is called after each answer. ``place`` points the run's copy of the handler at the one
    server of a fleet that serves this conversation (``backends.vllm.fleet_client.FleetSeat.apply``) and gives its
    client the conversation's session key (``session_key.SessionKeys.tag``).

    Raises whatever the handler raises (API errors, a dead server, the spend
    guard); the caller decides what is retried.
    """
    simulators = simulators_for(handler, conversation)
    if protocols.get(protocol.condition).scripted_user:
        user = confirm.ConfirmUser(
            conversation,
            protocol.declarations.boundary(protocol.boundary),  # type: ignore[arg-type]
            protocol.script,
            protocol.detector,
        )
        runner = confirm.bind(handler, user)
    else:
        runner = copy.copy(handler)  # per-run attributes never reach the shared handler
    runner.careful_repeat = repeat
    if place is not None:
        place(runner)
    if guard is not None:
        for name in QUERIES:
            setattr(runner, name, guard.wrap(getattr(runner, name), before_request or _nothing, after_answer))
    elif before_request is not None:
        for name in QUERIES:
            setattr(runner, name, _guarded(getattr(runner, name), before_request))
    # A backend may count per conversation (Claude: usage and cost) on this copy;
    # careful_end() returns the extra keys of the result entry.
    begin = getattr(runner, "careful_begin", None)
    if begin is not None:
        begin()
    printed = io.StringIO()
    started = time.monotonic()
    # BFCL's loop prints every step; keep it for the item's report, off the terminal
    # (``bridge.printing_to``: per thread, where redirect_stdout would take every thread's prints).
    with bridge.conversation(simulators), bridge.printing_to(printed):
        result, metadata = runner.inference(
            prompt_entry(conversation, protocol), include_input_log=False, exclude_state_log=False
        )
    from bfcl_eval.utils import make_json_serializable  # what BaseHandler.write applies

    extra = runner.careful_end() if begin is not None else {}
    entry = make_json_serializable({"id": conversation.id, "result": result, **metadata, **extra})
    return LiveRun(entry, printed.getvalue(), time.monotonic() - started)


def simulators_for(handler: Handler, conversation: Conversation) -> Simulators:
    """The conversation's own simulators. Building them is this plugin's work, before any request:
    a failure there is never the model's (it was seen once in ~2,000 conversations with 100 threads
    in flight: "dictionary changed size during iteration"), so it is tried once more, then the
    conversation is left unscored (``SetupFailed``), not filed as an inference error."""
    for attempt in (1, 2):
        try:
            return Simulators(
                conversation.involved_classes,
                conversation.initial_config,
                conversation.long_context,
                model_name=handler.model_name_underline_replaced,
                test_entry_id=conversation.id,
                template=state_template(conversation),
            )
        except Exception as exc:
            if attempt == 2:
                raise SetupFailed(
                    f"internal error, not the model's: could not set up the conversation's simulators "
                    f"({type(exc).__name__}: {exc}); a rerun of the same command runs it"
                ) from exc
    raise AssertionError("unreachable")


def _nothing() -> None:
    pass


def _guarded(query: Callable[P, R], before: Callable[[], None]) -> Callable[P, R]:
    def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
        before()
        return query(*args, **kwargs)

    return guarded
