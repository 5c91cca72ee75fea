"""End of session: scorecards, baseline comparison, release gate, terminal summary."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest

from . import scorecard, stats
from .dataset import category_of
from .state import CarefulState


def load_baseline(path: Path, state: CarefulState) -> None:
    """Read an earlier scorecard; refuse one from another dataset or declarations."""
    file = path / "scorecard.json" if path.is_dir() else path
    try:
        card = json.loads(file.read_text(encoding="utf-8"))
        prov, rows = card["provenance"], card["rows"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise pytest.UsageError(f"--careful-baseline: {file} is not a pytest-careful scorecard ({exc})") from None
    current_dataset, current_decl = scorecard.dataset_digest(), state.declarations.digest
    if prov.get("dataset") != current_dataset:
        raise pytest.UsageError(f"--careful-baseline: {file} was scored on another dataset "
                                f"({prov.get('dataset')} != {current_dataset}); the runs cannot be paired")
    if prov.get("declarations") != current_decl:
        raise pytest.UsageError(f"--careful-baseline: {file} was scored under other declarations "
                                f"({prov.get('declarations')} != {current_decl}); rescore it first")
    state.baseline = {"provenance": prov, "rows": {r["id"]: r for r in rows}}


def _model_dir(model: str) -> str:
    return model.replace("/", "_").replace(":", "_") or "model"


def finish(state: CarefulState, rootpath: Path) -> None:
    """Write one scorecard per condition and check the release gate."""
    options = state.options
    base = options.scorecards if options.scorecards.is_absolute() else rootpath / options.scorecards
    for condition in options.protocols:
        rows = [r for r in state.rows.values() if r["condition"] == condition]
        if not rows:
            continue
        prov = scorecard.provenance(
            state.source.model, state.source.decoder_key, condition, options.boundary, options.detector,
            state.declarations.digest,
            _sampling(state))
        if condition == "confirm":
            prov["user_script"] = options.user_script
        if options.live:
            prov["result_files"] = str(state.source.store(condition).model_dir)  # type: ignore[attr-defined]
        card = scorecard.scorecard(rows, prov)
        comparison = _compare(state, rows, condition)
        written = scorecard.write(base / _model_dir(state.source.model) / condition, card, comparison)
        state.written.extend(str(p) for p in written)
        state.cards[condition] = card
        _gate(state, condition, card, comparison)


def _sampling(state: CarefulState) -> str:
    if state.source.is_reference:
        return "reference trajectories"
    handle = getattr(state.source, "handle", None)
    if handle is None:
        return "rescored from a logged run"
    if handle.kind == "scripted":
        return "live: scripted model (deterministic)"
    return f"live: BFCL handler {handle.registry_key}, temperature {handle.temperature}"


def _compare(state: CarefulState, rows: list[dict[str, Any]], condition: str) -> dict[str, Any] | None:
    baseline = state.baseline
    if baseline is None:
        return None
    current = {r["id"]: bool(r["bfcl"]["valid"]) for r in rows}
    before = {i: bool(r["bfcl"]["valid"]) for i, r in baseline["rows"].items() if i in current}
    if set(before) != set(current):
        missing = sorted(set(current) - set(before))[:5]
        state.gate_messages.append(f"{condition}: baseline lacks {len(set(current) - set(before))} "
                                   f"conversations (e.g. {', '.join(missing)}); compared on none")
        return None
    comparison = stats.to_json(stats.compare_by_category(current, before, category_of))
    state.comparisons[condition] = comparison
    return comparison


def _gate(state: CarefulState, condition: str, card: dict[str, Any], comparison: dict[str, Any] | None) -> None:
    options, overall = state.options, card["totals"]["all"]
    if options.min_safe is not None and overall["safe_accuracy"] < options.min_safe:
        state.gate_messages.append(f"{condition}: success under effect safety {overall['safe_accuracy']:.3f} "
                                   f"< --careful-min-safe {options.min_safe}")
    if options.min_bfcl is not None and overall["bfcl_accuracy"] < options.min_bfcl:
        state.gate_messages.append(f"{condition}: BFCL accuracy {overall['bfcl_accuracy']:.3f} "
                                   f"< --careful-min-bfcl {options.min_bfcl}")
    if options.fail_on_regression is not None and comparison is not None:
        for category, result in comparison.items():
            if result["lost"] > result["gained"] and result["p"] < options.fail_on_regression:
                state.gate_messages.append(
                    f"{condition}/{category}: worse than the baseline ({result['gained']} gained, "
                    f"{result['lost']} lost, p = {result['p']:.4f} < {options.fail_on_regression})")


# --- terminal summary ------------------------------------------------------------


def summary_text(state: CarefulState, width: int) -> str:
    from rich.console import Console
    from rich.table import Table

    out = io.StringIO()
    console = Console(file=out, width=max(width, 80), force_terminal=False, color_system=None, soft_wrap=True)
    if not state.rows and not state.errors:
        console.print("no conversation was scored")
        return out.getvalue()
    console.print(f"boundary {state.options.boundary}, detector {state.options.detector}, "
                  f"gate {state.options.gate}", highlight=False)
    for table in _totals_tables(state, Table):
        console.print(table)
    console.print(_LEGEND, highlight=False)
    for line in _condition_notes(state):
        console.print(line, highlight=False, markup=False)
    for condition, comparison in state.comparisons.items():
        console.print(_comparison_table(condition, comparison, Table))
    _print_notable(state, console)
    for problem in state.source.problems:
        console.print(f"input problem: {problem}", highlight=False, markup=False)
    for node, error in sorted(state.errors.items()):
        console.print(f"error: {node}: {error}", highlight=False, markup=False)
    if state.written:
        console.print(f"scorecards: {Path(state.written[0]).parent.parent}", highlight=False)
    for message in state.gate_messages:
        console.print(f"release gate: {message}", highlight=False, markup=False)
    if state.options.release_gate:
        console.print("release gate: " + ("FAILED" if state.gate_messages else "passed"), highlight=False)
    return out.getvalue()


# Short headers: the two tables must fit an 80-column CI log.
_ACCURACY = ("n", "BFCL%", "safe%", "strict", "steps", "surplus out%", "in%")
_VIOLATIONS = ("collat.", "beyond d/w/r", "dup.w", "red.r", "failed", "asked")
_LEGEND = ("collat. = collateral destructive calls; beyond d/w/r = calls beyond the reference "
           "(destructive/write/read); dup.w = duplicate writes; red.r = redundant reads")


def _cells(t: dict[str, Any]) -> dict[str, str]:
    c = t["counts"]
    return {
        "n": str(t["conversations"]), "BFCL%": f"{100 * t['bfcl_accuracy']:.1f}",
        "safe%": f"{100 * t['safe_accuracy']:.1f}", "strict": str(t["strict_pass"]),
        "steps": f"{t['steps_per_conversation']:.1f}",
        "surplus out%": f"{100 * t['surplus_output_share']:.1f}",
        "in%": f"{100 * t['surplus_input_share']:.1f}",
        "collat.": str(c["collateral_destructive"]),
        "beyond d/w/r": f"{c['beyond_reference_destructive']}/{c['beyond_reference_write']}/{c['beyond_reference_read']}",
        "dup.w": str(c["duplicate_writes"]), "red.r": str(c["redundant_reads"]),
        "failed": str(c["failed_calls"]), "asked": str(c["asked"]),
    }


def _totals_tables(state: CarefulState, Table: Any) -> list[Any]:
    """Two narrow tables (accuracy, violations), one pair per condition, for 80 columns."""
    from rich import box
    from rich.markup import escape

    tables = []
    for condition, card in state.cards.items():
        for title, columns in (("accuracy", _ACCURACY), ("rule violations", _VIOLATIONS)):
            table = Table(title=escape(f"{state.source.model} [{condition}]: {title}"), box=box.SIMPLE_HEAD,
                          title_justify="left", pad_edge=False)
            table.add_column("category", no_wrap=True)
            for column in columns:
                table.add_column(column, justify="right", no_wrap=True)
            for category, t in card["totals"].items():
                cells = _cells(t)
                table.add_row(category.removeprefix("multi_turn_"), *(cells[c] for c in columns))
            tables.append(table)
    return tables


def _condition_notes(state: CarefulState) -> list[str]:
    """Per condition: the scripted user's answers (confirm), spend, resumed conversations."""
    lines = []
    for condition, card in state.cards.items():
        t = card["totals"]["all"]
        if "answers" in t:
            a = t["answers"]
            lines.append(
                f"[{condition}] scripted user: {a['yes']} yes, {a['no']} no, {a['restate']} restated; "
                f"destructive calls preceded by a yes: {100 * t['destructive_preceded_by_yes_share']:.1f}%; "
                f"strict successes needing a destructive call: "
                f"{t['strict_pass_needing_destructive']}/{t['needing_destructive']}")
        if "cost_usd" in t:
            cost = t["cost_usd"]
            lines.append(f"[{condition}] spend: ${cost['list']:.4f} at list prices, "
                         f"${cost['conservative']:.4f} with cache reads at the full input price")
        resumed = sum(1 for r in card["rows"] if r.get("resumed"))
        if resumed:
            lines.append(f"[{condition}] {resumed} of {len(card['rows'])} conversations read back from "
                         "earlier result files (not rerun)")
    ledger = getattr(state.source, "spend_ledger", None)
    if ledger is not None:
        spent = ledger.totals()
        cap = f" of a ${spent.cap_usd:.2f} cap" if spent.cap_usd is not None else ""
        lines.append(f"spend this run: ${spent.spent_list:.4f} at list prices, "
                     f"${spent.spent_conservative:.4f} conservative{cap}, {spent.requests} requests")
    output = getattr(state.source, "output", None)
    if output is not None:
        lines.append(f"result files (bfcl generate layout): {output}/<protocol>/")
    return lines


def _comparison_table(condition: str, comparison: dict[str, Any], Table: Any) -> Any:
    table = Table(title=f"{condition} vs baseline (BFCL verdict, exact McNemar)")
    for column in ("category", "gained", "lost", "p"):
        table.add_column(column, justify="left" if column == "category" else "right")
    for category, result in comparison.items():
        table.add_row(category.removeprefix("multi_turn_"), str(result["gained"]), str(result["lost"]),
                      f"{result['p']:.4f}")
    return table


def _print_notable(state: CarefulState, console: Any) -> None:
    slowest = sorted(state.durations.items(), key=lambda kv: (-kv[1], kv[0]))[:5]
    if slowest:
        console.print("slowest conversations:", highlight=False)
        for node, seconds in slowest:
            console.print(f"  {seconds:7.3f}s  {_rerun(state, node)}", highlight=False, markup=False)
    def violations(row: dict[str, Any]) -> int:
        return sum(row["counts"].get(r, 0) for r in ("collateral_destructive", "duplicate_writes", "redundant_reads", "failed_calls"))
    worst = sorted(((violations(r), n) for n, r in state.rows.items() if violations(r)), key=lambda x: (-x[0], x[1]))[:5]
    if worst:
        console.print("most violations (collateral + duplicate writes + redundant reads + failed calls):", highlight=False)
        for count, node in worst:
            console.print(f"  {count:4d}  {_rerun(state, node)}", highlight=False, markup=False)


def _rerun(state: CarefulState, node: str) -> str:
    """The command that reruns one conversation under the same options."""
    options = state.options
    parts = ["pytest", f"'{node}'"]
    if options.results is not None:
        parts += [f"--careful-results={options.results}", f"--careful-decoder={state.source.decoder_key}"]
    else:
        parts.append(f"--careful-model={state.source.model}")
    condition = node.rsplit("[", 1)[-1].rstrip("]")
    parts.append(f"--careful-protocol={condition}")
    return " ".join(parts)
