"""``verified_surplus_calls`` (opt-in: ``--careful-optimize``): the calls the trace did not need, proved by replay.

EffectWorld's optimizer (``verify.optimizer``) rewrites the model's own trace and accepts a
rewrite only when replay keeps every compared state, every demanded result, no new error and
BFCL's verdict, and when no call that stays loses its only source. Each call it removes is a
violation, naming the rewrite; ``optimized_calls`` and ``optimized_steps`` tally the trace it
reached (an upper bound on the minimum). The reference-free twin of ``beyond_reference_*``,
which compares against one reference path among several.

The optimizer's search runs on a budget of its own (``limits.apart``): past it, it keeps the
trace as far as it got (``bounded`` says why) and the conversation's verdict is the one a
scoring without this rule gives.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

from ...verify.optimizer import Optimized, optimize
from .rule import Rule, ScoredConversation, Violation


class VerifiedSurplusCalls(Rule):
    name = "verified_surplus_calls"
    description = (
        "calls the model's own trace did not need: removed by EffectWorld's optimizer, verified by replay (opt-in)"
    )
    tallies = ("optimized_calls", "optimized_steps")

    def __init__(self) -> None:
        # The last evaluation's optimized trace: ``tally`` reads what ``check`` made (the same thread, in
        # turn). Keyed by the evaluation itself: one conversation is scored under several protocols.
        self._last: tuple[object, Optimized] | None = None

    def check(self, conversation: ScoredConversation) -> Iterator[Violation]:
        optimized = self._optimized(conversation)
        if optimized is None:
            return
        by_place = {(c.turn, c.step, c.position): c for c in conversation.calls}
        for rewrite in optimized.removed:
            call = by_place.get((rewrite.turn, rewrite.step, rewrite.position))
            yield Violation(call, f"{rewrite.kind}: {rewrite.evidence}", turn=rewrite.turn)

    def tally(self, conversation: ScoredConversation, violations: Sequence[Violation]) -> Mapping[str, int]:
        optimized = self._optimized(conversation)
        if optimized is None:
            return {}
        return {"optimized_calls": optimized.calls_after, "optimized_steps": optimized.steps_after}

    def _optimized(self, conversation: ScoredConversation) -> Optimized | None:
        if conversation.evaluation is None:  # an unscored conversation: nothing was replayed
            return None
        if self._last is None or self._last[0] is not conversation.evaluation:
            self._last = (conversation.evaluation, optimize(conversation.evaluation))
        return self._last[1]
