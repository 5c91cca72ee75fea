"""``audit.json``: the item audit of the pinned bfcl-eval's 800 conversations, as shipped.

``careful-audit`` writes it (:func:`document`), with a reviewer's verdicts from
``audit_overrides.yaml`` applied, so that the shipped file is always the command's output;
the plugin reads it (:func:`load`). The schema (``SCHEMA``) is documented in ``docs/audit.md``:

* ``schema``, ``bfcl_eval`` (the version audited), ``rules`` (the normal forms, the classes and
  their severities, the search bounds), ``overrides`` (the file applied and its verdicts);
* ``totals``: literals by source, findings by severity, class and category, and per base item
  (``multi_turn_miss_func_143`` is ``multi_turn_base_143`` with a function held out);
* ``conversations``: each id with findings -> its findings (``turn``, ``call``, ``argument``,
  ``finding``, ``severity``, ``evidence``, and ``review`` where a reviewer confirmed one);
* ``rejected``: findings a reviewer rejected, with the reason (kept, never silently dropped).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import yaml

from ..common.bfcl import CATEGORIES, PINNED_VERSION
from ..data.dataset import category_of
from ..effects.declarations import DECLARATIONS_DIR
from . import normal_forms, provenance
from .audit import CLASSES, DEFECT, DOUBT, NEAR_MISS, SEVERITIES, ConversationAudit
from .options import OFF

SCHEMA = 1
AUDIT_FILE = "audit.json"
OVERRIDES_FILE = "audit_overrides.yaml"
#: The shipped audit (beside the declarations; the wheel's package data).
SHIPPED = DECLARATIONS_DIR / AUDIT_FILE
#: A reviewer's verdict on a finding: kept as is, dropped, or given another severity.
VERDICTS = ("confirmed", "rejected", DEFECT, DOUBT)


class AuditMark(TypedDict):
    """A finding as a scorecard row carries it (``Row.audit``): what the failure text and reports show."""

    finding: str
    severity: str
    turn: int
    call: int
    argument: str | None
    literal: object
    detail: str
    near_miss: str | None
    checked_by: str


class AuditFileError(ValueError):
    """An audit or overrides file that cannot be used; the message names the file and what is wrong."""


@dataclass(frozen=True)
class Override:
    """A reviewer's verdict on one finding, with the reason."""

    conversation: str
    turn: int
    call: int
    argument: str | None
    finding: str
    verdict: str
    reason: str

    @property
    def key(self) -> tuple[str, int, int, str, str]:
        return (self.conversation, self.turn, self.call, self.argument or "", self.finding)


def read_overrides(path: Path) -> list[Override]:
    """The reviewer's verdicts; a missing file has none. Every entry must name a finding and give a reason."""
    if not path.is_file():
        return []
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as exc:
        raise AuditFileError(f"{path}: not YAML ({exc})") from None
    entries = data.get("overrides", []) if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise AuditFileError(f"{path}: expected a mapping with a list under 'overrides'")
    return [_override(path, number, entry) for number, entry in enumerate(entries, start=1)]


def _override(path: Path, number: int, entry: object) -> Override:
    where = f"{path}: override {number}"
    if not isinstance(entry, dict):
        raise AuditFileError(f"{where}: expected a mapping")
    missing = [k for k in ("conversation", "turn", "call", "finding", "verdict", "reason") if k not in entry]
    if missing:
        raise AuditFileError(f"{where}: missing {', '.join(missing)}")
    if entry["verdict"] not in VERDICTS:
        raise AuditFileError(f"{where}: verdict {entry['verdict']!r} is not one of {', '.join(VERDICTS)}")
    if entry["finding"] not in CLASSES:
        raise AuditFileError(f"{where}: finding {entry['finding']!r} is not one of {', '.join(CLASSES)}")
    if not str(entry["reason"]).strip():
        raise AuditFileError(f"{where}: a verdict needs its reason")
    return Override(
        str(entry["conversation"]),
        int(entry["turn"]),
        int(entry["call"]),
        None if entry.get("argument") is None else str(entry["argument"]),
        str(entry["finding"]),
        str(entry["verdict"]),
        str(entry["reason"]).strip(),
    )


# -- writing ------------------------------------------------------------------------


def document(audits: Sequence[ConversationAudit], overrides: Sequence[Override] = ()) -> dict[str, object]:
    """The audit of ``audits`` as ``audit.json`` holds it, the overrides applied.

    An override that names no finding is an error: a verdict on a finding that is gone must
    be looked at again, not kept or dropped silently.
    """
    by_key = {o.key: o for o in overrides}
    used: set[tuple[str, int, int, str, str]] = set()
    conversations: dict[str, list[dict[str, object]]] = {}
    rejected: list[dict[str, object]] = []
    for audit in audits:
        kept = []
        for finding in audit.findings:
            row = finding.to_json()
            override = by_key.get((audit.conversation, *finding.key))
            if override is not None:
                used.add(override.key)
                if override.verdict == "rejected":
                    rejected.append({"conversation": audit.conversation, **row, "reason": override.reason})
                    continue
                if override.verdict in SEVERITIES:
                    row["severity"] = override.verdict
                row["review"] = {"verdict": override.verdict, "reason": override.reason}
            kept.append(row)
        if kept:
            conversations[audit.conversation] = kept
    stale = [o for o in overrides if o.key not in used]
    if stale:
        first = stale[0]
        raise AuditFileError(
            f"{OVERRIDES_FILE}: {len(stale)} override(s) name no finding of this audit, e.g. "
            f"{first.conversation} turn {first.turn} call {first.call} {first.argument or ''} {first.finding}"
        )
    return {
        "schema": SCHEMA,
        "bfcl_eval": PINNED_VERSION,
        "rules": _rules(),
        "overrides": {"file": OVERRIDES_FILE, "applied": len(used), "rejected": len(rejected)},
        "totals": _totals(audits, conversations),
        "conversations": conversations,
        "rejected": rejected,
    }


def _rules() -> dict[str, object]:
    return {
        "normal_forms": {"version": normal_forms.VERSION, "forms": dict(normal_forms.FORMS)},
        "classes": {name: {"severity": severity, "rule": rule} for name, (severity, rule) in CLASSES.items()},
        "source_kinds": list(provenance.KINDS),
        "near_miss": NEAR_MISS,
        "bounds": {
            "read_calls": provenance.READ_CALLS,
            "read_calls_per_function": provenance.READ_CALLS_PER_FUNCTION,
            "candidates_per_parameter": provenance.CANDIDATES_PER_PARAMETER,
            "derived_numbers": provenance.DERIVED_NUMBERS,
        },
    }


def _totals(
    audits: Sequence[ConversationAudit], conversations: Mapping[str, list[dict[str, object]]]
) -> dict[str, object]:
    sources: Counter[str] = Counter()
    for audit in audits:
        sources.update(audit.sources)
    rows = [row for found in conversations.values() for row in found]
    by_category = {}
    for category in CATEGORIES:
        ids = [a.conversation for a in audits if category_of(a.conversation) == category]
        if not ids:
            continue
        found = {i: conversations.get(i, []) for i in ids}
        by_category[category] = {
            "conversations": len(ids),
            "with_defect": sum(any(r["severity"] == DEFECT for r in f) for f in found.values()),
            "with_doubt_only": sum(bool(f) and all(r["severity"] == DOUBT for r in f) for f in found.values()),
            "findings": dict(sorted(Counter(str(r["finding"]) for f in found.values() for r in f).items())),
        }
    return {
        "conversations": len(audits),
        "literals": sum(sources.values()),
        "by_source": dict(sorted(sources.items())),
        "findings": {s: sum(r["severity"] == s for r in rows) for s in SEVERITIES},
        "by_class": dict(sorted(Counter(str(r["finding"]) for r in rows).items())),
        "by_category": by_category,
        "base_items": _base_items(conversations),
    }


def _base_items(conversations: Mapping[str, list[dict[str, object]]]) -> dict[str, dict[str, str]]:
    """Per base item (its number), the worst severity each category's mirror of it carries."""
    items: dict[str, dict[str, str]] = {}
    for cid in sorted(conversations, key=lambda c: (int(c.rsplit("_", 1)[1]), c)):
        severities = {str(r["severity"]) for r in conversations[cid]}
        worst = DEFECT if DEFECT in severities else DOUBT
        items.setdefault(cid.rsplit("_", 1)[1], {})[category_of(cid).removeprefix("multi_turn_")] = worst
    return items


def dumps(doc: Mapping[str, object]) -> str:
    """The file's bytes: stable (sorted where order means nothing), one finding per few lines."""
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


# -- reading ------------------------------------------------------------------------


@dataclass(frozen=True)
class Audit:
    """A read ``audit.json``: what the plugin shows of it."""

    path: Path
    sha256: str
    bfcl_eval: str
    conversations: Mapping[str, tuple[Mapping[str, object], ...]]

    def findings(self, conversation: str, severity: str | None = None) -> tuple[Mapping[str, object], ...]:
        found = self.conversations.get(conversation, ())
        return found if severity is None else tuple(f for f in found if f.get("severity") == severity)

    def has_defect(self, conversation: str) -> bool:
        return bool(self.findings(conversation, DEFECT))

    def defects(self, conversations: Iterable[str]) -> set[str]:
        return {c for c in conversations if self.has_defect(c)}

    def marks(self, conversation: str) -> list[AuditMark]:
        """The conversation's findings as its row carries them, defects first."""
        found = sorted(self.findings(conversation), key=lambda f: (f.get("severity") != DEFECT, f.get("turn", 0)))
        return [_mark(f) for f in found]


def _mark(finding: Mapping[str, object]) -> AuditMark:
    evidence = finding.get("evidence")
    shown: Mapping[str, object] = evidence if isinstance(evidence, dict) else {}
    return {
        "finding": str(finding.get("finding", "")),
        "severity": str(finding.get("severity", "")),
        "turn": int(str(finding.get("turn", 0))),
        "call": int(str(finding.get("call", 0))),
        "argument": None if finding.get("argument") is None else str(finding.get("argument")),
        "literal": shown.get("literal"),
        "detail": str(shown.get("detail", "")),
        "near_miss": None if shown.get("near_miss") is None else str(shown.get("near_miss")),
        "checked_by": str(shown.get("checked_by", "")),
    }


@functools.cache
def load(path: Path = SHIPPED) -> Audit:
    """An ``audit.json``, checked against the schema; ``AuditFileError`` names what is wrong."""
    try:
        raw = path.read_bytes()
        data = json.loads(raw)
    except (OSError, ValueError) as exc:
        raise AuditFileError(f"{path}: not a readable audit file ({exc})") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise AuditFileError(f"{path}: not an audit of schema {SCHEMA} (schema {data.get('schema')!r})")
    conversations = data.get("conversations")
    if not isinstance(conversations, dict) or not all(isinstance(v, list) for v in conversations.values()):
        raise AuditFileError(f"{path}: 'conversations' must map each id to a list of findings")
    return Audit(
        path,
        hashlib.sha256(raw).hexdigest(),
        str(data.get("bfcl_eval", "")),
        {str(k): tuple(v) for k, v in conversations.items()},
    )


def for_mode(mode: str) -> Audit | None:
    """The shipped audit that rows carry under ``--careful-audit=mode``; None under ``off``."""
    return None if mode == OFF else load()


def differences(shipped: Mapping[str, object], computed: Mapping[str, object]) -> list[str]:
    """The findings that differ between two audit documents, one line each (``+`` computed only,
    ``-`` shipped only, ``~`` changed); the other parts named when they differ."""
    lines = []
    old, new = _keyed(shipped), _keyed(computed)
    for key in sorted(set(old) | set(new)):
        where = " ".join(str(k) for k in key if k != "")
        if key not in new:
            lines.append(f"- {where} ({old[key]['severity']}): shipped, not found again")
        elif key not in old:
            lines.append(f"+ {where} ({new[key]['severity']}): found, not shipped")
        elif old[key] != new[key]:
            changed = sorted(k for k in set(old[key]) | set(new[key]) if old[key].get(k) != new[key].get(k))
            lines.append(f"~ {where}: {', '.join(changed)} differ")
    for part in ("schema", "bfcl_eval", "rules", "overrides", "totals", "rejected"):
        if shipped.get(part) != computed.get(part) and not lines:
            lines.append(f"~ {part} differs")
    return lines


def _keyed(doc: Mapping[str, object]) -> dict[tuple[object, ...], dict[str, object]]:
    conversations = doc.get("conversations")
    out: dict[tuple[object, ...], dict[str, object]] = {}
    for cid, found in conversations.items() if isinstance(conversations, dict) else ():
        for row in found:
            out[(cid, f"turn {row['turn']}", f"call {row['call']}", row.get("argument") or "", row["finding"])] = row
    return out
