"""Scoring one conversation's logged output: decode its steps, replay them, BFCL's verdict.

The other half of what ``results.py`` held: :mod:`pytest_careful.data.result_files` reads
the entries (and says what is wrong with a line); this decodes each entry's steps with the
run's decoder, replays the calls on fresh simulators and checks them as bfcl-eval does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..common.gc_pause import paused
from ..data import dataset
from ..data.dataset import Conversation
from ..data.result_files import InputProblem, LoggedEntry, read_result_file
from ..execution import limits
from ..execution.decoding import Decoder
from .replay import Replay, reference, replay
from .verdict import Verdict, check, force_terminated, inference_error


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
    raw: object = None


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


def step_text(step: object) -> str | None:
    """The text of a logged step: a string (prompting models, OpenAI FC without a
    call), or the string parts of a list (Claude FC logs ``["text"]``).

    Read as the confirm protocol's scripted user reads a step (``protocols.confirm_log.model_text``).
    """
    if isinstance(step, str):
        return step
    if isinstance(step, list):
        parts = [p for p in step if isinstance(p, str)]
        return "\n".join(parts) if parts else None
    return None


def decode_run(decoder: Decoder, result: Sequence[object]) -> DecodedRun:
    """Decode every raw step of ``result``, keeping where each came from."""
    run = DecodedRun([], [], [], [])
    for turn in result:
        steps, indices, silent = [], [], []
        items = turn if isinstance(turn, list) else []
        for index, item in enumerate(items):
            limits.at(len(run.turns), index)
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


def _decode(decoder: Decoder, step: object) -> tuple[list[str], str | None]:
    try:
        return decoder.decode_step(step), None
    except Exception as exc:  # BFCL ignores any failed decoding, and so do we
        return [], type(exc).__name__


def decode_turns(decoder: Decoder, result: Sequence[object]) -> list[list[list[str]]]:
    """Decode every step; like BFCL, steps that fail to decode or decode to nothing are dropped."""
    return decode_run(decoder, result).turns


def _is_empty(decoded: list[str]) -> bool:
    """bfcl-eval's ``is_empty_execute_response``: no call string, or one empty one."""
    return len(decoded) == 0 or (len(decoded) == 1 and len(decoded[0]) == 0)


@paused
def evaluate(
    conversation: Conversation,
    result: object,
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
    path: Path,
    decoder: Decoder,
    category: str | None = None,
    model_name: str = "careful",
) -> tuple[list[Evaluation], list[InputProblem]]:
    entries, problems = read_result_file(path, category)
    return [evaluate(dataset.get(e.id), e.result, decoder, model_name, entry=e) for e in entries], problems
