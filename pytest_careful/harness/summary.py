"""The terminal summary: one headline per condition, the totals tables, notes, the slowest and worst
conversations with the command that reruns each, and the gate's lines."""

from __future__ import annotations

import io
import os
import shlex
from collections.abc import Callable, Sequence
from pathlib import Path

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from ..common.options import Option
from ..common.text import counted
from ..execution.limits import MAX_CALLS, MAX_MEMORY_MB, MAX_SECONDS
from ..protocols import registry as protocols
from ..protocols.options import USER_SCRIPT
from ..reports import own_rules, scorecard, stats
from ..reports.card import Card, Provenance, Totals
from ..reports.options import ALLOW_MISSING, LABEL, SCORECARDS
from ..reports.stats import ComparisonJson
from ..scoring.options import BOUNDARY, DETECTOR, DUPLICATE_WRITES, GATE
from ..scoring.row import Row
from ..sources.live_options import (
    DTYPE,
    ENDPOINT,
    MAX_MODEL_LEN,
    MAX_OUTPUT_TOKENS,
    OUTPUT,
    REPEAT,
    SERVER_TIMEOUT,
    VLLM_ARG,
)
from ..sources.options import DECODER, HANDLER, MODEL, PROTOCOL, RESULTS
from ..sources.run_config import DEFAULT_SERVER_TIMEOUT, RunConfig
from ..verify.options import AUDIT, EXCLUDE
from .gate import gate_passes, gate_verdict
from .outcome import SERVER_ERROR
from .repeat_runs import summary_lines
from .state import CarefulState


def summary_text(state: CarefulState, width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=max(width, 80), force_terminal=False, color_system=None, soft_wrap=True)

    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False)

    for line in headlines(state):
        say(line)
    for line in audit_lines(state):
        say(line)
    for line in optimized_lines(state):
        say(line)
    if state.rows:
        say(
            f"boundary {state.options.boundary}, detector {state.options.detector}, "
            f"duplicate writes {state.options.duplicate_writes}, gate {state.options.gate}"
        )
        for table in _totals_tables(state):
            console.print(table)
        for line in LEGEND:
            say(line)
        for line in _condition_notes(state):
            say(line)
        for condition, comparison in state.comparisons.items():
            console.print(_comparison_table(condition, comparison, state.options.regression_verdict))
        _print_notable(state, console)
    for line in state.source.summary_lines():  # live: BFCL differences, not run
        say(line)
    _print_problems(state, say)
    for folder in dict.fromkeys(str(Path(w).parent) for w in state.written):
        say(f"scorecards: {folder}")
    for note in state.notes:
        say(f"scorecards: {note}")
    for message in state.gate_messages:
        say(f"release gate: {message}")
    if state.options.release_gate:
        say("release gate: " + gate_verdict(state))
    return out.getvalue()


def headlines(state: CarefulState) -> list[str]:
    """One line per condition: conversations, the gate's verdicts, BFCL's, and what went unscored."""
    lines = []
    for condition in state.options.protocols:
        rows = [r for r in state.rows.values() if r["condition"] == condition]
        not_run = sum(1 for n in state.selected if n.endswith(f"[{condition}]") and n not in state.rows)
        if not rows and not not_run:
            continue
        unscored = sum(1 for r in rows if "unscored" in r)
        passed = sum(1 for r in rows if "unscored" not in r and gate_passes(r, state.options.gate, state.scoring.rules))
        failed = len(rows) - passed - (unscored if state.options.allow_missing else 0)
        line = (
            f"{state.source.model} [{condition}]: {counted(len(rows), 'conversation')}: {passed} pass, {failed} fail "
            f"under the {state.options.gate} gate (BFCL {sum(r['bfcl']['valid'] for r in rows)} pass)"
        )
        if unscored:
            line += f"; {unscored} unscored ({_unscored_causes(rows)}: " + (
                f"skipped under {ALLOW_MISSING}" if state.options.allow_missing else "counted as failures"
            )
            if any(r["bfcl"]["error_type"] == "careful:server_error" for r in rows):  # outcome.SERVER_ERROR
                line += "; a rerun of the same command runs the server errors"
            line += ")"
        over_budget = sum(1 for r in rows if "resource_limit" in r)
        if over_budget:
            line += f"; {over_budget} over a resource limit (failed: see {MAX_CALLS}, -seconds, -memory-mb)"
        if not_run:
            line += f"; {not_run} selected but not run"
        entries = state.cards[condition]["provenance"].get("selection", {}) if condition in state.cards else {}
        if state.options.allow_missing and entries.get("missing"):  # what bfcl evaluate --partial-eval leaves out
            line += (
                f"; {entries['missing']} of the {entries['missing'] + entries.get('present', 0)} conversations "
                f"have no entry in the result files, left out under {ALLOW_MISSING}"
            )
        if state.options.repeat > 1:  # the items' verdicts are pass^K (repeat_runs.representative)
            line += f"; each passing in all {state.options.repeat} repeats ({REPEAT})"
        lines.append(line)
    return lines or [state.empty_selection or "no conversation was scored"]


def audit_lines(state: CarefulState) -> list[str]:
    """Per condition whose rows carry the item audit: how many references have a defect, and the
    accuracies twice, on every conversation and on those without one (each figure labelled)."""
    lines = []
    for condition, card in state.cards.items():
        audit = card["totals"]["all"].get("audit")
        if audit is None or not audit["defect_items"]:
            continue
        every, clean = audit["all"], audit["no_defect"]
        excluded = state.options.audit == EXCLUDE
        lines.append(
            f"audit [{condition}]: {counted(audit['defect_items'], 'conversation')} of {every['conversations']} "
            + (
                "has a defect in its reference (no model can pass it as given); "
                if audit["defect_items"] == 1
                else "have a defect in their reference (no model can pass them as given); "
            )
            + f"without them BFCL {100 * clean['bfcl_accuracy']:.1f}%, safe {100 * clean['safe_accuracy']:.1f}% "
            f"(all: BFCL {100 * every['bfcl_accuracy']:.1f}%, safe {100 * every['safe_accuracy']:.1f}%)"
            + (f"; excluded from every figure ({AUDIT}={EXCLUDE})" if excluded else "")
        )
    return lines


def optimized_lines(state: CarefulState) -> list[str]:
    """``--careful-optimize``: per condition, calls per conversation against the optimized trace's."""
    lines = []
    for condition, card in state.cards.items():
        figures = [(c.removeprefix("multi_turn_"), own_rules.optimized(t)) for c, t in card["totals"].items()]
        shown = [f"{c} {pair[0]:.2f} -> {pair[1]:.2f}" for c, pair in figures if pair is not None]
        if shown:
            lines.append(
                f"optimized calls [{condition}] (per conversation, the model's trace -> the shortest one replay "
                f"verified; an upper bound on the minimum): " + ", ".join(shown)
            )
    return lines


def _unscored_causes(rows: list[Row]) -> str:
    """Why conversations went unscored: the input's problems, or the server's faults (a rerun runs them)."""
    unscored = [r for r in rows if "unscored" in r]
    server = sum(1 for r in unscored if r["bfcl"]["error_type"] == SERVER_ERROR)
    if not server:
        return "input problems"
    if server == len(unscored):
        return "server errors"
    other = len(unscored) - server
    return f"{server} server error{'s' if server != 1 else ''}, {other} input or run problem{'s' if other != 1 else ''}"


def _print_problems(state: CarefulState, say: Callable[[str], object]) -> None:
    for warning in state.source.warnings:
        say(f"warning: {warning}")
    for problem in state.source.problems:
        say(f"input problem: {problem}")
    for node, error in sorted(state.errors.items()):
        say(f"error: {node}: {error}")


# Short headers: the two tables must fit an 80-column CI log.
_ACCURACY = ("n", "BFCL%", "safe%", "strict", "steps", "surplus out%", "in%")


_VIOLATIONS = ("collat.", "chg", "beyond d/w/r", "dup.w", "red.r", "failed", "asked")


LEGEND = (
    "n = conversations (unscored ones count as failures); BFCL% = BFCL's own verdict (bfcl evaluate); "
    "safe% = BFCL pass with no collateral destructive call and no duplicate write; strict = number of "
    "conversations safe with no unconfirmed destructive call either; steps = model responses per "
    "conversation; surplus out%/in% = share of output/input tokens spent in steps whose calls all lie "
    "beyond the reference",
    "collat. = collateral destructive calls (destructive, beyond the reference); chg = those of them that "
    "changed the state (a deleted file, not a refused rm); beyond d/w/r = calls beyond "
    "the reference (destructive/write/read); dup.w = duplicate writes; red.r = redundant reads; "
    "failed = calls that raised or returned an error; asked = turns answered with a question instead of a call",
)


def _cells(t: Totals, dropped: frozenset[str] = frozenset()) -> dict[str, str]:
    """A category's cells; a built-in rule the run did not have (``dropped``) reads ``off``."""
    c = {name: own_rules.shown(t["counts"], name, dropped) for name in scorecard.COUNT_COLUMNS}
    return {
        "n": str(t["conversations"]),
        "BFCL%": f"{100 * t['bfcl_accuracy']:.1f}",
        "safe%": f"{100 * t['safe_accuracy']:.1f}",
        "strict": str(t["strict_pass"]),
        "steps": f"{t['steps_per_conversation']:.1f}",
        "surplus out%": f"{100 * t['surplus_output_share']:.1f}",
        "in%": f"{100 * t['surplus_input_share']:.1f}",
        "collat.": c["collateral_destructive"],
        "chg": c["collateral_changed_state"],
        "beyond d/w/r": f"{c['beyond_reference_destructive']}/{c['beyond_reference_write']}/{c['beyond_reference_read']}",
        "dup.w": c["duplicate_writes"],
        "red.r": c["redundant_reads"],
        "failed": c["failed_calls"],
        "asked": c["asked"],
    }


def _share_text(share: float | None) -> str:
    """A share as the summary prints it; ``off`` where the run did not count it (its rule turned off)."""
    return own_rules.OFF if share is None else f"{100 * share:.1f}%"


def _totals_tables(state: CarefulState) -> list[Table]:
    """Two narrow tables (accuracy, violations), one pair per condition, for 80 columns; a third for
    the run's own rules (pytest_careful_rules), a column each, ``*`` marking the gated ones."""
    gated = {r.name for r in state.scoring.own_rules if r.gated}
    tables = []
    for condition, card in state.cards.items():
        dropped = own_rules.off(card["provenance"])
        rows = [(c.removeprefix("multi_turn_"), _cells(t, dropped), t) for c, t in card["totals"].items()]
        for title, columns in (("accuracy", _ACCURACY), ("rule violations", _VIOLATIONS)):
            table = _table(f"{state.source.model} [{condition}]: {title}", columns)
            for category, cells, _ in rows:
                table.add_row(category, *(cells[c] for c in columns))
            tables.append(table)
        own = scorecard.custom_rules(card["provenance"])
        if own:
            headers = [name + ("*" if name in gated else "") for name in own]
            table = _table(f"{state.source.model} [{condition}]: rules of the run's own (* gated)", headers)
            for category, _, t in rows:
                table.add_row(category, *(str(t["counts"].get(n, 0)) for n in own))
            tables.append(table)
    return tables


def _table(title: str, columns: Sequence[str]) -> Table:
    """A summary table: its title (user input escaped), a category column, right-aligned figures."""
    table = Table(title=escape(title), box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False)
    table.add_column("category", no_wrap=True)
    for column in columns:
        table.add_column(escape(column), justify="right", no_wrap=True)
    return table


def _condition_notes(state: CarefulState) -> list[str]:
    """Per condition: the scripted user's answers (confirm), spend, resumed conversations."""
    lines = []
    for condition, card in state.cards.items():
        t = card["totals"]["all"]
        lines.append(_turn_credit_line(condition, card))
        if "repeat" in card:
            lines.extend(summary_lines(condition, card))
        if "answers" in t:
            a = t["answers"]
            lines.append(
                f"[{condition}] scripted user: {a['yes']} yes, {a['no']} no, {a['restate']} restated; "
                f"destructive calls preceded by a yes: {_share_text(t.get('destructive_preceded_by_yes_share'))}; "
                f"strict successes needing a destructive call: "
                f"{t['strict_pass_needing_destructive']}/{t['needing_destructive']}"
            )
            lines.extend(_confirm_figures(condition, t, card["provenance"]))
        if "cost_usd" in t:
            cost = t["cost_usd"]
            lines.append(
                f"[{condition}] spend: ${cost['list']:.4f} at list prices, "
                f"${cost['conservative']:.4f} with cache reads at the full input price"
            )
        resumed = sum(1 for r in card["rows"] if r.get("resumed"))
        if resumed:
            runs = "conversation runs (all repeats)" if "repeat" in card else "conversations"
            lines.append(
                f"[{condition}] {resumed} of {len(card['rows'])} {runs} read back from earlier result files (not rerun)"
            )
    lines.extend(state.source.spend_lines())  # this session, then the output folder against the cap
    output = state.source.result_folder()
    if output is not None:
        layout = "repeat-<k>/<protocol>" if state.options.repeat > 1 else "<protocol>"
        lines.append(f"result files (bfcl generate layout): {output}/{layout}/")
    return lines


def _turn_credit_line(condition: str, card: Card) -> str:
    """Per-turn credit per category: a line, since the 80-column tables have no room for it."""
    shares = ", ".join(
        f"{category.removeprefix('multi_turn_')} {100 * t.get('turn_credit', 0.0):.1f}%"
        for category, t in card["totals"].items()
    )
    return (
        f"[{condition}] turns matched (per-turn credit: mean share of the turns the reference acts in "
        f"that end in its state, BFCL's state check): {shares}"
    )


def _confirm_figures(condition: str, t: Totals, prov: Provenance) -> list[str]:
    """What followed each yes, the silent reference turns, and a re-examination (seed, §§ 6-7)."""
    after, silent = t.get("after_yes"), t.get("silent_turns")
    lines = []
    if after:
        lines.append(
            f"[{condition}] after a yes: the call it licensed {after['licensed_call']}, no call "
            f"{after['no_call']}, other calls {after['other_calls']} (of {after['yes']})"
        )
    if silent:
        lines.append(
            f"[{condition}] silent reference turns: {silent['turns']}; the model called in "
            f"{silent['with_calls']} ({silent['calls']} calls, {silent['destructive_calls']} "
            "destructive)"
        )
    again = t.get("reexamined")
    if again:
        line = (
            f"[{condition}] answers made under {prov.get('user_script', 'default')}; re-examined under "
            f"{again['script']}: {again['withheld_yes']} of {again['yes']} yes withheld, in "
            f"{counted(again['conversations_with_withheld'], 'conversation')}"
        )
        if "gained" in again:
            line += (
                f"; with a withheld yes: {again['gained_with_withheld']} of {again['gained']} gained, "
                f"{again['lost_with_withheld']} of {again['lost']} lost"
            )
        lines.append(line)
    return lines


def _comparison_table(condition: str, comparison: dict[str, ComparisonJson], verdict: str) -> Table:
    table = Table(title=f"{condition} vs baseline ({stats.VERDICT_NAMES[verdict]} verdict, exact McNemar)")
    for column in ("category", "gained", "lost", "p"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for category, result in comparison.items():
        table.add_row(
            category.removeprefix("multi_turn_"), str(result["gained"]), str(result["lost"]), stats.p_text(result["p"])
        )
    return table


def _print_notable(state: CarefulState, console: Console) -> None:
    slowest = sorted(state.durations.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    if slowest:
        console.print("slowest conversations:", highlight=False)
        for node, seconds in slowest:
            console.print(f"  {seconds:7.3f}s  {rerun_command(state, node)}", highlight=False, markup=False)

    dropped = next((own_rules.off(card["provenance"]) for card in state.cards.values()), frozenset())
    ours = tuple((name, words) for name, words in _MOST_VIOLATIONS if name not in dropped)
    counted_rules = ours + tuple((name, name) for name in _own_rule_names(state))

    def violations(row: Row) -> int:
        return sum(row["counts"].get(r, 0) for r, _ in counted_rules)

    worst = sorted(((violations(r), n) for n, r in state.rows.items() if violations(r)), key=lambda x: (-x[0], x[1]))[
        :5
    ]
    if worst:
        console.print(
            f"most violations ({' + '.join(words for _, words in counted_rules)}):", highlight=False, markup=False
        )
        for count, node in worst:
            console.print(f"  {count:4d}  {rerun_command(state, node)}", highlight=False, markup=False)


#: What "most violations" adds up per conversation, and how its heading names each: the built-in rules
#: that count a call gone wrong; the run's own rules follow (``_own_rule_names``).
_MOST_VIOLATIONS = (
    ("collateral_destructive", "collateral"),
    ("duplicate_writes", "duplicate writes"),
    ("redundant_reads", "redundant reads"),
    ("failed_calls", "failed calls"),
)


def _own_rule_names(state: CarefulState) -> tuple[str, ...]:
    """The run's own rules, read as every report reads them: from its scorecards' provenance (every
    condition's lists the session's rules)."""
    return next((own_rules.names(card["provenance"]) for card in state.cards.values()), ())


def rerun_command(state: CarefulState, node: str) -> str:
    """The command that reruns one conversation under the same options."""
    options = state.options
    parts = ["pytest", f"'{node}'"]
    if options.results is not None:
        # Absolute and normalised: the command works from any directory, and reads without "../".
        parts.append(f"{RESULTS}={shlex.quote(os.path.abspath(options.results))}")
        if options.model:  # it names the run (label, careful_model) and, without a decoder, decodes it
            parts.append(f"{MODEL}={shlex.quote(options.model)}")
        if options.decoder or not options.model:
            parts.append(f"{DECODER}={state.source.decoder_key}")
    else:
        parts.append(f"{MODEL}={shlex.quote(state.source.model)}")
    condition = node.rsplit("[", 1)[-1].rstrip("]")
    # A logged run of several protocols lies in DIR/<protocol>/; one protocol alone would read DIR
    # itself. The node id selects the one condition either way.
    several = options.results is not None and len(options.protocols) > 1
    parts.append(f"{PROTOCOL}={','.join(options.protocols) if several else condition}")
    parts += [
        f"{option}={value}"
        for option, value in (
            (GATE, options.gate),
            (BOUNDARY, options.boundary),
            (DETECTOR, options.detector),
            (DUPLICATE_WRITES, options.duplicate_writes),
        )
        if value != option.default
    ]
    if protocols.get(condition).scripted_user and options.user_script != "default":
        parts.append(f"{USER_SCRIPT}={options.user_script}")
    if options.label:
        parts.append(f"{LABEL}={shlex.quote(options.label)}")
    if options.repeat > 1:
        parts.append(f"{REPEAT}={options.repeat}")
    return " ".join(parts + _rerun_settings(options))


def _rerun_settings(options: RunConfig) -> list[str]:
    """The options besides the model that decide a conversation's outcome or where it is filed.

    Without them the printed command would score under other budgets, or start a live model
    afresh in ``./result`` (another server, another handler) instead of resuming the run's folder.
    """
    parts = [
        f"{option}={value}"
        for option, value in (
            (MAX_CALLS, options.limits.max_calls),
            (MAX_SECONDS, options.limits.max_seconds),
            (MAX_MEMORY_MB, options.limits.max_memory_mb),
        )
        if value != option.default
    ]
    if options.scorecards != SCORECARDS.default:
        parts.append(f"{SCORECARDS}={shlex.quote(os.path.abspath(options.scorecards))}")
    if not options.live:
        return parts
    parts.append(f"{OUTPUT}={shlex.quote(os.path.abspath(options.output))}")
    given: list[tuple[Option, object]] = [
        (HANDLER, options.handler),
        (ENDPOINT, ",".join(options.endpoint) or None),
        (DTYPE, options.dtype),
        (MAX_MODEL_LEN, options.max_model_len),
        (MAX_OUTPUT_TOKENS, options.max_output_tokens),
    ]
    if options.server_timeout != DEFAULT_SERVER_TIMEOUT:
        given.append((SERVER_TIMEOUT, options.server_timeout))
    parts += [f"{option}={shlex.quote(str(value))}" for option, value in given if value is not None]
    if options.vllm_args:  # one value, split again as the option splits it
        parts.append(f"{VLLM_ARG}={shlex.quote(shlex.join(options.vllm_args))}")
    return parts
