"""Reading BFCL result files (``bfcl generate``'s JSONL): entries, and a problem per bad line.

A result file has one JSON object per line: ``id``, ``result`` (per turn, per
step: a string for prompting models, a list of ``{name: arguments}`` for
function-calling models; or a string in place of the whole list after an
inference error), optional token counts, latency and ``inference_log``.

Bad input never stops the run: every problem becomes a :class:`InputProblem`
that names the file, the line and the conversation, and every other entry is
still scored. Scoring an entry is :mod:`pytest_careful.evaluation.evaluate`'s.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ..common.bfcl import CATEGORIES
from . import dataset
from .dataset import Conversation

RESULT_FILE = re.compile(r"^BFCL_v4_(?P<category>multi_turn_[a-z_]+)_result\.json$")


@dataclass(frozen=True)
class InputProblem:
    """Something wrong with the user's input, located precisely."""

    file: str
    line: int | None
    conversation: str | None
    message: str

    def __str__(self) -> str:
        where = self.file + (f":{self.line}" if self.line is not None else "")
        who = f" [{self.conversation}]" if self.conversation else ""
        # Printable whatever the file held: a lone surrogate (or a non-UTF-8 file
        # name) would make the terminal's encoder raise, a control character
        # would reach it raw.
        return printable(f"{where}{who}: {self.message}")


def printable(text: str) -> str:
    """``text`` with every non-printable character (controls, surrogates, U+2028) escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


#: A conversation's ``result`` as BFCL writes it: per turn, the model's steps (each its output as
#: logged, any JSON value), or a string (BFCL's inference-error form).
LoggedResult = str | list[list[object]]


@dataclass
class LoggedEntry:
    """One conversation of a logged run, as read from its file.

    The other fields are the line's JSON values as read (BFCL's shapes, or whatever the file
    holds); their readers look at what they are.
    """

    id: str
    result: LoggedResult
    file: str
    line: int
    input_token_count: object = None
    output_token_count: object = None
    latency: object = None
    inference_log: object = None
    raw: dict[str, object] = field(default_factory=dict, repr=False)  # the line's JSON object


def find_result_files(directory: Path) -> tuple[dict[str, Path], list[InputProblem]]:
    """Multi-turn result files under ``directory`` (BFCL's tree or flat), by category."""
    found: dict[str, Path] = {}
    problems: list[InputProblem] = []
    for path in sorted(Path(directory).rglob("BFCL_v4_multi_turn_*_result.json")):
        match = RESULT_FILE.match(path.name)
        category = match["category"] if match else path.name
        if category not in CATEGORIES:
            problems.append(
                InputProblem(
                    str(path), None, None, f"unknown category {category!r}; expected one of {', '.join(CATEGORIES)}"
                )
            )
        elif category in found:
            problems.append(
                InputProblem(str(path), None, None, f"second result file for {category}; using {found[category]}")
            )
        else:
            found[category] = path
    return found, problems


def read_result_file(path: Path, category: str | None = None) -> tuple[list[LoggedEntry], list[InputProblem]]:
    """Entries of one result file, and the problems found in it.

    A file that is not JSON Lines at all (gzip, UTF-16, one JSON array) is one
    problem; lines end where bfcl-eval ends them (:data:`_LINE_END`). Every line
    that cannot be an entry (not UTF-8, not JSON, nested too deep,
    an integer too long to read, an unknown or foreign id, a shape BFCL could
    not have written) is an :class:`InputProblem` of its own; the others are read.
    Of several entries with one id the last one counts (:func:`keep_last`).
    """
    name = str(path)
    try:
        data = _contents(Path(path))
    except OSError as exc:
        return [], [InputProblem(name, None, None, f"cannot read file: {exc}")]
    parsed: list[LoggedEntry] = []
    problems: list[InputProblem] = []
    if data.startswith(UTF8_BOM):  # an editor's mark, not content: every entry is still there
        data = data[len(UTF8_BOM) :]
        problems.append(
            InputProblem(
                name, 1, None, "starts with a UTF-8 byte order mark; read without it (bfcl evaluate stops at it)"
            )
        )
    other_form = _other_form(data)
    if other_form:  # one problem that names the form, not one per meaningless "line"
        return [], problems + [InputProblem(name, None, None, other_form)]
    for number, raw in enumerate(_LINE_END.split(data), start=1):
        entry, problem = parse_raw_line(name, number, raw, category)
        if problem is not None:
            problems.append(problem)
        elif entry is not None:
            parsed.append(entry)
    entries, superseded = keep_last(parsed)
    return entries, sorted(problems + superseded, key=lambda p: p.line or 0)


def parse_raw_line(
    file: str, number: int, raw: bytes, category: str | None
) -> tuple[LoggedEntry | None, InputProblem | None]:
    """One line of a result file as bytes: its entry, its problem, or neither (a blank line)."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return None, InputProblem(
            file,
            number,
            _id_in(raw),
            f"not valid UTF-8 ({exc.reason} at byte {exc.start} of the line); the rest of the file is still read",
        )
    if not text.strip(" \t\r"):  # JSON's whitespace only: a line of U+2028 is not blank to BFCL
        return None, None
    return _parse_line(file, number, text, category)


def keep_last(entries: Iterable[LoggedEntry]) -> tuple[list[LoggedEntry], list[InputProblem]]:
    """One entry per id: the last one in the file, as BFCL keeps it.

    ``bfcl evaluate`` scores no file with two entries of one id (it stops on
    the length mismatch); BFCL's only rule that picks between them is
    ``BaseHandler.write(update_mode=True)``, where the entry written last
    replaces the earlier one. Rescoring, live resume and compaction all apply
    it. An earlier errored entry replaced later is a live run's retry, not a
    problem; any other earlier entry is reported.
    """
    kept: dict[str, LoggedEntry] = {}
    problems: list[InputProblem] = []
    for entry in entries:
        earlier = kept.get(entry.id)
        if earlier is not None and not _errored(earlier):
            problems.append(
                InputProblem(
                    entry.file,
                    entry.line,
                    entry.id,
                    f"duplicate entry (an earlier one at line {earlier.line}); "
                    "the last entry of an id counts, as in BFCL",
                )
            )
        kept[entry.id] = entry
    return list(kept.values()), problems


def _errored(entry: LoggedEntry) -> bool:
    """BFCL's inference-error form (a string ``result``), or a live run's error marker."""
    return isinstance(entry.result, str) or bool(entry.raw.get("error"))


#: Where a line ends as bfcl-eval reads the file (text mode, universal newlines): at
#: ``\r\n``, ``\n`` and a lone ``\r``, not at U+2028 or U+0085.
_LINE_END = re.compile(rb"\r\n|\r|\n")
UTF8_BOM = b"\xef\xbb\xbf"
#: A UTF-16 file's first two bytes: its byte order mark, or ``{`` or ``[`` and a NUL (no mark)
_UTF16_STARTS = (b"\xff\xfe", b"\xfe\xff", b"{\x00", b"\x00{", b"[\x00", b"\x00[")


def _contents(path: Path) -> bytes:
    """The file's bytes. A FIFO or device named like a result file would block a
    read forever: only regular files are opened."""
    if not path.is_file():
        raise OSError(f"{path} is not a regular file")
    return path.read_bytes()


def _other_form(data: bytes) -> str | None:
    """What the file is when it is not JSON Lines at all (compressed, UTF-16, one JSON array)."""
    if data.startswith(b"\x1f\x8b"):
        return "gzip-compressed, not JSON Lines: decompress it first (gunzip)"
    if data[:2] in _UTF16_STARTS:
        return "UTF-16 (or UTF-32) text; BFCL reads UTF-8: convert it first (iconv -f UTF-16 -t UTF-8)"
    if data.lstrip(b" \t\r\n").startswith(b"["):
        try:
            whole = json.loads(data)
        except (ValueError, RecursionError, MemoryError):
            return None  # not one array: read line by line
        if isinstance(whole, list):
            return (
                f"one JSON array of {len(whole)} values, not JSON Lines (one entry per line, as bfcl "
                "generate writes): convert it first (jq -c '.[]')"
            )
    return None


_ID = re.compile(rb'"id"\s*:\s*"(multi_turn_[a-z_]+_\d+)"')


def _id_in(raw: bytes) -> str | None:
    """The conversation id of a line that cannot be decoded, when it can still be seen."""
    match = _ID.search(raw)
    return match.group(1).decode("ascii") if match else None


#: The deepest nesting a line may have. Python's JSON reader gives up near 1,000 levels
#: (less the caller's stack, so where exactly depends on who reads); a fixed bound
#: makes the outcome the same everywhere, and leaves every reader of the entry
#: (decoders, transcripts, xdist's serialiser) stack to spare. Real entries nest < 10.
MAX_NESTING = 500

#: At most this much of a value from the file is quoted in a message.
QUOTE_CHARS = 80


def _parse_line(
    file: str, number: int, text: str, category: str | None
) -> tuple[LoggedEntry | None, InputProblem | None]:
    """One line's entry, or the line's problem: no line raises, whatever it holds."""
    try:
        return _parse_entry(file, number, text, category)
    except Exception as exc:  # noqa: BLE001 - any exception a line causes is that line's problem
        return None, InputProblem(file, number, _id_seen(text), f"cannot be read ({_reason(exc)})")


def _parse_entry(
    file: str, number: int, text: str, category: str | None
) -> tuple[LoggedEntry | None, InputProblem | None]:
    def problem(message: str, conversation: str | None = None) -> tuple[None, InputProblem]:
        return None, InputProblem(file, number, conversation, message)

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        hint = "two entries on one line?" if exc.msg == "Extra data" else "truncated line?"
        # Some of json's messages end in "at" already ("Unterminated string starting at").
        where = f"{exc.msg} column {exc.colno}" if exc.msg.endswith(" at") else f"{exc.msg} at column {exc.colno}"
        return problem(f"not valid JSON ({where}); {hint}", _id_seen(text))
    except (RecursionError, ValueError, MemoryError) as exc:  # deep nesting, integers past the digit limit
        return problem(f"not readable as JSON ({_reason(exc)})", _id_seen(text))
    if _nested_deeper(data, text, MAX_NESTING):
        return problem(f"nested more than {MAX_NESTING} levels deep (not read)", _id_seen(text))
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        return problem("expected a JSON object with a string 'id'")
    entry_id = data["id"]
    if not _DISPLAYABLE_ID.fullmatch(entry_id):
        return problem(f"unknown conversation id {_quote(entry_id)}")
    try:
        conversation = dataset.get(entry_id)
    except dataset.UnknownConversation as exc:
        return problem(str(exc), entry_id)
    if category and conversation.category != category:
        return problem(f"belongs to {conversation.category}, not to this file's {category}", entry_id)
    if "result" not in data:
        return problem("entry has no 'result'", entry_id)
    shape = _shape_problem(data["result"], conversation)
    if shape:
        return problem(shape, entry_id)
    return LoggedEntry(
        id=entry_id,
        result=data["result"],
        file=file,
        line=number,
        input_token_count=data.get("input_token_count"),
        output_token_count=data.get("output_token_count"),
        latency=data.get("latency"),
        inference_log=data.get("inference_log"),
        raw=data,
    ), None


# Ids shown as the conversation of a problem: what a conversation id can look like.
_DISPLAYABLE_ID = re.compile(r"[A-Za-z0-9_\-:.]{1,100}")
_ID_TEXT = re.compile(r'"id"\s*:\s*"(multi_turn_[a-z_]+_\d{1,6})"')


def _id_seen(text: str) -> str | None:
    """The conversation id of a line that cannot be read, when it can still be seen."""
    match = _ID_TEXT.search(text[:100_000])
    return match.group(1) if match else None


def _nested_deeper(data: object, text: str, limit: int) -> bool:
    """Whether ``data`` nests more than ``limit`` containers deep (walked without recursion)."""
    if text.count("[") + text.count("{") <= limit:
        return False  # cannot nest deeper than it has brackets
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if depth > limit:
            return True
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values() if isinstance(v, (dict, list)))
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value if isinstance(v, (dict, list)))
    return False


def _reason(exc: BaseException) -> str:
    if isinstance(exc, RecursionError):
        return f"nested more than Python's JSON reader allows, over {MAX_NESTING} levels"
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return f"an integer of more than {sys.get_int_max_str_digits()} digits, past Python's limit"
    return f"{type(exc).__name__}: {_quote(str(exc))}"


def _quote(value: str) -> str:
    """``value`` for a message: escaped, and cut to :data:`QUOTE_CHARS` characters."""
    cut = value[:QUOTE_CHARS]
    return ascii(cut) + (f" ... ({len(value)} characters)" if len(value) > QUOTE_CHARS else "")


def _shape_problem(result: object, conversation: Conversation) -> str | None:
    """A result BFCL could not have written. Fewer turns than the conversation
    has is not one: that is BFCL's own force termination, scored as such."""
    if isinstance(result, str):
        return None  # BFCL's inference-error form
    if not isinstance(result, list):
        return f"'result' must be a list of turns (or an error string), got {type(result).__name__}"
    if len(result) > conversation.n_turns:
        return f"'result' has {len(result)} turns but {conversation.id} has {conversation.n_turns}"
    for index, turn in enumerate(result):
        if not isinstance(turn, list):
            return f"turn {index} must be a list of steps, got {type(turn).__name__}"
    return None


def missing_conversations(entries: Iterable[LoggedEntry], category: str) -> list[str]:
    present = {e.id for e in entries}
    return [c.id for c in dataset.load_category(category) if c.id not in present]
