"""careful-report's input: scorecards found, read and type-checked (``Run``, ``ComparedRow``), named, and paired.

Every file is user input: a problem is a ``ReportError`` of one line naming the file.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..common import bfcl as _bfcl
from ..common.text import escape
from ..protocols import registry as protocols
from ..verify.options import AUDIT, EXCLUDE
from .baseline import audit_of, audit_problem, baseline_parts, read_scorecard
from .own_rules import names as custom_rules

#: Short names of the categories, as the paper's Table 5 heads its columns.
SHORT = {
    "multi_turn_base": "b",
    "multi_turn_miss_func": "mf",
    "multi_turn_miss_param": "mp",
    "multi_turn_long_context": "lc",
}


#: Settings that change verdicts, every protocol's (the protocols' registry says which applies where):
#: runs differing in one are not repeats of each other.
VERDICT_SETTINGS = protocols.SETTINGS


class ReportError(Exception):
    """A problem with the input that ends the command with one line and exit status 2."""


@dataclass(frozen=True)
class ComparedRow:
    """What a comparison reads from one scorecard row (``scoring.row.Row``), type-checked."""

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
    defect: bool = False  # the item audit marked a defect in its reference (``Row.audit``)
    calls: int = 0
    optimized_calls: int | None = None  # verified_surplus_calls' tally (--careful-optimize); None: not counted


@dataclass
class Run:
    """One scorecard: where it is, what produced it, and its rows by conversation id."""

    path: Path
    model: str
    condition: str
    settings: dict[str, str]
    provenance: Mapping[str, object]  # as the file holds it, but a label that is no string: None
    rows: dict[str, ComparedRow]
    label: str | None = None
    name: str = ""
    complete: bool = True
    notes: list[str] = field(default_factory=list)

    @property
    def group(self) -> tuple[str, ...]:
        """Runs with the same group are repeats: same model, condition and settings."""
        return (self.model, self.condition, *(self.settings.get(s, "") for s in VERDICT_SETTINGS))


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
        raise ReportError(f"{path}: cannot be followed ({one_line(exc)})") from None


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
        prov, raw = baseline_parts(read_scorecard(path))
        own = custom_rules(prov)
        rows = {cid: _row(number, cid, row, known_ids, own) for number, (cid, row) in enumerate(raw.items())}
        for key in ("model", "protocol"):
            if not isinstance(prov.get(key), str) or not prov[key]:
                raise ValueError(f"provenance.{key} must be a non-empty string")
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise ReportError(f"{path}: not a readable pytest-careful scorecard ({one_line(exc)})") from None
    if not rows:
        raise ReportError(f"{path}: the scorecard has no rows")
    if not isinstance(prov.get("label"), (str, type(None))):
        prov = {**prov, "label": None}  # a label is only a name: an odd one is dropped, not fatal
    settings = {s: str(prov.get(s, "")) for s in VERDICT_SETTINGS if prov.get(s) is not None}
    selection = prov.get("selection") or {}
    categories = {category_of_id(cid) for cid in rows}
    whole = all(cid in rows for cid in known_ids if category_of_id(cid) in categories)  # as baseline_coverage
    return Run(
        path=path,
        model=prov["model"],
        condition=prov["protocol"],
        settings=settings,
        provenance=prov,
        rows=rows,
        label=prov.get("label"),
        complete=whole and selection.get("complete") is not False,
    )


def one_line(exc: BaseException) -> str:
    """An exception's text on one short line: the file is hostile, so is its error message."""
    text = " ".join(str(exc).split())
    return (text[:200] + "...") if len(text) > 200 else text or type(exc).__name__


def _count(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a non-negative integer")
    return value


def _row(
    number: int, cid: str, row: Mapping[str, object], known_ids: frozenset[str], own: Sequence[str] = ()
) -> ComparedRow:
    """The fields a comparison reads, type-checked (ValueError naming the row otherwise)."""
    where = f"row {number} ({cid[:80]!r})"
    if cid not in known_ids:
        raise ValueError(f"{where} is not a BFCL multi-turn conversation id")
    counts = row.get("counts", {})
    if not isinstance(counts, dict):
        raise ValueError(f"{where}: counts must be an object")
    answered, answers = row.get("answers"), None
    if answered is not None:
        if not isinstance(answered, dict):
            raise ValueError(f"{where}: answers must be an object")
        yes, no, restate = (_count(answered.get(k, 0), f"{where} answers.{k}") for k in ("yes", "no", "restate"))
        answers = (yes, no, restate)
    strict = row.get("strict", False)
    if not isinstance(strict, bool):
        raise ValueError(f"{where}: strict must be true or false")
    verdict, safe = row["bfcl"], row["safe"]
    assert isinstance(verdict, dict) and isinstance(safe, bool)  # baseline_parts checked both
    return ComparedRow(
        bfcl=verdict["valid"],
        safe=safe,
        strict=strict,
        needs_destructive=_count(row.get("reference_destructive", 0), f"{where} reference_destructive") > 0,
        collateral=_count(counts.get("collateral_destructive", 0), f"{where} collateral_destructive"),
        asked=_count(counts.get("asked", 0), f"{where} asked"),
        destructive=_count(counts.get("destructive_calls", 0), f"{where} destructive_calls"),
        confirmed=_count(counts.get("confirmed_destructive", 0), f"{where} confirmed_destructive"),
        answers=answers,
        custom=tuple((name, _count(counts.get(name, 0), f"{where} {name}")) for name in own),
        defect=_defect(row.get("audit", []), where),
        calls=_count(row.get("calls", 0), f"{where} calls"),
        optimized_calls=None
        if "optimized_calls" not in counts
        else _count(counts["optimized_calls"], f"{where} optimized_calls"),
    )


def _defect(marks: object, where: str) -> bool:
    if not isinstance(marks, list) or not all(isinstance(m, dict) for m in marks):
        raise ValueError(f"{where}: audit must be a list of findings")
    return any(m.get("severity") == "defect" for m in marks)


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
        problem = audit_problem(dict(first.provenance), dict(run.provenance))
        if problem is not None:
            raise ReportError(f"{run.path} and {first.path}: {problem}")


def paired_ids(runs: list[Run], common: bool) -> tuple[list[str], str]:
    """The conversation ids every figure is computed on, and a sentence saying which (runs under
    ``--careful-audit=exclude``: without the items whose reference has a defect)."""
    ids, coverage = _shared_ids(runs, common)
    if not all(audit_of(dict(r.provenance))[0] == EXCLUDE for r in runs):
        return ids, coverage
    kept = [i for i in ids if not any(r.rows[i].defect for r in runs)]
    return kept, f"{coverage}; {len(ids) - len(kept)} with a defect in their reference left out ({AUDIT}={EXCLUDE})"


def _shared_ids(runs: list[Run], common: bool) -> tuple[list[str], str]:
    sets = [set(r.rows) for r in runs]
    shared = set.intersection(*sets)
    if not shared:
        raise ReportError("the runs share no conversation; nothing can be paired")
    ordered = sorted(shared, key=id_order)
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


def id_order(cid: str) -> tuple[int, int]:
    category, number = cid.rsplit("_", 1)
    return (_bfcl.CATEGORIES.index(category), int(number))


def _repeat_suffix(run: Run) -> str:
    """`` repeat 2`` for a scorecard that --careful-repeat wrote (``<condition>/repeat-2/``)."""
    index = run.provenance.get("repeat")
    return f" repeat {index}" if isinstance(index, int) and not isinstance(index, bool) else ""


def visible(text: str) -> str:
    """A label is user input, printed to the terminal (an ESC sequence there would act) and written to
    table.md (a newline there breaks the row): control and invisible characters shown escaped."""
    return escape(text)


def printable(text: str, limit: int = 500) -> str:
    """A message quoting user files on one terminal line: controls escaped, cut at ``limit`` characters."""
    text = visible(text)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text) - limit} more characters)"


#: Labels and model names longer than this are cut in a run's name (terminal, table.md, report.html).
MAX_NAME = 120


def cut_name(text: str) -> str:
    return text if len(text) <= MAX_NAME else text[:MAX_NAME] + "..."


def name_runs(runs: list[Run]) -> None:
    """A short unique name per run: its label and condition, numbered where they repeat."""
    base = [visible(f"{cut_name(r.label or r.model)} [{cut_name(r.condition)}]") + _repeat_suffix(r) for r in runs]
    seen: dict[str, int] = {}
    for run, name in zip(runs, base):
        seen[name] = seen.get(name, 0) + 1
        run.name = name if base.count(name) == 1 else f"{name} #{seen[name]}"


# --- figures ---------------------------------------------------------------------


def category_of_id(cid: str) -> str:
    return cid.rsplit("_", 1)[0]


def categories_of(ids: Iterable[str]) -> list[str]:
    present = {cid.rsplit("_", 1)[0] for cid in ids}
    return [c for c in _bfcl.CATEGORIES if c in present]


def by_category(ids: list[str]) -> dict[str, list[str]]:
    groups: dict[str, list[str]] = {}
    for cid in ids:
        groups.setdefault(cid.rsplit("_", 1)[0], []).append(cid)
    return groups
