"""One rule for showing text from files and models: what a report must never pass through raw."""

from __future__ import annotations

import difflib
import os
import re
import unicodedata
from collections.abc import Callable, Iterable

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
# A quoted literal as Python's tokenizer reads one on a line (unrolled: no backtracking
# through a long literal); a triple-quoted or unterminated one is cut by the final bound.
_LITERAL = re.compile(r"""'[^'\\\n]*+(?:\\.[^'\\\n]*+)*+'|"[^"\\\n]*+(?:\\.[^"\\\n]*+)*+\"""", re.S)


def shorten(text: str, limit: int = MAX_SHOWN) -> str:
    """``text``, or its first ``limit`` characters and its length when longer: ``aaaa… (199,000 chars)``."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} chars)"


def shorten_call(call: str, limit: int = MAX_SHOWN) -> str:
    """A call as written, each long string literal quoted as ``'aaaa…' (199,000 chars)``, then bounded."""
    if len(call) <= limit:
        return call
    return shorten(_LITERAL.sub(_shorten_literal, call), limit)


def _shorten_literal(match: re.Match[str]) -> str:
    literal = match.group()
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
) -> str:
    """``; did you mean confirm?`` for a misspelled ``name`` (with the other close matches), or "".

    ``prefix``, shared by every candidate (``--careful-``), is left out of the comparison:
    it would make any two names look alike. ``form``, where given, is what is compared of the name
    and of each candidate (a model key without its date); the candidates are shown as they are, the
    first of each form.
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
    close = [prefix + c for c in close]
    others = f" (close matches: {', '.join(close)})" if len(close) > 1 else ""
    return f"; did you mean {close[0]}?{others}"
