"""Reading BFCL result files (``bfcl generate``'s JSONL) and scoring their entries.

A result file has one JSON object per line: ``id``, ``result`` (per turn, per
step: a string for prompting models, a list of ``{name: arguments}`` for
function-calling models; or a string in place of the whole list after an
inference error), optional token counts, latency and ``inference_log``.

Bad input never stops the run: every problem becomes a :class:`InputProblem`
that names the file, the line and the conversation, and every other entry is
still scored.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

from ._gc import paused
from . import dataset
from ._bfcl import CATEGORIES
from .dataset import Conversation
from .decoding import Decoder
from .replay import Replay, reference, replay
from .verdict import Verdict, check, force_terminated, inference_error

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
        return f"{where}{who}: {self.message}"


@dataclass
class LoggedEntry:
    """One conversation of a logged run, as read from its file."""

    id: str
    result: Any
    file: str
    line: int
    input_token_count: Any = None
    output_token_count: Any = None
    latency: Any = None
    inference_log: Any = None
    raw: dict[str, Any] = field(default_factory=dict, repr=False)


def find_result_files(directory: Path) -> tuple[dict[str, Path], list[InputProblem]]:
    """Multi-turn result files under ``directory`` (BFCL's tree or flat), by category."""
    found: dict[str, Path] = {}
    problems: list[InputProblem] = []
    for path in sorted(Path(directory).rglob("BFCL_v4_multi_turn_*_result.json")):
        match = RESULT_FILE.match(path.name)
        category = match["category"] if match else path.name
        if category not in CATEGORIES:
            problems.append(InputProblem(str(path), None, None, f"unknown category {category!r}; "
                                         f"expected one of {', '.join(CATEGORIES)}"))
        elif category in found:
            problems.append(InputProblem(str(path), None, None,
                                         f"second result file for {category}; using {found[category]}"))
        else:
            found[category] = path
    return found, problems


def read_result_file(path: Path, category: str | None = None) -> tuple[list[LoggedEntry], list[InputProblem]]:
    """Entries of one result file, and the problems found in it."""
    entries: list[LoggedEntry] = []
    problems: list[InputProblem] = []
    seen: dict[str, int] = {}
    name = str(path)
    try:
        lines = _lines(Path(path))
    except OSError as exc:
        return [], [InputProblem(name, None, None, f"cannot read file: {exc}")]
    for number, raw in enumerate(lines, start=1):
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            problems.append(InputProblem(name, number, _id_in(raw), f"not valid UTF-8 ({exc.reason} at byte "
                                         f"{exc.start} of the line); the rest of the file is still read"))
            continue
        if not text.strip():
            continue
        entry, problem = _parse_line(name, number, text, category)
        if problem:
            problems.append(problem)
            continue
        assert entry is not None
        if entry.id in seen:
            first = entries[seen[entry.id]]
            if isinstance(first.result, str) and not isinstance(entry.result, str):
                # An errored conversation retried later (a live run's append-only log
                # before compaction): the finished entry is the one to score.
                entries[seen[entry.id]] = entry
                continue
            problems.append(InputProblem(name, number, entry.id,
                                         f"duplicate entry (first at line {first.line}); this one is ignored"))
            continue
        seen[entry.id] = len(entries)
        entries.append(entry)
    return entries, problems


def _lines(path: Path) -> list[bytes]:
    """The file's lines as bfcl-eval reads them (split at newlines only, not at U+2028 or U+0085).

    A FIFO or device named like a result file would block a read forever: only
    regular files are opened.
    """
    if not path.is_file():
        raise OSError(f"{path} is not a regular file")
    return [line.removesuffix(b"\r") for line in path.read_bytes().split(b"\n")]


_ID = re.compile(rb'"id"\s*:\s*"(multi_turn_[a-z_]+_\d+)"')


def _id_in(raw: bytes) -> str | None:
    """The conversation id of a line that cannot be decoded, when it can still be seen."""
    match = _ID.search(raw)
    return match.group(1).decode("ascii") if match else None


def _parse_line(file: str, number: int, text: str, category: str | None) -> tuple[LoggedEntry | None, InputProblem | None]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        guess = re.search(r'"id":\s*"([^"]+)"', text)
        return None, InputProblem(file, number, guess.group(1) if guess else None,
                                  f"not valid JSON ({exc.msg} at column {exc.colno}); truncated line?")
    if not isinstance(data, dict) or not isinstance(data.get("id"), str):
        return None, InputProblem(file, number, None, "expected a JSON object with a string 'id'")
    entry_id = data["id"]
    try:
        conversation = dataset.get(entry_id)
    except dataset.UnknownConversation as exc:
        return None, InputProblem(file, number, entry_id, str(exc))
    if category and conversation.category != category:
        return None, InputProblem(file, number, entry_id,
                                  f"belongs to {conversation.category}, not to this file's {category}")
    if "result" not in data:
        return None, InputProblem(file, number, entry_id, "entry has no 'result'")
    shape = _shape_problem(data["result"], conversation)
    if shape:
        return None, InputProblem(file, number, entry_id, shape)
    return LoggedEntry(
        id=entry_id, result=data["result"], file=file, line=number,
        input_token_count=data.get("input_token_count"),
        output_token_count=data.get("output_token_count"),
        latency=data.get("latency"), inference_log=data.get("inference_log"), raw=data,
    ), None


def _shape_problem(result: Any, conversation: Conversation) -> str | None:
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


@dataclass
class Evaluation:
    """A conversation scored by replay: decoded calls, the replay, BFCL's verdict."""

    conversation: Conversation
    decoded: list[list[list[str]]]
    replay: Replay
    reference: Replay
    verdict: Verdict
    entry: LoggedEntry | None = None
    run: DecodedRun | None = None


@dataclass(frozen=True)
class NoCallStep:
    """A raw step that made no call, as the result file records it.

    Attributes:
        index: the raw step index within its turn.
        text: the model's text (:func:`step_text`), or None where the file
            records none (an FC step logged as ``[]`` keeps no text).
        error: the decoder's exception type when the step failed to decode.
        raw: the step as logged.
    """

    index: int
    text: str | None
    error: str | None
    raw: Any = None


@dataclass
class DecodedRun:
    """Decoded steps per turn, with where each came from and the model's text.

    Attributes:
        turns: per turn, the decoded steps (each a list of call strings); steps
            that failed to decode or decoded to nothing are dropped, as BFCL does.
        raw_index: per turn, the raw step index of each decoded step (token
            counts are logged per raw step).
        texts: per turn, the text of each raw step that made no call.
        raw_steps: per turn, the number of raw steps.
        no_calls: per turn, every raw step that made no call (with or without text).
    """

    turns: list[list[list[str]]]
    raw_index: list[list[int]]
    texts: list[list[str]]
    raw_steps: list[int]
    no_calls: list[list[NoCallStep]] = field(default_factory=list)


def step_text(step: Any) -> str | None:
    """The text of a logged step: a string (prompting models, OpenAI FC without a
    call), or the string parts of a list (Claude FC logs ``["text"]``).

    Read as the confirm protocol's scripted user reads a step (``live.confirm.model_text``).
    """
    if isinstance(step, str):
        return step
    if isinstance(step, list):
        parts = [p for p in step if isinstance(p, str)]
        return "\n".join(parts) if parts else None
    return None


def decode_run(decoder: Decoder, result: Sequence[Sequence[Any]]) -> DecodedRun:
    """Decode every raw step of ``result``, keeping where each came from."""
    run = DecodedRun([], [], [], [])
    for turn in result:
        steps, indices, silent = [], [], []
        items = turn if isinstance(turn, list) else []
        for index, item in enumerate(items):
            decoded, error = _decode(decoder, item)
            if _is_empty(decoded):
                silent.append(NoCallStep(index, step_text(item), error, item))
                continue
            steps.append(list(decoded))
            indices.append(index)
        run.turns.append(steps)
        run.raw_index.append(indices)
        run.texts.append([s.text for s in silent if s.text is not None])
        run.raw_steps.append(len(items))
        run.no_calls.append(silent)
    return run


def _decode(decoder: Decoder, item: Any) -> tuple[Any, str | None]:
    try:
        return decoder.decode_step(item), None
    except Exception as exc:  # BFCL ignores any failed decoding, and so do we
        return [], type(exc).__name__


def decode_turns(decoder: Decoder, result: Sequence[Sequence[Any]]) -> list[list[list[str]]]:
    """Decode every step; like BFCL, steps that fail to decode or decode to nothing are dropped."""
    return decode_run(decoder, result).turns


def _is_empty(decoded: Any) -> bool:
    return len(decoded) == 0 or (len(decoded) == 1 and len(decoded[0]) == 0)


@paused
def evaluate(
    conversation: Conversation,
    result: Any,
    decoder: Decoder,
    model_name: str = "careful",
    snapshots: bool = True,
    entry: LoggedEntry | None = None,
) -> Evaluation:
    """Decode, replay and check one logged conversation."""
    ref = reference(conversation)
    if not isinstance(result, list):
        empty = replay(conversation, [], model_name, snapshots, prefix=ref)
        return Evaluation(conversation, [], empty, ref, inference_error(), entry, DecodedRun([], [], [], []))
    run = decode_run(decoder, result)
    model = replay(conversation, run.turns, model_name, snapshots, prefix=ref)
    if len(result) != conversation.n_turns:
        verdict = force_terminated(len(result), conversation.n_turns)
    else:
        verdict = check(conversation, model, ref)
    return Evaluation(conversation, run.turns, model, ref, verdict, entry, run)


def evaluate_file(
    path: Path, decoder: Decoder, category: str | None = None, model_name: str = "careful",
) -> tuple[list[Evaluation], list[InputProblem]]:
    entries, problems = read_result_file(path, category)
    return [evaluate(dataset.get(e.id), e.result, decoder, model_name, entry=e) for e in entries], problems


def missing_conversations(entries: Iterable[LoggedEntry], category: str) -> list[str]:
    present = {e.id for e in entries}
    return [c.id for c in dataset.load_category(category) if c.id not in present]
