"""Where a value is written in a text: verbatim, or in one of a closed, versioned list of
normal forms.

Every search ticks the conversation's budget in proportion to the text it scans
(``limits.scanned``): a result of 200,000 characters searched for every literal of a trace is
work the time limit must see.

The audit states this list (``FORMS``, ``VERSION``) in ``audit.json``: a literal counts as
learned from a text only through these forms, so what counts as a source is fixed and
checkable, never a judgement. Adding a form is a new version: every finding is recomputed.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from ..common.text import contains_words as _contains_words
from ..execution import limits

VERSION = "1"

#: The normal forms, in the order they are tried, each with what it allows.
FORMS: dict[str, str] = {
    "verbatim": "the value as written, as whole words (not inside a longer word or number)",
    "quoting": "straight and curly quotes alike, backslash-escaped quotes unescaped, quotes around the value dropped",
    "whitespace": "runs of spaces, tabs and line breaks as one space",
    "case": "letter case ignored",
    "prefix": "an @ or # prefix added or dropped",
    "number": "the same number with thousands separators, a currency sign, a percent sign (5% is 5 or 0.05), "
    "trailing zeros, a k suffix (20k), or in words (zero to twenty, the tens, hundred, thousand, million); "
    "rounded to the literal's decimals (10.0384 is 10.04)",
    "date": "the same date in words (October 10th, 2026; the 6th day of October in 2026), as M/D/Y, D/M/Y, "
    "M/D or ISO (2026-10-10); a date without its year matches any year; a month and year alike (12/25, "
    "12/2025, December 2025); a day, a month and a year the text gives apart ('the 15th of next month, "
    "which is November of 2026'; 'the eleventh month')",
    "joined": "two of the text's words or numbers written together, with or without a space or hyphen "
    "('US' and 9148817941 as US9148817941)",
    "list": "a list of strings a result shows, joined by a comma and a space",
    "extension": "a file name a result or the state shows, its extension changed to one the user names "
    "(file3.txt as file3.docx)",
    "empty": "the empty string, where the text asks for an empty or blank value",
    "template": "a quoted template of the user's with its placeholder filled by a value from another source",
}

_MONTHS = {
    name: number
    for number, names in enumerate(
        [
            ("january", "jan"),
            ("february", "feb"),
            ("march", "mar"),
            ("april", "apr"),
            ("may",),
            ("june", "jun"),
            ("july", "jul"),
            ("august", "aug"),
            ("september", "sep", "sept"),
            ("october", "oct"),
            ("november", "nov"),
            ("december", "dec"),
        ],
        start=1,
    )
    for name in names
}
_MONTH = r"(?P<month>" + "|".join(sorted(_MONTHS, key=len, reverse=True)) + r")\.?"
_DAY = r"(?P<day>\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"(?P<year>\d{4})"
_DATE_PATTERNS = [
    re.compile(r"\b(?P<year>\d{4})-(?P<mon>\d{1,2})-(?P<day>\d{1,2})\b"),
    re.compile(rf"\b{_MONTH}\s+{_DAY}\b(?:,?\s+(?:of\s+)?{_YEAR})?", re.IGNORECASE),
    re.compile(rf"\b{_DAY}\s+(?:day\s+)?(?:of\s+)?{_MONTH}(?:,?\s+(?:in\s+)?{_YEAR})?", re.IGNORECASE),
    re.compile(rf"\b{_MONTH},?\s+{_YEAR}\b", re.IGNORECASE),
]
_SLASH_DATE = re.compile(r"(?<![\d/])(\d{1,2})[/.](\d{1,2})[/.](\d{2}|\d{4})(?![\d/])")
_MONTH_YEAR = re.compile(r"(?<![\d/])(\d{1,2})/(\d{2}|\d{4})(?![\d/])")

#: A date as a text gives it: (year or None, month, day or None).
Date = tuple["int | None", int, "int | None"]

_NUMBER = re.compile(r"(?<![\w.])[-+]?[$€£¥]?\d[\d,]*(?:\.\d+)?(?:\s?[kK]\b|%)?")
_NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
} | {"thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70, "eighty": 80, "ninety": 90}
_SCALES = {"hundred": 100, "thousand": 1000, "million": 1_000_000}
_WORD = re.compile(r"[a-z]+")
_EMPTY_ASKED = re.compile(r"\b(empty|blank)\b", re.IGNORECASE)
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"'})


@dataclass
class Text:
    """One text, with what the normal forms compare against computed once, when first asked."""

    raw: str

    @functools.cached_property
    def unquoted(self) -> str:
        limits.scanned(self.raw)
        return unquote(self.raw)

    @functools.cached_property
    def spaced(self) -> str:
        return " ".join(self.unquoted.split())

    @functools.cached_property
    def lower(self) -> str:
        return self.spaced.lower()

    @functools.cached_property
    def numbers(self) -> list[float]:
        limits.scanned(self.raw)
        return list(numbers_in(self.raw))

    @functools.cached_property
    def dates(self) -> list[Date]:
        limits.scanned(self.raw)
        if not any(c.isdigit() for c in self.raw):
            return []
        return list(dates_in(self.raw)) + composite_dates(self.raw)


def contains_words(text: str, value: str) -> bool:
    """``common.text.contains_words``, the scan ticked (``limits.scanned``)."""
    limits.scanned(text)
    return _contains_words(text, value)


def unquote(text: str) -> str:
    return text.translate(_QUOTES).replace("\\'", "'").replace('\\"', '"')


def find_in_text(value: object, text: Text) -> str | None:
    """The first normal form under which ``text`` holds ``value``; None where none does."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return "number" if any(same_number(value, n) for n in text.numbers) else None
    if not isinstance(value, str):
        return None
    return _find_string(value, text)


@dataclass(frozen=True)
class _Wanted:
    """A string literal in the shapes the forms compare (computed once per value, not per text)."""

    raw: str
    stripped: str
    spaced: str
    lower: str
    bare: str
    date: Date | None
    number: float | None


@functools.lru_cache(maxsize=8192)
def _wanted(value: str) -> _Wanted:
    stripped = unquote(value).strip("'\"")
    spaced = " ".join(stripped.split())
    return _Wanted(
        value, stripped, spaced, spaced.lower(), spaced.lstrip("@#").lower(), parse_date(value), parse_number(value)
    )


def _find_string(value: str, text: Text) -> str | None:
    wanted = _wanted(value)
    if contains_words(text.raw, value):
        return "verbatim"
    if wanted.stripped and contains_words(text.unquoted, wanted.stripped):
        return "quoting"
    if wanted.spaced and contains_words(text.spaced, wanted.spaced):
        return "whitespace"
    if wanted.lower and contains_words(text.lower, wanted.lower):
        return "case"
    bare = wanted.bare
    if bare and bare != wanted.lower and contains_words(text.lower, bare):
        return "prefix"
    if bare and (contains_words(text.lower, "@" + bare) or contains_words(text.lower, "#" + bare)):
        return "prefix"
    if wanted.date is not None and any(same_date(wanted.date, d) for d in text.dates):
        return "date"
    if wanted.number is not None and any(same_number(wanted.number, n) for n in text.numbers):
        return "number"
    if value == "" and _EMPTY_ASKED.search(text.raw):
        return "empty"
    if _joined(wanted.spaced, text):
        return "joined"
    return None


def _joined(value: str, text: Text) -> bool:
    """``value`` is two of the text's words or numbers written together (``US`` + ``9148817941``)."""
    if len(value) < 4 or " " in value.strip():
        return False
    for cut in range(2, len(value) - 1):
        head, tail = value[:cut], value[cut:].lstrip(" -")
        if head.endswith(("-", " ")):
            continue
        if contains_words(text.unquoted, head) and contains_words(text.unquoted, tail):
            return True
    return False


def same_number(literal: float, written: float) -> bool:
    """The literal is the written number, or it rounded to the literal's own decimals."""
    if math.isclose(float(literal), float(written), rel_tol=1e-9, abs_tol=1e-9):
        return True
    decimals = _decimals(literal)
    return decimals > 0 and round(float(written), decimals) == float(literal)


def _decimals(value: float) -> int:
    """How many decimals a number is written with (``10.04``: 2; ``40``, ``45.0``: 0)."""
    if isinstance(value, int) or float(value).is_integer():
        return 0
    text = repr(float(value))
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


def parse_number(text: str) -> float | None:
    """A string that is one number in a normal form (``'2,000'``, ``'$15'``, ``'20k'``); None otherwise."""
    found = list(numbers_in(text.strip()))
    match = _NUMBER.fullmatch(text.strip())
    return found[0] if match and found else None


def numbered_spans(text: str) -> Iterator[tuple[str, float]]:
    """Every number written in ``text`` with the characters it is written in (its first value)."""
    for match in _NUMBER.finditer(text):
        values = list(numbers_in(match.group()))
        if values:
            yield match.group(), values[0]


def numbers_in(text: str) -> Iterator[float]:
    """Every number written in ``text``, in every value its normal forms give it."""
    for match in _NUMBER.finditer(text):
        written = match.group()
        scale = 1000.0 if written.rstrip().lower().endswith("k") else 1.0
        digits = written.rstrip("kK%").strip().lstrip("$€£¥").replace(",", "")
        digits = digits.replace("$", "").replace("€", "").replace("£", "").replace("¥", "")
        try:
            value = float(digits) * scale
        except ValueError:
            continue
        yield value
        if written.endswith("%"):
            yield value / 100
    yield from _number_words(text.lower())


def _number_words(text: str) -> Iterator[float]:
    words = _WORD.findall(text)
    for index, word in enumerate(words):
        if word in _NUMBER_WORDS:
            value = _NUMBER_WORDS[word]
            following = words[index + 1] if index + 1 < len(words) else ""
            yield float(value * _SCALES[following]) if following in _SCALES else float(value)
        elif word in _SCALES and (index == 0 or words[index - 1] in ("a", "one")):
            yield float(_SCALES[word])


def parse_date(text: str) -> Date | None:
    """A string that is one date in a normal form; None otherwise."""
    stripped = text.strip()
    dates = list(dates_in(stripped))
    if not dates:
        return None
    spans = [m for p in (*_DATE_PATTERNS, _SLASH_DATE, _MONTH_YEAR) for m in [p.fullmatch(stripped)] if m]
    return dates[0] if spans else None


def dates_in(text: str) -> Iterator[Date]:
    """Every date written in ``text`` (an ambiguous slash date in both readings)."""
    for _, date in dated_spans(text):
        yield date


def dated_spans(text: str) -> Iterator[tuple[str, Date]]:
    """Every date written in ``text``, with the words it is written in."""
    for pattern in _DATE_PATTERNS:
        for match in pattern.finditer(text):
            yield match.group(), _date_of(match.groupdict())
    for match in _SLASH_DATE.finditer(text):
        first, second, year = int(match.group(1)), int(match.group(2)), _full_year(match.group(3))
        if 1 <= first <= 12 and 1 <= second <= 31:
            yield match.group(), (year, first, second)
        if 1 <= second <= 12 and 1 <= first <= 31:
            yield match.group(), (year, second, first)
    for match in _MONTH_YEAR.finditer(text):
        month, after = int(match.group(1)), str(match.group(2))
        if 1 <= month <= 12:
            yield match.group(), (_full_year(after), month, None)
            if len(after) == 2 and 1 <= int(after) <= 31:  # 11/15: November 15th, any year
                yield match.group(), (None, month, int(after))


_ORDINAL_DAY = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)\b", re.IGNORECASE)
_ORDINAL_MONTH = re.compile(
    r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth)\s+month\b", re.IGNORECASE
)
_ORDINALS = "first second third fourth fifth sixth seventh eighth ninth tenth eleventh twelfth".split()
_A_MONTH = re.compile(
    r"\b(" + "|".join(sorted((m for m in _MONTHS if len(m) > 3), key=len, reverse=True)) + r")\b", re.IGNORECASE
)
_A_YEAR = re.compile(r"\b(19\d\d|20\d\d)\b")


def composite_dates(text: str) -> list[Date]:
    """Dates whose day, month and year a text gives apart: an ordinal day, a month by name (or 'the
    eleventh month'), a year; every combination of the ones it gives (a handful)."""
    days = {int(m.group(1)) for m in _ORDINAL_DAY.finditer(text) if 1 <= int(m.group(1)) <= 31}
    months = {_MONTHS[m.group(1).lower()] for m in _A_MONTH.finditer(text)}
    months |= {_ORDINALS.index(m.group(1).lower()) + 1 for m in _ORDINAL_MONTH.finditer(text)}
    years: set[int | None] = {int(y) for y in _A_YEAR.findall(text)} or {None}
    if not days or not months or len(days) * len(months) * len(years) > 64:
        return []
    return [(year, month, day) for day in sorted(days) for month in sorted(months) for year in sorted(years, key=str)]


def _date_of(groups: dict[str, str | None]) -> Date:
    year, day = groups.get("year"), groups.get("day")
    numbered = groups.get("mon")
    month = int(numbered) if numbered else _MONTHS[(groups.get("month") or "").lower()]
    return (int(year) if year else None, month, int(day) if day else None)


def _full_year(written: str) -> int:
    return int(written) + 2000 if len(written) == 2 else int(written)


def same_date(literal: Date, written: Date) -> bool:
    """The literal's date is the written one (a year or day the text leaves out matches any)."""
    (y1, m1, d1), (y2, m2, d2) = literal, written
    return m1 == m2 and (y1 is None or y2 is None or y1 == y2) and (d1 == d2 or d1 is None or d2 is None)


def find_in_texts(value: object, texts: Iterable[Text]) -> tuple[str, int] | None:
    """The first text (its index) holding ``value``, and the form; None where none does."""
    for index, text in enumerate(texts):
        form = find_in_text(value, text)
        if form is not None:
            return form, index
    return None
