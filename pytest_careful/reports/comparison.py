"""careful-report's figures over paired runs: Table 5's rows, exact McNemar per pair, repeats,
rank agreement; ``comparison.json``'s types.

(No ``from __future__ import annotations`` here: see ``common.json_types``.)
"""

import itertools
from collections import Counter
from dataclasses import dataclass

from ..common import bfcl as _bfcl
from ..common.json_types import NotRequired, TypedDict
from ..protocols import registry as protocols
from ..verify import audit_file
from . import own_rules, stats
from . import repeat_stats as repeats
from .agreement import spearman_rho
from .runs import SHORT, Run, by_category, categories_of, category_of_id, cut_name, id_order, visible
from .stats import spearman_p

#: Below this p-value a paired difference is called unlikely to be noise.
ALPHA = 0.05


#: Spearman rho over fewer models than this is not reported (2 models always give +-1).
MIN_MODELS_FOR_RANKS = 3


#: One accuracy with its interval (``pass`` is a keyword: the functional form).
Accuracy = TypedDict("Accuracy", {"pass": int, "n": int, "accuracy": float, "interval": list[float]})


class MetricAccuracy(TypedDict):
    bfcl: Accuracy
    safe: Accuracy


class RunSummary(MetricAccuracy):
    """One run in ``comparison.json``: what it is and its accuracies, overall and per category."""

    name: str
    path: str
    model: str
    condition: str
    settings: dict[str, str]
    complete: bool
    by_category: dict[str, MetricAccuracy]
    #: calls per conversation, and optimized calls per conversation (--careful-optimize runs; else None), per category and "all"
    calls: dict[str, tuple[float, float | None]]


class VsStandard(TypedDict):
    """A condition's run against its model's standard run: BFCL verdicts gained and lost, McNemar's p."""

    against: str
    gained: int
    lost: int
    p: float


class Table5Row(TypedDict):
    """One row of the paper's Table 5; ``custom``: the run's own rules, violations summed;
    ``standard_note``: why the row has no standard run to be compared with, or which of several it has."""

    run: str
    model: str
    label: str | None  # the provenance's label (None: none, or one that is no string)
    condition: str
    # BFCL accuracy per category (runs.SHORT), None where the run has none of it
    b: float | None
    mf: float | None
    mp: float | None
    lc: float | None
    mean: float | None
    safe: float | None
    collateral: int | None  # None: the run had the built-in rule off (``provenance.rules_off``)
    asked: int | None
    answers: list[int] | None  # yes, no, restate: confirm runs only
    confirmed_pct: float | None
    strict: int | None
    needing_destructive: int
    vs_standard: VsStandard | None
    custom: NotRequired[dict[str, int]]
    standard_note: NotRequired[str]


class Pair(TypedDict):
    """Exact McNemar of ``b`` against ``a``, per category and overall, with a sentence each."""

    a: str
    b: str
    bfcl: dict[str, stats.ComparisonJson]
    bfcl_sentences: dict[str, str]
    safe: dict[str, stats.ComparisonJson]
    safe_sentences: dict[str, str]


class RepeatSection(TypedDict):
    bfcl: repeats.RepeatStats
    safe: repeats.RepeatStats
    by_category: dict[str, dict[str, repeats.RepeatStats]]


class Stability(TypedDict):
    """A conversation whose verdict flips between repeats: each repeat's verdicts."""

    id: str
    bfcl: list[bool]
    safe: list[bool]


class RepeatGroup(TypedDict):
    """Runs that repeat one model and condition."""

    model: str
    condition: str
    settings: dict[str, str]
    runs: list[str]
    repeat: RepeatSection
    stability: list[Stability]


class Rho(TypedDict):
    rho: float
    p: float


class RankAgreement(TypedDict):
    """Table 3: Spearman rho per category (``mean``: over categories), or why there is none."""

    models: list[str]
    condition: str
    reason: NotRequired[str]
    rho: NotRequired[dict[str, Rho | None]]


class UniversalFailure(TypedDict):
    """A conversation every run fails (BFCL's verdict), with the audit's findings of its reference."""

    id: str
    findings: list[str]  # "defect:one_word_changed", ... (empty: none)


class UniversalFailures(TypedDict):
    """The items every run fails, and how many the item audit explains (gorilla#1367's cross-check)."""

    audit_sha256: str
    count: int
    with_defect: int
    with_doubt_only: int
    by_class: dict[str, int]
    items: list[UniversalFailure]


class Report(TypedDict):
    """``comparison.json``: everything careful-report's three files show."""

    coverage: str
    notes: list[str]
    ids: int
    categories: list[str]
    interval_method: str
    alpha: float
    runs: list[RunSummary]
    table5: list[Table5Row]
    rank_agreement: RankAgreement
    pairs: list[Pair]
    repeats: list[RepeatGroup]
    repeat: NotRequired[RepeatSection]  # when every run repeats one model and condition
    universal_failures: UniversalFailures


def universal_failures(runs: list[Run], ids: list[str]) -> UniversalFailures:
    """Items that every run fails under BFCL's verdict, each with the shipped audit's findings: a defect
    explains a universal failure; a universal failure with no finding is worth a look."""
    audit = audit_file.load()
    failing = [i for i in ids if not any(r.rows[i].bfcl for r in runs)]
    items: list[UniversalFailure] = []
    for cid in failing:
        found = sorted({f"{f.get('severity')}:{f.get('finding')}" for f in audit.findings(cid)})
        items.append({"id": cid, "findings": found})
    classes = Counter(name.split(":", 1)[1] for item in items for name in item["findings"])
    defect = sum(any(f.startswith("defect:") for f in item["findings"]) for item in items)
    return {
        "audit_sha256": audit.sha256,
        "count": len(items),
        "with_defect": defect,
        "with_doubt_only": sum(bool(item["findings"]) for item in items) - defect,
        "by_class": dict(sorted(classes.items())),
        "items": items,
    }


def _accuracy(run: Run, ids: list[str], metric: str) -> Accuracy:
    passed = sum(getattr(run.rows[i], metric) for i in ids)
    low, high = repeats.wilson_interval(passed, len(ids))
    return {"pass": passed, "n": len(ids), "accuracy": passed / len(ids) if ids else 0.0, "interval": [low, high]}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def table5_row(run: Run, ids: list[str], standard: Run | None, note: str | None = None) -> Table5Row:
    """One row of the paper's Table 5; None where a column has no data (shown as "-"); ``note``: what
    the table says of the row's pairing with a standard run (``pairing``)."""
    groups = by_category(ids)
    rows = [run.rows[i] for i in ids]
    bfcl = {c: sum(run.rows[i].bfcl for i in g) / len(g) for c, g in groups.items()}
    safe = {c: sum(run.rows[i].safe for i in g) / len(g) for c, g in groups.items()}
    confirm = protocols.has_scripted_user(run.condition) or any(r.answers is not None for r in rows)
    needing = [r for r in rows if r.needs_destructive]
    destructive = sum(r.destructive for r in rows)
    dropped = own_rules.off(run.provenance)
    percent = {SHORT[c]: (100 * bfcl[c] if c in bfcl else None) for c in _bfcl.CATEGORIES}
    out: Table5Row = {
        "run": run.name,
        "model": run.model,
        "label": run.label,
        "condition": run.condition,
        "b": percent["b"],
        "mf": percent["mf"],
        "mp": percent["mp"],
        "lc": percent["lc"],
        "mean": _percent(_mean(list(bfcl.values()))),
        "safe": _percent(_mean(list(safe.values()))),
        "collateral": None if "collateral_destructive" in dropped else sum(r.collateral for r in rows),
        "asked": None if "asked" in dropped else sum(r.asked for r in rows),
        "answers": [sum(r.answers[k] for r in rows if r.answers) for k in range(3)] if confirm else None,
        "confirmed_pct": (100 * sum(r.confirmed for r in rows) / destructive if destructive else 0.0)
        if confirm and "unconfirmed_destructive" not in dropped
        else None,
        "strict": sum(r.strict for r in needing) if confirm else None,
        "needing_destructive": len(needing),
        "vs_standard": None,
    }
    if rows and rows[0].custom:  # the run's own rules: violations summed over the compared conversations
        out["custom"] = {name: sum(dict(r.custom)[name] for r in rows) for name, _ in rows[0].custom}
    if standard is not None and standard is not run:
        c = stats.compare({i: run.rows[i].bfcl for i in ids}, {i: standard.rows[i].bfcl for i in ids})
        out["vs_standard"] = {"against": standard.name, "gained": c.gained, "lost": c.lost, "p": c.p}
    if note:
        out["standard_note"] = note
    return out


def _percent(value: float | None) -> float | None:
    return None if value is None else 100 * value


@dataclass(frozen=True)
class Pairing:
    """The standard run a condition is compared with in Table 5 (None: none), and what the table says of it."""

    standard: Run | None
    note: str | None = None


#: A note names at most this many runs, then says how many more.
_NAMED_RUNS = 4


def pairing(run: Run, runs: list[Run]) -> Pairing:
    """The standard run of ``run``'s model with the same settings, leaving out those only one of the two
    protocols has (the protocols' registry says which: confirm's user script); a note where none or
    several qualify (several: the one of the same label, where one alone has it)."""
    standard = protocols.STANDARD.name
    if run.condition == standard:
        return Pairing(None)
    model = visible(cut_name(run.model))
    candidates = [o for o in runs if o.condition == standard and o.model == run.model]
    if not candidates:
        return Pairing(None, f"{run.name}: no standard run of {model} among the runs")
    shared = protocols.common_settings(run.condition, standard)
    qualify = [o for o in candidates if all(_setting(o, s) == _setting(run, s) for s in shared)]
    if not qualify:
        differences = "; ".join(_differences(run, o, shared) for o in candidates[:_NAMED_RUNS])
        return Pairing(None, f"{run.name}: no standard run of {model} has its settings ({differences})")
    if len(qualify) == 1:
        return Pairing(qualify[0])
    named = _names(qualify)
    labelled = [o for o in qualify if o.label == run.label]
    if len(labelled) == 1:
        return Pairing(
            labelled[0],
            f"{run.name}: compared with {labelled[0].name}, the one of its label among the "
            f"{len(qualify)} standard runs of {model} with its settings ({named})",
        )
    return Pairing(
        None,
        f"{run.name}: {len(qualify)} standard runs of {model} have its settings ({named}), so none is "
        "chosen; give careful-report one of them to pair it (the pairs below compare it with each)",
    )


def _setting(run: Run, name: str) -> str:
    return run.settings.get(name, "unset")


def _differences(run: Run, other: Run, shared: tuple[str, ...]) -> str:
    """``boundary final, not majority as in m [standard]``: where ``other`` differs from ``run``."""
    return (
        ", ".join(
            f"{s} {visible(cut_name(_setting(run, s)))}, not {visible(cut_name(_setting(other, s)))}"
            for s in shared
            if _setting(run, s) != _setting(other, s)
        )
        + f" as in {other.name}"
    )


def _names(runs: list[Run]) -> str:
    more = len(runs) - _NAMED_RUNS
    return ", ".join(r.name for r in runs[:_NAMED_RUNS]) + (f" and {more} more" if more > 0 else "")


def compare_pair(a: Run, b: Run, ids: list[str]) -> Pair:
    """Exact McNemar of b against a on BFCL and on safe, per category and overall."""
    results = {
        metric: stats.compare_by_category(
            {i: getattr(b.rows[i], metric) for i in ids}, {i: getattr(a.rows[i], metric) for i in ids}, category_of_id
        )
        for metric in ("bfcl", "safe")
    }

    def sentences(metric: str) -> dict[str, str]:
        return {cat: sentence(a.name, b.name, metric, cat, c) for cat, c in results[metric].items()}

    return {
        "a": a.name,
        "b": b.name,
        "bfcl": stats.to_json(results["bfcl"]),
        "bfcl_sentences": sentences("bfcl"),
        "safe": stats.to_json(results["safe"]),
        "safe_sentences": sentences("safe"),
    }


def format_p(p: float) -> str:
    """Two significant digits, as the paper prints p; "< 0.001" below that."""
    if p < 0.001:
        return "< 0.001"
    return f"{p:.2f}" if p >= 0.1 else f"{p:.2g}"


def sentence(a: str, b: str, metric: str, category: str, c: stats.Comparison) -> str:
    """A plain sentence for the reader about one paired comparison."""
    where = "overall" if category == stats.ALL else "on " + category.removeprefix("multi_turn_")
    label = "BFCL" if metric == "bfcl" else "safe"
    if not c.flipped:
        return f"{b} vs {a}, {label} {where}: no conversation changed its verdict"
    judged = "within run-to-run noise" if c.p >= ALPHA else "unlikely to be noise"
    p = format_p(c.p)
    return (
        f"{b} vs {a}, {label} {where}: {c.gained} gained, {c.lost} lost; the difference is {judged}, "
        f"p {p if p.startswith('<') else '= ' + p}"
    )


def repeat_group(group: list[Run], ids: list[str]) -> RepeatGroup:
    """Repeat statistics of runs of one model and condition, overall and per category."""

    def overall(metric: str) -> repeats.RepeatStats:
        outcomes = {i: [getattr(r.rows[i], metric) for r in group] for i in ids}
        figures = repeats.repeat_stats(outcomes)
        figures["pass_hat"] = {str(k): repeats.pass_hat_k(outcomes, k) for k in range(1, len(group) + 1)}
        return figures

    repeat: RepeatSection = {
        "bfcl": overall("bfcl"),
        "safe": overall("safe"),
        "by_category": {
            cat: {
                m: repeats.repeat_stats({i: [getattr(r.rows[i], m) for r in group] for i in cat_ids})
                for m in ("bfcl", "safe")
            }
            for cat, cat_ids in by_category(ids).items()
        },
    }
    flipping = sorted(set(repeat["bfcl"]["flipped"]) | set(repeat["safe"]["flipped"]), key=id_order)
    return {
        "model": group[0].model,
        "condition": group[0].condition,
        "settings": group[0].settings,
        "runs": [r.name for r in group],
        "repeat": repeat,
        "stability": [
            {"id": i, "bfcl": [r.rows[i].bfcl for r in group], "safe": [r.rows[i].safe for r in group]}
            for i in flipping
        ],
    }


def rank_agreement(runs: list[Run], ids: list[str]) -> RankAgreement:
    """Table 3: Spearman rho between models' BFCL and safe accuracies (standard runs, repeats averaged)."""
    by_model: dict[str, list[Run]] = {}
    for run in runs:
        if run.condition == "standard":
            by_model.setdefault(run.model, []).append(run)
    out: RankAgreement = {"models": sorted(by_model), "condition": "standard"}
    if len(by_model) < MIN_MODELS_FOR_RANKS:
        out["reason"] = f"needs standard runs of at least {MIN_MODELS_FOR_RANKS} models; there are {len(by_model)}"
        return out
    groups = {"mean": ids, **by_category(ids)}
    rho_of: dict[str, Rho | None] = {}
    out["rho"] = rho_of
    for key, group_ids in groups.items():
        points = [_model_point(by_model[m], group_ids, key == "mean") for m in out["models"]]
        bfcl, safe = [p[0] for p in points], [p[1] for p in points]
        if len(set(bfcl)) < 2 or len(set(safe)) < 2:
            rho_of[key] = None  # a constant ranking has no correlation
            continue
        rho = spearman_rho(bfcl, safe)
        rho_of[key] = {"rho": rho, "p": spearman_p(rho, len(bfcl))} if rho is not None else None
    return out


def _model_point(model_runs: list[Run], ids: list[str], per_category_mean: bool) -> tuple[float, float]:
    """(BFCL, safe) accuracy of one model on ``ids``, averaged over its repeats."""

    def accuracy(run: Run, metric: str) -> float:
        if not per_category_mean:
            return sum(getattr(run.rows[i], metric) for i in ids) / len(ids)
        groups = by_category(ids).values()
        return sum(sum(getattr(run.rows[i], metric) for i in g) / len(g) for g in groups) / len(groups)

    return (
        sum(accuracy(r, "bfcl") for r in model_runs) / len(model_runs),
        sum(accuracy(r, "safe") for r in model_runs) / len(model_runs),
    )


def build(runs: list[Run], ids: list[str], coverage: str, notes: list[str]) -> Report:
    """Everything the three output files show, as one JSON-ready object."""
    groups: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    repeated = [repeat_group(g, ids) for g in groups.values() if len(g) > 1]
    out: Report = {
        "coverage": coverage,
        "notes": notes,
        "ids": len(ids),
        "categories": categories_of(ids),
        "interval_method": repeats.INTERVAL_METHOD,
        "alpha": ALPHA,
        "runs": [_run_json(r, ids) for r in runs],
        "table5": [table5_row(r, ids, *_paired(r, runs)) for r in runs],
        "rank_agreement": rank_agreement(runs, ids),
        "pairs": [compare_pair(a, b, ids) for a, b in itertools.combinations(runs, 2)],
        "repeats": repeated,
        "universal_failures": universal_failures(runs, ids),
    }
    if len(groups) == 1 and repeated:
        out["repeat"] = repeated[0]["repeat"]  # all runs repeat one model and condition
    return out


def _paired(run: Run, runs: list[Run]) -> tuple[Run | None, str | None]:
    chosen = pairing(run, runs)
    return chosen.standard, chosen.note


def _run_json(run: Run, ids: list[str]) -> RunSummary:
    groups = by_category(ids)
    return {
        "name": run.name,
        "path": str(run.path),
        "model": run.model,
        "condition": run.condition,
        "settings": run.settings,
        "complete": run.complete,
        "bfcl": _accuracy(run, ids, "bfcl"),
        "safe": _accuracy(run, ids, "safe"),
        "by_category": {
            c: {"bfcl": _accuracy(run, g, "bfcl"), "safe": _accuracy(run, g, "safe")} for c, g in groups.items()
        },
        "calls": {c: _calls(run, g) for c, g in [*groups.items(), ("all", ids)]},
    }


def _calls(run: Run, ids: list[str]) -> tuple[float, float | None]:
    """Calls per conversation, and the optimized trace's (None where a row did not count them)."""
    rows = [run.rows[i] for i in ids]
    calls = sum(r.calls for r in rows) / len(rows) if rows else 0.0
    optimized = [r.optimized_calls for r in rows]
    if not rows or any(o is None for o in optimized):
        return calls, None
    return calls, sum(o or 0 for o in optimized) / len(rows)


# --- output ----------------------------------------------------------------------
