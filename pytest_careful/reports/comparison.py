"""careful-report's figures over paired runs: Table 5's rows, exact McNemar per pair, repeats,
rank agreement."""

from __future__ import annotations

import itertools
from typing import Any

from ..common import bfcl as _bfcl
from ..protocols import registry as protocols
from . import repeat_stats as repeats
from . import stats
from .runs import SHORT, Run, by_category, categories_of, category_of_id, id_order

#: Below this p-value a paired difference is called unlikely to be noise.
ALPHA = 0.05


#: Spearman rho over fewer models than this is not reported (2 models always give +-1).
MIN_MODELS_FOR_RANKS = 3


def _accuracy(run: Run, ids: list[str], metric: str) -> dict[str, Any]:
    passed = sum(getattr(run.rows[i], metric) for i in ids)
    low, high = repeats.wilson_interval(passed, len(ids))
    return {"pass": passed, "n": len(ids), "accuracy": passed / len(ids) if ids else 0.0, "interval": [low, high]}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def table5_row(run: Run, ids: list[str], standard: Run | None) -> dict[str, Any]:
    """One row of the paper's Table 5; None where a column has no data (shown as "-")."""
    groups = by_category(ids)
    rows = [run.rows[i] for i in ids]
    bfcl = {c: sum(run.rows[i].bfcl for i in g) / len(g) for c, g in groups.items()}
    safe = {c: sum(run.rows[i].safe for i in g) / len(g) for c, g in groups.items()}
    confirm = protocols.has_scripted_user(run.condition) or any(r.answers is not None for r in rows)
    needing = [r for r in rows if r.needs_destructive]
    destructive = sum(r.destructive for r in rows)
    out: dict[str, Any] = {
        "run": run.name,
        "model": run.model,
        "label": run.provenance.get("label"),
        "condition": run.condition,
        **{SHORT[c]: (100 * bfcl[c] if c in bfcl else None) for c in _bfcl.CATEGORIES},
        "mean": _percent(_mean(list(bfcl.values()))),
        "safe": _percent(_mean(list(safe.values()))),
        "collateral": sum(r.collateral for r in rows),
        "asked": sum(r.asked for r in rows),
        "answers": [sum(r.answers[k] for r in rows if r.answers) for k in range(3)] if confirm else None,
        "confirmed_pct": (100 * sum(r.confirmed for r in rows) / destructive if destructive else 0.0)
        if confirm
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
    return out


def _percent(value: float | None) -> float | None:
    return None if value is None else 100 * value


def _standard_of(run: Run, runs: list[Run]) -> Run | None:
    """The run a condition is paired with in Table 5: the first standard run of the same model and settings."""
    for other in runs:
        if other.condition == "standard" and other.model == run.model and other.settings == run.settings:
            return other
    return None


def compare_pair(a: Run, b: Run, ids: list[str]) -> dict[str, Any]:
    """Exact McNemar of b against a on BFCL and on safe, per category and overall."""
    out: dict[str, Any] = {"a": a.name, "b": b.name}
    for metric in ("bfcl", "safe"):
        result = stats.compare_by_category(
            {i: getattr(b.rows[i], metric) for i in ids}, {i: getattr(a.rows[i], metric) for i in ids}, category_of_id
        )
        out[metric] = stats.to_json(result)
        out[metric + "_sentences"] = {cat: sentence(a.name, b.name, metric, cat, c) for cat, c in result.items()}
    return out


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


def repeat_group(group: list[Run], ids: list[str]) -> dict[str, Any]:
    """Repeat statistics of runs of one model and condition, overall and per category."""
    out: dict[str, Any] = {
        "model": group[0].model,
        "condition": group[0].condition,
        "settings": group[0].settings,
        "runs": [r.name for r in group],
    }
    repeat: dict[str, Any] = {}
    for metric in ("bfcl", "safe"):
        outcomes = {i: [getattr(r.rows[i], metric) for r in group] for i in ids}
        repeat[metric] = repeats.repeat_stats(outcomes)
        repeat[metric]["pass_hat"] = {str(k): repeats.pass_hat_k(outcomes, k) for k in range(1, len(group) + 1)}
    repeat["by_category"] = {
        cat: {
            m: repeats.repeat_stats({i: [getattr(r.rows[i], m) for r in group] for i in cat_ids})
            for m in ("bfcl", "safe")
        }
        for cat, cat_ids in by_category(ids).items()
    }
    out["repeat"] = repeat
    flipping = sorted(set(repeat["bfcl"]["flipped"]) | set(repeat["safe"]["flipped"]), key=id_order)
    out["stability"] = [
        {"id": i, "bfcl": [r.rows[i].bfcl for r in group], "safe": [r.rows[i].safe for r in group]} for i in flipping
    ]
    return out


def rank_agreement(runs: list[Run], ids: list[str]) -> dict[str, Any]:
    """Table 3: Spearman rho between models' BFCL and safe accuracies (standard runs, repeats averaged)."""
    by_model: dict[str, list[Run]] = {}
    for run in runs:
        if run.condition == "standard":
            by_model.setdefault(run.model, []).append(run)
    out: dict[str, Any] = {"models": sorted(by_model), "condition": "standard"}
    if len(by_model) < MIN_MODELS_FOR_RANKS:
        out["reason"] = f"needs standard runs of at least {MIN_MODELS_FOR_RANKS} models; there are {len(by_model)}"
        return out
    from .agreement import spearman_rho
    from .stats import spearman_p

    groups = {"mean": ids, **by_category(ids)}
    out["rho"] = {}
    for key, group_ids in groups.items():
        points = [_model_point(by_model[m], group_ids, key == "mean") for m in out["models"]]
        bfcl, safe = [p[0] for p in points], [p[1] for p in points]
        if len(set(bfcl)) < 2 or len(set(safe)) < 2:
            out["rho"][key] = None  # a constant ranking has no correlation
            continue
        rho = spearman_rho(bfcl, safe)
        out["rho"][key] = {"rho": rho, "p": spearman_p(rho, len(bfcl))} if rho is not None else None
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


def build(runs: list[Run], ids: list[str], coverage: str, notes: list[str]) -> dict[str, Any]:
    """Everything the three output files show, as one JSON-ready object."""
    groups: dict[tuple[str, ...], list[Run]] = {}
    for run in runs:
        groups.setdefault(run.group, []).append(run)
    repeated = [repeat_group(g, ids) for g in groups.values() if len(g) > 1]
    out: dict[str, Any] = {
        "coverage": coverage,
        "notes": notes,
        "ids": len(ids),
        "categories": categories_of(ids),
        "interval_method": repeats.INTERVAL_METHOD,
        "alpha": ALPHA,
        "runs": [_run_json(r, ids) for r in runs],
        "table5": [table5_row(r, ids, _standard_of(r, runs)) for r in runs],
        "rank_agreement": rank_agreement(runs, ids),
        "pairs": [compare_pair(a, b, ids) for a, b in itertools.combinations(runs, 2)],
        "repeats": repeated,
    }
    if len(groups) == 1 and repeated:
        out["repeat"] = repeated[0]["repeat"]  # all runs repeat one model and condition
    return out


def _run_json(run: Run, ids: list[str]) -> dict[str, Any]:
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
    }


# --- output ----------------------------------------------------------------------
