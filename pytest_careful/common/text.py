"""One rule for showing text from files and models: what a report must never pass through raw."""

from __future__ import annotations

import difflib
import os
import unicodedata
from collections.abc import Callable, Iterable, Iterator

# Controls (terminal escapes, carriage returns), invisible format characters (bidi
# overrides), lone surrogates (unencodable) and line separators (model or file text
# must not forge lines of a transcript, a table row or a terminal screen).
_ESCAPED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})


def escape(text: str) -> str:
    """``text`` with those characters written as Python escapes (``\\x1b``, ``\\u202e``), the rest as is."""
    if text.isascii() and text.isprintable():  # the usual case: nothing to escape
        return text
    return "".join(map(_escape, text))


def _escape(char: str) -> str:
    if unicodedata.category(char) not in _ESCAPED_CATEGORIES:
        return char
    return char.encode("unicode_escape", "backslashreplace").decode("ascii")


# --- long values: cut once, where a report's text is made from them -------------------
#: A text or value longer than this is quoted as its first characters and its length
#: (``'aaaa…' (199,000 chars)``), never whole: in rows, evidence, reasons and every report
#: made from them. Few real calls pass it (the real run's longest, 2,141 characters, does).
MAX_SHOWN = 500
#: A string literal inside a long call is quoted to this many characters, so that every
#: argument of the call still shows.
MAX_SHOWN_LITERAL = 100


def shorten(text: str, limit: int = MAX_SHOWN) -> str:
    """``text``, or its first ``limit`` characters and its length when longer: ``aaaa… (199,000 chars)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} chars)"


def shorten_call(call: str, limit: int = MAX_SHOWN) -> str:
    """A call as written, each long string literal quoted as ``'aaaa…' (199,000 chars)``, then bounded."""
    if len(call) <= limit:
        return call
    parts: list[str] = []
    done = 0
    for start, end in _literals(call):
        parts += [call[done:start], _shorten_literal(call[start:end])]
        done = end
    parts.append(call[done:])
    return shorten("".join(parts), limit)


def _literals(text: str) -> Iterator[tuple[int, int]]:
    """The spans of the quoted literals in ``text``, as Python's tokenizer reads them on one line.

    A literal closes at its unescaped quote; a newline or the end first leaves it unterminated,
    and the search goes on from the character after its opening quote, as a regex's would. A regex
    rescans to the end from every quote of an unterminated run (``'x\\'x\\'…``), quadratic in
    model text; here each character is read once.
    """
    closing = {quote: _closing(text, quote) for quote in "'\""}
    at = 0
    while at < len(text):
        ends = closing.get(text[at])
        if ends is not None and (end := ends[at + 1]) >= 0:
            yield at, end + 1
            at = end + 1
        else:
            at += 1


def _closing(text: str, quote: str) -> list[int]:
    """For each position, where a literal read from there closes on ``quote``; -1 where it does not."""
    ends = [-1] * (len(text) + 2)
    for at in range(len(text) - 1, -1, -1):
        char = text[at]
        if char == quote:
            ends[at] = at
        elif char == "\\":
            # an escape takes the next character whatever it is, a quote or a newline too
            ends[at] = ends[at + 2] if at + 1 < len(text) else -1
        elif char != "\n":
            ends[at] = ends[at + 1]
    return ends


def _shorten_literal(literal: str) -> str:
    if len(literal) <= MAX_SHOWN_LITERAL + 2:
        return literal
    quote = literal[0]
    return f"{literal[: MAX_SHOWN_LITERAL + 1]}…{quote} ({len(literal) - 2:,} chars)"


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """``1 conversation``, ``2 conversations``: the count with its noun in the right number."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def did_you_mean(
    name: str,
    candidates: Iterable[str],
    cutoff: float = 0.5,
    prefix: str = "",
    form: Callable[[str], str] | None = None,
    first: Callable[[str], bool] | None = None,
) -> str:
    """``; did you mean confirm?`` for a misspelled ``name`` (with the other close matches), or "".

    ``prefix``, shared by every candidate (``--careful-``), is left out of the comparison:
    it would make any two names look alike. ``form``, where given, is what is compared of the name
    and of each candidate (a model key without its date); the candidates are shown as they are, the
    first of each form. ``first``, where given, picks the close matches to name before the others
    (a model of the kind asked for), each group in its own order.
    """
    pool: dict[str, str] = {}
    for candidate in dict.fromkeys(candidates):
        shown = candidate.removeprefix(prefix)
        pool.setdefault(form(shown) if form else shown, shown)
    stem = name.removeprefix(prefix)
    stem = form(stem) if form else stem
    same_but_case = [c for f, c in pool.items() if f.lower() == stem.lower()]
    close = difflib.get_close_matches(stem, list(pool), n=5, cutoff=cutoff)
    # The longest shared start first ("gpt-4.2-turbo-FC": gpt-4.1-..., not glm-4.5-air-FC), stably.
    close.sort(key=lambda c: -len(os.path.commonprefix([c.lower(), stem.lower()])))
    close = list(dict.fromkeys(same_but_case + [pool[f] for f in close]))
    if not close:
        return ""
    if first is not None:
        close = [c for c in close if first(c)] + [c for c in close if not first(c)]
    close = [prefix + c for c in close]
    others = f" (close matches: {', '.join(close)})" if len(close) > 1 else ""
    return f"; did you mean {close[0]}?{others}"


def contains_words(text: str, value: str) -> bool:
    """``value`` occurs in ``text`` and is not part of a longer word or number there."""
    if not value:
        return False
    start = text.find(value)
    while start >= 0:
        end = start + len(value)
        before = text[start - 1] if start else " "
        after = text[end] if end < len(text) else " "
        if not (before.isalnum() and value[0].isalnum()) and not (after.isalnum() and value[-1].isalnum()):
            return True
        start = text.find(value, start + 1)
    return False
