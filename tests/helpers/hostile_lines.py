"""Generated hostile result-file lines (issue 12, classes 1 and 5), with what each must become.

:func:`corpus` builds a whole ``BFCL_v4_multi_turn_<category>_result.json`` from a
seed: every conversation of the category gets a line (a good one, or a hostile one
of a randomly drawn kind), garbage lines are scattered between them, and some ids
get two or three lines. Each line carries its expectation, written from what the
generator made (never from the code under test):

* ``Line.entry``: the line is read as the entry of ``Line.id`` with result ``Line.result``
  (good lines, including those with raw U+2028/U+2029/U+0085, NUL or escaped lone
  surrogates inside strings, hostile but well-formed steps, wrong-typed metadata);
* otherwise the line is an input problem at its line, of ``Line.id`` when the id can
  be seen in it (``None`` when it cannot: random bytes, an unreadable id).

Of several lines of one id the last entry counts, as BFCL's own ``write(update_mode=True)``
keeps it; :meth:`Corpus.expected` applies that rule to the expectations.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

#: Digits beyond Python's int-to-str limit (4,300 by default).
HUGE_DIGITS = (4301, 5000, 20_000, 100_000)
#: Nesting that no reader may be asked to follow (refused), and nesting that is read.
DEEP = (600, 1000, 5000, 100_000)
SHALLOW = (2, 50, 200)
WEIRD_TEXT = (
    "a\u2028b",
    "a\u2029b",
    "a\u0085b",
    "nul\x00here",
    "bell\x07\x1b[31mred",
    "\ufeffbom",
    "é\u200d👍",
    "tab\there",
    "\r only cr",
    "line\nbreak",
)


@dataclass
class Line:
    """One generated line and what it must become."""

    kind: str
    data: bytes
    id: str | None
    entry: bool
    result: Any = None


@dataclass
class Corpus:
    lines: list[Line] = field(default_factory=list)

    def text(self) -> bytes:
        return b"".join(line.data + b"\n" for line in self.lines)

    def expected(self) -> tuple[dict[str, tuple[int, Any]], set[tuple[int, str | None]]]:
        """The entries by id (line, result) and the located problems (line, id)."""
        entries: dict[str, tuple[int, Any]] = {}
        problems: set[tuple[int, str | None]] = set()
        for number, line in enumerate(self.lines, start=1):
            if not line.entry:
                problems.add((number, line.id))
                continue
            earlier = entries.get(line.id)  # type: ignore[arg-type]
            if earlier is not None and not isinstance(earlier[1], str):
                problems.add((number, line.id))  # a second entry: reported, and it counts
            entries[line.id] = (number, line.result)  # type: ignore[index]
        return entries, problems


def dumps(entry: Any, ascii_only: bool = False) -> bytes:
    """As BFCL writes a line (``ensure_ascii=False``): raw U+2028 and friends stay raw."""
    text = json.dumps(entry, ensure_ascii=ascii_only)
    return text.encode("utf-8", "surrogatepass")


def nested_text(depth: int, inner: str = "0") -> str:
    return "[" * depth + inner + "]" * depth


def nested(depth: int, inner: Any = 0) -> Any:
    value = inner
    for _ in range(depth):
        value = [value]
    return value


def _seen(kind: str, data: bytes, cid: str) -> Line:
    """A hostile line of ``cid``: its problem names ``cid`` when the id still stands whole in it."""
    return Line(kind, data, cid if f'"id": "{cid}"'.encode() in data else None, False)


Good = Callable[[str], Any]


class Generator:
    """Hostile and good lines for the conversations of one category."""

    def __init__(self, rng: random.Random, good: Good, n_turns: Callable[[str], int], foreign_ids: list[str]) -> None:
        self.rng = rng
        self.good = good  # a conversation id -> a result that is read
        self.n_turns = n_turns
        self.foreign_ids = foreign_ids

    # -- good lines ---------------------------------------------------------

    def good_line(self, cid: str) -> Line:
        result = self.good(cid)
        return Line("good", dumps({"id": cid, "result": result}), cid, True, result)

    def weird_strings(self, cid: str) -> Line:
        """Raw separators, NUL, controls, escaped lone surrogates inside strings: all read."""
        result = json.loads(json.dumps(self.good(cid)))
        text = self.rng.choice(WEIRD_TEXT + ("lone \ud800 surrogate", "\udfff"))
        step: Any = text if self.rng.random() < 0.5 else [{"cd": json.dumps({"folder": text})}]
        if result and isinstance(result[0], list):
            result[0].append(step)
        entry = {"id": cid, "result": result, "inference_log": [{"role": "assistant", "content": text}]}
        raw = dumps(entry, ascii_only="\ud800" in text or "\udfff" in text)
        return Line("weird_strings", raw, cid, True, result)

    def hostile_step(self, cid: str) -> Line:
        """Well-formed JSON with hostile values inside a step: read, then scored as BFCL scores it."""
        result = json.loads(json.dumps(self.good(cid)))
        choice = self.rng.randrange(7)
        if choice == 0:
            step: Any = [{"cd": json.dumps({"folder": "x" * self.rng.choice((10_000, 300_000))})}]
        elif choice == 1:
            step = [{"cd": '{"folder": ' + "9" * self.rng.choice(HUGE_DIGITS) + "}"}]  # inside a string
        elif choice == 2:
            step = [{"cd": '{"folder": ' + nested_text(self.rng.choice(DEEP)) + "}"}]  # inside a string
        elif choice == 3:
            step = nested(self.rng.choice(SHALLOW))
        elif choice == 4:
            step = [{"cd": {"folder": int("7" * 4000)}}]  # an int Python can still print
        elif choice == 5:
            step = self.rng.choice([None, 5, 2.5, True, {"cd": "{}"}, "", [], [[]], [{}], [{"": ""}]])
        else:
            step = [{"c" * self.rng.choice((1, 3000)): "{}"}] * self.rng.choice((1, 300))
        if result and isinstance(result[0], list):
            result[0].insert(self.rng.randrange(len(result[0]) + 1), step)
        return Line("hostile_step", dumps({"id": cid, "result": result}), cid, True, result)

    def odd_metadata(self, cid: str) -> Line:
        """Wrong types in the fields BFCL only counts (tokens, latency, log): read, as BFCL reads them."""
        result = self.good(cid)
        field_name = self.rng.choice(["input_token_count", "output_token_count", "latency", "inference_log"])
        value = self.rng.choice([None, "12", -1, 1e308, [["a", None]], {"x": 1}, [[[[1]]]], True, [1, [2]]])
        entry = {"id": cid, "result": result, field_name: value}
        return Line("odd_metadata", dumps(entry), cid, True, result)

    def inference_error(self, cid: str) -> Line:
        """BFCL's own error form: a string result, scored as a failure."""
        result = "Error during inference: " + self.rng.choice(WEIRD_TEXT)
        return Line("inference_error", dumps({"id": cid, "result": result}), cid, True, result)

    # -- hostile lines ---------------------------------------------------------

    def truncated(self, cid: str) -> Line:
        data = self.good_line(cid).data
        return _seen("truncated", data[: self.rng.randrange(1, len(data))], cid)

    def deep(self, cid: str) -> Line:
        depth = self.rng.choice(DEEP)
        where = self.rng.randrange(3)
        if where == 0:
            text = f'{{"id": "{cid}", "result": {nested_text(depth)}}}'
        elif where == 1:
            text = f'{{"id": "{cid}", "result": [[]], "inference_log": {nested_text(depth, "{}")}}}'
        else:
            text = f'{{"id": "{cid}", "result": [[{nested_text(depth)}]]}}'
        return Line("deep", text.encode(), cid, False)

    def huge_int(self, cid: str) -> Line:
        digits = "9" * self.rng.choice(HUGE_DIGITS)
        where = self.rng.randrange(5)
        if where == 0:
            return Line("huge_int", f'{{"id": {digits}, "result": [[]]}}'.encode(), None, False)
        template = (
            '{{"id": "{cid}", "result": [[[{{"cd": {{"folder": {d}}}}}]]]}}',
            '{{"id": "{cid}", "result": {d}}}',
            '{{"id": "{cid}", "result": [[]], "input_token_count": [[{d}]]}}',
            '{{"id": "{cid}", "result": [[]], "latency": -{d}}}',
        )[where - 1]
        return Line("huge_int", template.format(cid=cid, d=digits).encode(), cid, False)

    def wrong_type(self, cid: str) -> Line:
        """A field of a type BFCL could not have written (the id, the result, a turn)."""
        odd: list[Any] = [None, 0, -1, 2.5, True, {}, {"x": [1]}, [], "", 10**30]
        where = self.rng.randrange(4)
        if where == 0:
            entry: Any = {"id": self.rng.choice(odd[:-1] + [[cid], {"id": cid}]), "result": [[]]}
            return Line("wrong_type_id", dumps(entry), None, False)
        if where == 1:
            value = self.rng.choice([v for v in odd if not isinstance(v, (list, str))])
            return Line("wrong_type_result", dumps({"id": cid, "result": value}), cid, False)
        if where == 2:
            turn = self.rng.choice([v for v in odd if not isinstance(v, list)] + ["turn as text"])
            return Line("wrong_type_turn", dumps({"id": cid, "result": [[], turn]}), cid, False)
        if self.rng.random() < 0.5:
            return Line("no_result", dumps({"id": cid}), cid, False)
        top = self.rng.choice([[cid], cid, 5, None, True, "x"])
        return Line("not_an_object", dumps(top), None, False)

    def too_many_turns(self, cid: str) -> Line:
        result = [[] for _ in range(self.n_turns(cid) + self.rng.choice((1, 2, 50)))]
        return Line("too_many_turns", dumps({"id": cid, "result": result}), cid, False)

    def bad_utf8(self, cid: str) -> Line:
        data = self.good_line(cid).data
        at = self.rng.randrange(len(data) + 1)
        junk = self.rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80\x80", b"\xf8\x88\x80\x80\x80"])
        return _seen("bad_utf8", data[:at] + junk + data[at:], cid)

    def raw_nul(self, cid: str) -> Line:
        """A raw NUL anywhere (JSON allows none, not even inside a string)."""
        data = dumps({"id": cid, "result": self.good(cid)})
        at = self.rng.randrange(1, len(data))
        return _seen("nul", data[:at] + b"\x00" + data[at:], cid)

    def separator_outside_strings(self, cid: str) -> Line:
        """U+2028 between tokens: not JSON whitespace, so not a line BFCL can read."""
        text = json.dumps({"id": cid, "result": self.good(cid)}).replace(", ", ",\u2028", 1)
        return Line("separator", text.encode("utf-8"), cid, False)

    # -- lines that belong to no conversation of the file ---------------------------------

    def random_bytes(self) -> Line:
        size = self.rng.choice((1, 3, 40, 700))
        # no \n and no \r: bfcl-eval's reader (text mode) ends a line at either
        data = bytes(self.rng.choice([b for b in range(256) if b not in (10, 13)]) for _ in range(size))
        if not data.strip(b" \t\r"):
            data = b"\x00" + data
        return Line("random_bytes", data, None, False)

    def foreign(self) -> Line:
        choice = self.rng.randrange(6)
        ids = [
            self.rng.choice(self.foreign_ids),
            "multi_turn_base_999999",
            "multi_turn_base_abc",
            "multi_turn_base_1:x-y-z",
            "x" * self.rng.choice((101, 100_000)),
            "multi_turn_base_\ud800",
        ]
        fid = ids[choice]
        shown = fid if choice < 4 else None
        return Line("foreign", dumps({"id": fid, "result": [[]]}, ascii_only=choice == 5), shown, False)

    HOSTILE = (
        "truncated",
        "deep",
        "huge_int",
        "wrong_type",
        "too_many_turns",
        "bad_utf8",
        "raw_nul",
        "separator_outside_strings",
    )
    READ = ("good_line", "weird_strings", "hostile_step", "odd_metadata", "inference_error")

    def line_for(self, cid: str, hostile_share: float) -> Line:
        names = self.HOSTILE if self.rng.random() < hostile_share else self.READ
        return getattr(self, self.rng.choice(names))(cid)


def corpus(
    seed: int,
    ids: list[str],
    good: Good,
    n_turns: Callable[[str], int],
    foreign_ids: list[str],
    hostile_share: float = 0.5,
    garbage: int = 20,
    duplicates: int = 12,
) -> Corpus:
    """A whole result file: a line for every id, garbage between, some ids two or three times."""
    rng = random.Random(seed)
    make = Generator(rng, good, n_turns, foreign_ids)
    lines = [make.line_for(cid, hostile_share) for cid in ids]
    for cid in rng.sample(ids, duplicates):  # a second (maybe third) line later in the file
        for _ in range(rng.choice((1, 1, 2))):
            lines.insert(rng.randrange(len(lines) + 1), make.line_for(cid, hostile_share))
    for _ in range(garbage):
        extra = make.random_bytes() if rng.random() < 0.5 else make.foreign()
        lines.insert(rng.randrange(len(lines) + 1), extra)
    return Corpus(lines)
