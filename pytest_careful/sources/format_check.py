"""Does the chosen decoder read a logged run's output format? A small sample tells.

bfcl-eval's handlers log model output in a handful of formats (function-calling
lists of ``{name: arguments}``, prompting strings ``[f(a=1)]``, ``<tool_call>``
JSON text, ...), and a decoder of another format decodes every step to nothing:
each conversation then fails BFCL, and the scorecard shows 0% with no hint why.

When a run is opened, a deterministic sample of its steps is decoded with the
chosen decoder. If (almost) none decodes into calls, one decoder of each common
format is tried on the same sample, and those that read it are suggested. The
candidate handlers are imported only then, so a run that decodes well pays for
the sample alone.
"""

from __future__ import annotations

import ast
import itertools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from ..data.result_files import LoggedEntry
from ..execution import limits
from ..execution.decoding import decoder
from ..execution.interpreter import MAX_CALL_CHARS
from .options import DECODER

SAMPLE_CONVERSATIONS = 24  # spread evenly over the run
STEPS_PER_CONVERSATION = 3  # the first steps with output: mostly calls in any run
MIN_DECODED = 0.25  # below this share of the sample, the decoder reads (almost) nothing
SUGGEST_DECODED = 0.5  # a candidate is suggested when it reads at least this share
#: Each sampled step is decoded within this budget, and reads as no call past it: a step that
#: expands (``'a' * 199_999`` a few thousand times) must not cost the run what its conversation's
#: own budget refuses. Real steps decode to a few kB in milliseconds.
SAMPLE_LIMITS = limits.Limits(max_memory_mb=32, max_seconds=2.0)


@dataclass(frozen=True)
class Format:
    """One output format bfcl-eval's handlers write, and a registry key that decodes it."""

    key: str
    description: str


FORMATS = (
    Format(
        "gpt-4.1-2025-04-14-FC",
        "function-calling lists of {name: arguments}, as the OpenAI, Claude, Mistral and Gemini FC handlers log them",
    ),
    Format("Qwen/Qwen3-8B", "prompting strings [f(a=1), g()], as the prompting handlers log them"),
    Format(
        "Qwen/Qwen3-8B-FC", '<tool_call>{"name": ..., "arguments": ...}</tool_call> text (Qwen- and Hermes-style FC)'
    ),
    Format("meta-llama/Llama-3.1-8B-Instruct-FC", 'JSON {"name": ..., "parameters": ...} text (Llama 3.1 FC)'),
    Format("Salesforce/Llama-xLAM-2-8b-fc-r", 'JSON lists [{"name": ..., "arguments": ...}] (xLAM)'),
)


def sample_steps(entries: Iterable[LoggedEntry | None]) -> list[object]:
    """The first steps with output of conversations spread evenly over the run (deterministic)."""
    usable = sorted((e for e in entries if e is not None and isinstance(e.result, list)), key=lambda e: (e.file, e.id))
    stride = max(1, -(-len(usable) // SAMPLE_CONVERSATIONS))
    steps: list[object] = []
    for entry in usable[::stride]:
        steps.extend(itertools.islice(_steps_with_output(entry.result), STEPS_PER_CONVERSATION))
    return steps


def _steps_with_output(result: object) -> Iterator[object]:
    """The steps of a logged result (a list of turns) that hold output; an error string has none."""
    if not isinstance(result, list):
        return
    for turn in result:
        for step in turn if isinstance(turn, list) else ():
            if step not in ([], "", None) and not (isinstance(step, str) and not step.strip()):
                yield step


def decoded_count(key: str, steps: Sequence[object]) -> int:
    """How many of ``steps`` the decoder of ``key`` decodes into calls."""
    chosen = decoder(key)

    def reads(step: object) -> bool:
        try:
            with limits.metered(SAMPLE_LIMITS):
                calls = chosen.decode_step(step)
        except limits.ResourceLimit:
            return False
        except Exception:  # as in BFCL, a step that fails to decode makes no call
            return False
        return bool(calls) and all(_is_call(c) for c in calls)

    return sum(map(reads, steps))


def _is_call(text: object) -> bool:
    """A decoded call string (some decoders pass prose through as a "call")."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_CALL_CHARS:
        return False
    try:
        return isinstance(ast.parse(text.strip(), mode="eval").body, ast.Call)  # parsed, never run
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False


def decoder_warnings(key: str, flag: str, entries: Iterable[LoggedEntry | None], where: str) -> list[str]:
    """A warning when the decoder of ``key`` reads (almost) none of a sample of the run.

    Args:
        key: the registry key decoding the run.
        flag: how the user chose it, e.g. ``--careful-decoder=Qwen3-8B``.
        entries: the run's entries.
        where: the run's folder, for the message.
    """
    steps = sample_steps(entries)
    named = flag if flag.endswith(f"={key}") else f"{flag} (decoder {key})"
    try:
        read = decoded_count(key, steps) if steps else 0
    except Exception as exc:  # e.g. a handler module whose imports fail here
        return [
            f"{named}: the decoder cannot be built here ({type(exc).__name__}: {exc}); no conversation can be decoded."
        ]
    if not steps or read >= MIN_DECODED * len(steps):
        return []
    advice = suggestion(key, steps, read)
    prose = sum(map(is_prose, steps))
    if advice.startswith(NO_BETTER) and prose >= MIN_PROSE * len(steps):  # no decoder is at fault: say what is
        return [
            f"{named}: the model answered in prose, not in function calls: {prose} of {len(steps)} sampled steps "
            f"of {where} are sentences that no common format reads as calls (BFCL fails a turn without a call)"
        ]
    head = f"{named} decodes {read} of {len(steps)} sampled steps of {where} (steps with output) into function calls."
    return [
        f"{head}\n  {advice}\n  The rows are still scored with {key} "
        "(a decoder of the wrong format reads no call, and every conversation fails BFCL)."
    ]


#: A run whose sampled steps are this share of prose (and that no common format reads) answered in prose.
MIN_PROSE = 0.9
#: A step that begins as a sentence does ("I'm glad to help.", "Here's how:", "Sure, ..."): a word, then
#: a blank or punctuation, and no "(" after it (``ls (a=1)`` is a call).
_SENTENCE = re.compile(r"[^\W\d_][\w'\u2019.-]*(?![\w'\u2019.-])(?!\s*\()[\s,.!?:;]")


def is_prose(step: object) -> bool:
    """Whether a step is text that begins as a sentence, not as a call list, JSON or a tagged call."""
    return isinstance(step, str) and _SENTENCE.match(step.lstrip()) is not None


#: How ``suggestion`` begins when no common format reads the steps better than the chosen decoder.
NO_BETTER = "No common format reads it better"


def suggestion(key: str, steps: Sequence[object], read: int) -> str:
    """Which common formats read ``steps`` better than ``key`` does, as advice."""
    counts = {f: _count_or_zero(f.key, steps) for f in FORMATS if f.key != key}
    found = sorted(
        (f for f, n in counts.items() if n >= SUGGEST_DECODED * len(steps) and n > read), key=lambda f: -counts[f]
    )
    if not found:
        tried = ", ".join(f.key for f in counts)
        return (
            f"{NO_BETTER} ({tried} were tried): check that the run made "
            "function calls at all, and which handler made it."
        )
    lines = [f"{f.key} decodes {counts[f]} of {len(steps)}: {f.description}" for f in found]
    return (
        "Its output looks like another format. "
        + "; ".join(lines)
        + f". Rescore with {DECODER}={found[0].key}, or with the registry key of "
        "the handler that made the run."
    )


def _count_or_zero(key: str, steps: Sequence[object]) -> int:
    try:
        return decoded_count(key, steps)
    except Exception:  # a candidate handler that cannot be built here is no suggestion
        return 0
