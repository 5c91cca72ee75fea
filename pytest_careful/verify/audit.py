"""The item audit: which reference literals a model could not have learned, by replay.

For every reference call, every literal argument gets its sources (:mod:`.provenance`). A
literal with none is *checked* when replacing it with a sentinel and replaying the reference
changes BFCL's verdict: only then must a model reproduce it. A checked literal with no source,
after the bounded read and arithmetic searches, is a finding, of one class decided by rules a
program applies (``CLASSES``), each with its severity:

* ``defect``: the item cannot be passed as given (the reference contradicts the user's own
  words, or uses a value or a function the conversation gives only later);
* ``doubt``: it can be passed only by guessing (a wording, a number the user never gave).

A reference write that changes nothing, or a read that fails, is no finding: "make sure the
budget is set" is a no-op when it already is, and "verify my passport" may rightly fail.
"""

from __future__ import annotations

import difflib
import pickle
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from ..common.text import shorten, shorten_call
from ..data.dataset import Conversation
from ..evaluation.replay import OK, CallRecord, Replay, call_status, reference, replay
from ..evaluation.verdict import RESPONSE_MISMATCH, STATE_MISMATCH, Verdict, check
from ..execution.executor import Simulators
from .literals import Literal, literals_of, sentinel, with_value
from .normal_forms import VERSION as FORMS_VERSION
from .normal_forms import Text, dated_spans, find_in_text, numbered_spans, parse_date, parse_number, unquote
from .provenance import (
    DOC,
    READ,
    READ_CALLS,
    RESULT,
    STATE,
    USER,
    Trajectory,
    first_offered,
    parameter_names,
    quoted_spans,
)

DEFECT, DOUBT = "defect", "doubt"
SEVERITIES = (DEFECT, DOUBT)

#: The finding classes: severity, and the rule that decides each, as audit.json and the docs state it.
CLASSES: dict[str, tuple[str, str]] = {
    "contradicts_user": (
        DEFECT,
        "no source, and the user's turn gives another value of the same kind: with the user's value "
        "the call succeeds and BFCL's checker fails the conversation",
    ),
    "contradicts_result": (
        DEFECT,
        "no source, while the call's other literals come from earlier results: those results give another "
        "value of the same kind, unused by the others, and with it the call succeeds and BFCL's checker "
        "fails the conversation",
    ),
    "one_word_changed": (
        DEFECT,
        "a text of three words or more that matches a source only after changing one word, and the "
        "literal's word has no source of its own",
    ),
    "reordered": (DEFECT, "a text of three words or more that matches a source only after reordering its words"),
    "arrives_late": (
        DEFECT,
        "no source up to its turn, and a later user turn gives it: the reference needs it before the user says it",
    ),
    "function_arrives_late": (
        DEFECT,
        "the reference calls a function that the conversation offers only in a later turn, or never",
    ),
    "punctuation": (
        DOUBT,
        "a text that matches a source only after changing its punctuation or quotes: the source leaves "
        "the exact text open",
    ),
    "no_source": (
        DOUBT,
        "no source: in no user turn, earlier result, visible state or doc, and no read or arithmetic gives it",
    ),
}

#: Counted for every literal: the first kind of source found, or why it needs none.
UNCHECKED = "unchecked"  # no source, but BFCL's checker does not read it
FLAG = "flag"  # a boolean: the request's meaning sets it, which the audit does not decide
FINDING = "finding"

#: The kinds of value the ``contradicts_user`` rule compares: typed ones, whose spans in a
#: user's message are unambiguous (a name or a word could be anything the sentence says).
CONTRADICTED_KINDS = ("date", "number", "code", "id", "file")

#: A user's number contradicts a literal only when it is this close (relative difference): the
#: user's 550 against a reference's 500 is a defect; their 10 ("10 times the price") is not.
NUMBER_DISTANCE = 0.5

#: A no_source literal's near miss is the nearest span of its kind in the user's turns, shown only when it
#: shares something with the literal: a number within NUMBER_DISTANCE of it, a date within NEAR_MONTHS,
#: any other text a run of three letters or digits (case aside), or one containing the other.
NEAR_MISS = (
    "the nearest span of the literal's kind in the user's turns, shown only when it shares something with "
    "the literal: a number within half of it, a date within a year, else three letters or digits in a row "
    "(case aside) or the whole of one in the other"
)
NEAR_MONTHS = 12

#: A text's words: a number with its decimals and separators whole (``10000.00``), else letters and digits.
_WORD = re.compile(r"\d+(?:[.,]\d+)*|\w+(?:'\w+)?")
_CODE = re.compile(r"\b[A-Z]{2,5}\b")
_FILE = re.compile(r"\b[\w-]+\.[A-Za-z0-9]{1,5}\b")
_ID = re.compile(r"\b(?=[\w-]*\d)(?=[\w-]*[A-Za-z_])[\w-]{2,}\b")
_NAME = re.compile(r"\b[A-Z][\w'-]*(?:\s+[A-Z][\w'-]*){0,2}\b")


@dataclass(frozen=True)
class FindingEvidence:
    """What a reader needs to check a finding in one look.

    Attributes:
        literal: the reference's value.
        searched: where its source was looked for.
        near_miss: the nearest near-miss, the difference marked ``[source → reference]``.
        checked_by: how BFCL's checker reads the literal (a sentinel in its place fails there).
        detail: what the rule found, in one sentence.
    """

    literal: object
    searched: tuple[str, ...]
    near_miss: str | None
    checked_by: str
    detail: str

    def to_json(self) -> dict[str, object]:
        return {
            "literal": self.literal,
            "searched": list(self.searched),
            "near_miss": self.near_miss,
            "checked_by": self.checked_by,
            "detail": self.detail,
        }


@dataclass(frozen=True)
class Finding:
    """One literal (or one call) of a reference that a model could not have learned."""

    turn: int
    call: int  # the call's place among its turn's calls (0: the first)
    call_text: str
    function: str
    argument: str | None  # None: the finding is the call itself (a function offered too late)
    finding: str
    evidence: FindingEvidence

    @property
    def severity(self) -> str:
        return CLASSES[self.finding][0]

    @property
    def key(self) -> tuple[int, int, str, str]:
        """What identifies a finding across audits (an override names it so)."""
        return (self.turn, self.call, self.argument or "", self.finding)

    def to_json(self) -> dict[str, object]:
        return {
            "turn": self.turn,
            "call": self.call,
            "function": self.function,
            "call_text": shorten_call(self.call_text, 300),
            "argument": self.argument,
            "finding": self.finding,
            "severity": self.severity,
            "evidence": self.evidence.to_json(),
        }


@dataclass
class ConversationAudit:
    """One conversation's findings, and what its literals' sources were."""

    conversation: str
    findings: list[Finding] = field(default_factory=list)
    sources: Counter[str] = field(default_factory=Counter)  # first source kind (or UNCHECKED/FINDING) per literal


def audit_conversation(
    conversation: Conversation, reads: Mapping[str, tuple[str, ...]] | None = None
) -> ConversationAudit:
    """Audit one conversation's reference."""
    ref = reference(conversation)
    trajectory = Trajectory(conversation, ref, reads)
    audit = ConversationAudit(conversation.id)
    for index, record in enumerate(trajectory.calls):
        late = _function_late(conversation, record, trajectory.within(index))
        if late is not None:
            audit.findings.append(late)
        for literal in literals_of(record.call):
            audit.findings.extend(_audit_literal(trajectory, ref, index, literal, audit.sources))
    return audit


def _function_late(conversation: Conversation, record: CallRecord, within: int) -> Finding | None:
    first = first_offered(conversation, record.name)
    if first is not None and first <= record.turn:
        return None
    when = "never" if first is None else f"only from turn {first}"
    evidence = FindingEvidence(
        record.name,
        ("the functions offered in each turn (miss_func holds some back)",),
        None,
        "the call's own result and state change",
        f"turn {record.turn} calls {record.name}, which the conversation offers {when}",
    )
    return Finding(record.turn, within, record.call, record.name, None, "function_arrives_late", evidence)


def _audit_literal(
    trajectory: Trajectory, ref: Replay, index: int, literal: Literal, counts: Counter[str]
) -> Iterator[Finding]:
    record = trajectory.calls[index]
    if isinstance(literal.value, bool):  # a flag the request's meaning sets: no text can source it
        counts[FLAG] += 1
        return
    doc = trajectory.offered(record.turn).get(record.name)
    parameter = _parameter(literal, parameter_names(doc))
    sources = trajectory.sources(index, literal.value, parameter)
    if sources:
        counts[sources[0].kind] += 1
        return
    checked_by = _checked_by(trajectory.conversation, ref, record, literal)
    if checked_by is None:
        counts[UNCHECKED] += 1
        return
    derived = trajectory.derivations(index, literal.value)
    if derived:
        counts[derived[0].kind] += 1
        return
    found = _classify(trajectory, ref, index, literal, parameter, checked_by)
    if found is None:
        counts[USER] += 1  # the word a near miss changed has a source: a template filled
        return
    counts[FINDING] += 1
    yield found


def _parameter(literal: Literal, parameters: Sequence[str]) -> str:
    head = literal.path[0]
    if isinstance(head, int):
        return parameters[head] if head < len(parameters) else f"*{head}"
    return str(head)


# -- is it checked? -------------------------------------------------------------------


def _checked_by(conversation: Conversation, ref: Replay, record: CallRecord, literal: Literal) -> str | None:
    """How BFCL's checker reads the literal: where a sentinel in its place fails; None: nowhere."""
    changed = with_value(record.call, literal.path, sentinel(literal.value))
    verdict = _verdict_with(conversation, ref, record, changed)
    if verdict is None:
        return None
    if verdict.error_type == STATE_MISMATCH:
        owner = re.search(r"for (\w+) does not", verdict.error_message)
        attributes = ", ".join(sorted(verdict.details.differences))
        return f"state of {owner.group(1) if owner else 'an instance'} ({attributes}) after turn {verdict.turn}"
    if verdict.error_type == RESPONSE_MISMATCH:
        return f"the results BFCL requires after turn {verdict.turn}"
    return f"{verdict.error_type} at turn {verdict.turn}"


def _verdict_with(conversation: Conversation, ref: Replay, record: CallRecord, changed: str) -> Verdict | None:
    """BFCL's verdict on the reference with ``record``'s call replaced; None when it still passes.

    The turns up to the changed one are replayed and checked first: most changes fail there.
    """
    steps = [[[call] for call in turn] for turn in conversation.ground_truth]
    steps[record.turn][record.step][record.position] = changed
    upto = record.turn + 1
    verdict = check(conversation, replay(conversation, steps[:upto], snapshots=False, prefix=ref), ref, upto)
    if verdict.valid and upto < conversation.n_turns:
        verdict = check(conversation, replay(conversation, steps, snapshots=False, prefix=ref), ref)
    return None if verdict.valid else verdict


# -- the classes ------------------------------------------------------------------------


def _classify(
    trajectory: Trajectory, ref: Replay, index: int, literal: Literal, parameter: str, checked_by: str
) -> Finding | None:
    record = trajectory.calls[index]
    value = literal.value
    searched = _searched(trajectory, index)

    parameters = parameter_names(trajectory.offered(record.turn).get(record.name))

    def finding(kind: str, near_miss: str | None, detail: str) -> Finding:
        evidence = FindingEvidence(value, searched, near_miss, checked_by, detail)
        argument = literal.argument(parameters)
        return Finding(record.turn, trajectory.within(index), record.call, record.name, argument, kind, evidence)

    later = trajectory.later_user(record.turn, value)
    if later is not None:
        turn, form = later
        return finding(
            "arrives_late", f"user turn {turn}: {_quote(value)} ({form})", f"first given in user turn {turn}"
        )
    if isinstance(value, str) and len(_WORD.findall(value)) >= 3:
        text = _text_near_miss(trajectory, index, value)
        if text is not None:
            kind, near, sourced_word = text
            if kind == "one_word_changed" and sourced_word:
                return None
            return finding(kind, near, _TEXT_DETAIL[kind])
    contradiction = _contradiction(trajectory, ref, index, literal)
    if contradiction is not None:
        return finding("contradicts_user", contradiction, "with the user's value BFCL's checker fails the conversation")
    contradiction = _result_contradiction(trajectory, ref, index, literal)
    if contradiction is not None:
        return finding(
            "contradicts_result", contradiction, "with the result's value BFCL's checker fails the conversation"
        )
    nearest = _nearest(trajectory, index, value)
    detail = (
        "no source; the nearest value of its kind the user gave is shown" if nearest else "no source and no near miss"
    )
    return finding("no_source", nearest, detail)


_TEXT_DETAIL = {
    "one_word_changed": "matches its source only after changing one word",
    "reordered": "matches its source only after reordering its words",
    "punctuation": "matches its source only after changing punctuation or quotes",
}


def _searched(trajectory: Trajectory, index: int) -> tuple[str, ...]:
    record = trajectory.calls[index]
    turns = "turn 0" if record.turn == 0 else f"turns 0-{record.turn}"
    visible = sorted(f"{c}.{a}" for c, attrs in trajectory.visible(record.turn).items() for a in attrs)  # noqa: SLF001
    return (
        f"{USER}: the user's messages of {turns}, in the normal forms of version {FORMS_VERSION}",
        f"{RESULT}: the results of the {index} earlier calls",
        f"{STATE}: before the call, {', '.join(visible) if visible else 'no attribute a read offered shows'}",
        f"{DOC}: {record.name}'s documentation (enums, defaults, words)",
        f"{READ}: the reads offered in turn {record.turn}, with sourced arguments (at most {READ_CALLS} calls); "
        "arithmetic on the numbers given so far",
    )


# -- texts: one word changed, reordered, punctuation -------------------------------------


def _source_texts(trajectory: Trajectory, index: int) -> Iterator[tuple[str, str]]:
    """(where, text) of every text a model saw before the call: user turns, and results' strings."""
    record = trajectory.calls[index]
    for turn, message in trajectory.user_texts(record.turn):
        yield f"user turn {turn}", message.raw
    for earlier in range(index):
        call = trajectory.calls[earlier]
        for shown in trajectory.result_strings(earlier):
            yield f"result of turn {call.turn}, call {trajectory.within(earlier)}", shown


def _text_near_miss(trajectory: Trajectory, index: int, value: str) -> tuple[str, str, bool] | None:
    """The nearest source text that differs from ``value`` only in punctuation, one word, or word order."""
    words = [w.lower() for w in _WORD.findall(unquote(value))]
    best: tuple[int, str, str, bool] | None = None
    for where, text in _source_texts(trajectory, index):
        plain = unquote(text)
        spans = list(_WORD.finditer(plain))
        lowered = [m.group().lower() for m in spans]
        for start in range(0, max(len(spans) - len(words), 0) + 1):
            window = lowered[start : start + len(words)]
            if len(window) != len(words):
                continue
            kind = _window_kind(window, words)
            if kind is None:
                continue
            rank = {"punctuation": 0, "one_word_changed": 1, "reordered": 2}[kind]
            if best is None or rank < best[0]:
                if kind == "punctuation":  # the source as written: the difference is in what lies between words
                    shown = repr(shorten(plain[spans[start].start() : spans[start + len(words) - 1].end() + 1], 400))
                else:
                    shown = _marked(
                        [m.group() for m in spans[start : start + len(words)]], _WORD.findall(unquote(value))
                    )
                sourced = kind == "one_word_changed" and _changed_word_sourced(trajectory, index, window, words)
                best = (rank, kind, f"{where}: {shown}", sourced)
    if best is None:
        return None
    return best[1], best[2], best[3]


def _window_kind(window: list[str], words: list[str]) -> str | None:
    if window == words:
        return "punctuation"  # the words agree, so only punctuation or quotes differ
    if sorted(window) == sorted(words):
        return "reordered"
    if sum(a != b for a, b in zip(window, words)) == 1:
        return "one_word_changed"
    return None


def _changed_word_sourced(trajectory: Trajectory, index: int, window: list[str], words: list[str]) -> bool:
    """The reference's changed word has a source of its own (a placeholder the user left to fill), and
    is not the source's word written otherwise (the user's ``10000`` as ``10000.00`` is a change)."""
    original, changed = next((a, b) for a, b in zip(window, words) if a != b)
    number = parse_number(changed)
    if find_in_text(changed if number is None else number, Text(original)) is not None:
        return False
    return any(trajectory.sources(index, v) for v in ([changed] if number is None else [changed, number]))


def _marked(source: Sequence[str], literal: Sequence[str]) -> str:
    """The source's words with each difference from the literal marked ``[source → literal]``."""
    out: list[str] = []
    matcher = difflib.SequenceMatcher(a=list(source), b=list(literal), autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op == "equal":
            out += source[a1:a2]
        else:
            out.append(f"[{' '.join(source[a1:a2]) or '∅'} → {' '.join(literal[b1:b2]) or '∅'}]")
    return shorten(" ".join(out), 400)


# -- a value of the same kind in the user's own turn -----------------------------------


def kind_of(value: object) -> str:
    """What sort of value a literal is, as the user's spans are matched against it."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return "number"
    if not isinstance(value, str):
        return "other"
    stripped = value.strip()
    if parse_date(stripped) is not None:
        return "date"
    if parse_number(stripped) is not None:
        return "number"
    for kind, pattern in (("code", _CODE), ("file", _FILE), ("id", _ID)):
        if pattern.fullmatch(stripped):
            return kind
    if len(_WORD.findall(stripped)) >= 3:
        return "text"
    if _NAME.fullmatch(stripped):
        return "name"
    return "word"


def spans_of_kind(text: str, kind: str) -> list[tuple[str, object]]:
    """The spans of ``text`` of one kind: (as written, the value a call would carry)."""
    if kind == "number":
        return list(numbered_spans(text))
    if kind == "date":
        return list(dated_spans(text))
    patterns = {"code": _CODE, "file": _FILE, "id": _ID, "name": _NAME}
    if kind in patterns:
        return [(m, m) for m in patterns[kind].findall(text)]
    quoted = quoted_spans(text)
    if kind == "text":
        return [(q, q) for q in quoted if len(_WORD.findall(q)) >= 3]
    return [(q, q) for q in quoted if len(_WORD.findall(q)) < 3]


def _contradiction(trajectory: Trajectory, ref: Replay, index: int, literal: Literal) -> str | None:
    """The user's value of the same kind, where it makes the call succeed and BFCL fail the conversation."""
    record = trajectory.calls[index]
    kind = kind_of(literal.value)
    if kind not in CONTRADICTED_KINDS:
        return None
    own = {repr(other.value) for other in literals_of(record.call) if other.path != literal.path}
    for text in trajectory.user[record.turn] if record.turn < len(trajectory.user) else []:
        spans = [(w, v) for w, v in spans_of_kind(text.raw, kind) if repr(_as_literal(literal.value, v)) not in own]
        if not spans:
            continue
        written, span = min(spans, key=lambda s: _distance(literal.value, s[1]))
        if kind == "number" and _distance(literal.value, span) > NUMBER_DISTANCE:
            continue  # a number far from the literal says something else (a count, a multiplier)
        substitute = _as_literal(literal.value, span)
        if substitute is None or substitute == literal.value:
            continue
        changed = with_value(record.call, literal.path, substitute)
        if not _succeeds(trajectory, index, changed):
            continue
        if _verdict_with(trajectory.conversation, ref, record, changed) is not None:
            return f"user turn {record.turn} gives {written!r}; with it: {shorten_call(changed, 200)}"
    return None


def _result_contradiction(trajectory: Trajectory, ref: Replay, index: int, literal: Literal) -> str | None:
    """The value the results give where the call's other literals all come from results, and this one does not."""
    record = trajectory.calls[index]
    kind = kind_of(literal.value)
    others = [o for o in literals_of(record.call) if o.path != literal.path and not isinstance(o.value, bool)]
    if kind not in CONTRADICTED_KINDS or not others:
        return None
    feeding: set[int] = set()
    for other in others:
        calls = {s.call for s in trajectory.sources(index, other.value) if s.kind == RESULT and s.call is not None}
        if not calls:
            return None
        feeding |= {trajectory.calls[c].turn for c in calls}
    used = {repr(o.value) for o in others}
    candidates = [
        (earlier, value)
        for earlier, call in enumerate(trajectory.calls[:index])
        if call.turn in feeding
        for value in trajectory.result_values(earlier, kind)
        if repr(_as_literal(literal.value, value)) not in used
    ]
    if not candidates:
        return None
    earlier, value = min(candidates, key=lambda c: _distance(literal.value, c[1]))
    substitute = _as_literal(literal.value, value)
    if substitute is None or substitute == literal.value or _distance(literal.value, value) > NUMBER_DISTANCE:
        return None
    changed = with_value(record.call, literal.path, substitute)
    if (
        not _succeeds(trajectory, index, changed)
        or _verdict_with(trajectory.conversation, ref, record, changed) is None
    ):
        return None
    source = trajectory.calls[earlier]
    return (
        f"the result of turn {source.turn}, call {trajectory.within(earlier)} ({shorten_call(source.call, 80)}) gives "
        f"{value!r}; with it: {shorten_call(changed, 200)}"
    )


def _as_literal(like: object, span: object) -> object:
    """A span as the literal's type and format would carry it (a date in the literal's ISO form)."""
    if isinstance(like, bool):
        return None
    if isinstance(like, (int, float)):
        if not isinstance(span, (int, float)):
            return None
        return int(span) if isinstance(like, int) and float(span).is_integer() else float(span)
    if isinstance(span, tuple):  # a date, written in the literal's own format
        return _date_like(str(like), span)
    return str(span) if isinstance(span, (str, int, float)) else None


def _date_like(literal: str, date: tuple[int | None, int, int | None]) -> str | None:
    """``date`` written as ``literal`` writes its date (ISO, MM/YYYY, MM/YY, MM/DD/YYYY); None if it cannot be."""
    year, month, day = date
    own = parse_date(literal)
    if own is None:
        return None
    year = year if year is not None else own[0]
    formats = [
        (r"\d{4}-\d{2}-\d{2}", lambda: f"{year:04d}-{month:02d}-{day:02d}", day is not None and year is not None),
        (r"\d{2}/\d{4}", lambda: f"{month:02d}/{year:04d}", year is not None),
        (r"\d{2}/\d{2}", lambda: f"{month:02d}/{(year or 0) % 100:02d}", year is not None),
        (r"\d{2}/\d{2}/\d{4}", lambda: f"{month:02d}/{day:02d}/{year:04d}", day is not None and year is not None),
    ]
    for pattern, written, possible in formats:
        if re.fullmatch(pattern, literal):
            return written() if possible else None
    return None


def _distance(value: object, span: object) -> float:
    """How far a span is from the literal: relative difference of numbers, months between dates,
    else one minus the strings' similarity."""
    if isinstance(span, tuple):
        own = parse_date(str(value))
        if own is None:
            return float("inf")
        (y1, m1, d1), (y2, m2, d2) = own, span
        years = 0 if y1 is None or y2 is None else abs(y1 - y2)
        days = 0 if d1 is None or d2 is None else abs(d1 - d2) / 31
        return years * 12 + abs(m1 - m2) + days
    if isinstance(value, (int, float)) and isinstance(span, (int, float)):
        return abs(float(value) - float(span)) / max(abs(float(value)), abs(float(span)), 1.0)
    return 1.0 - difflib.SequenceMatcher(a=str(value), b=str(span), autojunk=False).ratio()


def _succeeds(trajectory: Trajectory, index: int, changed: str) -> bool:
    """The changed call, on the state before the original, returns no error."""
    execution = Simulators.around(pickle.loads(trajectory.instances_before(index))).execute(changed)
    return call_status(execution) == OK


def _nearest(trajectory: Trajectory, index: int, value: object) -> str | None:
    """The nearest span of the literal's kind in the user's turns so far, for a reader to compare;
    None when even the nearest shares nothing with the literal (``NEAR_MISS``)."""
    record = trajectory.calls[index]
    kind = kind_of(value)
    spans = [
        (turn, w, v) for turn, text in trajectory.user_texts(record.turn) for w, v in spans_of_kind(text.raw, kind)
    ]
    if not spans:
        return None
    turn, written, span = min(spans, key=lambda s: _distance(value, s[2]))
    if not _near(value, span):
        return None
    return f"user turn {turn}: {written!r}"


def _near(value: object, span: object) -> bool:
    """Whether a span shares something with the literal, so that showing it as a near miss means something."""
    if isinstance(span, tuple):  # a date
        return _distance(value, span) <= NEAR_MONTHS
    if isinstance(span, (int, float)) and not isinstance(span, bool):
        return _distance(value, span) <= NUMBER_DISTANCE
    a, b = _letters_and_digits(value), _letters_and_digits(span)
    return bool(a and b) and (a in b or b in a or bool(_trigrams(a) & _trigrams(b)))


def _letters_and_digits(value: object) -> str:
    return "".join(c for c in str(value).lower() if c.isalnum())


def _trigrams(text: str) -> set[str]:
    return {text[i : i + 3] for i in range(len(text) - 2)}


def _quote(value: object) -> str:
    return repr(value) if not isinstance(value, str) else repr(shorten(value, 200))
