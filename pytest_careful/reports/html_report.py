"""report.html: one self-contained page per scorecard, and the per-conversation detail it shows.

Two halves, on two sides of xdist:

* Where an item is scored (a worker, or the only process), ``conversation_detail``
  turns its evaluation into a bounded, JSON-safe record (turns, the model's steps
  beside the reference's calls, results and statuses, state diffs) and
  ``DetailSink`` appends it to a JSONL sidecar file of its own process. The detail
  never rides on the test report: what crosses xdist stays one row per item.
* The controller creates the sidecar folder before any worker starts, passes it
  to them (``workerinput``), reads every file back when it writes the scorecards
  (``read_details``) and renders ``report.html`` with ``render``.

The page is built with Jinja2, autoescaped: every text in it may come from a
model, and a model's text is hostile. Strings are cut where they are made (a
visible "… (N more bytes)" marker) and every string that reaches the page also
passes ``page_text``, which escapes control and invisible characters and cuts
anything still longer than ``MAX_PAGE_TEXT``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import jinja2
from markupsafe import Markup

from ..execution import dag
from ..execution.snapshot import Change, diff
from ..protocols import registry as protocols
from ..scoring import rules
from . import own_rules
from .card import Card, Detail, StateChange, Step, Totals, TurnDetail
from .stats import VERDICT_NAMES, ComparisonJson, compared_verdict, p_text

if TYPE_CHECKING:  # types only: the controller renders the page without the scoring stages loaded
    from ..data.dataset import Conversation
    from ..evaluation.evaluate import Evaluation
    from ..evaluation.replay import CallRecord, TurnReplay
    from ..execution.snapshot import Change
    from ..scoring.row import Row, ViolationJson

#: Per-field limits of a conversation's detail, in characters (the marker says how many bytes were cut).
MAX_TEXT = 2_000  # the model's text, a user request
MAX_CALL = 500  # one call as written
MAX_RESULT = 300  # one call's result (a long file read is cut: the page is for reading, not for the data)
MAX_VALUE = 300  # one state value in a diff
MAX_CHANGES = 20  # state changes shown per turn
MAX_CALLS = 40  # calls shown per turn
MAX_EVIDENCE = 20  # violations shown per conversation (scorecard.json has them all)
MAX_EVIDENCE_ITEMS = 5  # reference calls and state changes quoted beside a violation
#: The conversations' part of the page, in bytes of HTML: past it, the turns and evidence of some
#: conversations are left out (``within_budget``), so that the page stays under 10 MB whatever
#: the model wrote (the rest of the page is a few hundred kB at most).
MAX_CONVERSATION_BYTES = 9_000_000
#: Backstop for every string that reaches the page (row fields come from scorecard.json uncut).
MAX_PAGE_TEXT = 10_000
TEMPLATES = Path(__file__).parent / "templates"
# Characters a page must not pass through as they are: C0/C1 controls (but tab and newline),
# zero-width and bidi controls, line/paragraph separators, BOM, lone surrogates (unencodable).
_UNSAFE = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e"
    "\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\ud800-\udfff]"
)


_PIECE = 1 << 16


def clip(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters, with a visible marker of how many bytes were cut."""
    if len(text) <= limit:
        return text
    # str.isascii is a flag lookup: a megabyte of ASCII is measured without being encoded; other
    # text is encoded a piece at a time, never copied whole (issue 23).
    rest = (
        len(text) - limit
        if text.isascii()
        else sum(len(text[i : i + _PIECE].encode("utf-8", "surrogatepass")) for i in range(limit, len(text), _PIECE))
    )
    return f"{text[:limit]}… ({rest} more bytes)"


def page_text(text: str, limit: int = MAX_PAGE_TEXT) -> str:
    """``text`` as the page may show it: cut, controls and invisible characters escaped (``\\x1b``)."""
    text = clip(text, limit)
    if _UNSAFE.search(text) is None:
        return text
    return _UNSAFE.sub(lambda m: ascii(m.group())[1:-1], text)


def value_text(value: object, limit: int = MAX_VALUE) -> str:
    """A state value as JSON text, cut without building all of it (a file tree can be huge)."""
    if isinstance(value, str):
        return clip(value, limit)
    size = dag.text_size(value, "json")
    text = dag.text_prefix(value, limit, "json")
    return text + (f"… ({size - len(text)} more characters)" if size > len(text) else "")


# --- the detail, where the item is scored --------------------------------------------


def conversation_detail(evaluation: Evaluation) -> Detail:
    """What the page shows of one conversation beyond its row: turn by turn, model beside reference
    (the sidecar's ``card.Detail``).

    Bounded: every text is cut (``MAX_*``), and so are the calls and changes per turn.
    """
    conversation = evaluation.conversation
    replay, reference = evaluation.replay, evaluation.reference
    turns: list[TurnDetail] = []
    for index in range(max(len(replay.turns), len(reference.turns))):
        model_turn = replay.turns[index] if index < len(replay.turns) else None
        reference_turn = reference.turns[index] if index < len(reference.turns) else None
        turns.append(
            {
                "index": index,
                "request": clip(_request(conversation, index), MAX_TEXT),
                "model": _model_steps(evaluation, index, model_turn),
                "model_ran": model_turn is not None,
                "reference": _calls(reference_turn.calls if reference_turn else []),
                "state_diff": _state_diff(model_turn, reference_turn),
            }
        )
    entry = evaluation.entry
    inference_error = entry.result if entry is not None and isinstance(entry.result, str) else None
    return {
        "classes": list(conversation.involved_classes),
        "turns": turns,
        "inference_error": clip(inference_error, MAX_TEXT) if inference_error else None,
    }


def _request(conversation: Conversation, index: int) -> str:
    messages = conversation.questions[index] if index < len(conversation.questions) else []
    return "\n".join(str(m.get("content", "")) for m in messages if isinstance(m, dict))


def _model_steps(evaluation: Evaluation, index: int, turn: TurnReplay | None) -> list[Step]:
    """The turn's calls and its steps without a call, in the order the model made them."""
    if turn is None:
        return []
    run = evaluation.run
    raw_index = run.raw_index[index] if run and index < len(run.raw_index) else []
    calls = _calls(turn.calls)
    for call, record in zip(calls, turn.calls):
        call["order"] = raw_index[record.step] if record.step < len(raw_index) else record.step
    if len(calls) > len(turn.calls[:MAX_CALLS]):
        calls[-1]["order"] = calls[-2]["order"]  # "… N more calls" right after the last call shown
    texts: list[Step] = []
    for step in (run.no_calls[index] if run and index < len(run.no_calls) else [])[:MAX_CALLS]:
        texts.append(
            {
                "order": step.index,
                "step": step.index,
                "kind": "text",
                "text": clip(step.text, MAX_TEXT) if step.text is not None else None,
                "error": step.error,
            }
        )
    return sorted(calls + texts, key=lambda s: s["order"])


def _calls(records: Sequence[CallRecord]) -> list[Step]:
    """Each call with its result and status. Not each call's own state change: diffing every call
    costs more than scoring it; the turn's diff against the reference and the rule evidence show
    what matters."""
    out: list[Step] = [
        {
            "kind": "call",
            "step": record.step,
            "call": clip(record.call, MAX_CALL),
            "result": clip(str(record.result), MAX_RESULT),
            "status": record.status,
        }
        for record in records[:MAX_CALLS]
    ]
    if len(records) > MAX_CALLS:
        out.append({"kind": "more", "step": None, "text": f"… {len(records) - MAX_CALLS} more calls"})
    return out


def _changes(changes: Sequence[Change]) -> list[StateChange]:
    """The changes from the reference's state to the model's, cut to ``MAX_CHANGES``."""
    out: list[StateChange] = [
        {"path": clip(".".join(c.path), MAX_CALL), "reference": _side(c.before), "model": _side(c.after)}
        for c in changes[:MAX_CHANGES]
    ]
    if len(changes) > MAX_CHANGES:
        out.append({"path": f"… {len(changes) - MAX_CHANGES} more changes", "reference": "", "model": ""})
    return out


def _side(value: object) -> str | None:
    return None if value == Change.MISSING else value_text(value)


def _state_diff(model_turn: TurnReplay | None, reference_turn: TurnReplay | None) -> list[StateChange]:
    """Where the model's state after the turn differs from the reference's (hidden attributes too)."""
    if model_turn is None or reference_turn is None:
        return []
    return _changes(diff(reference_turn.state_after, model_turn.state_after))


class DetailSink:
    """Appends one process's details to its own JSONL file in the run's sidecar folder.

    One line per item, written when it is scored: the lines of items that finished
    before a worker crashed are kept, and no two processes share a file.
    """

    def __init__(self, directory: Path, worker: str) -> None:
        self.path = Path(directory) / f"{worker}-{os.getpid()}.jsonl"

    def write(self, node: str, detail: Detail) -> None:
        # ASCII-escaped: a lone surrogate in a model's text must not make the write fail.
        line = json.dumps({"node": node, "detail": detail}, separators=(",", ":"))
        try:
            with open(self.path, "a", encoding="utf-8") as out:
                out.write(line + "\n")
        except OSError:
            pass  # the page then says the detail is missing; the score itself is unaffected


def read_details(directory: Path | None, nodes: Iterable[str] | None = None) -> dict[str, Detail]:
    """Every detail in the sidecar folder, by node id (the last one of a node wins).

    A line cut short by a crashed worker is skipped; so are lines of nodes not in ``nodes``.
    """
    wanted = None if nodes is None else set(nodes)
    found: dict[str, Detail] = {}
    if directory is None or not Path(directory).is_dir():
        return found
    for path in sorted(Path(directory).glob("*.jsonl")):
        with open(path, encoding="utf-8", errors="replace") as lines:
            for line in lines:
                try:
                    record = json.loads(line)
                except ValueError:
                    continue
                if (
                    isinstance(record, dict)
                    and isinstance(record.get("detail"), dict)
                    and (wanted is None or record.get("node") in wanted)
                ):
                    found[str(record["node"])] = record["detail"]
    return found


# --- the page, on the controller -----------------------------------------------------

#: The summary table's columns: (header, legend). Values come from ``_summary_cells``.
SUMMARY_COLUMNS = (
    ("n", "conversations scored in this category (unscored ones count as failures)"),
    ("BFCL %", "share passing BFCL's own verdict, as `bfcl evaluate` scores it"),
    ("safe %", "share passing BFCL with no collateral destructive call and no duplicate write"),
    ("strict", "number of conversations safe with no unconfirmed destructive call either"),
    ("collateral", "destructive calls beyond the reference, whether or not they succeeded (the paper's count)"),
    ("changed state", "collateral destructive calls that changed the state (a deleted file, not a refused rm)"),
    ("beyond d/w/r", "calls beyond the reference: destructive / write / read"),
    ("dup. writes", "non-idempotent writes repeated after they had succeeded"),
    ("redund. reads", "reads repeated with the same arguments and nothing changed in between"),
    ("failed", "calls that raised or returned an error"),
    ("asked", "turns answered with a question instead of a call"),
    ("steps", "model responses per conversation"),
    ("surplus out %", "share of output tokens spent in steps whose calls all lie beyond the reference"),
    ("surplus in %", "share of input tokens spent in those steps"),
)
#: Per-turn credit, where the rows have it (``turn_credit``).
TURNS_COLUMN = (
    "turns %",
    "per-turn credit: mean share of a conversation's checked turns (those the reference "
    "acts in) at whose end the state equals the reference's",
)


#: Where the run's own rules' columns go: after the built-in rules', before the per-step figures.
_OWN_RULES_AT = [header for header, _ in SUMMARY_COLUMNS].index("steps")


def _summary_columns(card: Card, own: Sequence[own_rules.OwnRule]) -> list[tuple[str, str]]:
    """The summary table's (header, legend) pairs: the built-in rules, the run's own beside them."""
    columns = list(SUMMARY_COLUMNS)
    columns[_OWN_RULES_AT:_OWN_RULES_AT] = [(rule.header, rule.legend) for rule in own]
    return columns + ([TURNS_COLUMN] if "turn_credit" in card["totals"].get("all", {}) else [])


def _summary_cells(
    totals: Totals, own: Sequence[own_rules.OwnRule] = (), dropped: frozenset[str] = frozenset()
) -> list[str]:
    cells = _built_in_cells(totals, dropped)
    cells[_OWN_RULES_AT:_OWN_RULES_AT] = [str(totals["counts"].get(rule.name, 0)) for rule in own]
    return cells


def _built_in_cells(totals: Totals, dropped: frozenset[str] = frozenset()) -> list[str]:
    """A category's cells; a built-in rule the run did not have (``dropped``) reads ``off``."""
    c = {name: own_rules.shown(totals["counts"], name, dropped) for name in rules.NAMES + rules.TALLIES}
    return [
        str(totals["conversations"]),
        f"{100 * totals['bfcl_accuracy']:.1f}",
        f"{100 * totals['safe_accuracy']:.1f}",
        str(totals["strict_pass"]),
        c["collateral_destructive"],
        c["collateral_changed_state"],
        f"{c['beyond_reference_destructive']}/{c['beyond_reference_write']}/{c['beyond_reference_read']}",
        c["duplicate_writes"],
        c["redundant_reads"],
        c["failed_calls"],
        c["asked"],
        f"{totals['steps_per_conversation']:.1f}",
        f"{100 * totals['surplus_output_share']:.1f}",
        f"{100 * totals['surplus_input_share']:.1f}",
    ] + ([f"{100 * totals['turn_credit']:.1f}"] if "turn_credit" in totals else [])


def render(
    card: Card,
    comparison: Mapping[str, ComparisonJson] | None = None,
    details: Mapping[str, Detail] | None = None,
    reruns: Mapping[str, str] | None = None,
    charts: Mapping[str, str] | None = None,
    baseline: str | None = None,
) -> str:
    """The page of one scorecard.

    Args:
        card: the scorecard (``scorecard.scorecard``).
        comparison: the baseline comparison (``stats.to_json``), if any.
        details: ``conversation_detail`` records by node id (``multi_turn_base_0[standard]``).
        reruns: the command that reruns each node, by node id.
        charts: SVG text by chart name (``plots.svg``), drawn inline.
        baseline: the baseline's name (its label or model), named in the comparison's heading.
    """
    prov = card["provenance"]
    own, dropped = own_rules.read(prov), own_rules.off(prov)
    # the built-in rules the run had, then its own (a replacement of a built-in rule among them)
    names = tuple(n for n in rules.NAMES if n not in dropped) + tuple(r.name for r in own)
    context = {
        "prov": prov,
        "provenance": sorted((k, _plain(v)) for k, v in prov.items()),
        "columns": _summary_columns(card, own),
        "summary": [
            (c.removeprefix("multi_turn_"), _summary_cells(t, own, dropped)) for c, t in _ordered(card["totals"])
        ],
        "charts": [(name, Markup(_inline_svg(svg))) for name, svg in (charts or {}).items()],
        "optimized": [
            (c.removeprefix("multi_turn_"), pair)
            for c, t in _ordered(card["totals"])
            if (pair := own_rules.optimized(t)) is not None
        ],
        "audit": [(c.removeprefix("multi_turn_"), t["audit"]) for c, t in _ordered(card["totals"]) if "audit" in t],
        "comparison": [(c, _comparison_cells(r)) for c, r in _ordered(comparison or {})],
        "baseline": baseline,
        "compared": VERDICT_NAMES[compared_verdict(prov)],
        "rules": [r for r in names if any(r in _flagged(row, names) for row in card["rows"])],
        "all_rules": names,
        "categories": sorted({r["category"].removeprefix("multi_turn_") for r in card["rows"]}),
        "conversations": card["rows"],
        "bodies": _bodies(card["rows"], details or {}, reruns or {}, names),
        "script_hash": _script_hash(),
        "script": Markup(script_text()),
        "css": Markup((TEMPLATES / "report.css").read_text(encoding="utf-8")),
    }
    return jinja_environment().get_template("report.html.j2").render(context)


@dataclass(frozen=True)
class ComparisonCells:
    """One category against the baseline, as the page shows it: p as a reader reads it, flipped ids
    (``[id, "gained" | "lost"]``) in dataset order."""

    gained: int
    lost: int
    p_text: str
    flipped: list[list[str]]


def _comparison_cells(result: ComparisonJson) -> ComparisonCells:
    """One category against the baseline (``stats.to_json``'s), as the page shows it."""
    p = float(result["p"])
    flipped = sorted(result.get("flipped", []), key=lambda pair: _id_number(str(pair[0])))
    return ComparisonCells(result["gained"], result["lost"], p_text(p), flipped)


def _id_number(cid: str) -> tuple[str, int]:
    """``multi_turn_base_10`` after ``multi_turn_base_9`` (not after ``multi_turn_base_1``)."""
    stem, _, number = cid.rpartition("_")
    return (stem, int(number)) if number.isdigit() else (cid, -1)


_Figures = TypeVar("_Figures")


def _ordered(by_category: Mapping[str, _Figures]) -> list[tuple[str, _Figures]]:
    """Categories in their order, ``all`` last (a scorecard read back from JSON sorts it first)."""
    return [(c, v) for c, v in by_category.items() if c != "all"] + [
        (c, v) for c, v in by_category.items() if c == "all"
    ]


def _plain(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, ensure_ascii=False)


def _node(row: Row) -> str:
    return f"{row['id']}[{row['condition']}]"


def _bodies(
    rows: Sequence[Row],
    details: Mapping[str, Detail],
    reruns: Mapping[str, str],
    names: Sequence[str] = rules.NAMES,
) -> list[Markup]:
    """Each conversation's ``<details>`` element, rendered on its own and kept within the budget."""
    template = jinja_environment().get_template("conversation.html.j2")
    conversations = [_conversation(row, details.get(_node(row)), reruns.get(_node(row), ""), names) for row in rows]
    bodies = [template.render(c=c) for c in conversations]
    for index in within_budget(conversations, [len(b.encode("utf-8")) for b in bodies]):
        conversations[index] = replace(
            conversations[index],
            detail=None,
            violations=(),
            more_violations=0,
            why_no_detail=f"left out to keep the page under 10 MB: its conversations take at most "
            f"{MAX_CONVERSATION_BYTES} bytes, and passing ones are left out first",
        )
        bodies[index] = template.render(c=conversations[index])
    return [Markup(body) for body in bodies]  # rendered by an autoescaping template


def within_budget(
    conversations: Sequence[ConversationView], sizes: Sequence[int], budget: int = MAX_CONVERSATION_BYTES
) -> list[int]:
    """Indices of the conversations whose turns and evidence are left out so that the rest fit ``budget``.

    Safe conversations go first, then the others; the largest first within each. Every field is
    already cut, so this matters only for huge runs or hostile models; what is left of a
    conversation (its line, a sentence) is counted as 1 kB.
    """
    total = sum(sizes)
    dropped = []
    for index in sorted(range(len(sizes)), key=lambda i: (conversations[i].safe != "pass", -sizes[i])):
        if total <= budget:
            break
        total -= sizes[index] - 1_000
        dropped.append(index)
    return dropped


@dataclass(frozen=True)
class EvidenceChange:
    """A state change quoted beside a violation, its values cut (None: absent on that side)."""

    path: str
    before: str | None
    after: str | None


@dataclass(frozen=True)
class ViolationView:
    """A violation as the page shows it: every text cut."""

    rule: str
    turn: int | None
    step: int | None
    call: str
    note: str
    reference_calls: tuple[str, ...]
    changes: tuple[EvidenceChange, ...]


@dataclass(frozen=True)
class ConversationView:
    """One conversation as ``conversation.html.j2`` renders it."""

    node: str
    row: Row  # the scorecard's row, as the card holds it
    category: str
    bfcl: str
    safe: str
    strict: str
    flagged: tuple[str, ...]
    violations: tuple[ViolationView, ...]
    more_violations: int
    detail: Detail | None
    rerun: str
    why_no_detail: str


def _conversation(row: Row, detail: Detail | None, rerun: str, names: Sequence[str] = rules.NAMES) -> ConversationView:
    # The gated rules first (rules.NAMES's order, then the run's own), each in turn order: the cut keeps
    # what matters.
    order = {rule: index for index, rule in enumerate(names)}
    ordered = sorted(row.get("violations", []), key=lambda v: order.get(v.get("rule"), len(order)))
    return ConversationView(
        node=_node(row),
        row=row,
        category=row["category"].removeprefix("multi_turn_"),
        bfcl="pass" if row["bfcl"]["valid"] else "fail",
        safe="pass" if row["safe"] else "fail",
        strict="pass" if row["strict"] else "fail",
        flagged=tuple(_flagged(row, names)),
        violations=tuple(_violation(v) for v in ordered[:MAX_EVIDENCE]),
        more_violations=max(0, len(row.get("violations", [])) - MAX_EVIDENCE),
        detail=detail,
        rerun=rerun,
        why_no_detail=row.get("unscored") or row.get("resource_limit") or "",
    )


def _flagged(row: Row, names: Sequence[str] = rules.NAMES) -> list[str]:
    """The rules the conversation broke (without confirm, every destructive call is "unconfirmed": not one)."""
    return [
        r
        for r in names
        if row["counts"].get(r)
        and (r != "unconfirmed_destructive" or protocols.has_scripted_user(row.get("condition")))
    ]


def _violation(violation: ViolationJson) -> ViolationView:
    """A violation as the row holds it, its texts cut (the row keeps the model's call uncut)."""
    changes = violation.get("changes") or []
    return ViolationView(
        rule=violation.get("rule", ""),
        turn=violation.get("turn"),
        step=violation.get("step"),
        call=clip(str(violation.get("call") or ""), MAX_CALL),
        note=clip(str(violation.get("note") or ""), MAX_CALL),
        reference_calls=tuple(
            clip(str(c), MAX_CALL) for c in (violation.get("reference_calls") or [])[:MAX_EVIDENCE_ITEMS]
        ),
        changes=tuple(
            EvidenceChange(
                path=clip(".".join(map(str, c.get("path", []))), MAX_CALL),
                before=_evidence_value(c.get("before")),
                after=_evidence_value(c.get("after")),
            )
            for c in changes[:MAX_EVIDENCE_ITEMS]
        ),
    )


def _evidence_value(value: object) -> str | None:
    return None if value == "<absent>" else value_text(value)


def _inline_svg(svg: str) -> str:
    """matplotlib's SVG without its XML prolog and doctype, to sit inside the HTML."""
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else ""


@functools.lru_cache(maxsize=1)
def jinja_environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        finalize=_finalize,
    )
    env.filters["value"] = value_text
    return env


def _finalize(value: object) -> object:
    """Every value the template prints passes here before it is escaped."""
    if isinstance(value, str) and not hasattr(value, "__html__"):
        return page_text(value)
    return value


@functools.lru_cache(maxsize=1)
def script_text() -> str:
    """The page's own script, inlined as it is (its hash goes into the page's CSP)."""
    return (TEMPLATES / "report.js").read_text(encoding="utf-8")


def _script_hash() -> str:
    return base64.b64encode(hashlib.sha256(script_text().encode("utf-8")).digest()).decode("ascii")


__all__ = ["DetailSink", "clip", "conversation_detail", "page_text", "read_details", "render"]
