"""EffectWorld's optimizer: each pass on a minimal trace and on its twin, which keeps the call for a
reason (its result is demanded, the state changed in between, a later literal's only source)."""

from __future__ import annotations

from collections.abc import Sequence

import hostile_payloads as payloads
import pytest
from test_audit_classes import FILES, TICKETS, conversation

from pytest_careful.data.dataset import Conversation
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.execution import limits
from pytest_careful.execution.decoding import passthrough_decoder
from pytest_careful.verify.optimizer import MAX_CALLS, Optimized, optimize

Trace = list[list[list[str]]]


def optimized(c: Conversation, trace: Trace) -> Optimized:
    """The trace (per turn, per step, calls) as a logged run gives it, evaluated and optimized."""
    evaluation = evaluate(c, trace, passthrough_decoder())
    return optimize(evaluation)


def kinds(o: Optimized) -> list[tuple[str, str]]:
    return [(r.kind, r.call) for r in o.rewrites]


def files(questions: Sequence[str], reference: list[list[str]]) -> Conversation:
    return conversation(["GorillaFileSystem"], FILES, questions, reference)


def test_a_read_repeated_with_nothing_changed_goes() -> None:
    c = files(["List the files."], [["ls()"]])
    o = optimized(c, [[["ls()"], ["ls()"]]])
    assert kinds(o) == [("redundant_read", "ls()")] and (o.calls_before, o.calls_after) == (2, 1)
    assert "nothing changed since" in o.rewrites[0].evidence


def test_twin_a_read_after_a_change_stays() -> None:
    """The second ls sees the new file, and the reference demands both results."""
    c = files(["List the files, create new.txt, list them again."], [["ls()", "touch(file_name='new.txt')", "ls()"]])
    o = optimized(c, [[["ls()"], ["touch(file_name='new.txt')"], ["ls()"]]])
    assert [r.kind for r in o.rewrites if r.kind != "batched"] == []
    assert o.calls_after == 3


def test_a_write_repeated_after_it_took_effect_goes() -> None:
    c = files(["Write 'hi' into notes.txt."], [["echo(content='hi', file_name='notes.txt')"]])
    o = optimized(c, [[["echo(content='hi', file_name='notes.txt')"], ["echo(content='hi', file_name='notes.txt')"]]])
    assert kinds(o)[0] == ("duplicate_write", "echo(content='hi', file_name='notes.txt')") and o.calls_after == 1


def test_twin_two_writes_of_two_files_stay() -> None:
    c = files(
        ["Write 'hi' into notes.txt and into other.txt."],
        [
            [
                "echo(content='hi', file_name='notes.txt')",
                "touch(file_name='other.txt')",
                "echo(content='hi', file_name='other.txt')",
            ]
        ],
    )
    trace = [
        [
            [
                "echo(content='hi', file_name='notes.txt')",
                "touch(file_name='other.txt')",
                "echo(content='hi', file_name='other.txt')",
            ]
        ]
    ]
    assert optimized(c, trace).calls_after == 3


def test_twin_a_write_repeated_after_the_state_changed_stays() -> None:
    """'hi', then 'bye', then 'hi' again into one file: the third write undoes the second, so it is no
    duplicate and stays (the two before it are overwritten: dead, not duplicates)."""
    hi, bye = "echo(content='hi', file_name='notes.txt')", "echo(content='bye', file_name='notes.txt')"
    c = files(["Write 'hi' into notes.txt."], [[hi]])
    o = optimized(c, [[[hi], [bye], [hi]]])
    assert all(r.kind != "duplicate_write" for r in o.rewrites)
    assert not any(r.step == 2 for r in o.removed)
    assert o.turns == [[[hi]]] and o.origins == [[[(2, 0)]]]  # the third write is the one kept
    after = evaluate(c, o.turns, passthrough_decoder()).replay.turns[0].state_after
    without_third = evaluate(c, [[[hi], [bye]]], passthrough_decoder()).replay.turns[0].state_after
    assert after.classes["GorillaFileSystem"].public != without_third.classes["GorillaFileSystem"].public


def test_a_failed_call_goes() -> None:
    c = files(["List the files."], [["ls()"]])
    o = optimized(c, [[["cat(file_name='missing.txt')"], ["ls()"]]])
    assert kinds(o)[0] == ("failed_call", "cat(file_name='missing.txt')") and o.calls_after == 1


def test_twin_a_failed_call_the_reference_makes_too_stays() -> None:
    """The reference's own cat fails the same way: its error is a result the response check demands."""
    c = files(["Show missing.txt."], [["cat(file_name='missing.txt')"]])
    assert optimized(c, [[["cat(file_name='missing.txt')"]]]).calls_after == 1


def test_a_computation_no_turn_demands_is_folded() -> None:
    c = conversation(
        ["MathAPI", "TicketAPI"],
        TICKETS,
        ["Open a ticket titled 'T' with priority 5."],
        [["create_ticket(title='T', priority=5)"]],
    )
    o = optimized(c, [[["add(a=2, b=3)"], ["create_ticket(title='T', priority=5)"]]])
    assert kinds(o)[0] == ("constant_folding", "add(a=2, b=3)") and o.calls_after == 1


def test_twin_a_computation_that_is_a_literals_only_source_stays() -> None:
    """The user gives 2 and 2, not 4: without add, priority=4 would be a guess."""
    c = conversation(
        ["MathAPI", "TicketAPI"],
        TICKETS,
        ["Open a ticket titled 'T' with the priority 2 plus 2."],
        [["create_ticket(title='T', priority=4)"]],
    )
    o = optimized(c, [[["add(a=2, b=2)"], ["create_ticket(title='T', priority=4)"]]])
    assert o.calls_after == 2 and not o.removed


def test_a_call_nothing_reads_is_dead() -> None:
    c = files(["List the files."], [["ls()"]])
    o = optimized(c, [[["pwd()"], ["ls()"]]])
    assert kinds(o)[0] == ("dead_call", "pwd()") and o.calls_after == 1


def test_twin_a_read_that_is_a_later_literals_only_source_stays() -> None:
    """The user says 'the file', not its name: ls is where the name comes from."""
    c = files(["Show me the file in this folder."], [["cat(file_name='notes.txt')"]])
    o = optimized(c, [[["ls()"], ["cat(file_name='notes.txt')"]]])
    assert o.calls_after == 2 and not o.removed
    named = files(["Show me notes.txt."], [["cat(file_name='notes.txt')"]])
    assert kinds(optimized(named, [[["ls()"], ["cat(file_name='notes.txt')"]]]))[0] == ("dead_call", "ls()")


def test_independent_steps_are_batched() -> None:
    c = files(
        ["Count the lines of notes.txt, then show it."],
        [["wc(file_name='notes.txt', mode='l')", "cat(file_name='notes.txt')"]],
    )
    o = optimized(c, [[["wc(file_name='notes.txt', mode='l')"], ["cat(file_name='notes.txt')"]]])
    assert kinds(o) == [("batched", "cat(file_name='notes.txt')")]
    assert (o.steps_before, o.steps_after, o.calls_after) == (2, 1, 2)


def test_a_batched_step_is_named_by_its_place_in_the_original_trace() -> None:
    """pwd goes first (dead), so cat is the rewritten trace's step 1 but the original's step 2."""
    c = files(
        ["Count the lines of notes.txt, then show it."],
        [["wc(file_name='notes.txt', mode='l')", "cat(file_name='notes.txt')"]],
    )
    o = optimized(c, [[["pwd()"], ["wc(file_name='notes.txt', mode='l')"], ["cat(file_name='notes.txt')"]]])
    assert kinds(o) == [("dead_call", "pwd()"), ("batched", "cat(file_name='notes.txt')")]
    batched = o.rewrites[1]
    assert (batched.turn, batched.step, batched.position) == (0, 2, 0)
    assert o.original[batched.turn][batched.step][batched.position] == "cat(file_name='notes.txt')"


def test_a_call_repeated_in_a_turn_is_judged_by_its_own_sources() -> None:
    """The second cat's file name comes from ls(a=True), the step just before it: it stays apart. The
    first, identical cat got the name from ls() alone; mistaking one for the other would batch them."""
    c = files(
        ["Show me the file in this folder, create other.txt, list everything, and show the file again."],
        [
            [
                "ls()",
                "cat(file_name='notes.txt')",
                "touch(file_name='other.txt')",
                "ls(a=True)",
                "cat(file_name='notes.txt')",
            ]
        ],
    )
    trace: Trace = [
        [
            ["ls()"],
            ["cat(file_name='notes.txt')"],
            ["touch(file_name='other.txt')"],
            ["ls(a=True)"],
            ["cat(file_name='notes.txt')"],
        ]
    ]
    o = optimized(c, trace)
    assert not o.removed and o.turns[0][-1] == ["cat(file_name='notes.txt')"]
    assert o.origins[0][-1] == [(4, 0)]


def test_twin_a_step_that_reads_the_step_before_stays_apart() -> None:
    c = files(["Show me the file in this folder."], [["ls()", "cat(file_name='notes.txt')"]])
    o = optimized(c, [[["ls()"], ["cat(file_name='notes.txt')"]]])
    assert o.steps_after == 2 and not o.rewrites


def test_a_turn_keeps_a_call() -> None:
    """Two reads nothing demands: one may go, never both (BFCL fails a turn with no call)."""
    c = files(["Hello.", "List the files."], [[], ["ls()"]])
    o = optimized(c, [[["pwd()"], ["pwd()"]], [["ls()"]]])
    assert sum(len(s) for s in o.turns[0]) == 1


def test_a_failing_trace_stays_failing_with_the_same_error() -> None:
    c = files(["Show notes.txt."], [["cat(file_name='notes.txt')"]])
    trace: Trace = [[["pwd()"], ["cat(file_name='wrong.txt')"]]]
    o = optimized(c, trace)
    before = evaluate(c, trace, passthrough_decoder()).verdict
    after = evaluate(c, o.turns, passthrough_decoder()).verdict
    assert o.calls_after < o.calls_before and not before.valid
    assert (after.valid, after.error_type, after.turn) == (before.valid, before.error_type, before.turn)


def test_a_trace_past_the_bound_is_not_searched() -> None:
    c = files(["List the files."], [["ls()"]])
    o = optimized(c, [[["pwd()"] for _ in range(MAX_CALLS)] + [["ls()"]]])
    assert o.bounded is not None and "not optimized" in o.bounded and o.calls_after == o.calls_before == MAX_CALLS + 1


def test_the_trials_are_bounded() -> None:
    c = files(["List the files."], [["ls()"]])
    o = optimize(evaluate(c, [[["pwd()"] for _ in range(30)] + [["ls()"]]], passthrough_decoder()), max_trials=5)
    assert o.trials == 5 and "stopped after 5" in (o.bounded or "")


@pytest.mark.parametrize("calls", [150, 5000])
def test_the_runs_limits_apply_to_every_replay_it_makes(calls: int) -> None:
    """Inside the conversation's budget, as a rescoring scores it: the trace's own replay stops at the
    limit; the optimizer's replays count against the calls the conversation has left, on a meter of
    their own, and stop the search there (never the conversation)."""
    c = files(["List the files."], [["ls()"]])
    trace: Trace = [[["pwd()"] for _ in range(calls)] + [["ls()"]]]
    budget = limits.Limits(max_calls=1_000)
    with limits.metered(budget) as meter:
        try:
            evaluation = evaluate(c, trace, passthrough_decoder())
        except limits.ResourceLimit as exceeded:
            assert exceeded.limit == "calls" and meter.calls == budget.max_calls + 1 and calls > budget.max_calls
            return
        o = optimize(evaluation)
        assert meter.calls == calls + 1  # the trace's replay only
    assert o.bounded is not None and f"the {budget.max_calls - calls - 1:,} calls left" in o.bounded


@pytest.mark.parametrize("kind", ["exponential", "deep_chain", "many_writes"])
def test_hostile_traces_end_in_a_result_or_one_named_limit(kind: str) -> None:
    """A copy bomb (shared folders doubling), a deep chain, thousands of writes: under the default
    budget the optimizer ends with its trace or with the one limit it crossed, its counts within it."""
    conversation = payloads.conversation_for(kind)
    trace = payloads.as_run(
        conversation, getattr(payloads, kind)({"exponential": 40, "deep_chain": 90, "many_writes": 1000}[kind])
    )
    budget = limits.Limits()
    with limits.metered(budget) as meter:
        try:
            o = optimize(evaluate(conversation, trace, passthrough_decoder()))
        except limits.ResourceLimit as exceeded:
            assert exceeded.limit in ("calls", "memory", "seconds") and "\n" not in exceeded.reason
            return
    assert meter.calls <= budget.max_calls and meter.bytes <= budget.max_memory_mb * 2**20
    assert o.calls_after <= o.calls_before


def test_the_rule_counts_each_evaluation_of_one_conversation_apart() -> None:
    """One rule instance scores a conversation under several protocols: each row's tally is its own trace's."""
    from pytest_careful.effects import declarations
    from pytest_careful.scoring.conversation import ScoringConfig, score_evaluation
    from pytest_careful.scoring.rules import Settings, built_in, opt_in

    settings = Settings(optimize=True)
    config = ScoringConfig("m", "passthrough", declarations.load(), settings, built_in(settings) + opt_in(settings))
    c = files(["List the files."], [["ls()"]])
    repeated = score_evaluation(evaluate(c, [[["ls()"], ["ls()"]]], passthrough_decoder()), "standard", config)
    once = score_evaluation(evaluate(c, [[["ls()"]]], passthrough_decoder()), "confirm", config)
    assert (repeated["counts"]["verified_surplus_calls"], repeated["counts"]["optimized_calls"]) == (1, 1)
    assert (once["counts"]["verified_surplus_calls"], once["counts"]["optimized_calls"]) == (0, 1)
    assert once["calls"] == 1 and repeated["calls"] == 2


def test_steps_a_spoken_response_lies_between_stay_apart() -> None:
    """The model asked between the two calls (the confirm protocol's user answered there): no batching."""
    c = files(
        ["Count the lines of notes.txt, then show it."],
        [["wc(file_name='notes.txt', mode='l')", "cat(file_name='notes.txt')"]],
    )
    logged = [[["wc(file_name='notes.txt', mode='l')"], "Shall I show it?", ["cat(file_name='notes.txt')"]]]
    o = optimize(evaluate(c, logged, passthrough_decoder()))
    assert o.steps_after == 2 and not o.rewrites


class _Clock:
    """A clock that moves ``step`` on each reading: time as the meter sees it, never wall time."""

    def __init__(self, step: float) -> None:
        self.at, self.step, self.readings = 100.0, step, 0

    def __call__(self) -> float:
        self.readings += 1
        self.at += self.step
        return self.at


def _scored(trace: object, optimize: bool, clock: _Clock) -> dict[str, object]:
    """One conversation scored as an item scores it, under a budget read on ``clock``: its row,
    or the limit that stopped it."""
    from pytest_careful.effects import declarations
    from pytest_careful.scoring.conversation import ScoringConfig, score_conversation
    from pytest_careful.scoring.rules import Settings, built_in, opt_in

    settings = Settings(optimize=optimize)
    config = ScoringConfig("m", "passthrough", declarations.load(), settings, built_in(settings) + opt_in(settings))
    c = payloads.conversation_for("many_calls")
    try:
        with limits.metered(limits.Limits(max_seconds=10.0), now=clock):
            row, _ = score_conversation(c, trace, None, passthrough_decoder(), "standard", config)
    except limits.ResourceLimit as exceeded:
        return {"resource_limit": exceeded.reason}
    own = {"verified_surplus_calls", "optimized_calls", "optimized_steps"}
    return {
        "bfcl": row["bfcl"],
        "safe": row["safe"],
        "strict": row["strict"],
        "calls": row["calls"],
        "counts": {k: v for k, v in row["counts"].items() if k not in own},
        "optimized_calls": row["counts"].get("optimized_calls"),
    }


def test_an_echo_bomb_keeps_its_verdict_under_the_optimizer() -> None:
    """150 echoes whose results are 200,000 characters each: every literal's source search scans
    them all. The optimizer stops at its own budget (half the time limit, its time left out of the
    conversation's) and the row is the plain scoring's: the limit never escapes into the verdict.
    The clock moves 0.01 s per reading, so the bound is counted, not timed."""
    from pytest_careful.evaluation.replay import reference
    from pytest_careful.verify.optimizer import SECONDS_SHARE

    c = payloads.conversation_for("many_calls")
    reference(c)
    trace = payloads.as_run(c, payloads.EXPANDING_CALLS["results that echo"][:150])
    plain_clock, optimized_clock = _Clock(0.01), _Clock(0.01)
    plain = _scored(trace, False, plain_clock)
    optimized = _scored(trace, True, optimized_clock)
    assert "resource_limit" not in plain and plain["optimized_calls"] is None
    assert "resource_limit" not in optimized, optimized
    assert {k: v for k, v in optimized.items() if k != "optimized_calls"} == {
        k: v for k, v in plain.items() if k != "optimized_calls"
    }
    assert optimized["optimized_calls"] is not None and optimized["optimized_calls"] <= optimized["calls"]
    # Bounded: the plain scoring's readings, plus at most the optimizer's share of the limit's.
    share = SECONDS_SHARE * 10.0 / 0.01
    assert optimized_clock.readings <= plain_clock.readings + share + 50


def test_the_optimizer_stops_at_its_own_budget_and_says_why() -> None:
    """Outside the conversation's meter the optimizer's own budget is what stops it: bounded, with its reason."""
    c = payloads.conversation_for("many_calls")
    trace = payloads.as_run(c, payloads.EXPANDING_CALLS["results that echo"][:150])
    evaluation = evaluate(c, trace, passthrough_decoder())
    with limits.metered(limits.Limits(max_seconds=10.0), now=_Clock(0.01)) as meter:
        o = optimize(evaluation)
        assert meter.calls == 0  # nothing it replayed was charged to the conversation
    assert o.bounded is not None and "the optimizer's own budget (over its time limit" in o.bounded
    assert o.calls_after <= o.calls_before


def test_a_text_search_ticks_in_proportion_to_the_text() -> None:
    """A hang in a search through a long result shows on the clock: 200,000 characters are 196 steps."""
    from pytest_careful.verify.normal_forms import Text, find_in_text

    with limits.metered(limits.Limits()) as meter:
        find_in_text("needle", Text("a" * 200_000))
    assert meter.steps >= 200_000 // limits.CHARS_PER_TICK
