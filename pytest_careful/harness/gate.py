"""The baseline (``--careful-baseline``) and the release gate (``--careful-min-safe``,
``--careful-min-bfcl``, ``--careful-fail-on-regression``), judged from the scorecards.

Reading a baseline scorecard is :mod:`pytest_careful.reports.baseline`'s (careful-report reads them too)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from ..common import bfcl as _bfcl
from ..common.text import counted
from ..data import dataset
from ..data.dataset import category_of
from ..reports import scorecard, stats
from ..reports.baseline import audit_problem, baseline_coverage, baseline_parts, read_scorecard
from ..reports.card import Card, Totals
from ..reports.options import (
    ALLOW_MISSING,
    ALLOW_PARTIAL_BASELINE,
    BASELINE,
    MIN_BFCL,
    MIN_SAFE,
)
from ..reports.runs import printable
from ..reports.scorecard import has_defect
from ..reports.stats import ComparisonJson
from ..scoring.row import Row
from ..scoring.rules import Rule, checking
from ..verify.options import EXCLUDE
from .state import CarefulState


def load_baseline(path: Path, state: CarefulState) -> None:
    """Read an earlier scorecard; refuse one from another dataset or declarations, or a selection.

    A baseline that cannot be used fails closed, before any conversation runs: one usage error
    (exit 4) naming the file and what is wrong, so no model time is spent on a run whose gate
    could not be judged. The file is user input: the message is escaped and cut (``printable``).
    """
    try:
        _check_baseline(path, state)
    except pytest.UsageError as exc:
        raise pytest.UsageError(printable(str(exc))) from None


def _check_baseline(path: Path, state: CarefulState) -> None:
    file = path / "scorecard.json" if path.is_dir() else path
    try:
        prov, rows = baseline_parts(read_scorecard(file))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise pytest.UsageError(f"{BASELINE}: {file} is not a pytest-careful scorecard ({exc})") from None
    current_dataset, current_decl = scorecard.dataset_digest(), state.declarations.digest
    if prov.get("dataset") != current_dataset:
        raise pytest.UsageError(
            f"{BASELINE}: {file} was scored on another dataset "
            f"({prov.get('dataset')} != {current_dataset}); the runs cannot be paired"
        )
    if prov.get("declarations") != current_decl:
        raise pytest.UsageError(
            f"{BASELINE}: {file} was scored under other declarations "
            f"({prov.get('declarations')} != {current_decl}); rescore it first"
        )
    _check_baseline_ids(file, rows)
    ours: dict[str, object] = {
        "audit": {"mode": state.options.audit, "sha256": getattr(state.scoring.audit, "sha256", "")}
    }
    problem = audit_problem(ours, prov)
    if problem is not None:
        raise pytest.UsageError(f"{BASELINE}: {file} and this run: {problem}")
    covered, expected = baseline_coverage(rows)
    partial = covered < expected or prov.get("selection", {}).get("complete") is False
    if partial and not state.options.allow_partial_baseline:
        raise pytest.UsageError(
            f"{BASELINE}: {file} scored a selection ({covered} of {expected} conversations), not a "
            f"whole run; pass {ALLOW_PARTIAL_BASELINE} to compare with it anyway"
        )
    state.baseline = {"provenance": prov, "rows": rows}


def _check_baseline_ids(file: Path, rows: Collection[str]) -> None:
    """Rows of conversations the dataset has, and some: else the pairing fails late or means nothing."""
    if not rows:
        raise pytest.UsageError(f"{BASELINE}: {file} has no rows")
    known = {c.id for c in dataset.load(_bfcl.CATEGORIES)}
    unknown = [(number, cid) for number, cid in enumerate(rows) if cid not in known]
    if unknown:
        number, cid = unknown[0]
        raise pytest.UsageError(
            f"{BASELINE}: {file}: row {number} ({cid[:80]!r}) is not a BFCL multi-turn conversation id"
        )


def compare_with_baseline(state: CarefulState, rows: list[Row], condition: str) -> dict[str, ComparisonJson] | None:
    """Paired exact McNemar per category on ``--careful-regression-verdict``'s verdict, this run's
    rows against the baseline's; None without a baseline or where it lacks some of them."""
    baseline = state.baseline
    if baseline is None:
        return None
    if state.options.audit == EXCLUDE:  # the items with a defect count in no figure, the comparison's neither
        rows = [r for r in rows if not has_defect(r)]
    verdict = state.options.regression_verdict
    current = {r["id"]: stats.paired_verdict(r, verdict) for r in rows}
    before = {i: stats.paired_verdict(r, verdict) for i, r in baseline["rows"].items() if i in current}
    if set(before) != set(current):
        missing = sorted(set(current) - set(before))[:5]
        state.gate_messages.append(
            f"{condition}: baseline lacks {len(set(current) - set(before))} "
            f"conversations (e.g. {', '.join(missing)}); compared on none"
        )
        return None
    comparison = stats.to_json(stats.compare_by_category(current, before, category_of))
    state.comparisons[condition] = comparison
    return comparison


def judge_gate(
    state: CarefulState,
    condition: str,
    card: Card,
    comparison: dict[str, ComparisonJson] | None,
    not_run: list[str],
) -> None:
    """Release-gate messages; fail closed on conversations that could not be scored or did not run."""
    options, overall = state.options, card["totals"]["all"]
    if not options.release_gate:
        return  # without a gate, the headline says what went unscored
    if not_run:
        state.gate_messages.append(
            f"{condition}: {len(not_run)} selected conversations did not run "
            f"(e.g. {not_run[0]}): stopped early, interrupted or a worker crashed"
        )
    errored = sorted(n for n in state.errors if n.endswith(f"[{condition}]"))
    if errored:
        state.gate_messages.append(
            f"{condition}: {counted(len(errored), 'conversation')} errored outside scoring "
            f"(e.g. {errored[0]}: a fixture's setup or teardown, a crashed worker)"
        )
    unscored = overall.get("unscored", 0)
    if unscored and not options.allow_missing:
        state.gate_messages.append(
            f"{condition}: {counted(unscored, 'conversation')} could not be scored and count as "
            f"failures ({ALLOW_MISSING} judges only the scored ones)"
        )
    accuracy = _gate_accuracy(overall, options.allow_missing)
    if options.min_safe is not None and accuracy.safe < options.min_safe:
        state.gate_messages.append(
            f"{condition}: success under effect safety {accuracy.safe:.3f} "
            f"< {MIN_SAFE} {options.min_safe}{accuracy.over}"
        )
    if options.min_bfcl is not None and accuracy.bfcl < options.min_bfcl:
        state.gate_messages.append(
            f"{condition}: BFCL accuracy {accuracy.bfcl:.3f} < {MIN_BFCL} {options.min_bfcl}{accuracy.over}"
        )
    if options.fail_on_regression is not None and comparison is not None:
        for category, result in comparison.items():
            if result["lost"] > result["gained"] and result["p"] < options.fail_on_regression:
                state.gate_messages.append(
                    f"{condition}/{category}: {stats.VERDICT_NAMES[options.regression_verdict]} verdicts worse than "
                    f"the baseline's ({result['gained']} gained, {result['lost']} lost, "
                    f"p {p_clause(result['p'])}, below {options.fail_on_regression})"
                )


@dataclass(frozen=True)
class _Judged:
    """Accuracies the gate judges, and over what (empty: every selected conversation)."""

    bfcl: float
    safe: float
    over: str


def _gate_accuracy(overall: Totals, allow_missing: bool) -> _Judged:
    """Accuracies the gate judges: over every selected conversation, or only the scored ones."""
    unscored = overall.get("unscored", 0)
    if not (allow_missing and unscored):
        return _Judged(overall["bfcl_accuracy"], overall["safe_accuracy"], "")
    scored = overall["conversations"] - unscored
    return _Judged(
        overall["bfcl_pass"] / scored if scored else 0.0,
        overall["safe_pass"] / scored if scored else 0.0,
        f" (over the {scored} scored conversations)",
    )


# --- terminal summary ------------------------------------------------------------


def gate_verdict(state: CarefulState) -> str:
    """The gate's last line; with nothing selected there is nothing it could have passed."""
    if state.gate_messages:
        return "FAILED"
    if not state.selected:
        return "nothing to judge: no conversation was selected (pytest exits 5)"
    return "passed" + _regression_clause(state)


def _regression_clause(state: CarefulState) -> str:
    """What a passing gate compared with the baseline, on which verdict: a pass says what it held."""
    if state.options.fail_on_regression is None or not state.comparisons:
        return ""
    name = stats.VERDICT_NAMES[state.options.regression_verdict]
    parts = [
        f"{condition} {result['gained']} gained, {result['lost']} lost"
        for condition, comparison in state.comparisons.items()
        if (result := comparison.get(stats.ALL)) is not None
    ]
    return f" ({name} verdicts against the baseline: {'; '.join(parts)})" if parts else ""


def gate_passes(row: Row, gate: str, rules: Sequence[Rule]) -> bool:
    """The item's verdict under a gate, from its row (what ``item.run_conversation`` decides)."""
    if gate == "none":
        return True
    if row.get("rule_errors"):  # a rule raised: the item failed
        return False
    return bool(row["bfcl"]["valid"]) and not any(row["counts"].get(r, 0) for r in checking.gate_names(gate, rules))


def p_clause(p: float) -> str:
    text = stats.p_text(p)
    return text if text.startswith("<") else f"= {text}"
