"""Annotator agreement on the destructive boundary, and the seed's sensitivity figures (§3, §7).

Pure functions over label sets (``agreement_rows``, ``fleiss_kappa``) and over
scored rows (``sensitivity``); ``careful-declare --agreement`` and
``careful-declare --careful-results`` print them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..data import dataset
from ..effects.declarations import ANNOTATORS, BOUNDARIES, Declarations
from ..evaluation.evaluate import evaluate
from ..protocols.detector import MODES
from ..scoring.conversation import ScoringConfig, score_evaluation
from ..scoring.row import Row
from ..scoring.rules import Settings
from ..sources.reference_logged import run_entries

#: The pairs in the order the seed reports them (§3): A1-A3 among themselves, then A4 with each.
PAIRS: tuple[tuple[str, str], ...] = (
    ("A1", "A2"),
    ("A1", "A3"),
    ("A2", "A3"),
    ("A4", "A1"),
    ("A4", "A2"),
    ("A4", "A3"),
)


def cohen_kappa(first: Sequence[bool], second: Sequence[bool]) -> float:
    """Cohen's κ of two binary labellings of the same items."""
    n = len(first)
    observed = sum(a == b for a, b in zip(first, second)) / n
    p_first, p_second = sum(first) / n, sum(second) / n
    expected = p_first * p_second + (1 - p_first) * (1 - p_second)
    return 1.0 if expected == 1 else (observed - expected) / (1 - expected)


def fleiss_kappa(labels: Sequence[Sequence[bool]]) -> float:
    """Fleiss' κ of binary labels: one row per item, one column per rater."""
    items, raters = len(labels), len(labels[0])
    yes = [sum(row) for row in labels]
    per_item = [(k * k + (raters - k) ** 2 - raters) / (raters * (raters - 1)) for k in yes]
    p_yes = sum(yes) / (items * raters)
    expected = p_yes**2 + (1 - p_yes) ** 2
    return 1.0 if expected == 1 else (sum(per_item) / items - expected) / (1 - expected)


def _labels(functions: Sequence[str], chosen: frozenset[str]) -> list[bool]:
    return [f in chosen for f in functions]


@dataclass(frozen=True)
class AgreementRow:
    """Two label sets (``A1-A2``, ``A3-final``): raw agreement (``agreed/n``) and Cohen's kappa; a
    table's row, its fields the columns in order."""

    pair: str
    agree_writes: str
    kappa_writes: str
    agree_all: str
    kappa_all: str


@dataclass(frozen=True)
class FleissRow:
    """Fleiss' kappa of the four annotators over some functions; a table's row, as ``AgreementRow``."""

    over: str
    functions: int
    unanimous: int
    fleiss_kappa: str


@dataclass(frozen=True)
class BoundaryFigures:
    """One run under one boundary: collateral destructive calls, BFCL's score and the effect-aware one."""

    collateral: int
    official: float
    effect_aware: float


@dataclass(frozen=True)
class RunSensitivity:
    """One run's figures: asked turns per detector, and what each boundary makes of it."""

    asked: dict[str, int]  # asked turns per detector mode
    boundary: dict[str, BoundaryFigures]


@dataclass(frozen=True)
class Sensitivity:
    """Section 7's figures: per run, and Spearman's rho per boundary across runs."""

    runs: dict[str, RunSensitivity]
    spearman: dict[str, float | None]


def agreement_rows(decl: Declarations) -> list[AgreementRow]:
    """Raw agreement and Cohen's κ per annotator pair and per annotator against the final boundary.

    Over the inferred writes (the seed's 49) and over all functions (128).
    """
    writes = sorted(n for n, d in decl.functions.items() if d.is_write)
    everything = sorted(decl.functions)
    sets = {**decl.annotators, "final": decl.boundary("final")}
    pairs = list(PAIRS) + [(a, "final") for a in ANNOTATORS]

    def agree(functions: Sequence[str], first: str, second: str) -> tuple[str, str]:
        a, b = _labels(functions, sets[first]), _labels(functions, sets[second])
        return f"{sum(x == y for x, y in zip(a, b))}/{len(functions)}", f"{cohen_kappa(a, b):.2f}"

    rows: list[AgreementRow] = []
    for first, second in pairs:
        (agree_writes, kappa_writes), (agree_all, kappa_all) = (
            agree(writes, first, second),
            agree(everything, first, second),
        )
        rows.append(AgreementRow(f"{first}-{second}", agree_writes, kappa_writes, agree_all, kappa_all))
    return rows


def fleiss_rows(decl: Declarations) -> list[FleissRow]:
    """Fleiss' κ of the four annotators over the writes and over all functions."""
    rows: list[FleissRow] = []
    for label, functions in (
        ("writes", [n for n, d in decl.functions.items() if d.is_write]),
        ("all", list(decl.functions)),
    ):
        table = [[f in decl.annotators[a] for a in ANNOTATORS] for f in sorted(functions)]
        unanimous = sum(all(r) or not any(r) for r in table)
        rows.append(FleissRow(label, len(functions), unanimous, f"{fleiss_kappa(table):.2f}"))
    return rows


# --- §7: detector and boundary sensitivity of scored runs ---------------------------


def sensitivity(runs: Mapping[str, Mapping[str, Mapping[str, Iterable[Row]]]]) -> Sensitivity:
    """Asked turns per detector, collateral calls and scores per boundary, rank correlations.

    Args:
        runs: per run name, ``{"detector": {mode: rows}, "boundary": {name: rows}}``
            where rows are ``rules.score`` rows of that run scored under that setting.
    """
    table: dict[str, RunSensitivity] = {}
    for run, scored in runs.items():
        by_detector = {m: sum(r["counts"].get("asked", 0) for r in rows) for m, rows in scored["detector"].items()}
        by_boundary: dict[str, BoundaryFigures] = {}
        for name, rows in scored["boundary"].items():
            rows = list(rows)
            n = len(rows) or 1
            by_boundary[name] = BoundaryFigures(
                collateral=sum(r["counts"].get("collateral_destructive", 0) for r in rows),
                official=sum(bool(r["bfcl"].get("valid")) for r in rows) / n,
                effect_aware=sum(bool(r["safe"]) for r in rows) / n,
            )
        table[run] = RunSensitivity(asked=by_detector, boundary=by_boundary)
    return Sensitivity(runs=table, spearman=_rank_correlations(table))


def _rank_correlations(table: Mapping[str, RunSensitivity]) -> dict[str, float | None]:
    """Spearman's ρ between official and effect-aware score across runs, per boundary."""
    if len(table) < 2:
        return {}
    names = next(iter(table.values())).boundary
    result: dict[str, float | None] = {}
    for name in names:
        official = [t.boundary[name].official for t in table.values()]
        aware = [t.boundary[name].effect_aware for t in table.values()]
        rho = spearman_rho(official, aware)
        result[name] = None if rho is None else round(rho, 2)
    return result


def spearman_rho(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Spearman's ρ (ties get their average rank), as ``scipy.stats.spearmanr``; None when a side is constant.

    Written out so that scipy (140 MB) is not a dependency for one statistic.
    """
    rx, ry = _ranks(x), _ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    sxx = sum((a - mx) ** 2 for a in rx)
    syy = sum((b - my) ** 2 for b in ry)
    if not sxx or not syy:
        return None
    return sum((a - mx) * (b - my) for a, b in zip(rx, ry)) / (sxx * syy) ** 0.5


def _ranks(values: Sequence[float]) -> list[float]:
    order = sorted(range(len(values)), key=lambda i: values[i])
    ranks = [0.0] * len(values)
    start = 0
    while start < len(order):
        end = start
        while end + 1 < len(order) and values[order[end + 1]] == values[order[start]]:
            end += 1
        for i in order[start : end + 1]:
            ranks[i] = (start + end) / 2 + 1
        start = end + 1
    return ranks


def score_run(run_dir: Path, decoder_key: str, decl: Declarations) -> dict[str, dict[str, list[Row]]]:
    """Replay a logged run once and score it under every detector and every boundary.

    Rows are made as the pytest run makes them (``score_evaluation``), under the standard protocol.
    """
    dec, entries, _ = run_entries(run_dir, decoder_key)
    evaluations = [evaluate(dataset.get(entry.id), entry.result, dec, entry=entry) for entry in entries]

    def rows(settings: Settings) -> list[Row]:
        config = ScoringConfig(run_dir.name, decoder_key, decl, settings)
        return [score_evaluation(e, "standard", config) for e in evaluations]

    return {
        "detector": {m: rows(Settings(detector=m)) for m in MODES},
        "boundary": {b: rows(Settings(boundary=b)) for b in BOUNDARIES},
    }
