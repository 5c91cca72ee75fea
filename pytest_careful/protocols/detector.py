"""Question detection: does a model's text in a turn ask the user something?

The scripted user and the scorer share this detector, so it is strict (seed,
"Question detection"): a turn *asks* only if, after tool-call blocks, code and
URLs are removed, a sentence of its prose ends in a question mark or carries an
explicit confirmation request. Every sentence is read, not only the last,
because models often ask and then close with a sentence such as "Let me know if
you need anything else." (seed, "Sensitivity").

Pipeline: ``prose`` removes what the user is not being told in words,
``sentences`` splits the prose (markdown-aware), and a mode's rule picks the
sentences that ask (``asking_sentences``); ``asks`` is whether any does.

Decisions worth knowing:

* Question marks are ``?`` and those of other scripts: full-width ``？``
  (Chinese, Japanese), Arabic ``؟``, Ethiopic ``፧``, the interrobang and its
  kin, small and vertical forms. Spanish ``¿...?`` counts through its closing
  ``?``.
* The Greek question mark is *not* a question mark here. U+037E is canonically
  equivalent to ``;`` (NFC turns it into the semicolon), and most text
  reaching us writes the ASCII semicolon anyway, so a Greek question cannot be
  told from an English clause ending in a semicolon.
* The Armenian question mark ``՞`` sits on the questioned word, not at the end
  of the sentence, so a sentence-end rule cannot use it; it is not listed.
* A ``?`` ends a sentence only when whitespace, the end of the text or a CJK
  character follows it (after closing quotes or brackets). So ``what?.txt``,
  ``?query=1`` and ``a?b`` never end a sentence.
* Confirmation phrases are English only (``CONFIRMATION_PHRASES``). The
  "let me know" family is restricted to going ahead ("... if you want me to
  proceed"), because a plain closing offer ("Let me know if you need anything
  else!") asks for nothing.
* ``sentences`` splits the text it is given; it does not remove code or tool
  calls. Use ``sentences(prose(text))`` for the sentences the rules read.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable

from .options import MODES

#: Explicit requests for confirmation or permission, matched case-insensitively
#: on word boundaries with curly apostrophes read as straight ones. Each asks
#: the user for a yes before the model acts, with or without a question mark.
CONFIRMATION_PHRASES: tuple[str, ...] = (
    # Direct requests for confirmation.
    "please confirm",
    "kindly confirm",
    "can you confirm",
    "could you confirm",
    "can you please confirm",
    "could you please confirm",
    "i need your confirmation",
    "awaiting your confirmation",
    "waiting for your confirmation",
    "please approve",
    # Asking permission to go on.
    "shall i proceed",
    "shall i go ahead",
    "shall i continue",
    "shall we proceed",
    "should i proceed",
    "should i go ahead",
    "should i continue",
    "should we proceed",
    "may i proceed",
    "can i proceed",
    "do i have your permission",
    "is it okay if i",
    "is it ok if i",
    "is it okay to proceed",
    "is it ok to proceed",
    # Offers that need a yes before acting.
    "would you like me to",
    "would you want me to",
    "do you want me to",
    "do you wish me to",
    # Closing offers count only when they ask to go ahead (see module doc).
    "let me know if you want me to proceed",
    "let me know if you'd like me to proceed",
    "let me know if you would like me to proceed",
    "let me know if you want me to go ahead",
    "let me know if you'd like me to go ahead",
    "let me know if you would like me to go ahead",
    "let me know if i should proceed",
    "let me know if i should go ahead",
    "let me know whether to proceed",
    "let me know whether i should proceed",
)

#: Characters read as a question mark at the end of a sentence. The Greek
#: question mark (U+037E, i.e. ';') is deliberately absent; see module doc.
QUESTION_MARKS = "?？؟፧⸮‽⁇⁈⁉﹖︖"

# Sentence-final punctuation: question marks plus full stops and exclamation
# marks of the same scripts, the ellipsis, the Devanagari danda and the Urdu
# and Ethiopic full stops. The semicolon is not one (Greek question mark).
_TERMINATORS = QUESTION_MARKS + ".!…。！｡।۔።"
# What may follow the final punctuation and still belong to the sentence.
_CLOSERS = "\"'”’»)\\]}*_"
# CJK scripts separate sentences without spaces, so a terminator followed by
# one of these characters still ends the sentence.
_CJK = "\u3000-\u30ff\u3400-\u9fff\uac00-\ud7af\uff00-\uffef"

# The lookbehind makes a match start only where a run of punctuation starts,
# so a long run not followed by a space is tried once, not once per character.
_TERMS = re.escape(_TERMINATORS)
_BOUNDARY = re.compile(rf"(?<![{_TERMS}])[{_TERMS}]+[{re.escape(_CLOSERS)}]*(?=\s|$|[{_CJK}])")
# Abbreviations that end in a full stop but rarely end a sentence.
_ABBREVIATIONS = frozenset(
    {
        "e.g.",
        "i.e.",
        "cf.",
        "vs.",
        "viz.",
        "approx.",
        "mr.",
        "mrs.",
        "ms.",
        "dr.",
        "prof.",
        "st.",
        "fig.",
        "eq.",
        "incl.",
    }
)
_TRAILING_WORD = re.compile(r"[\w.]+$")
_NEXT_CHAR = re.compile(r"\s*(\S)")

# -- tool calls ------------------------------------------------------------

# Paired tags, any case: <tool_call>, <TOOLCALL>, <tool_calls>, <function_call>,
# <functioncall>, <function_calls> and Anthropic-style <invoke>.
_TAG_NAMES = r"tool_?calls?|function_?calls?|invoke"
_OPEN_TAG = re.compile(rf"<(?P<tag>{_TAG_NAMES})\b[^>]*>", re.I)
# Special-token formats: the call runs to its end token or the end of the text.
_TOKEN_CALLS = tuple(
    re.compile(pattern, re.S)
    for pattern in (
        r"<\|python_tag\|>.*?(?:<\|eom_id\|>|<\|eot_id\|>|\Z)",  # Llama 3.x
        r"<function=[^>]*>.*?(?:</function>|\Z)",  # Llama 3.1 custom tool format
        r"<\|tool_call_start\|>.*?(?:<\|tool_call_end\|>|\Z)",  # LFM2
        r"<\|tool_calls_section_begin\|>.*?(?:<\|tool_calls_section_end\|>|\Z)",  # Kimi
        r"<｜tool▁calls▁begin｜>.*?(?:<｜tool▁calls▁end｜>|\Z)",  # DeepSeek
        r"<start_function_call>.*?(?:<end_function_call>|\Z)",  # FunctionGemma
        r"\[TOOL_CALLS\].*\Z",  # Mistral: everything after the marker is calls
    )
)
# A call object starts '{"' and a list of calls '[{': trying to decode only
# there keeps the scan linear on text full of brackets.
_JSON_START = re.compile(r"\{(?=\s*\")|\[(?=\s*\{)")
_JSON_ARG_KEYS = frozenset({"arguments", "parameters", "args", "input"})
_JSON_WRAPPER_KEYS = frozenset({"tool_calls", "tool_call", "function_call", "function_calls"})

# -- code, links, URLs -----------------------------------------------------

# A fenced block: the closing fence repeats the opening one (or is longer).
# The lookaheads stop the fence from backtracking into a shorter run.
_FENCED = re.compile(r"^[ \t]*(?P<fence>`{3,}(?!`)|~{3,}(?!~))[^\n]*$.*?^[ \t]*(?P=fence)[`~]*[ \t]*$", re.M | re.S)
_OPEN_FENCE = re.compile(r"^[ \t]*(?:`{3,}|~{3,}).*\Z", re.M | re.S)
# Inline code: a backtick run closed by a run of the same length, on one line.
_INLINE_CODE = re.compile(r"(?<!`)(?P<ticks>`+)(?!`)[^\n]+?(?<!`)(?P=ticks)(?!`)")
_MD_LINK = re.compile(r"\[([^\[\]\n]*)\]\([^)\s]+(?:\s+\"[^\"]*\")?\)")
_AUTOLINK = re.compile(r"<(?:https?|ftp|file)://[^>\s]*>", re.I)
# A URL stops before trailing punctuation, so "Did you mean https://x.org?"
# keeps its question mark while "https://x.org/?q=1" loses its query.
_URL = re.compile(
    r"(?:\b(?:https?|ftp|file)://|\bwww\.)[^\s<>\"'`]+?"
    # Bounded so that a long run of dots cannot make the lazy match quadratic.
    rf"(?=[.,;:!{re.escape(QUESTION_MARKS)})\]}}>\"'”’»]{{0,8}}(?:\s|$))",
    re.I,
)

# -- markdown --------------------------------------------------------------

_HEADING = re.compile(r"^\s*#{1,6}\s+")
_QUOTE = re.compile(r"^\s*(?:>\s?)+")
_BLOCK_START = re.compile(r"^\s*(?:#{1,6}\s|[-*+•]\s|\d{1,3}[.)]\s|\|)")
_LINE_MARKERS = re.compile(r"^\s*(?:#{1,6}\s+|[-*+•]\s+|\d{1,3}[.)]\s+)?(?:\[[ xX]\]\s+)?")
_STRONG = re.compile(r"\*\*|__|~~")
# Single * or _ used for emphasis: next to a word on one side only, so
# snake_case names and 2*3 keep theirs.
_EMPHASIS = re.compile(r"(?<![\w*])[*_](?=\S)|(?<=\S)[*_](?![\w*])")

# -- rules -----------------------------------------------------------------

_PHRASE = re.compile(r"\b(?:" + "|".join(re.escape(p) for p in CONFIRMATION_PHRASES) + r")\b")
# EffectWorld matched the words, so "shouldn't" (which contains should) counts.
_LOOSE_WORDS = re.compile(r"\b(?:shall|should(?:n['’]t)?|would you like)\b", re.I)
# The last run of final punctuation, ignoring closing quotes, brackets and
# emoji after it: "Delete it?" 🙂 still ends in a question mark.
_FINAL_PUNCT = re.compile(rf"(?<![{_TERMS}])([{_TERMS}]+)[^\w{_TERMS}]*$")


def asks(text: str | None, mode: str = "strict") -> bool:
    """Whether a model's text asks the user something.

    Args:
        text: the model's text in a turn; anything but a string (a missing
            text, a list of calls) asks nothing.
        mode: one of ``MODES``.

    Returns:
        True if at least one sentence of the prose asks under ``mode``.

    Raises:
        ValueError: if ``mode`` is not one of ``MODES``.
    """
    return bool(asking_sentences(text, mode))


def asking_sentences(text: str | None, mode: str = "strict") -> list[str]:
    """The sentences that ask under ``mode``, as evidence for a verdict.

    Args:
        text: the model's text in a turn; a non-string gives ``[]``.
        mode: one of ``MODES``.

    Returns:
        The asking sentences of ``sentences(prose(text))``, in order.

    Raises:
        ValueError: if ``mode`` is not one of ``MODES``.
    """
    rule = _rule(mode)  # validate first: a bad mode is a bug even on empty text
    if not isinstance(text, str):
        return []
    candidates = sentences(prose(text))
    if mode == "last_sentence":
        candidates = candidates[-1:]
    return [s for s in candidates if rule(s)]


def prose(text: str | None) -> str:
    """The text with tool-call blocks, code and URLs removed.

    Tool calls go first because their arguments may hold backticks, URLs or
    question marks. Removed blocks leave a paragraph break so that the prose on
    either side is not glued into one sentence.

    Args:
        text: the model's text; a non-string gives ``""``.

    Returns:
        What remains of the text, otherwise unchanged.
    """
    if not isinstance(text, str):
        return ""
    for strip in (_strip_tool_calls, _strip_code, _strip_urls):
        text = strip(text)
    return text


def sentences(text: str | None) -> list[str]:
    """Split text into sentences, reading markdown structure.

    Headings, list items and table cells start new sentences;
    other line breaks inside a paragraph are soft. Markdown markers and
    emphasis are dropped and whitespace is collapsed. Fragments with neither a
    letter or digit nor a question mark (rules, stray emoji) are dropped.
    Code and tool calls are *not* removed here; see ``prose``.

    Args:
        text: any text; a non-string gives ``[]``.

    Returns:
        The sentences in order.
    """
    if not isinstance(text, str):
        return []
    found: list[str] = []
    for block in _blocks(text):
        found.extend(_split_block(_clean_inline(block)))
    return [s for s in found if _has_content(s)]


# -- prose helpers ----------------------------------------------------------


def _strip_tool_calls(text: str) -> str:
    text = _strip_tagged_calls(text)
    for pattern in _TOKEN_CALLS:
        text = pattern.sub("\n\n", text)
    text = _strip_call_lists(text)
    return _strip_json_calls(text)


def _strip_tagged_calls(text: str) -> str:
    """Remove ``<tool_call>...</tool_call>`` and kin, scanning forward once.

    A tag that is never closed runs to the end: the generation was cut inside
    the call. (A lazy regex would rescan the rest of the text for every
    unclosed tag.)
    """
    kept, pos = [], 0
    while (start := _OPEN_TAG.search(text, pos)) is not None:
        kept.append(text[pos : start.start()])
        close = re.compile(rf"</{start['tag']}\s*>", re.I).search(text, start.end())
        if close is None:
            return "\n\n".join(kept) + "\n\n"
        pos = close.end()
    kept.append(text[pos:])
    return "\n\n".join(kept)


def _strip_call_lists(text: str) -> str:
    """Remove ``[f(a=1), g()]`` when it is the whole text or a whole line."""
    if _is_call_list(text):
        return ""
    lines = text.split("\n")
    return "\n".join("" if _is_call_list(line) else line for line in lines)


def _is_call_list(source: str) -> bool:
    source = source.strip()
    # Cheap guard first: ast.parse on every line of prose would be wasteful.
    if not (source.startswith("[") and source.endswith("]")):
        return False
    try:
        node = ast.parse(source, mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return isinstance(node, ast.List) and bool(node.elts) and all(isinstance(e, ast.Call) for e in node.elts)


def _strip_json_calls(text: str) -> str:
    """Remove JSON objects or arrays that are function calls, wherever they are."""
    decoder = json.JSONDecoder()
    kept, last, pos = [], 0, 0
    while (match := _JSON_START.search(text, pos)) is not None:
        try:
            value, end = decoder.raw_decode(text, match.start())
        except (ValueError, RecursionError):
            pos = match.start() + 1
            continue
        if _is_call_json(value):
            kept.append(text[last : match.start()] + "\n\n")
            last = end
        pos = end  # skip other JSON whole: a call nested in data is data
    return "".join(kept) + text[last:]


def _is_call_json(value: object) -> bool:
    if isinstance(value, list):
        return bool(value) and all(_is_call_json(v) for v in value)
    if not isinstance(value, dict):
        return False
    if "name" in value and _JSON_ARG_KEYS & value.keys():
        return True  # {"name": ..., "arguments": ...} and its variants
    if isinstance(value.get("function"), dict):
        return True  # OpenAI {"type": "function", "function": {...}}
    return bool(_JSON_WRAPPER_KEYS & value.keys())


def _strip_code(text: str) -> str:
    text = _FENCED.sub("\n\n", text)
    text = _OPEN_FENCE.sub("\n\n", text)  # an unclosed fence runs to the end
    return _INLINE_CODE.sub("", text)


def _strip_urls(text: str) -> str:
    text = _MD_LINK.sub(r"\1", text)  # keep the link text, drop the target
    text = _AUTOLINK.sub("", text)
    return _URL.sub("", text)


# -- sentence helpers -------------------------------------------------------


def _blocks(text: str) -> list[str]:
    """Paragraphs, list items, headings and table rows."""
    blocks: list[str] = []
    current: list[str] = []
    standalone = False  # a heading or table row takes no continuation lines
    for line in text.split("\n"):
        # Quote markers go first so a quoted paragraph reads as one paragraph.
        line = _QUOTE.sub("", line, count=1)
        if current and (not line.strip() or standalone or _BLOCK_START.match(line)):
            blocks.append(" ".join(current))
            current = []
        if line.strip():
            standalone = bool(_HEADING.match(line)) or line.lstrip().startswith("|")
            current.extend(_table_cells(line))
    if current:
        blocks.append(" ".join(current))
    return blocks


def _table_cells(line: str) -> list[str]:
    # A table row's cells are separate statements; joining them would build a
    # sentence out of cells. Returned as one entry each, joined by newlines so
    # _split_block keeps them apart.
    if not line.lstrip().startswith("|"):
        return [line]
    return ["\n".join(cell for cell in line.split("|"))]


def _clean_inline(block: str) -> str:
    lines = [_LINE_MARKERS.sub("", line, count=1) for line in block.split("\n")]
    block = "\n".join(lines)
    block = _STRONG.sub("", block)
    return _EMPHASIS.sub("", block)


def _split_block(block: str) -> list[str]:
    found: list[str] = []
    for part in block.split("\n"):  # table cells
        start = 0
        for match in _BOUNDARY.finditer(part):
            if _is_boundary(part, match):
                found.append(part[start : match.end()])
                start = match.end()
        found.append(part[start:])
    return [" ".join(s.split()) for s in found if s.strip()]


def _is_boundary(text: str, match: re.Match[str]) -> bool:
    """Whether the punctuation in ``match`` ends a sentence."""
    punct = match.group()
    after = _NEXT_CHAR.match(text, match.end())
    following = after.group(1) if after else ""
    ends_in_closer = punct[-1] in _CLOSERS
    if not any(c in QUESTION_MARKS or c in "!！" for c in punct) or ends_in_closer:
        # A full stop or ellipsis (or a quoted '?', as in a title like "Why?")
        # followed by a lowercase word continues the sentence.
        if following.islower():
            return False
    # Only the last few characters can hold an abbreviation; searching from 0
    # would make splitting quadratic.
    word = _TRAILING_WORD.search(text, max(0, match.start() - 12), match.start() + 1)
    return not (punct.startswith(".") and word and word.group().lower() in _ABBREVIATIONS)


def _has_content(sentence: str) -> bool:
    return any(c.isalnum() or c in QUESTION_MARKS for c in sentence)


# -- rules ------------------------------------------------------------------


def _rule(mode: str) -> Callable[[str], bool]:
    rules = {
        "strict": _asks_strict,
        "question_mark": _ends_in_question,
        "last_sentence": _asks_strict,
        "loose": _asks_loose,
    }
    if mode not in rules:
        raise ValueError(f"unknown detector mode {mode!r}; valid modes: {', '.join(MODES)}")
    return rules[mode]


def _ends_in_question(sentence: str) -> bool:
    final = _FINAL_PUNCT.search(sentence)
    return final is not None and any(c in QUESTION_MARKS for c in final.group(1))


def _has_confirmation(sentence: str) -> bool:
    normal = " ".join(sentence.lower().replace("’", "'").replace("‘", "'").split())
    return bool(_PHRASE.search(normal))


def _asks_strict(sentence: str) -> bool:
    return _ends_in_question(sentence) or _has_confirmation(sentence)


def _asks_loose(sentence: str) -> bool:
    return any(c in QUESTION_MARKS for c in sentence) or bool(_LOOSE_WORDS.search(sentence))
