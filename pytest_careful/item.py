"""One collected conversation x condition, and what running it does."""

from __future__ import annotations

import json
from typing import Any

import pytest
from _pytest.nodeid import coerce_node_id

from . import dataset, rules, subreports
from .live import confirm
from .live.source import LiveError
from .evidence import format_bfcl_failure, format_violations, transcript
from .results import evaluate
from .state import SESSION_KEY

GATED_RULES = {
    "bfcl": (),
    "safe": rules.SAFETY_RULES,
    "strict": rules.SAFETY_RULES + ("unconfirmed_destructive",),
    "rules": rules.RULES,
    "none": (),
}
ROW_KEY = pytest.StashKey[str]()
LOG_KEY = pytest.StashKey[str]()
#: Report sections of the call phase only (see ``call_sections``).
SECTIONS_KEY = pytest.StashKey[list[tuple[str, str]]]()

#: JUnit property names: a documented, stable contract (see README).
PROPERTY_PREFIX = "careful_"


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
        # Node ids read like BFCL ids so that copy-pasted ids and -k work.
        self._id = coerce_node_id(f"{conversation_id}[{condition}]")

    def reportinfo(self) -> tuple[str, int, str]:
        return f"careful/{dataset.category_of(self.conversation_id)}", 0, self.name


def run_conversation(request: pytest.FixtureRequest) -> None:
    """The test body of every CarefulItem (collected as its ``callobj``)."""
    item: CarefulItem = request.node  # type: ignore[assignment]
    state = request.config.stash[SESSION_KEY]
    conversation = dataset.get(item.conversation_id)
    run_failure = None
    try:
        result, entry = state.source.result(item.condition, conversation)
    except LookupError as problem:
        pytest.fail(f"input problem: {problem}", pytrace=False)
    except LiveError as problem:
        if problem.entry is None:  # the run stopped (budget, credit, server): not scored
            pytest.fail(f"model run failed: {problem}", pytrace=False)
        # Scored as BFCL scores an inference error; the next run retries it.
        run_failure = f"model run failed: {problem} (scored as an inference error; a rerun retries it)"
        result, entry = problem.entry.result, problem.entry
    evaluation = evaluate(conversation, result, state.source.decoder(),
                          model_name=state.source.decoder_key, entry=entry)
    confirmations = None
    if item.condition == "confirm" and entry is not None and evaluation.run is not None:
        # Read back from the inference log, so rescoring a logged confirm run agrees.
        confirmations = confirm.confirmations(entry.inference_log, evaluation.run.raw_index)
    row = rules.score(evaluation, state.declarations, state.settings, confirmations)
    row.update(condition=item.condition, model=state.source.model)
    if item.condition == "confirm" and entry is not None:
        row["answers"] = confirm.answer_counts(entry.inference_log)
    live_details(state.source, item, row)
    gated = GATED_RULES[state.options.gate]
    _rule_subtests(request, row, gated, quiet_unconfirmed=item.condition != "confirm")
    # Only now: subtest reports copy the item's sections, properties and (through
    # our makereport wrapper) its row; the row must cross xdist once, on the item's report.
    item.stash[ROW_KEY] = json.dumps(row, sort_keys=True)
    # What record_property does, without its warning under the default xunit2
    # family: user properties reach the JUnit XML (and cross xdist) in any family.
    item.user_properties.extend(junit_properties(row).items())
    fails = state.options.gate != "none" and not row["bfcl"]["valid"]
    if fails or _shows_passed_sections(request.config) or any(row["counts"].get(r) for r in gated):
        # Sections are shown for failures (and with -rP/-rA); building and sending
        # the transcript of every passing item would only cost time.
        sections = [("careful transcript", transcript(evaluation))]
        log = item.stash.get(LOG_KEY, "")
        if log:
            sections.append(("careful model loop (BFCL's log, last 100 lines)", "\n".join(log.splitlines()[-100:])))
        item.stash[SECTIONS_KEY] = sections
    if run_failure:
        pytest.fail(run_failure, pytrace=False)
    failures = ([format_bfcl_failure(evaluation)] if fails else []) + subreports.pending(item)
    if failures:
        pytest.fail("\n\n".join(failures), pytrace=False)


def call_sections(item: pytest.Item) -> list[tuple[str, str]]:
    """The item's sections, titled as ``add_report_section("call", ...)`` titles them.

    Given to the call report only: ``add_report_section`` would also copy them
    into the teardown report, which never shows them but would carry every
    transcript across xdist a second time.
    """
    return [(f"Captured {key} call", content) for key, content in item.stash.get(SECTIONS_KEY, [])]


def live_details(source: Any, item: CarefulItem, row: dict[str, Any]) -> None:
    """Live runs: whether the row was resumed from the result file, the loop's log."""
    runs = getattr(source, "runs", None)
    if runs is None:
        return
    key = (item.condition, item.conversation_id)
    row["resumed"] = key in source.resumed
    run = runs.get(key)
    if run is not None:
        row["seconds"] = round(run.seconds, 3)
        cost = run.entry.get("careful_cost_usd")
        if cost:
            row["cost_usd"] = cost
        item.stash[LOG_KEY] = run.log


def _shows_passed_sections(config: pytest.Config) -> bool:
    chars = config.getoption("reportchars", "") or ""
    return "P" in chars or "A" in chars


def _rule_subtests(request: pytest.FixtureRequest, row: dict[str, Any], gated: tuple[str, ...],
                   quiet_unconfirmed: bool) -> None:
    for rule in rules.RULES:
        count = row["counts"].get(rule, 0)
        if not count:
            continue  # a rule that passes prints nothing
        if rule == "unconfirmed_destructive" and quiet_unconfirmed and rule not in gated:
            continue  # without the confirm protocol every destructive call is unconfirmed
        if rule in gated:
            violations = [v for v in row["violations"] if v["rule"] == rule]
            subreports.report(request, rule, {"count": count}, subreports.FAILED,
                              format_violations(rule, violations))
        else:
            subreports.report(request, rule, {"count": count}, subreports.XFAILED,
                              f"{count} {rule.replace('_', ' ')} (reported, not gated)")


def junit_properties(row: dict[str, Any]) -> dict[str, str | int]:
    """The stable JUnit property contract: JSON-safe strings and ints only."""
    props: dict[str, str | int] = {
        "careful_conversation": row["id"],
        "careful_condition": row["condition"],
        "careful_category": row["category"],
        "careful_bfcl": "pass" if row["bfcl"]["valid"] else "fail",
        "careful_bfcl_error": row["bfcl"]["error_type"] or "",
        "careful_safe": "pass" if row["safe"] else "fail",
        "careful_strict": "pass" if row["strict"] else "fail",
    }
    for rule in rules.RULES:
        props[PROPERTY_PREFIX + rule] = int(row["counts"].get(rule, 0))
    # Live runs and the confirm protocol add theirs (only where they apply).
    if "resumed" in row:
        props["careful_resumed"] = "yes" if row["resumed"] else "no"
    for kind, count in sorted(row.get("answers", {}).items()):
        props[f"careful_answers_{kind}"] = int(count)
    if "answers" in row:
        props["careful_confirmed_destructive"] = int(row["counts"].get("confirmed_destructive", 0))
    for figure, usd in sorted(row.get("cost_usd", {}).items()):
        props[f"careful_cost_usd_{figure}"] = f"{usd:.6f}"
    return props


def make_items(collector: CarefulCollector, conversations: list[dataset.Conversation],
               protocols: tuple[str, ...]) -> list[CarefulItem]:
    items = []
    for conversation in conversations:
        for condition in protocols:
            item = CarefulItem.from_parent(
                collector, name=f"{conversation.id}[{condition}]", callobj=run_conversation,
                conversation_id=conversation.id, condition=condition,
            )
            for marker in markers_for(conversation, condition):
                item.add_marker(marker)
            items.append(item)
    return items


def markers_for(conversation: dataset.Conversation, condition: str) -> list[str]:
    classes = [CLASS_MARKERS[c] for c in conversation.involved_classes]
    return [conversation.category.removeprefix("multi_turn_"), condition, "careful", *classes]


CLASS_MARKERS = {
    "GorillaFileSystem": "gorilla_file_system",
    "MathAPI": "math_api",
    "MessageAPI": "message_api",
    "TwitterAPI": "twitter_api",
    "TicketAPI": "ticket_api",
    "TradingBot": "trading_bot",
    "TravelAPI": "travel_api",
    "VehicleControlAPI": "vehicle_control_api",
}


