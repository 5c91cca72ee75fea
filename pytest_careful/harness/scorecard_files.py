"""End of session: each condition's scorecard folder written (or a partial/ one beside a fuller run),
and the plugin's run-finished hook.

The baseline and the release gate are :mod:`.gate`'s; the terminal summary :mod:`.summary`'s."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common import bfcl as _bfcl
from ..data import dataset
from ..protocols import registry as protocols
from ..reports import scorecard, stats
from ..reports.card import Card, EntriesJson, Narrowed, Page, Provenance, SelectionJson
from ..reports.html_report import read_details
from ..reports.options import BASELINE, LABEL
from ..scoring.row import Row
from ..scoring.rules import NAMES as BUILT_IN_NAMES
from ..scoring.rules import checking, is_built_in
from ..sources.run_config import RunConfig
from . import repeat_runs
from .gate import compare_with_baseline, judge_gate
from .state import CarefulState
from .summary import rerun_command


def finish(state: CarefulState, invocation_dir: Path, narrowed_by: Narrowed) -> None:
    """Write one scorecard per condition and check the release gate.

    ``./scorecards`` means the directory the command was run from. A run that
    scored only part of its conversations never replaces a fuller scorecard,
    and two different runs never overwrite each other silently (see ``_target``).
    """
    options = state.options
    base = options.scorecards if options.scorecards.is_absolute() else invocation_dir / options.scorecards
    label = options.label or state.source.default_label()
    identity = run_identity(state)
    expected = {c.id for c in dataset.load(_run_categories(state))}
    for condition in options.protocols:
        rows = [r for r in state.rows.values() if r["condition"] == condition]
        not_run = sorted(n for n in state.selected if n.endswith(f"[{condition}]") and n not in state.rows)
        if not rows:
            if not_run and options.release_gate:
                state.gate_messages.append(f"{condition}: none of {len(not_run)} selected conversations was scored")
            continue
        complete = not not_run and {r["id"] for r in rows} >= expected
        prov = scorecard.provenance(
            state.source.model,
            state.source.decoder_key,
            condition,
            options.boundary,
            options.detector,
            state.declarations.digest,
            _sampling(state),
        )
        prov["label"], prov["source"] = label, identity
        prov["duplicate_writes"] = options.duplicate_writes
        prov["selection"] = _selection(rows, expected, not_run, complete, options, narrowed_by)
        audit = state.scoring.audit
        if audit is not None:  # the audit the rows were marked from, and what it does to the figures
            prov["audit"] = {"mode": options.audit, "sha256": audit.sha256, "bfcl_eval": audit.bfcl_eval}
        if options.results is not None:  # a logged run: what its result files hold of the categories read
            prov["selection"].update(_entries(state, condition))
        if state.baseline is not None:  # the verdict comparison.json pairs (--careful-regression-verdict)
            prov["regression_verdict"] = options.regression_verdict
        own = state.scoring.own_rules
        if own:  # the run's own rules: what every report needs to show them
            prov["custom_rules"] = checking.describe(own)
        off = [n for n in BUILT_IN_NAMES if n not in {r.name for r in state.scoring.rules if is_built_in(r)}]
        if off:  # built-in rules turned off or replaced (pytest_careful_modify_rules, -p no:careful-rules)
            prov["rules_off"] = off
        if protocols.get(condition).scripted_user:  # the script the run was made under; a stricter one re-examines it
            prov["user_script"] = state.source.user_script(condition, options.user_script)
            if prov["user_script"] != options.user_script:
                prov["reexamined_under"] = options.user_script
        if options.live:
            prov["result_files"] = str(state.source.folders.store(condition).model_dir)  # type: ignore[attr-defined]
            # Every repeat's (conversation id, repeat): which server served each, the key each sent.
            keys = [(r["id"], r.get("repeat", 1)) for row in rows for r in row.get("repeat_rows", [row])]
            prov["live"] = state.source.provenance(condition, keys)  # type: ignore[attr-defined]
        if options.repeat > 1:  # --careful-repeat: a scorecard per repeat; the gate judges their pool
            judge_gate(
                state,
                condition,
                _finish_repeats(state, base, label, condition, identity, rows, prov, complete),
                None,
                not_run,
            )
            continue
        card = scorecard.scorecard(rows, prov)
        comparison = compare_with_baseline(state, rows, condition)
        if comparison is not None and "reexamined" in card["totals"]["all"]:
            _withheld_in_changed(card, state.baseline, options.regression_verdict)
        directory, notes = _target(state, base, label, condition, identity, card, complete)
        written = scorecard.write(directory, card, comparison, page=_page_inputs(state, card))
        state.written.extend(str(p) for p in written)
        state.notes.extend(notes)  # once written: a note must not claim what did not happen
        state.cards[condition] = card
        _finished(state, card, directory / "scorecard.json")
        judge_gate(state, condition, card, comparison, not_run)


def _page_inputs(state: CarefulState, card: Card) -> Page:
    """What report.html adds to the card: the workers' details, rerun commands, the baseline's name."""
    nodes = [f"{r['id']}[{r['condition']}]" for r in card["rows"]]
    baseline = (state.baseline or {}).get("provenance", {})
    return Page(
        details=read_details(state.details_dir, nodes),
        reruns={n: rerun_command(state, n) for n in nodes},
        baseline=baseline.get("label") or baseline.get("model"),
    )


def _finish_repeats(
    state: CarefulState,
    base: Path,
    label: str,
    condition: str,
    identity: dict[str, str],
    rows: list[Row],
    prov: Provenance,
    complete: bool,
) -> Card:
    """``--careful-repeat``: each repeat's scorecard in ``<condition>/repeat-<k>/``, ``repeats.json`` beside.

    Returns the pooled card (every repeat's rows, accuracies the means over
    repeats, and its ``repeat`` section), which the summary and the gate read.
    """
    k = state.options.repeat
    per_repeat = repeat_runs.rows_by_repeat(rows, k)
    folder = None
    for index, repeat_rows in enumerate(per_repeat, start=1):
        result_files = str(state.source.folders.store(condition, index).model_dir)  # type: ignore[attr-defined]
        prov_k: Provenance = {**prov, "repeat": index, "repeats": k, "result_files": result_files}
        card = scorecard.scorecard(repeat_rows, prov_k)
        directory, notes = _target(state, base, label, f"{condition}/repeat-{index}", identity, card, complete)
        state.written.extend(
            str(p) for p in scorecard.write(directory, card, None, page=_repeat_page(state, card, index))
        )
        state.notes.extend(notes)
        if folder is None:  # beside the repeat folders (a selection: in a partial/ of its own)
            folder = directory.parent.parent / "partial" if directory.name == "partial" else directory.parent
    pooled = scorecard.scorecard([r for repeat_rows in per_repeat for r in repeat_rows], {**prov, "repeats": k})
    pooled["repeat"] = repeat_runs.section(per_repeat)
    assert folder is not None
    state.written.append(str(repeat_runs.write_repeats_file(folder, {**prov, "repeats": k}, pooled["repeat"])))
    state.notes.extend(repeat_runs.stale_note(folder, condition, k))
    state.cards[condition] = pooled
    _finished(state, pooled, None)
    return pooled


def _finished(state: CarefulState, card: Card, path: Path | None) -> None:
    """``pytest_careful_run_finished``: the condition's scorecard is written (the pooled one for repeats)."""
    hook = state.hook.pytest_careful_run_finished if state.hook is not None else None
    if hook is not None and hook.get_hookimpls():
        hook(scorecard=scorecard.Scorecard.from_json(card, path))


def _repeat_page(state: CarefulState, card: Card, index: int) -> Page:
    """report.html's inputs for one repeat: its own details (``item.write_detail`` keys repeats > 1 apart)."""
    page = _page_inputs(state, card)
    if index > 1:
        suffix = f"@repeat-{index}"
        keyed = read_details(state.details_dir, [n + suffix for n in page.reruns or {}])
        page = dataclasses.replace(page, details={n.removesuffix(suffix): detail for n, detail in keyed.items()})
    return page


def _withheld_in_changed(card: Card, baseline: Any, verdict: str) -> None:
    """Per category: gained and lost conversations (vs the baseline, on the compared verdict) that
    contain a withheld yes."""
    for category, totals in card["totals"].items():
        rows = [r for r in card["rows"] if category in ("all", r["category"])]
        changed: dict[str, list[bool]] = {"gained": [], "lost": []}
        for row in rows:
            now, before = stats.paired_verdict(row, verdict), stats.paired_verdict(baseline["rows"][row["id"]], verdict)
            if now != before:
                withheld = bool(row.get("reexamined", {}).get("withheld_yes"))
                changed["gained" if now else "lost"].append(withheld)
        if "reexamined" in totals:
            reexamined = totals["reexamined"]
            reexamined["gained_with_withheld"] = sum(changed["gained"])
            reexamined["lost_with_withheld"] = sum(changed["lost"])
            reexamined["gained"], reexamined["lost"] = len(changed["gained"]), len(changed["lost"])


def run_identity(state: CarefulState) -> dict[str, str]:
    """What makes two runs the same run, whatever their labels."""
    options = state.options
    if options.results is not None:
        return {"results": str(options.results.resolve()), "decoder": state.source.decoder_key}
    if not options.live:
        return {"model": state.source.model}
    return {"model": state.source.model, "output": str(options.output.resolve())}


def _run_categories(state: CarefulState) -> tuple[str, ...]:
    """The categories of the whole run, a selection's denominator: node ids narrow the categories
    read (a logged run need not hold the others) but not the run they select from."""
    options = state.options
    if not options.categories_from_node_ids:
        return options.categories
    return state.source.run_categories or _bfcl.CATEGORIES


def _selection(
    rows: list[Row],
    expected: set[str],
    not_run: list[str],
    complete: bool,
    options: RunConfig,
    narrowed_by: Narrowed,
) -> SelectionJson:
    unscored = sum(1 for r in rows if "unscored" in r)
    return {
        "complete": complete,
        "conversations": len(expected),
        "rows": len(rows),
        "scored": len(rows) - unscored,
        "unscored": unscored,
        "not_run": len(not_run),
        "categories": list(options.categories),
        **narrowed_by,
    }


def _entries(state: CarefulState, condition: str) -> EntriesJson:
    """Of the conversations of the categories read, how many the result files hold an entry (or a line
    that could not be read) for, and how many they hold nothing of (``--careful-allow-missing`` left
    those out; without it a selection of any is refused)."""
    ids = [c.id for c in dataset.load(state.options.categories)]
    missing = sum(state.source.lacks_entry(condition, i) for i in ids)
    return {"present": len(ids) - missing, "missing": missing}


def _target(
    state: CarefulState,
    base: Path,
    label: str,
    condition: str,
    identity: dict[str, str],
    card: Card,
    complete: bool,
) -> tuple[Path, list[str]]:
    """Where this condition's scorecard goes, and what to tell the user about it.

    * Another run's scorecard under the same default label is kept: this run
      gets the label plus a hash of what identifies it. An explicit
      ``--careful-label`` is the user's choice: it replaces, and says so.
    * A run that scored a selection (``-k``, node ids, ``--lf``, an early
      stop) never replaces a fuller scorecard of the same run: it goes to
      ``partial/`` beside it, which holds the latest selection. Its provenance
      says what was selected either way, and ``--careful-baseline`` refuses it.
    """
    notes = []
    directory = base / label / condition
    existing = _existing(directory)
    if existing and _other_run(existing, identity):
        if state.options.label:
            notes.append(
                f"{condition}: replaced {directory / 'scorecard.json'}, which held another run's "
                f"scorecard ({_describe(existing.provenance.get('source'))})"
            )
            existing = None
        else:
            other = label
            label = f"{label}-{_digest(identity)}"
            directory = base / label / condition
            notes.append(
                f"{condition}: {base / other} holds another run's scorecard "
                f"({_describe(existing.provenance.get('source'))}); this run's is in "
                f"{base / label} (name it with {LABEL})"
            )
            existing = _existing(directory)
    selection = card["provenance"]["selection"]
    scored = f"{selection['rows']} of {selection['conversations']} conversations"
    if _replaces(existing, {r["id"] for r in card["rows"]}, complete):
        if not complete:
            notes.append(
                f"{condition}: a selection ({scored}), marked partial in its provenance ({BASELINE} refuses it)"
            )
        return directory, notes
    prior = _existing(directory / "partial")
    if prior and _other_run(prior, identity):
        notes.append(f"{condition}: replaced {directory / 'partial'}, which held another run's selection")
    elif prior and len(prior.ids) > len(card["rows"]):
        notes.append(
            f"{condition}: replaced the larger selection ({len(prior.ids)} rows) that {directory / 'partial'} held"
        )
    kept = f" ({_scope(existing)})" if existing is not None else ""
    notes.append(
        f"{condition}: partial run ({scored}) written to {directory / 'partial'}; the fuller "
        f"scorecard in {directory}{kept} is kept"
    )
    return directory / "partial", notes


def _scope(existing: _Existing) -> str:
    """What the scorecard already there scored, as the notes say it (``12 of 200 conversations``)."""
    selection = existing.provenance.get("selection")
    total = selection.get("conversations") if isinstance(selection, dict) else None
    whole = "" if not isinstance(total, int) else f" of {total}"
    return f"{len(existing.ids)}{whole} conversations"


@dataclass(frozen=True)
class _Existing:
    """The scorecard already in a folder: its provenance as read (any JSON) and its rows' ids."""

    provenance: dict[str, Any]
    ids: list[str]


def _other_run(existing: _Existing, identity: dict[str, str]) -> bool:
    return existing.provenance.get("source") not in (None, identity)


def _replaces(existing: _Existing | None, ids: set[str], complete: bool) -> bool:
    """Whether this run's scorecard may take the place of the one there (same run)."""
    if existing is None:
        return True
    if complete and ids >= set(existing.ids):
        return True
    if (existing.provenance.get("selection") or {}).get("complete", True):
        return False  # a whole run is never replaced by a selection of it
    return len(ids) >= len(existing.ids)  # between two selections, the fuller stays


def _existing(directory: Path) -> _Existing | None:
    try:
        card = json.loads((directory / "scorecard.json").read_text(encoding="utf-8"))
        if not isinstance(card["provenance"], dict):  # not a scorecard: as one that cannot be read
            return None
        return _Existing(card["provenance"], [r["id"] for r in card["rows"]])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _describe(source: Any) -> str:
    if not isinstance(source, dict):
        return "unknown source"
    return ", ".join(f"{k} {v}" for k, v in sorted(source.items()))


def _digest(identity: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()[:8]


def _sampling(state: CarefulState) -> str:
    return state.source.sampling()
