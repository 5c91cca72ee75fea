"""``failed_calls``: calls that raised, were refused, or returned an error.

A false status flag (a failed login, a failed verification) is an answer, not a failure: the
references themselves receive four of them.
"""

from __future__ import annotations

from collections.abc import Iterator

from .rule import Rule, ScoredConversation, Violation


class FailedCalls(Rule):
    name = "failed_calls"
    description = "calls that raised, named no function that exists, or returned an error"

    def check(self, conversation: ScoredConversation) -> Iterator[Violation]:
        for call in conversation.calls:
            if call.failed:
                yield Violation(call, call.status)
