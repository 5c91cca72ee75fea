"""What running one conversation comes to: its row, failure text, report sections, JUnit properties.

Shared by the item's test body (:mod:`.item`) and ``--careful-repeat`` (:mod:`.repeat_runs`),
which scores K repeats in one item.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NoReturn, Protocol, TypeGuard

import pytest

from ..common.text import counted, shorten
from ..data import dataset
from ..data.result_files import LoggedEntry
from ..evaluation.evaluate import Evaluation
from ..execution import isolation
from ..execution.decoding import Decoder
from ..live.errors import LiveError, OutputUnwritable, SetupFailed
from ..protocols import registry as protocols
from ..reports import html_report
from ..reports.options import ALLOW_MISSING
from ..scoring.conversation import RESOURCE_LIMIT, UNSCORED, ConversationResult, score_conversation, unscored_row
from ..scoring.conversation import SERVER_ERROR as SERVER_ERROR  # the items' name for it, as before
from ..scoring.evidence import format_bfcl_failure, format_violations, transcript
from ..scoring.row import CostUsd, Row
from ..scoring.rules import Rule, checking, is_built_in
from ..sources.reference_logged import Source
from ..verify.audit import DEFECT
from ..verify.audit_file import AuditMark
from ..verify.options import AUDIT, EXCLUDE
from .state import SESSION_KEY, CarefulState

ROW_KEY = pytest.StashKey[str]()
LOG_KEY = pytest.StashKey[str]()
#: Report sections of the call phase only (see ``call_sections``).
SECTIONS_KEY = pytest.StashKey[list[tuple[str, str]]]()


#: JUnit property names: a documented, stable contract (see README).
PROPERTY_PREFIX = "careful_"


class ConversationItem(Protocol):
    """What scoring reads of a conversation's item (``item.CarefulItem``, which imports this module)."""

    condition: str
    conversation_id: str
    repeat: int
    config: pytest.Config
    stash: pytest.Stash

    @property
    def nodeid(self) -> str: ...


def score(
    item: ConversationItem,
    state: CarefulState,
    conversation: dataset.Conversation,
    result: object,
    entry: LoggedEntry | None,
    decoder: Decoder,
) -> tuple[Row, str | None]:
    """Replay, verdict, rules and evidence of one conversation: its row and failure text.

    Runs inside the conversation's budget (``limits.metered``): the evidence too,
    since a state can be costly to show. And under ``isolation.EXCLUSIVE``: a live
    run's conversations execute calls on other threads meanwhile (``live.inflight``),
    and the replay's instances must see their own world until the row is made.
    """
    with isolation.EXCLUSIVE:
        return _score_exclusive(item, state, conversation, result, entry, decoder)


def _score_exclusive(
    item: ConversationItem,
    state: CarefulState,
    conversation: dataset.Conversation,
    result: object,
    entry: LoggedEntry | None,
    decoder: Decoder,
) -> tuple[Row, str | None]:
    row, evaluation = score_conversation(conversation, result, entry, decoder, item.condition, state.scoring)
    live_details(state.source, item, row)
    write_detail(item, state, evaluation)
    gated = checking.gate_names(state.options.gate, state.scoring.rules)
    failing = _failing_rules(row, gated) if state.options.gate != "none" else []
    failing += [r for r in row.get("rule_errors", {}) if r not in failing]  # a rule that raised: said, always
    bfcl_fails = state.options.gate != "none" and not row["bfcl"]["valid"]
    sections = []
    # A passing item's sections are shown only by -rP/-rA and JUnit's <system-out>:
    # otherwise its rule evidence would be built and sent across xdist for nothing.
    shown = bfcl_fails or failing or _shows_passed_sections(item.config) or item.config.getoption("xmlpath", None)
    reported = _reported_rules(row, gated, state.scoring.rule_names) if shown else ""
    if reported:
        sections.append(("careful rules (reported, not gated)", reported))
    if bfcl_fails or failing or _shows_passed_sections(item.config):
        # The transcript of every passing item would only cost time to build and send.
        sections.append(("careful transcript", transcript(evaluation)))
        log = item.stash.get(LOG_KEY, "")
        if log:
            sections.append(("careful model loop (BFCL's log, last 100 lines)", "\n".join(log.splitlines()[-100:])))
    failure = _failure_text(row, evaluation, state.options.gate, bfcl_fails, failing) if bfcl_fails or failing else None
    item.stash[SECTIONS_KEY] = sections
    return row, failure


def write_detail(item: ConversationItem, state: CarefulState, evaluation: Evaluation) -> None:
    """report.html's turn-by-turn detail, to this process's sidecar file.

    Not on the test report: what crosses xdist stays one row per item (``html_report``).
    """
    if state.details_dir is None:
        return
    worker = getattr(item.config, "workerinput", {}).get("workerid", "main")
    repeat = getattr(item, "repeat", 1)  # --careful-repeat: each repeat's detail apart (scorecard_files._repeat_page)
    node = item.nodeid if repeat == 1 else f"{item.nodeid}@repeat-{repeat}"
    try:
        detail = html_report.conversation_detail(evaluation)
    except Exception as exc:  # the page must never cost a conversation its score (a budget overrun still stops it)
        detail = {"classes": [], "turns": [], "inference_error": None, "error": f"{type(exc).__name__}: {exc}"}
    html_report.DetailSink(state.details_dir, worker).write(node, detail)


def _failing_rules(row: Row, gated: tuple[str, ...]) -> list[str]:
    return [rule for rule in gated if row["counts"].get(rule, 0)]


def _reported_rules(row: Row, gated: tuple[str, ...], rule_names: Sequence[str]) -> str:
    """Evidence of the rules that count but do not gate, one titled block each."""
    blocks = []
    for rule in rule_names:
        count = row["counts"].get(rule, 0)
        if (
            not count
            or rule in gated
            or (rule == "unconfirmed_destructive" and not protocols.has_scripted_user(row["condition"]))
        ):
            continue  # without the confirm protocol every destructive call is unconfirmed
        violations = [v for v in row["violations"] if v["rule"] == rule]
        blocks.append(f"[{rule}] {count}, reported, not gated\n" + _indent(format_violations(rule, violations)))
    return "\n".join(blocks)


def _failure_text(row: Row, evaluation: Evaluation, gate: str, bfcl_fails: bool, failing: list[str]) -> str:
    """The item's failure: a first line for summaries, then one block per failing sub-assertion."""
    reasons = [f"BFCL {row['bfcl']['error_type']}"] if bfcl_fails else []
    errors = row.get("rule_errors", {})
    reasons += [f"{rule} raised" if rule in errors else f"{rule} {row['counts'][rule]}" for rule in failing]
    lines = [f"[{gate} gate] " + ", ".join(reasons)]
    lines += audit_block(row)
    if bfcl_fails:
        lines += ["", "[bfcl] failed", _indent(format_bfcl_failure(evaluation))]
    for rule in failing:
        if rule in errors:  # a rule of the user's own that raised: its error, where it was raised
            lines += ["", f"[{rule}] error in the rule itself", _indent(f"{row['id']}: {errors[rule]}")]
            continue
        violations = [v for v in row["violations"] if v["rule"] == rule]
        lines += ["", f"[{rule}] failed (gated)", _indent(format_violations(rule, violations))]
    return "\n".join(lines)


def audit_block(row: Row) -> list[str]:
    """The item audit's defects of the reference, one titled block before the rules' (none: nothing)."""
    defects = [m for m in row.get("audit", []) if m["severity"] == DEFECT]
    if not defects:
        return []
    lines = ["", f"[audit] the reference has {counted(len(defects), 'defect')}: no model can pass it as given"]
    for mark in defects:
        argument = mark["argument"] or "the call"
        lines.append(f"  {mark['finding']}: turn {mark['turn']}, call {mark['call']}, {argument} = {_literal(mark)}")
        if mark["near_miss"]:
            lines.append(f"    near miss: {mark['near_miss']}")
        lines.append(f"    {mark['detail']}; BFCL reads it in the {mark['checked_by']}")
    lines.append("  (careful-audit; docs/audit.md: the classes and their evidence)")
    return lines


def _literal(mark: AuditMark) -> str:
    value = mark["literal"]
    return shorten(repr(value), 200) if not isinstance(value, str) else repr(shorten(value, 200))


def audit_defects(row: Row) -> str:
    """The row's defects as the ``careful_audit`` JUnit property says them (``""``: none)."""
    return ", ".join(
        f"defect:{m['finding']} (turn {m['turn']}, {m['argument'] or 'the call'})"
        for m in row.get("audit", [])
        if m["severity"] == DEFECT
    )


def _indent(text: str) -> str:
    return "\n".join("  " + line if line else line for line in text.splitlines())


def fail_or_exclude(state: CarefulState, row: Row, failure: str) -> NoReturn:
    """Fail the item; under ``--careful-audit=exclude``, one whose reference has a defect is xfailed
    instead: it counts in no figure, and its text still says why it failed."""
    if state.options.audit == EXCLUDE and audit_defects(row):
        pytest.xfail(f"excluded by {AUDIT}={EXCLUDE}: {audit_defects(row)}\n{failure}")
    pytest.fail(failure, pytrace=False)


def record(item: ConversationItem, row: Row) -> None:
    """The row, on the item: it crosses xdist on the call report.

    Its JUnit properties (``junit_properties``) are a function of the row: the controller
    adds them to the call and teardown reports (``session.CarefulPlugin``) instead of
    sending them twice per item across xdist (two thirds of what the workers serialised).
    """
    item.stash[ROW_KEY] = json.dumps(row, sort_keys=True)
    announce(item.config, row)


def announce(config: pytest.Config, row: Row) -> None:
    """``pytest_careful_conversation_scored``, once per row (each repeat's under ``--careful-repeat``)."""
    hook = config.hook.pytest_careful_conversation_scored
    if not hook.get_hookimpls():
        return
    state = config.stash[SESSION_KEY]
    for each in row.get("repeat_rows", [row]):
        hook(result=ConversationResult.from_row(each, state.scoring.rule_names))


def unscored(
    item: ConversationItem,
    state: CarefulState,
    conversation: dataset.Conversation,
    reason: str,
    error_type: str = UNSCORED,
) -> NoReturn:
    """Fail closed: a conversation that could not be scored is a failure everywhere.

    Its row counts in every total (BFCL and safe fail), its JUnit properties say
    why, and under ``--careful-allow-missing`` it is skipped instead. ``error_type``
    ``SERVER_ERROR``: the server failed it (the model's answer was never seen).
    """
    record(item, failed_row(item, state, conversation, reason, error_type))
    if state.options.allow_missing:
        pytest.skip(f"unscored (allowed by {ALLOW_MISSING}): {reason}")
    pytest.fail(f"unscored: {reason}", pytrace=False)


def no_entry_reason(problem: LiveError) -> str:
    """What left a conversation with no entry to score: the run stopped, this plugin, or the model run."""
    if isinstance(problem, OutputUnwritable):
        return "run stopped"
    return "not run" if isinstance(problem, SetupFailed) else "model run failed"


def over_budget(
    item: ConversationItem, state: CarefulState, conversation: dataset.Conversation, reason: str
) -> NoReturn:
    """A conversation whose scoring went over its budget fails, and nothing else does.

    It is scored as a failure (BFCL error type ``careful:resource_limit``, every
    verdict failing), not as unscored: the model's own output made it costly, so
    ``--careful-allow-missing`` must not skip it.
    """
    record(item, failed_row(item, state, conversation, reason, RESOURCE_LIMIT))
    item.stash[SECTIONS_KEY] = []
    pytest.fail(
        f"[{state.options.gate} gate] BFCL {RESOURCE_LIMIT}\n\n[resource_limit] {reason}\n"
        "  this conversation fails (its rules and transcript are not computed); the others are scored",
        pytrace=False,
    )


def failed_row(
    item: ConversationItem,
    state: CarefulState,
    conversation: dataset.Conversation,
    reason: str,
    error_type: str = UNSCORED,
) -> Row:
    """``unscored_row`` for ``item`` of this session (its condition, model, declarations, boundary)."""
    return unscored_row(conversation, item.condition, reason, state.scoring, error_type=error_type)


def call_sections(item: pytest.Item) -> list[tuple[str, str]]:
    """The item's sections, titled as ``add_report_section("call", ...)`` titles them.

    Given to the call report only: ``add_report_section`` would also copy them
    into the teardown report, which never shows them but would carry every
    transcript across xdist a second time.
    """
    return [(f"Captured {key} call", content) for key, content in item.stash.get(SECTIONS_KEY, [])]


def live_details(source: Source, item: Any, row: Row) -> None:
    """Live runs: whether the row was resumed from the result file, the loop's log."""
    details = source.live_details((item.condition, item.conversation_id, item.repeat))
    if details is None:
        return
    row["resumed"] = details.resumed
    run = details.run
    if run is not None:
        row["seconds"] = round(run.seconds, 3)
        cost = _cost(run.entry.get("careful_cost_usd"))
        if cost is not None:
            row["cost_usd"] = cost
        item.stash[LOG_KEY] = run.log


def _cost(logged: object) -> CostUsd | None:
    """An entry's ``careful_cost_usd`` (``live.backends.claude``), when it holds both figures as numbers."""
    if not isinstance(logged, dict):
        return None
    at_list, conservative = logged.get("list"), logged.get("conservative")
    if not (_usd(at_list) and _usd(conservative)):
        return None
    return {"list": float(at_list), "conservative": float(conservative)}


def _usd(value: object) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shows_passed_sections(config: pytest.Config) -> bool:
    chars = config.getoption("reportchars", "") or ""
    return "P" in chars or "A" in chars


#: Tallies with a JUnit property of their own, after the built-in rules' (the contract as it has always been).
JUNIT_TALLIES = ("collateral_changed_state",)


def junit_properties(row: Row, model: str, rules: Sequence[Rule], audit: bool = False) -> dict[str, str | int]:
    """The stable JUnit property contract: JSON-safe strings and ints only; ``audit``: the run
    carries the item audit (``careful_audit``, empty for an item whose reference has no defect)."""
    props: dict[str, str | int] = {
        "careful_model": model,
        "careful_conversation": row["id"],
        "careful_condition": row["condition"],
        "careful_category": row["category"],
        "careful_bfcl": "pass" if row["bfcl"]["valid"] else "fail",
        "careful_bfcl_error": row["bfcl"]["error_type"] or "",
        "careful_safe": "pass" if row["safe"] else "fail",
        "careful_strict": "pass" if row["strict"] else "fail",
    }
    for name in _property_names(row, rules):
        props[PROPERTY_PREFIX + name] = int(row["counts"].get(name, 0))
    if "turns" in row:  # per-turn credit (turn_credit.py); "" when no turn left the reference
        props["careful_turns"], props["careful_turns_matched"] = int(row["turns"]), int(row["turns_matched"])
        first = row["first_divergent_turn"]
        props["careful_first_divergent_turn"] = "" if first is None else int(first)
    if audit:
        props["careful_audit"] = audit_defects(row)
    if "unscored" in row:
        props["careful_input_error"] = row["unscored"]
    if "resource_limit" in row:
        props["careful_resource_limit"] = row["resource_limit"]
    # Live runs and the confirm protocol add theirs (only where they apply).
    if "resumed" in row:
        props["careful_resumed"] = "yes" if row["resumed"] else "no"
    if "repeat_rows" in row:  # --careful-repeat: each repeat's verdicts, in order
        props.update(junit_repeat_properties(row["repeat_rows"]))
    if "answers" in row:  # the confirm protocol; sorted by kind, as the contract has always listed them
        answers = row["answers"]
        props["careful_answers_no"] = int(answers["no"])
        props["careful_answers_restate"] = int(answers["restate"])
        props["careful_answers_yes"] = int(answers["yes"])
        props["careful_confirmed_destructive"] = int(row["counts"].get("confirmed_destructive", 0))
    if row.get("cost_usd"):  # a paid run
        props["careful_cost_usd_conservative"] = f"{row['cost_usd']['conservative']:.6f}"
        props["careful_cost_usd_list"] = f"{row['cost_usd']['list']:.6f}"
    return props


def _property_names(row: Row, rules: Sequence[Rule]) -> list[str]:
    """Each rule's count: the built-in ones, ``JUNIT_TALLIES``, then the others, in the run's order."""
    ours = [r.name for r in rules if is_built_in(r)]
    tallies = [t for t in JUNIT_TALLIES if t in row["counts"]]
    return ours + tallies + [r.name for r in rules if not is_built_in(r)]


def junit_repeat_properties(rows: list[Row]) -> dict[str, str | int]:
    """Each repeat's verdicts, in repeat order (strings and ints only)."""

    def verdicts(passed: list[bool]) -> str:
        return ",".join("pass" if ok else "fail" for ok in passed)

    return {
        "careful_repeats": len(rows),
        "careful_repeat_bfcl": verdicts([bool(r["bfcl"]["valid"]) for r in rows]),
        "careful_repeat_safe": verdicts([bool(r["safe"]) for r in rows]),
    }
