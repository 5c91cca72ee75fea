"""One rule for showing text from files and models: what a report must never pass through raw."""

from __future__ import annotations

import unicodedata

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
