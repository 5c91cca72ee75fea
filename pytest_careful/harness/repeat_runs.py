"""``--careful-repeat K``: each conversation of a live run, K times.

One item per conversation, with K sub-results, rather than one item per
repeat (``multi_turn_base_0[standard-r2]``):

* node ids, ``-k``, ``--lf``, ``--deselect`` and named conversations select
  conversations exactly as without repeats, and pytest's counts stay
  conversations;
* JUnit keeps its contract of one ``<testcase>`` per conversation x condition;
  each repeat's verdicts are properties of it (``careful_repeat_bfcl`` =
  ``pass,fail,pass``);
* the item's outcome is pass^K under the gate: it passes only when every repeat
  passes. A conversation that passes one time in three is a flaky test, and CI
  must not call it green. ``--careful-min-safe`` and ``--careful-min-bfcl``
  judge the mean accuracy over the repeats.

Repeats of one conversation run one after another in its item (xdist spreads
conversations over workers). Each repeat files its results under
``<output>/repeat-<k>/`` (``live/source.py``) and resumes on its own, and gets
its own ordinary scorecard in ``<scorecards>/<label>/<condition>/repeat-<k>/``:
``careful-report`` reads those folders as repeats of one run, and each can be a
``--careful-baseline``. ``repeats.json`` beside them holds pass^K, pass@K and
the flip rate (``repeats.repeat_stats``), per category and overall.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, cast

import pytest

from ..common import bfcl as _bfcl
from ..common.text import counted
from ..data import dataset
from ..execution import limits
from ..live.errors import LiveError, NotRun, ServerError
from ..reports import repeat_stats as repeats
from ..reports.card import Card, Provenance, RepeatFigures
from ..reports.options import ALLOW_MISSING
from ..scoring.row import Row
from .outcome import (
    RESOURCE_LIMIT,
    SECTIONS_KEY,
    SERVER_ERROR,
    ConversationItem,
    failed_row,
    no_entry_reason,
    record,
    score,
)
from .state import CarefulState

if TYPE_CHECKING:
    from ..live.source import LiveSource

#: The file beside the repeat folders.
REPEATS_FILE = "repeats.json"


def run_repeats(item: ConversationItem, state: CarefulState, conversation: dataset.Conversation) -> None:
    """The item body with K > 1: score every repeat, record them, fail unless all pass."""
    rows: list[Row] = []
    failures: list[str | None] = []
    sections: list[tuple[str, str]] = []
    for repeat in range(1, state.options.repeat + 1):
        item.repeat = repeat
        item.stash[SECTIONS_KEY] = []
        row, failure = _one_repeat(item, state, conversation, repeat)
        row["repeat"] = repeat
        rows.append(row)
        failures.append(failure)
        sections += [(f"{title}, repeat {repeat}", text) for title, text in item.stash.get(SECTIONS_KEY, [])]
    item.stash[SECTIONS_KEY] = sections
    record(item, {**rows[representative(rows, failures)], "repeat_rows": rows})
    failing = [index for index, failure in enumerate(failures) if failure]
    if not failing:
        return
    if state.options.allow_missing and all("unscored" in rows[i] for i in failing):
        pytest.skip(f"unscored (allowed by {ALLOW_MISSING}) in {len(failing)} of {len(rows)} repeats")
    pytest.fail(failure_text(failures, state.options.gate), pytrace=False)


def _one_repeat(
    item: ConversationItem, state: CarefulState, conversation: dataset.Conversation, repeat: int
) -> tuple[Row, str | None]:
    """One repeat's row and failure text (None when it passes the gate); as ``item.run_conversation``."""
    run_failure = None
    try:
        # repeats are live runs only (read_options): the source is a LiveSource
        result, entry = cast("LiveSource", state.source).result(item.condition, conversation, repeat)
    except NotRun as problem:  # this session did not run it: the item is skipped, a rerun runs it
        pytest.skip(str(problem))
    except ServerError as problem:  # the server failed it: never the model's verdict
        return failed_row(item, state, conversation, str(problem), SERVER_ERROR), f"unscored: {problem}"
    except LiveError as problem:
        if problem.entry is None:  # the run stopped (budget, credit, output): not scored
            reason = f"{no_entry_reason(problem)}: {problem}"
            return failed_row(item, state, conversation, reason), f"unscored: {reason}"
        run_failure = f"model run failed: {problem} (scored as an inference error; a rerun retries it)"
        result, entry = problem.entry.result, problem.entry
    decoder = state.source.decoder()
    try:
        with limits.metered(state.options.limits):
            row, failure = score(item, state, conversation, result, entry, decoder)
    except limits.ResourceLimit as exceeded:
        row = failed_row(item, state, conversation, exceeded.reason, RESOURCE_LIMIT)
        return row, f"[{state.options.gate} gate] BFCL {RESOURCE_LIMIT}\n\n[resource_limit] {exceeded.reason}"
    return row, run_failure or failure


def representative(rows: list[Row], failures: list[str | None]) -> int:
    """The repeat whose row stands for the conversation in per-conversation counts.

    The first repeat failing BFCL, else the first failing the gate, else the
    first: then the summary's pass counts (gate and BFCL) are pass^K.
    """
    for index, row in enumerate(rows):
        if not row["bfcl"]["valid"]:
            return index
    return next((index for index, failure in enumerate(failures) if failure), 0)


def failure_text(failures: list[str | None], gate: str) -> str:
    """A first line naming the failing repeats, then each one's failure as a block."""
    failing = [(index + 1, text) for index, text in enumerate(failures) if text]
    first = failing[0][1].splitlines()[0].removeprefix(f"[{gate} gate] ")
    lines = [
        f"[{gate} gate] failed in {len(failing)} of {len(failures)} repeats "
        f"({', '.join(f'r{r}' for r, _ in failing)}); r{failing[0][0]}: {first}"
    ]
    for repeat, text in failing:
        lines += ["", f"[repeat {repeat}]", *("  " + line if line else line for line in text.splitlines())]
    return "\n".join(lines)


# --- scorecards and summary ----------------------------------------------------------


def rows_by_repeat(rows: list[Row], k: int) -> list[list[Row]]:
    """Per repeat, every conversation's row of that repeat (from the items' ``repeat_rows``)."""
    return [[row["repeat_rows"][index] for row in rows] for index in range(k)]


def section(per_repeat: list[list[Row]]) -> RepeatFigures:
    """pass^K, pass@K, flip rate, mean and interval on BFCL and safe, per category and overall."""
    outcomes: dict[str, dict[str, list[bool]]] = {"bfcl": {}, "safe": {}}
    for rows in per_repeat:
        for row in rows:
            outcomes["bfcl"].setdefault(row["id"], []).append(bool(row["bfcl"]["valid"]))
            outcomes["safe"].setdefault(row["id"], []).append(bool(row["safe"]))
    ids = list(outcomes["bfcl"])
    groups = {c: [i for i in ids if dataset.category_of(i) == c] for c in _bfcl.CATEGORIES}
    groups = {c: members for c, members in groups.items() if members}
    groups["all"] = ids
    return {
        category: {
            metric: repeats.repeat_stats({i: outcomes[metric][i] for i in members}) for metric in ("bfcl", "safe")
        }
        for category, members in groups.items()
    }


def write_repeats_file(directory: Path, prov: Provenance, repeat: RepeatFigures) -> Path:
    """``repeats.json`` beside the repeat folders: the repeat statistics and the run's provenance."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / REPEATS_FILE
    body = {"provenance": prov, "repeat": repeat, "interval_method": repeats.INTERVAL_METHOD}
    path.write_text(json.dumps(body, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def stale_note(folder: Path, condition: str, k: int) -> list[str]:
    """A note when ``folder`` also holds scorecards this run did not write (an earlier run's).

    A run without repeats leaves ``<condition>/scorecard.json``, a run with more
    repeats ``repeat-<j>/`` for j > K. Nothing is deleted (they are results), but
    careful-report would read them as more repeats of this run (and, given
    ``<condition>/`` itself, only the run-without-repeats' scorecard).
    """
    stale = [folder / "scorecard.json"] if (folder / "scorecard.json").is_file() else []
    stale += sorted(
        (
            p
            for p in folder.glob("repeat-*/scorecard.json")
            if not p.parent.name.removeprefix("repeat-").isdigit() or int(p.parent.name.removeprefix("repeat-")) > k
        ),
        key=lambda p: p.parent.name,
    )
    if not stale:
        return []
    names = ", ".join(str(p.relative_to(folder)) for p in stale)
    return [
        f"{condition}: {folder} also holds {names} from an earlier run, which careful-report reads as "
        f"repeats of this one; remove them to compare these {k} repeats alone"
    ]


def summary_lines(condition: str, card: Card) -> list[str]:
    """One line per category: pass^K, pass@K and flip rate, on BFCL and safe."""
    lines = []
    for category, figures in card.get("repeat", {}).items():
        b, s = figures["bfcl"], figures["safe"]
        k = b["k"]
        lines.append(
            f"[{condition}] {k} repeats, {category.removeprefix('multi_turn_')} ({counted(b['n'], 'conversation')}): "
            f"BFCL pass^{k} {100 * b['pass_all']:.1f}%, pass@{k} {100 * b['pass_any']:.1f}%, "
            f"flip rate {100 * b['flip_rate']:.1f}%, mean {100 * b['mean']:.1f}% "
            f"[{100 * b['interval'][0]:.1f}, {100 * b['interval'][1]:.1f}]; "
            f"safe pass^{k} {100 * s['pass_all']:.1f}%, pass@{k} {100 * s['pass_any']:.1f}%, "
            f"flip rate {100 * s['flip_rate']:.1f}%"
        )
    if lines:
        lines.append(
            f"[{condition}] the tables above pool the repeats (n = conversations x repeats; "
            "accuracies are means over repeats); each repeat's scorecard is in its repeat-<k>/ folder"
        )
    return lines
