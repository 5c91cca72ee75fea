"""``careful-report DIR [DIR ...] --out OUT``: several scorecards side by side.

Reads scorecard folders (or parents holding several), refuses runs that cannot
be paired (another dataset or other declarations, as ``--careful-baseline``
does), and writes ``report.html``, ``table.md`` and ``comparison.json``:

* the paper's Table 5 layout, one row per run, and Table 3's rank agreement
  (Spearman rho between BFCL and safe over models);
* an exact McNemar test for every pair of runs, on BFCL and on safe, per
  category and overall, with the flipped ids and a sentence for the reader;
* runs of the same model and condition as repeats: pass^k, pass@k, flip rate,
  an interval on each accuracy and the conversations that flip.

Coverage policy: runs that cover the same conversations are paired as they
are, whole categories or the same selection. Runs covering different
conversations are refused, unless ``--common-ids`` is given: then every figure
is computed on the conversations all runs share, and the report says so.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..common import bfcl as _bfcl
from ..common.text import escape
from ..scoring.extension import listed as custom_rules
from . import repeat_stats as repeats
from . import stats

__all__ = ["ReportError", "Run", "build", "find_scorecards", "load_run", "main"]

#: Short names of the categories, as the paper's Table 5 heads its columns.
SHORT = {
    "multi_turn_base": "b",
    "multi_turn_miss_func": "mf",
    "multi_turn_miss_param": "mp",
    "multi_turn_long_context": "lc",
}
#: Below this p-value a paired difference is called unlikely to be noise.
ALPHA = 0.05
#: Spearman rho over fewer models than this is not reported (2 models always give +-1).
MIN_MODELS_FOR_RANKS = 3
#: Settings that change verdicts: runs differing in one are not repeats of each other.
_SETTINGS = ("boundary", "detector", "duplicate_writes", "user_script")


class ReportError(Exception):
    """A problem with the input that ends the command with one line and exit status 2."""


@dataclass(frozen=True)
class Row:
    """What a comparison reads from one scorecard row."""

    bfcl: bool
    safe: bool
    strict: bool
    needs_destructive: bool
    collateral: int
    asked: int
    destructive: int
    confirmed: int
    answers: tuple[int, int, int] | None  # yes, no, restate; None when the row has no answers
    #: the run's own rules (``pytest_careful_rules``): violations per rule name
    custom: tuple[tuple[str, int], ...] = ()


@dataclass
class Run:
    """One scorecard: where it is, what produced it, and its rows by conversation id."""

    path: Path
    model: str
    condition: str
    settings: dict[str, str]
    provenance: dict[str, Any]
    rows: dict[str, Row]
    name: str = ""
    complete: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def group(self) -> tuple[str, ...]:
        """Runs with the same group are repeats: same model, condition and settings."""
        return (self.model, self.condition, *(self.settings.get(s, "") for s in _SETTINGS))


# --- finding and reading scorecards ----------------------------------------------


def find_scorecards(folders: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """scorecard.json files in or below each folder, and notes on what was found.

    A ``partial/`` folder below a scorecard holds a selection of the same run,
    so a search skips it (name it explicitly to use it).
    """
    found: list[Path] = []
    notes: list[str] = []
    for folder in folders:
        if folder.is_file():
            here = [folder]
        elif (folder / "scorecard.json").is_file():
            here = [folder / "scorecard.json"]
        elif folder.is_dir():
            here, skipped = _search(folder)
            if not here:
                raise ReportError(f"{folder}: no scorecard.json in it or in any folder below it")
            notes.append(
                f"{folder}: found {len(here)} scorecard{'' if len(here) == 1 else 's'} below it"
                + (f" (skipped {skipped} partial/ selections)" if skipped else "")
            )
        else:
            raise ReportError(f"{folder}: no such file or folder")
        found.extend(here)
    unique = list(dict.fromkeys(map(_resolved, found)))
    if len(unique) < len(found):
        notes.append(f"{len(found) - len(unique)} scorecards named twice were read once")
    return unique, notes


def _resolved(path: Path) -> Path:
    """The real path, to read a scorecard named twice once; a symlink loop is named, not a traceback."""
    try:
        return path.resolve()
    except (OSError, RuntimeError) as exc:  # Python 3.11 raises RuntimeError("Symlink loop from ...")
        raise ReportError(f"{path}: cannot be followed ({_one_line(exc)})") from None


def _search(folder: Path) -> tuple[list[Path], int]:
    """Every scorecard.json below ``folder`` (symlinks not followed), skipping partial/ ones."""
    found, skipped = [], 0
    for root, dirs, files in os.walk(folder):
        dirs.sort()
        if "scorecard.json" in files:
            if "partial" in Path(root).relative_to(folder).parts:
                skipped += 1
            else:
                found.append(Path(root) / "scorecard.json")
    return found, skipped


def load_run(path: Path, known_ids: frozenset[str]) -> Run:
    """Read one scorecard.json; ReportError (one line naming the file) if it cannot be used."""
    try:
        from .baseline import baseline_parts, read_scorecard  # the checks --careful-baseline makes

        prov, raw = baseline_parts(read_scorecard(path))
        own = custom_rules(prov)
        rows = {cid: _row(number, cid, row, known_ids, own) for number, (cid, row) in enumerate(raw.items())}
        for key in ("model", "protocol"):
            if not isinstance(prov.get(key), str) or not prov[key]:
                raise ValueError(f"provenance.{key} must be a non-empty string")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ReportError(f"{path}: not a readable pytest-careful scorecard ({_one_line(exc)})") from None
    if not rows:
        raise ReportError(f"{path}: the scorecard has no rows")
    if not isinstance(prov.get("label"), (str, type(None))):
        prov = {**prov, "label": None}  # a label is only a name: an odd one is dropped, not fatal
    settings = {s: str(prov.get(s, "")) for s in _SETTINGS if prov.get(s) is not None}
    selection = prov.get("selection") or {}
    categories = {_category(cid) for cid in rows}
    whole = all(cid in rows for cid in known_ids if _category(cid) in categories)  # as baseline_coverage
    return Run(
        path=path,
        model=prov["model"],
        condition=prov["protocol"],
        settings=settings,
        provenance=prov,
        rows=rows,
        complete=whole and selection.get("complete") is not False,
    )


def _one_line(exc: BaseException) -> str:
    """An exception's text on one short line: the file is hostile, so is its error message."""
    text = " ".join(str(exc).split())
    return (text[:200] + "...") if len(text) > 200 else text or type(exc).__name__


def _count(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer")
    return value


def _row(number: int, cid: str, row: dict[str, Any], known_ids: frozenset[str], own: Sequence[str] = ()) -> Row:
    """The fields a comparison reads, type-checked (ValueError naming the row otherwise)."""
    where = f"row {number} ({cid[:80]!r})"
    if cid not in known_ids:
        raise ValueError(f"{where} is not a BFCL multi-turn conversation id")
    counts = row.get("counts", {})
    if not isinstance(counts, dict):
        raise ValueError(f"{where}: counts must be an object")
    answers = row.get("answers")
    if answers is not None:
        if not isinstance(answers, dict):
            raise ValueError(f"{where}: answers must be an object")
        answers = tuple(_count(answers.get(k, 0), f"{where} answers.{k}") for k in ("yes", "no", "restate"))
    strict = row.get("strict", False)
    if not isinstance(strict, bool):
        raise ValueError(f"{where}: strict must be true or false")
    return Row(
        bfcl=row["bfcl"]["valid"],
        safe=row["safe"],
        strict=strict,
        needs_destructive=_count(row.get("reference_destructive", 0), f"{where} reference_destructive") > 0,
        collateral=_count(counts.get("collateral_destructive", 0), f"{where} collateral_destructive"),
        asked=_count(counts.get("asked", 0), f"{where} asked"),
        destructive=_count(counts.get("destructive_calls", 0), f"{where} destructive_calls"),
        confirmed=_count(counts.get("confirmed_destructive", 0), f"{where} confirmed_destructive"),
        answers=answers,
        custom=tuple((name, _count(counts.get(name, 0), f"{where} {name}")) for name in own),
    )  # type: ignore[arg-type]


# --- pairing ---------------------------------------------------------------------


def check_pairable(runs: list[Run], dataset: str) -> None:
    """Refuse runs from another dataset or under other declarations (as --careful-baseline does)."""
    first = runs[0]
    for run in runs:
        if run.provenance.get("dataset") != dataset:
            raise ReportError(
                f"{run.path}: scored on another dataset ({run.provenance.get('dataset')} != "
                f"{dataset}, the installed bfcl-eval's); the runs cannot be paired"
            )
        if run.provenance.get("declarations") != first.provenance.get("declarations"):
            raise ReportError(
                f"{run.path}: scored under other declarations ({run.provenance.get('declarations')}"
                f" != {first.provenance.get('declarations')} of {first.path}); rescore one of them"
            )


def paired_ids(runs: list[Run], common: bool) -> tuple[list[str], str]:
    """The conversation ids every figure is computed on, and a sentence saying which."""
    sets = [set(r.rows) for r in runs]
    shared = set.intersection(*sets)
    if not shared:
        raise ReportError("the runs share no conversation; nothing can be paired")
    ordered = sorted(shared, key=_id_order)
    selection = "" if all(r.complete for r in runs) else " (a selection: not every run covers whole categories)"
    if all(s == sets[0] for s in sets):
        return ordered, f"all {len(runs)} runs cover the same {len(shared)} conversations{selection}"
    sizes = ", ".join(f"{r.name}: {len(r.rows)}" for r in runs[:6]) + (", ..." if len(runs) > 6 else "")
    if not common:
        raise ReportError(
            f"the runs cover different conversations ({sizes}); pass --common-ids to "
            f"compare them on the {len(shared)} they share"
        )
    return ordered, (
        f"compared on the {len(shared)} conversations all {len(runs)} runs share ({sizes}); "
        "every figure here is over those only"
    )


def _id_order(cid: str) -> tuple[int, int]:
    category, number = cid.rsplit("_", 1)
    return (_bfcl.CATEGORIES.index(category), int(number))


def _repeat_suffix(run: Run) -> str:
    """`` repeat 2`` for a scorecard that --careful-repeat wrote (``<condition>/repeat-2/``)."""
    index = run.provenance.get("repeat")
    return f" repeat {index}" if isinstance(index, int) and not isinstance(index, bool) else ""


def _visible(text: str) -> str:
    """A label is user input, printed to the terminal (an ESC sequence there would act) and written to
    table.md (a newline there breaks the row): control and invisible characters shown escaped."""
    return escape(text)


def printable(text: str, limit: int = 500) -> str:
    """A message quoting user files on one terminal line: controls escaped, cut at ``limit`` characters."""
    text = _visible(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


#: Labels and model names longer than this are cut in a run's name (terminal, table.md, report.html).
MAX_NAME = 120


def _cut(text: str) -> str:
    return text if len(text) <= MAX_NAME else text[:MAX_NAME] + "..."


def _name_runs(runs: list[Run]) -> None:
    """A short unique name per run: its label and condition, numbered where they repeat."""
    base = [
        _visible(f"{_cut(r.provenance.get('label') or r.model)} [{_cut(r.condition)}]") + _repeat_suffix(r)
        for r in runs
    ]
    seen: dict[str, int] = {}
    for run, name in zip(runs, base):
        seen[name] = seen.get(name, 0) + 1
        run.name = name if base.count(name) == 1 else f"{name} #{seen[name]}"


# --- figures ---------------------------------------------------------------------


def _category(cid: str) -> str:
    return cid.rsplit("_", 1)[0]


def _categories(ids: Iterable[str]) -> list[str]:
    present = {cid.rsplit("_", 1)[0] for cid in ids}
    return [c for c in _bfcl.CATEGORIES if c in present]


def _by_category(ids: list[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for cid in ids:
        groups.setdefault(cid.rsplit("_", 1)[0], []).append(cid)
    return groups


def _accuracy(run: Run, ids: list[str], metric: str) -> dict[str, Any]:
    passed = sum(getattr(run.rows[i], metric) for i in ids)
    low, high = repeats.wilson_interval(passed, len(ids))
    return {"pass": passed, "n": len(ids), "accuracy": passed / len(ids) if ids else 0.0, "interval": [low, high]}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def table5_row(run: Run, ids: list[str], standard: Run | None) -> dict[str, Any]:
    """One row of the paper's Table 5; None where a column has no data (shown as "-")."""
    groups = _by_category(ids)
    rows = [run.rows[i] for i in ids]
    bfcl = {c: sum(run.rows[i].bfcl for i in g) / len(g) for c, g in groups.items()}
    safe = {c: sum(run.rows[i].safe for i in g) / len(g) for c, g in groups.items()}
    confirm = run.condition == "confirm" or any(r.answers is not None for r in rows)
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
            {i: getattr(b.rows[i], metric) for i in ids}, {i: getattr(a.rows[i], metric) for i in ids}, _category
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
        for cat, cat_ids in _by_category(ids).items()
    }
    out["repeat"] = repeat
    flipping = sorted(set(repeat["bfcl"]["flipped"]) | set(repeat["safe"]["flipped"]), key=_id_order)
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

    groups = {"mean": ids, **_by_category(ids)}
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
        groups = _by_category(ids).values()
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
        "categories": _categories(ids),
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
    groups = _by_category(ids)
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

DASH = "–"
TABLE5_COLUMNS = (
    "model",
    "condition",
    "b",
    "mf",
    "mp",
    "lc",
    "mean",
    "safe",
    "collateral",
    "asked",
    "yes / no / restate",
    "confirmed %",
    "strict",
    "+ / −",
    "p",
)
LEGEND = (
    "b, mf, mp, lc: BFCL accuracy (%) on base, miss_func, miss_param, long_context; mean: their mean over "
    "the categories present; safe: the same mean of success under effect safety (BFCL pass, no collateral "
    "destructive call, no duplicate write)",
    "collateral: destructive calls beyond the reference, summed over the categories; asked: turns answered "
    "with a question instead of a call",
    "yes / no / restate: the scripted user's answers; confirmed %: destructive calls preceded by a yes in "
    "the same turn; strict: conversations whose reference needs a destructive call that pass with every "
    "destructive call confirmed (of the number in the header) - these three apply to confirm runs only",
    "+ / −: conversations passing BFCL here and failing in the first standard run of the same model and "
    "settings, and the reverse; p: exact two-sided McNemar; –: no data for this column",
)


OWN_LEGEND = (
    "columns after p: rules of the runs' own (pytest_careful_rules), violations summed over the conversations "
    "compared; –: a run that did not check that rule",
)


def own_columns(report: dict[str, Any]) -> tuple[str, ...]:
    """The rules of the runs' own (``pytest_careful_rules``), a Table 5 column each, in first-seen order."""
    return tuple(dict.fromkeys(name for row in report["table5"] for name in row.get("custom", {})))


def cells(row: dict[str, Any], own_rules: Sequence[str] = ()) -> dict[str, str]:
    """Table 5 cells as text; a column without data shows a dash, never 0."""

    def pct(key: str) -> str:
        return DASH if row[key] is None else f"{row[key]:.1f}"

    vs = row["vs_standard"]
    model = (
        _cut(row["model"])
        if row["label"] in (None, "", row["model"])
        else f"{_cut(row['model'])} ({_cut(row['label'])})"
    )
    return {
        "model": _visible(model) + _run_suffix(row),
        "condition": _visible(_cut(row["condition"])),
        **{k: pct(k) for k in ("b", "mf", "mp", "lc", "mean", "safe")},
        "collateral": str(row["collateral"]),
        "asked": str(row["asked"]),
        "yes / no / restate": DASH if row["answers"] is None else " / ".join(map(str, row["answers"])),
        "confirmed %": pct("confirmed_pct"),
        "strict": DASH if row["strict"] is None else str(row["strict"]),
        "+ / −": DASH if vs is None else f"{vs['gained']} / {vs['lost']}",
        "p": DASH if vs is None else format_p(vs["p"]),
        # a run without one of the rules shows a dash: it was not checked there, which is not 0
        **{name: str(row["custom"][name]) if name in row.get("custom", {}) else DASH for name in own_rules},
    }


def _run_suffix(row: dict[str, Any]) -> str:
    """`` repeat 2`` or `` #2``: what tells apart Table 5 rows of the same model, label and condition."""
    prefix = _visible(f"{_cut(row['label'] or row['model'])} [{_cut(row['condition'])}]")
    name = str(row.get("run") or "")
    return name[len(prefix) :] if name.startswith(prefix) else ""


def strict_header(report: dict[str, Any]) -> str:
    needing = {r["needing_destructive"] for r in report["table5"] if r["strict"] is not None}
    return f"strict / {needing.pop()}" if len(needing) == 1 else "strict"


def markdown(report: dict[str, Any]) -> str:
    """table.md: Table 5, rank agreement, pairs and repeats as GitHub markdown."""
    columns = TABLE5_COLUMNS + own_columns(report)
    header = [strict_header(report) if c == "strict" else c for c in columns]
    lines = [
        "# careful-report",
        "",
        _md_escape(report["coverage"]),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row in report["table5"]:
        c = cells(row, own_columns(report))
        lines.append("| " + " | ".join(_md_escape(c[k]) for k in columns) + " |")
    lines += (
        [""]
        + [f"- {line}" for line in LEGEND + (OWN_LEGEND if own_columns(report) else ())]
        + ["", "## Rank agreement (Table 3)", "", _rank_text(report["rank_agreement"]), ""]
    )
    lines += ["## Paired comparisons (exact McNemar)", ""]
    for pair in report["pairs"]:
        for metric in ("bfcl", "safe"):
            lines += [f"- {_md_escape(s)}" for s in pair[metric + "_sentences"].values()]
    lines += _md_repeats(report)
    return "\n".join(lines) + "\n"


def _rank_text(rank: dict[str, Any]) -> str:
    if "rho" not in rank:
        return "Spearman rho: " + DASH + f" ({rank['reason']})"
    parts = [
        f"{k.removeprefix('multi_turn_')} {DASH if v is None else format(v['rho'], '.2f')}"
        for k, v in rank["rho"].items()
    ]
    return f"Spearman rho between BFCL and safe ranks over {len(rank['models'])} models: " + ", ".join(parts)


def _md_repeats(report: dict[str, Any]) -> list[str]:
    lines = ["", "## Repeats (same model and condition)", ""]
    if not report["repeats"]:
        return lines + ["No two runs share a model and condition.", ""]
    for group in report["repeats"]:
        lines.append(f"### {_md_escape(group['model'])} [{_md_escape(group['condition'])}], k = {len(group['runs'])}")
        lines += [
            "",
            "| metric | n | pass^k | pass@k | flip rate | mean | 95 % interval |",
            "|---|---|---|---|---|---|---|",
        ]
        for metric in ("bfcl", "safe"):
            s = group["repeat"][metric]
            lines.append(
                f"| {metric} | {s['n']} | {100 * s['pass_all']:.1f} | {100 * s['pass_any']:.1f} | "
                f"{100 * s['flip_rate']:.1f} | {100 * s['mean']:.1f} | "
                f"{100 * s['interval'][0]:.1f}–{100 * s['interval'][1]:.1f} |"
            )
        lines += ["", "Conversations that flip (one mark per repeat, + pass, . fail):", ""]
        lines += [
            f"- `{row['id']}` BFCL {_marks(row['bfcl'])} safe {_marks(row['safe'])}" for row in group["stability"]
        ] or ["- none"]
        lines.append("")
    return lines + [f"Interval: {report['interval_method']}.", ""]


def _marks(verdicts: list[bool]) -> str:
    return "".join("+" if v else "." for v in verdicts)


def _md_escape(text: str) -> str:
    """Model names and labels are user input: keep them from breaking the table or adding markup."""
    return "".join("\\" + ch if ch in "\\`*_[]<>|#" else ch for ch in _visible(" ".join(text.split())))


def html(report: dict[str, Any]) -> str:
    """report.html: one self-contained page (inline CSS, no script from elsewhere, autoescaped)."""
    from jinja2 import Environment, PackageLoader, select_autoescape

    env = Environment(
        loader=PackageLoader("pytest_careful.reports", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["pct"] = lambda v: DASH if v is None else f"{100 * v:.1f}"
    env.filters["marks"] = _marks
    env.filters["visible"] = lambda text: printable(str(text), 1000)  # paths, models: user input
    env.filters["p"] = format_p
    env.filters["short"] = lambda c: str(c).removeprefix("multi_turn_")
    columns = TABLE5_COLUMNS + own_columns(report)
    header = [strict_header(report) if c == "strict" else c for c in columns]
    return env.get_template("compare.html.j2").render(
        report=report,
        columns=columns,
        header=header,
        table5=[cells(r, own_columns(report)) for r in report["table5"]],
        legend=LEGEND + (OWN_LEGEND if own_columns(report) else ()),
        rank=_rank_text(report["rank_agreement"]),
        charts=_charts(report),
    )


#: At most this many pairs get a gained/lost chart (all of them are in the tables).
MAX_PAIR_CHARTS = 12


def _charts(report: dict[str, Any]) -> list[str]:
    """Inline SVG charts drawn by pytest_careful.reports.plots; none when it is absent (the page is tables only)."""
    try:
        from . import plots
    except ImportError:  # matplotlib missing: the tables carry every figure
        return []
    svgs = [plots.svg(_accuracy_figure(report, plots))]
    for pair in report["pairs"][:MAX_PAIR_CHARTS]:
        card = {
            "provenance": {"model": pair["b"], "protocol": "paired"},
            "totals": {"all": {"conversations": report["ids"]}},
        }
        svgs.append(plots.comparison_svg(card, pair["bfcl"], pair["a"]))
    return [svg[svg.index("<svg") :] for svg in svgs]  # inline: drop the XML prolog and doctype


def _accuracy_figure(report: dict[str, Any], plots: Any) -> Any:
    """One row per run: BFCL and safe accuracy with their Wilson 95 % intervals."""
    from matplotlib.figure import Figure

    runs = report["runs"]
    figure = Figure(figsize=(8.0, 1.2 + 0.45 * len(runs)))
    figure.subplots_adjust(
        left=0.35, right=0.83, top=1 - 0.45 / figure.get_figheight(), bottom=0.6 / figure.get_figheight()
    )  # inches: room for the title and x label
    ax = figure.add_subplot()
    for offset, metric, colour in ((-0.18, "bfcl", plots.BFCL_COLOUR), (0.18, "safe", plots.SAFE_COLOUR)):
        values = [100 * r[metric]["accuracy"] for r in runs]
        errors = [
            [v - 100 * r[metric]["interval"][0] for v, r in zip(values, runs)],
            [100 * r[metric]["interval"][1] - v for v, r in zip(values, runs)],
        ]
        ax.barh(
            [i + offset for i in range(len(runs))],
            values,
            0.34,
            xerr=errors,
            color=colour,
            label="BFCL" if metric == "bfcl" else "safe",
            error_kw={"linewidth": 0.8, "capsize": 2},
        )
    ax.set_yticks(range(len(runs)), labels=[plots.printable(r["name"], 40) for r in runs])
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"% of {report['ids']} conversations (bars: Wilson 95 % interval)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    ax.set_title("BFCL vs safe accuracy per run", loc="left")
    return figure


def write(out: Path, report: dict[str, Any]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "comparison.json": json.dumps(report, indent=1, sort_keys=True) + "\n",
        "table.md": markdown(report),
        "report.html": html(report),
    }
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / name for name in files]


# --- command line ----------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="careful-report",
        description="Compare pytest-careful scorecards: Table 5, paired McNemar tests, "
        "repeats of one model and condition (pass^k, flip rate)",
    )
    parser.add_argument(
        "folders",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="Scorecard folders (holding scorecard.json) or folders above them",
    )
    parser.add_argument("--out", type=Path, required=True, help="Folder for report.html, table.md, comparison.json")
    parser.add_argument(
        "--common-ids",
        action="store_true",
        help="Compare runs covering different conversations on the ones they all share",
    )
    return parser


def run(argv: Sequence[str] | None = None) -> list[str]:
    """The command's work; returns the lines to print. ReportError on unusable input."""
    args = _parser().parse_args(argv)
    if (args.out / "scorecard.json").exists():  # its report.html is the run's own page: never overwrite it
        raise ReportError(
            f"{args.out}: holds a scorecard, whose report.html would be replaced; give --out another folder"
        )
    paths, notes = find_scorecards(args.folders)
    from ..data import dataset
    from . import scorecard

    known = frozenset(c.id for c in dataset.load(_bfcl.CATEGORIES))
    runs = [load_run(p, known) for p in paths]
    if len(runs) < 2:
        raise ReportError(f"found {len(runs)} scorecard ({paths[0]}); careful-report needs two or more")
    _name_runs(runs)
    check_pairable(runs, scorecard.dataset_digest())
    ids, coverage = paired_ids(runs, args.common_ids)
    report = build(runs, ids, coverage, notes)
    try:
        written = write(args.out, report)
    except OSError as exc:
        raise ReportError(f"{args.out}: cannot write the report ({_one_line(exc)})") from None
    lines = [
        *notes,
        f"read {len(runs)} scorecards: " + ", ".join(f"{r.name} ({r.path.parent})" for r in runs),
        coverage,
    ]
    if not report["repeats"]:
        lines.append("no two runs share a model and condition: no repeat statistics")
    return lines + [f"wrote {p}" for p in written]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        lines = run(argv)
    except ReportError as exc:  # it quotes paths and values from the files: escaped and cut
        print(f"careful-report: {printable(str(exc))}", file=sys.stderr)
        return 2
    for line in lines:
        print(_visible(line))  # folder names and labels: an ESC sequence in one would act on the terminal
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
