"""What ``duplicate_writes`` and ``redundant_reads`` share: a turn's repeats, beyond the reference's own."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from .rule import ModelCall, ScoredConversation

Repeats = Callable[[Sequence[ModelCall]], list[ModelCall]]


def beyond_reference_repeats(conversation: ScoredConversation, repeats: Repeats) -> Iterator[ModelCall]:
    """Per turn, the model's repeats minus the reference's own repeats of the same call."""
    for turn in range(conversation.turns):
        model = repeats(conversation.calls_in(turn))
        if not model:
            continue
        allowance: dict[object, int] = {}
        for call in repeats(conversation.reference_calls_in(turn)):
            allowance[call.signature] = allowance.get(call.signature, 0) + 1
        for call in model:
            if allowance.get(call.signature, 0) > 0:
                allowance[call.signature] -= 1
            else:
                yield call
