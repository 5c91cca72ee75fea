"""Which server of a fleet each conversation goes to (``live/backends/vllm/fleet.py``), as a pure policy, and the
ledger of what each server served. The whole path, against loopback server processes:
test_fleet_live.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_careful.live.backends.vllm.fleet import (
    GROWTH,
    SLACK,
    START,
    Fleet,
    FleetLedger,
    Visit,
    queue_of,
    served_by,
    summary_lines,
)

A, B, C = "http://a/v1", "http://b/v1", "http://c/v1"


def _fill(fleet: Fleet, n: int, now: float = 0.0) -> list[str]:
    """Assign ``n`` conversations one after another (None: one found no room)."""
    out = []
    for _ in range(n):
        url = fleet.choose(now)
        if url is not None:
            fleet.take(url)
        out.append(url)
    return out


def _answered(fleet: Fleet, url: str, n: int, now: float = 1.0) -> None:
    """``n`` answers from ``url``, each letting in a conversation wherever there is room then."""
    for _ in range(n):
        fleet.sent(url, now - 1.0)
        fleet.answered(url, 1.0, now)
        _fill(fleet, 1, now)


def test_equal_servers_take_turns_and_none_takes_more_than_it_has_shown_it_runs() -> None:
    fleet = Fleet([A, B, C], total=300)
    placed = _fill(fleet, 3 * START + 5)
    assert [placed.count(u) for u in (A, B, C)] == [START] * 3  # the rest wait: no speed is known yet
    assert placed[3 * START :] == [None] * 5
    assert placed[:6] == [A, B, C, A, B, C]


def test_the_total_is_shared_out_and_never_exceeded() -> None:
    fleet = Fleet([A, B], total=10)
    assert _fill(fleet, 12).count(None) == 2
    assert {u: s.in_flight for u, s in fleet.servers.items()} == {A: 5, B: 5}
    fleet.leave(A)
    assert fleet.choose(0.0) == A  # the room that came free


def test_a_faster_server_gets_a_larger_share() -> None:
    fleet = Fleet([A, B], total=90, start=100)
    for _ in range(5):
        fleet.sent(A, 0.0)
        fleet.answered(A, 1.0, 1.0)
        fleet.sent(B, 0.0)
        fleet.answered(B, 2.0, 2.0)
    shares = fleet.shares(2.0)
    assert shares[A] == pytest.approx(60) and shares[B] == pytest.approx(30)
    placed = _fill(fleet, 90, now=2.0)
    assert placed.count(A) == 60 and placed.count(B) == 30


def test_a_server_silent_for_long_counts_as_slow() -> None:
    """A hung server answers nothing: its requests in flight say how slow it is before any time-out."""
    fleet = Fleet([A, B], total=100, start=100)
    for url in (A, B):
        fleet.sent(url, 0.0)
        fleet.answered(url, 1.0, 1.0)
        fleet.sent(url, 1.0)  # one request in flight on each
    assert fleet.shares(1.5)[A] == pytest.approx(50)  # both answered in 1 s, neither is late yet
    for now in range(2, 31):  # A answers every second; B, since its request at 1.0, nothing
        fleet.answered(A, 1.0, float(now))
        fleet.sent(A, float(now))
    shares = fleet.shares(31.0)
    assert shares[A] == pytest.approx(100 * 30 / 31) and shares[B] == pytest.approx(100 / 31)
    fleet.answered(B, 30.0, 31.0)  # it answered at last: its recent mean takes the 30 s in
    slow = 0.8 * 1.0 + 0.2 * 30.0  # SMOOTHING 0.2
    assert fleet.shares(31.0)[B] == pytest.approx(100 * (1 / slow) / (1 + 1 / slow))


def test_a_queueing_server_gets_no_new_conversation_while_another_has_room() -> None:
    fleet = Fleet([A, B], total=200)
    _fill(fleet, 8)  # 4 each
    fleet.observed(A, waiting=1, running=3)  # A runs three of them and queues the fourth
    assert fleet.servers[A].full == 3 and fleet.servers[A].limit == 3 + SLACK
    fleet.leave(A)
    fleet.leave(A)  # two ended: A has room under its limit, but its last reading says it queues
    assert fleet.choose(0.0) == B
    for _ in range(START - 4):
        fleet.take(B)
    assert fleet.servers[B].in_flight == fleet.servers[B].limit
    assert fleet.choose(0.0) == A  # no other has room: A, up to its limit
    for _ in range(1 + SLACK):
        fleet.take(A)
    assert fleet.choose(0.0) is None  # both full: the conversation waits


def test_a_server_that_says_nothing_of_its_queue_grows_its_limit_with_each_answer_while_full() -> None:
    fleet = Fleet([A, B], total=100)
    _fill(fleet, 2 * START)
    _answered(fleet, A, 10)
    assert fleet.servers[A].limit == START + 10 and fleet.servers[A].in_flight == START + 10
    fleet.answered(B, None, 3.0)  # a request that failed without an answer says nothing of speed
    assert fleet.servers[B].seconds is None and fleet.servers[B].limit == START


def test_a_server_that_says_its_queue_grows_its_limit_by_an_eighth_per_reading_until_it_queues() -> None:
    """Answers come in waves (conversations started together answer together): grown with each, a
    limit would overshoot by a wave before the next reading showed the queue."""
    fleet = Fleet([A], total=100)
    _fill(fleet, START)
    fleet.observed(A, waiting=0, running=START)
    assert fleet.servers[A].limit == START + START // GROWTH
    _answered(fleet, A, 10)  # answers no longer grow it
    assert fleet.servers[A].limit == START + START // GROWTH
    fleet.observed(A, waiting=0, running=fleet.servers[A].in_flight)
    assert fleet.servers[A].limit == 18 + 18 // GROWTH
    _fill(fleet, 2)
    fleet.observed(A, waiting=2, running=18)  # it runs 18 of its 20 and queues 2
    assert fleet.servers[A].limit == 18 + SLACK
    _answered(fleet, A, 3)
    fleet.observed(A, waiting=0, running=18)  # as full as when it queued: fed just right
    assert fleet.servers[A].limit == 18 + SLACK


def test_a_limit_nobody_uses_does_not_grow() -> None:
    """Answers or readings while fewer conversations are in flight than the limit allows say nothing
    of what the server can take: growing then would let a burst onto it later."""
    fleet = Fleet([A, B], total=100)
    _fill(fleet, 3)
    for _ in range(10):
        fleet.sent(A, 0.0)
        fleet.answered(A, 1.0, 1.0)
    fleet.observed(B, waiting=0, running=1)
    assert fleet.servers[A].limit == fleet.servers[B].limit == START


def test_a_server_that_queued_takes_more_only_while_it_runs_less_than_it_can() -> None:
    """Past what a server held when it queued, its limit grows by SLACK at most: a queue of its own
    slows each conversation on it. Seen running fewer than it ran then, with nothing queued (the
    conversations spend longer between requests), it takes as many more as it has slots idle."""
    fleet = Fleet([A], total=100, start=10)
    _fill(fleet, 10)
    fleet.observed(A, waiting=2, running=8)
    assert fleet.servers[A].limit == 8 + SLACK
    for _ in range(5):
        fleet.observed(A, waiting=0, running=8)  # as full as it was, no queue: fed just right
    assert fleet.servers[A].limit == 8 + SLACK
    fleet.observed(A, waiting=0, running=6)  # two slots idle: underfed
    assert fleet.servers[A].limit == 10 + 2
    fleet.observed(A, waiting=0, running=9)  # it runs more than when it queued: its capacity is unknown again
    assert fleet.servers[A].capacity is None and fleet.servers[A].limit == 12  # (10 in flight: the limit unused)


def test_a_queueing_server_is_used_when_no_other_has_room_and_its_limit_allows() -> None:
    fleet = Fleet([A, B], total=40)
    fleet.observed(A, waiting=1, running=0)  # busy with other users' requests; none of ours yet
    fleet.observed(B, waiting=1, running=0)
    assert fleet.choose(0.0) in (A, B)


def test_several_processes_sharing_a_server_each_keep_their_part_of_it() -> None:
    """Two processes with 20 conversations each on a server that runs 30 and queues 10: each keeps 15."""
    fleet = Fleet([A, B], total=100, start=100)
    for _ in range(20):
        fleet.take(A)
    fleet.observed(A, waiting=10, running=30)
    assert fleet.servers[A].limit == 15 + SLACK


def test_a_server_that_left_gets_nothing_and_a_fleet_without_servers_places_nothing() -> None:
    fleet = Fleet([A, B], total=100)
    assert fleet.drop(A, "stopped answering") and not fleet.drop(A, "again")
    assert set(_fill(fleet, START)) == {B}
    fleet.drop(B, "stopped answering")
    assert fleet.choose(0.0) is None and not fleet.live()
    with pytest.raises(ValueError):
        Fleet([], total=1)


VLLM_METRICS = """# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="Qwen/Qwen3-8B"} 7.0
vllm:num_requests_running{engine="1",model_name="Qwen/Qwen3-8B"} 5.0
vllm:num_requests_running{engine="0",model_name="other"} 40.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="Qwen/Qwen3-8B"} 3.0
vllm:num_requests_waiting{engine="1",model_name="Qwen/Qwen3-8B"} 0.0
vllm:num_requests_waiting_by_reason{reason="capacity"} 9.0
vllm:num_requests_swapped{engine="0",model_name="Qwen/Qwen3-8B"} 2.0
"""


def test_the_queue_is_read_from_vllms_metrics_for_the_model_summed_over_its_engines() -> None:
    assert queue_of(VLLM_METRICS, "Qwen/Qwen3-8B") == (3, 12)
    assert queue_of(VLLM_METRICS, "other") == (None, 40)
    assert queue_of("vllm:num_requests_waiting 4\n", "m") == (4, None)  # no labels
    assert queue_of("<html>not found</html>", "m") == (None, None)
    assert queue_of('vllm:num_requests_waiting{model_name="m"} NaN-ish\n', "m") == (None, None)


def test_the_ledger_gives_each_servers_counts_and_the_server_each_conversation_ended_on(tmp_path: Path) -> None:
    ledger = FleetLedger(tmp_path)
    visits = [
        Visit("s1", "standard.1.multi_turn_base_0", A, 7, False),
        Visit("s2", "standard.1.multi_turn_base_1", A, 3, True),  # A stopped answering mid-way
        Visit("s2", "standard.1.multi_turn_base_1", B, 8, False),  # ... and it ran again on B
        Visit("s2", "standard.1.multi_turn_base_2", B, 6, False),
        Visit("s2", "standard.2.multi_turn_base_2", A, 5, False),
    ]
    for visit in visits:
        ledger.append(visit)
    with ledger.path.open("a") as handle:
        handle.write('{"session": "s2", "key": "cut sh')  # a line a kill cut short
    assert ledger.visits() == visits
    assert summary_lines(ledger.visits(), [A, B, C], "s2") == [
        f"servers: {A} 1 conversation, 8 requests; {B} 2 conversations, 14 requests; {C} 0 conversations, 0 requests",
        f"server {A} stopped answering: 1 conversation moved to the others and ran again there",
    ]
    assert summary_lines(ledger.visits(), [A, B], "s3") == []  # nothing ran in that session
    wanted = {"standard.1.multi_turn_base_0", "standard.1.multi_turn_base_1", "standard.1.multi_turn_base_2"}
    assert served_by(ledger.visits(), wanted) == {
        "standard.1.multi_turn_base_0": A,
        "standard.1.multi_turn_base_1": B,
        "standard.1.multi_turn_base_2": B,
    }
