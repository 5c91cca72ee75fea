"""``redundant_reads``: the same read repeated while nothing changed, beyond the reference.

A read with the same arguments, repeated within a turn with no state change in between (hidden
state included: a ``cd`` makes an earlier ``ls`` stale), beyond what the reference repeats.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from .repeats import beyond_reference_repeats
from .rule import ModelCall, Rule, ScoredConversation, Violation


def repeated_reads(calls: Sequence[ModelCall]) -> list[ModelCall]:
    """Reads repeated with the same arguments while no call changed any state."""
    seen: set[object] = set()
    found = []
    for call in calls:
        if call.changed_state:  # any state change, hidden included, makes earlier reads stale
            seen.clear()
            continue
        if not call.declared or call.writes:
            continue
        if call.signature in seen:
            found.append(call)
        seen.add(call.signature)
    return found


class RedundantReads(Rule):
    name = "redundant_reads"
    description = "the same read, same arguments, repeated with nothing changed since"

    def check(self, conversation: ScoredConversation) -> Iterator[Violation]:
        for call in beyond_reference_repeats(conversation, repeated_reads):
            yield Violation(call, "same read, same arguments, nothing changed since")
