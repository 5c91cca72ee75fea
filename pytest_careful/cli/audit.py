"""``careful-audit``: the item audit of BFCL's 800 reference trajectories, by replay.

careful-audit                 # recompute, apply audit_overrides.yaml, write the shipped audit.json
careful-audit --check         # recompute; exit 1, one line per finding that differs, unless identical
careful-audit --json          # the audit on standard output (nothing written)
careful-audit --markdown      # the findings as a Markdown table (nothing written)

Each reference literal gets its sources (the user's turns, earlier results, visible state, the
docs, a bounded read search, arithmetic); a literal BFCL's checker reads and no source gives is
a finding: a ``defect`` (no model can pass the item as given) or a ``doubt`` (only a guess
passes). See docs/audit.md.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..data import dataset
from ..verify.audit import CLASSES, DEFECT, DOUBT, ConversationAudit, audit_conversation
from ..verify.audit_file import (
    OVERRIDES_FILE,
    SHIPPED,
    AuditFileError,
    differences,
    document,
    dumps,
    read_overrides,
)


def audit_all(conversation_ids: Sequence[str], jobs: int) -> list[ConversationAudit]:
    """Every conversation audited, in order, on ``jobs`` processes (forked: the dataset is loaded once)."""
    if jobs <= 1 or len(conversation_ids) < 2:
        return [audit_conversation(dataset.get(c)) for c in conversation_ids]
    chunks = [list(conversation_ids[i::jobs]) for i in range(jobs)]  # interleaved: the costly ones spread out
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        done = {a.conversation: a for chunk in pool.map(_audit_chunk, chunks) for a in chunk}
    return [done[c] for c in conversation_ids]


def _audit_chunk(conversation_ids: list[str]) -> list[ConversationAudit]:
    return [audit_conversation(dataset.get(c)) for c in conversation_ids]


def markdown(doc: Mapping[str, object]) -> str:
    """The audit as Markdown: counts per class and category, the base items with a defect, then every
    finding with its evidence (defects first). docs/audit.md holds this output (a test compares them)."""
    conversations = doc["conversations"]
    totals = doc["totals"]
    assert isinstance(conversations, dict) and isinstance(totals, dict)
    by_category = totals["by_category"]
    classes = list(CLASSES)
    lines = ["| class | severity | " + " | ".join(c.removeprefix("multi_turn_") for c in by_category) + " | all |"]
    lines.append("|---|---|" + "---|" * (len(by_category) + 1))
    for name in classes:
        counts = [by_category[c]["findings"].get(name, 0) for c in by_category]
        lines.append(f"| {name} | {CLASSES[name][0]} | " + " | ".join(map(str, counts)) + f" | {sum(counts)} |")
    with_defect = [by_category[c]["with_defect"] for c in by_category]
    lines.append("| conversations with a defect | | " + " | ".join(map(str, with_defect)) + f" | {sum(with_defect)} |")
    lines += ["", "Base items whose mirror carries a defect in some category (`-`: none, `doubt`: a doubt only):", ""]
    lines += ["| item | " + " | ".join(c.removeprefix("multi_turn_") for c in by_category) + " |"]
    lines.append("|---|" + "---|" * len(by_category))
    for item, marks in totals["base_items"].items():
        if DEFECT in marks.values():
            cells = [marks.get(c.removeprefix("multi_turn_"), "-") for c in by_category]
            lines.append(f"| {item} | " + " | ".join(cells) + " |")
    rows = [(cid, f) for cid, found in conversations.items() for f in found]
    for severity in (DEFECT, DOUBT):
        lines += ["", f"{severity.capitalize()}s:", ""]
        lines += [
            "| conversation | turn | call | argument | finding | literal | evidence |",
            "|---|---|---|---|---|---|---|",
        ]
        for cid, f in (r for r in rows if r[1]["severity"] == severity):
            evidence = f["evidence"]
            shown = evidence.get("near_miss") or evidence.get("detail") or ""
            lines.append(
                f"| {cid} | {f['turn']} | {f['call']} | {f.get('argument') or '(the call)'} | {f['finding']} | "
                f"{_cell(repr(evidence['literal']))} | {_cell(str(shown))} |"
            )
    return "\n".join(lines) + "\n"


def _cell(text: str) -> str:
    text = text if len(text) <= 200 else text[:199] + "…"
    return text.replace("|", "\\|").replace("\n", " ")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="careful-audit", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument("--check", action="store_true", help="Recompute and fail unless the audit file is identical")
    output.add_argument("--json", action="store_true", help="Print the audit as JSON (nothing written)")
    output.add_argument("--markdown", action="store_true", help="Print the findings as a Markdown table")
    parser.add_argument(
        "--file", type=Path, default=SHIPPED, help="The audit file written or checked (default: the shipped one)"
    )
    parser.add_argument(
        "--overrides",
        type=Path,
        default=None,
        help=f"A reviewer's verdicts to apply (default: {OVERRIDES_FILE} beside the audit file)",
    )
    parser.add_argument(
        "-j", "--jobs", type=int, default=min(os.cpu_count() or 1, 8), help="Processes (default: the cores)"
    )
    args = parser.parse_args(argv)
    started = time.perf_counter()
    overrides_path = args.overrides or args.file.parent / OVERRIDES_FILE
    try:
        overrides = read_overrides(overrides_path)
        ids = [c.id for c in dataset.load()]
        doc = document(audit_all(ids, max(args.jobs, 1)), overrides)
    except AuditFileError as exc:
        print(f"careful-audit: {exc}", file=sys.stderr)
        return 2
    took = time.perf_counter() - started
    if args.json:
        sys.stdout.write(dumps(doc))
        return 0
    if args.markdown:
        sys.stdout.write(markdown(doc))
        return 0
    if args.check:
        return _check(args.file, doc, took)
    args.file.write_text(dumps(doc), encoding="utf-8")
    print(f"careful-audit: {_summary(doc)}; wrote {args.file} in {took:.1f} s")
    return 0


def _check(path: Path, doc: Mapping[str, object], took: float) -> int:
    try:
        shipped = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"careful-audit: {path}: cannot read it ({exc})", file=sys.stderr)
        return 1
    lines = differences(shipped, doc)
    if not lines and dumps(shipped) != dumps(doc):
        lines = ["~ the file's bytes differ (rewrite it with careful-audit)"]
    for line in lines:
        print(line)
    print(f"careful-audit: {path} is {'stale' if lines else 'up to date'} ({_summary(doc)}; {took:.1f} s)")
    return 1 if lines else 0


def _summary(doc: Mapping[str, object]) -> str:
    totals = doc["totals"]
    assert isinstance(totals, dict)
    findings = totals["findings"]
    conversations = doc["conversations"]
    assert isinstance(conversations, dict)
    with_defect = sum(any(f["severity"] == DEFECT for f in found) for found in conversations.values())
    return (
        f"{totals['conversations']} conversations, {totals['literals']:,} literals: "
        f"{findings[DEFECT]} defects in {with_defect} conversations, {findings[DOUBT]} doubts"
    )


if __name__ == "__main__":
    sys.exit(main())
