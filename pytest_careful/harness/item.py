"""One collected conversation x condition: its collector, item, markers, and the test body it runs.

What running it comes to (row, failure text, sections, JUnit properties) is :mod:`.outcome`'s."""

from __future__ import annotations

import os
from typing import Any

import pytest
from _pytest._code import Traceback
from _pytest.nodeid import coerce_node_id

from ..data import dataset
from ..execution import limits
from ..live.errors import LiveError, NotRun, ServerError
from . import outcome
from .markers import CLASS_MARKERS
from .repeat_runs import run_repeats
from .state import SESSION_KEY


class CarefulCollector(pytest.Collector):
    """Parent of the conversation items; collects nothing by itself."""

    def collect(self) -> list[pytest.Item]:
        return []


class CarefulItem(pytest.Function):
    """A conversation under a condition; node id ``multi_turn_base_17[standard]``."""

    def __init__(self, *, conversation_id: str, condition: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.conversation_id = conversation_id
        self.condition = condition
        self.repeat = 1  # the repeat being scored (--careful-repeat; set by repeat_runs)
        # Node ids read like BFCL ids so that copy-pasted ids and -k work.
        self._id = coerce_node_id(f"{conversation_id}[{condition}]")

    def reportinfo(self) -> tuple[os.PathLike[str] | str, int | None, str]:
        # Anchored at the rootdir, so that the location reads careful/<category>
        # whichever directory the command runs in.
        return self.config.rootpath / "careful" / dataset.category_of(self.conversation_id), None, self.name

    def _traceback_filter(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Traceback:
        """pytest's frame filter, skipped for this plugin's own ``pytest.fail(pytrace=False)``.

        Such a failure is shown in pytest's "value" style (its message only), whichever
        frames the filter keeps; the filter cost ~0.6 ms per failing conversation.
        """
        if isinstance(excinfo.value, pytest.fail.Exception) and not excinfo.value.pytrace:
            return excinfo.traceback
        return super()._traceback_filter(excinfo)


def run_conversation(request: pytest.FixtureRequest) -> None:
    """The test body of every CarefulItem (collected as its ``callobj``).

    One conversation, one test: the item's outcome is the gate's verdict, and
    the rules are its sub-assertions, each a titled block of the failure text
    (gated ones) or of the "careful rules" section (the others).
    """
    item: CarefulItem = request.node  # type: ignore[assignment]
    state = request.config.stash[SESSION_KEY]
    conversation = dataset.get(item.conversation_id)
    if state.options.repeat > 1:  # --careful-repeat: K runs in this one item (repeat_runs.py says why)
        return run_repeats(item, state, conversation)
    run_failure = unscored = not_run = None
    error_type = outcome.UNSCORED
    try:
        result, entry = state.source.result(item.condition, conversation)
    except NotRun as problem:  # this session did not run it (the run stopped first): skipped, rerun runs it
        not_run = str(problem)
    except LookupError as problem:
        unscored = f"input problem: {problem}"
    except ServerError as problem:  # the server failed it: never the model's verdict
        unscored, error_type = str(problem), outcome.SERVER_ERROR
    except LiveError as problem:
        if problem.entry is None:  # the run stopped (budget, credit, output): not scored
            unscored = f"{outcome.no_entry_reason(problem)}: {problem}"
        else:
            # Scored as BFCL scores an inference error; the next run retries it.
            run_failure = f"model run failed: {problem} (scored as an inference error; a rerun retries it)"
            result, entry = problem.entry.result, problem.entry
    if not_run is not None:
        pytest.skip(not_run)
    if unscored is not None:  # outside the except: the failure carries no chained exception
        outcome.unscored(item, state, conversation, unscored, error_type)
    decoder = state.source.decoder()  # outside the budget: the first one imports its handler
    over_budget: str | None
    try:
        with limits.metered(state.options.limits):
            row, failure = outcome.score(item, state, conversation, result, entry, decoder)
    except limits.ResourceLimit as exceeded:
        over_budget = exceeded.reason
    else:
        over_budget = None
    if over_budget is not None:  # outside the except, as above
        outcome.over_budget(item, state, conversation, over_budget)
    outcome.record(item, row)
    if run_failure:
        pytest.fail(run_failure, pytrace=False)
    if failure:
        outcome.fail_or_exclude(state, row, failure)


def make_items(
    collector: CarefulCollector, conversations: list[dataset.Conversation], protocols: tuple[str, ...]
) -> list[CarefulItem]:
    items = []
    for conversation in conversations:
        for condition in protocols:
            item = CarefulItem.from_parent(
                collector,
                name=f"{conversation.id}[{condition}]",
                callobj=run_conversation,
                conversation_id=conversation.id,
                condition=condition,
            )
            for marker in markers_for(conversation, condition):
                item.add_marker(marker)
            items.append(item)
    return items


def markers_for(conversation: dataset.Conversation, condition: str) -> list[str]:
    classes = [CLASS_MARKERS[c] for c in conversation.involved_classes]
    return [conversation.category.removeprefix("multi_turn_"), condition, "careful", *classes]
