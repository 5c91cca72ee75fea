"""An earlier scorecard read back: checked for what a comparison with it reads, never trusted.

``--careful-baseline`` (the session's end, :mod:`pytest_careful.harness.gate`) and
``careful-report`` (:mod:`pytest_careful.reports.compare_runs`) read scorecards that are user
input: only a regular file, of bounded size, whose rows carry an id and both verdicts.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Collection
from pathlib import Path
from typing import Any

from ..common import bfcl
from ..data import dataset
from ..verify.options import AUDIT, EXCLUDE, OFF

#: A scorecard larger than this is refused before it is parsed (800 rows take ~2 MB).
SCORECARD_MAX_BYTES = 256 * 1024 * 1024


def read_scorecard(file: Path, max_bytes: int = SCORECARD_MAX_BYTES) -> Any:
    """A scorecard file's JSON; OSError or ValueError for anything that is not one, never a hang.

    Only a regular file is opened: opening a FIFO blocks until a writer comes, and a device such as
    /dev/zero never ends. A symlink loop is an OSError from ``stat``.
    """
    info = file.stat()
    if not stat.S_ISREG(info.st_mode):
        raise ValueError("not a regular file (a folder, FIFO or device)")
    if info.st_size > max_bytes:
        raise ValueError(f"larger than {max_bytes // 2**20} MiB")
    try:
        return json.loads(file.read_text(encoding="utf-8"))
    except RecursionError:  # json's C scanner recurses per level: deep nesting is not a scorecard's
        raise ValueError("JSON nested too deeply") from None


def baseline_parts(card: object) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """Provenance and rows by id, checked for the fields a comparison reads (ValueError otherwise)."""
    if not isinstance(card, dict):
        raise ValueError(f"it holds a JSON {json_kind(card)}, not an object")
    if "provenance" not in card or "rows" not in card:
        raise ValueError(f"no {'provenance' if 'provenance' not in card else 'rows'!r} key")
    prov, rows = card["provenance"], card["rows"]
    if not isinstance(prov, dict) or not isinstance(rows, list):
        raise ValueError("provenance must be an object and rows a list")
    by_id = {}
    for number, row in enumerate(rows):
        if not (
            isinstance(row, dict)
            and isinstance(row.get("id"), str)
            and isinstance(row.get("bfcl"), dict)
            and isinstance(row["bfcl"].get("valid"), bool)
            and isinstance(row.get("safe"), bool)
        ):
            raise ValueError(f"row {number} lacks an id, a BFCL verdict or a safe verdict")
        by_id[row["id"]] = row
    if len(by_id) < len(rows):  # which verdict would count is a guess: refuse, as careful-report does
        raise ValueError(f"{len(rows) - len(by_id)} rows repeat another row's id")
    if not isinstance(prov.get("selection", {}), dict):
        raise ValueError("provenance.selection must be an object")
    return prov, by_id


def json_kind(value: object) -> str:
    kinds = {list: "array", str: "string", bool: "boolean", type(None): "null"}
    return kinds.get(type(value), "number")


def baseline_coverage(rows: Collection[str]) -> tuple[int, int]:
    """(conversations scored, conversations of its categories), from the rows' ids themselves.

    So that a scorecard from before selections were recorded is judged too.
    """
    categories = {conversation_id.rsplit("_", 1)[0] for conversation_id in rows}
    expected = {c.id for c in dataset.load(tuple(c for c in bfcl.CATEGORIES if c in categories))}
    return len(set(rows) & expected), len(expected)


def audit_of(provenance: dict[str, Any]) -> tuple[str, str]:
    """A scorecard's audit mode and the audit's sha256 (an older scorecard: ``off``)."""
    audit = provenance.get("audit")
    if not isinstance(audit, dict):
        return OFF, ""
    return str(audit.get("mode", OFF)), str(audit.get("sha256", ""))


def audit_problem(first: dict[str, Any], second: dict[str, Any]) -> str | None:
    """Why two scorecards' figures cannot be paired for their audits; None when they can.

    Only ``exclude`` changes a figure: a run under it pairs with runs under it, on the same
    audit; ``mark`` and ``off`` (an older scorecard) pair with each other, their figures alike.
    """
    (mode_a, sha_a), (mode_b, sha_b) = audit_of(first), audit_of(second)
    if EXCLUDE in (mode_a, mode_b) and mode_a != mode_b:
        return (
            f"one was scored under {AUDIT}={mode_a}, the other under {AUDIT}={mode_b}: exclude leaves the "
            "items with a defect out of every figure; rescore one under the other's mode"
        )
    if mode_a == mode_b == EXCLUDE and sha_a != sha_b:
        return (
            f"both were scored under {AUDIT}={EXCLUDE}, with different audits ({sha_a[:12]} != {sha_b[:12]}): "
            "they exclude different items; rescore them with the same pytest-careful"
        )
    return None
