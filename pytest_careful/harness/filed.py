"""Conversations filed but never reported by their items, scored by the controller at the end.

A live run's conversations run ahead of their items (``live.inflight``): when a worker is
killed, or the run is interrupted, some conversations are complete in the result file while
their items never ran (a crashed worker's item is reported as an error, interrupted ones not
at all). The scorecard counts every filed conversation all the same: the controller scores
each such entry as the item would have, from the same bytes, before the scorecards are written.
"""

from __future__ import annotations

from typing import Any

import pytest

from ..data import dataset
from ..data.result_files import LoggedEntry
from ..data.result_store import is_complete
from ..execution import limits
from ..scoring.row import Row
from . import outcome, selection
from .item import CarefulCollector, CarefulItem, run_conversation
from .state import CarefulState


def score_filed(session: pytest.Session, state: CarefulState) -> list[str]:
    """Score the selected conversations that have no row and a complete entry; their node ids."""
    source: Any = state.source
    if not state.options.live or state.options.repeat > 1 or not hasattr(source, "folders"):
        return []  # repeats are scored K at a time by their item (repeat_runs)
    missing = sorted(n for n in state.selected if n not in state.rows and selection.NODE_ID.match(n))
    if not missing:
        return []
    collector = CarefulCollector.from_parent(session, name="careful-filed", nodeid="careful-filed")
    files: dict[tuple[str, str], dict[str, LoggedEntry]] = {}
    scored = []
    for node in missing:
        match = selection.NODE_ID.match(node)
        assert match is not None
        conversation_id, condition = match["id"], match["condition"] or state.options.protocols[0]
        category = dataset.category_of(conversation_id)
        if (condition, category) not in files:
            files[(condition, category)] = source.folders.store(condition).read(category)[0]
        entry = files[(condition, category)].get(conversation_id)
        if entry is None or not is_complete(entry.raw):
            continue
        item = CarefulItem.from_parent(
            collector, name=node, callobj=run_conversation, conversation_id=conversation_id, condition=condition
        )
        row = _row(item, state, entry)
        if row is not None:
            row["resumed"] = False
            row["scored_after"] = "its item did not run (an interrupt or a crashed worker); scored from the file"
            state.rows[node] = row
            scored.append(node)
    return scored


def _row(item: CarefulItem, state: CarefulState, entry: LoggedEntry) -> Row | None:
    """The row the item would have made (None if scoring it failed here: it stays not run)."""
    conversation = dataset.get(item.conversation_id)
    try:
        with limits.metered(state.options.limits):
            row, _ = outcome.score(item, state, conversation, entry.result, entry, state.source.decoder())
    except limits.ResourceLimit as exceeded:
        return outcome.failed_row(item, state, conversation, exceeded.reason, outcome.RESOURCE_LIMIT)
    except Exception:  # never let the end of a run fail on one entry: it is counted as not run
        return None
    return row
