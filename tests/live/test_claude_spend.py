"""The spend cap against the loopback Messages API: every attempt, time-outs, resumes, two sessions.

What the server billed is computed here from the usage it reported for every
request it handled (answered or not: a request answered late or never is
billed all the same) and the rates read straight from ``prices.yaml``; the
cap must hold against that figure, whatever the client saw.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from test_claude_live import (  # noqa: F401
    CONVERSATION,
    MAX_OUTPUT,
    MODEL_ID,
    RecordingFake,
    configured,
    hand_cost,
    ledger_of,
    messages,
    reference_responder,
    run,
    server,
    summed,
)
from test_claude_plugin import IDS, KEY, replay_any_conversation

from pytest_careful.data import dataset
from pytest_careful.live.backends.claude import budget, ratelimit
from pytest_careful.live.backends.claude import client as claude
from pytest_careful.live.backends.claude.budget import BudgetExceeded, Cost, Prices, SpendLedger
from pytest_careful.live.errors import StopRun
from pytest_careful.live.source import LiveSource
from pytest_careful.live.stops import SESSION_ENV


class WatchedLedger(SpendLedger):
    """Counts what each attempt went through: reserved, then settled, released or kept."""

    def __init__(self, ledger: SpendLedger) -> None:
        super().__init__(ledger.path, ledger.cap_usd, ledger.session)
        self.events: list[str] = []

    def reserve(self, bound_usd: float) -> str:
        reservation = super().reserve(bound_usd)
        self.events.append("reserve")
        return reservation

    def settle(self, reservation_id: str, cost: Cost) -> None:
        super().settle(reservation_id, cost)
        self.events.append("settle")

    def release(self, reservation_id: str, *, answered: bool = False) -> None:
        super().release(reservation_id, answered=answered)
        self.events.append("error" if answered else "not sent")

    def keep(self, reservation_id: str) -> None:
        super().keep(reservation_id)
        self.events.append("keep")


def watched(
    tmp_path: Path,
    budget_usd: float | None = None,
    *,
    timeout: float | None = None,
    max_retries: int = claude.MAX_RETRIES,
) -> tuple[Any, LiveSource, WatchedLedger]:
    """A handler set up as a Claude run sets it up, its ledger watched, its client's time-out set."""
    handler, source = configured(tmp_path, budget_usd)
    ledger = WatchedLedger(ledger_of(source))
    handler.careful_configure(
        max_output_tokens=MAX_OUTPUT, ledger=ledger, prices=Prices.load(), max_retries=max_retries, timeout=timeout
    )
    source.spend_ledger = ledger  # type: ignore[attr-defined]
    return handler, source, ledger


def first_bound(server: RecordingFake) -> float:
    """The bound of the conversation's first request (the same for each of its attempts)."""
    body = messages(server)[0]
    return budget.request_bound(
        Prices.load().lookup(MODEL_ID),
        system=body.get("system"),
        tools=body["tools"],
        messages=body["messages"],
        max_tokens=MAX_OUTPUT,
    )


def billed(server: RecordingFake) -> float:
    """What the server billed (conservative figure), every request it handled included."""
    return hand_cost(summed(server.usages))[1]


# ------------------------------------------------------------ every attempt counts


@pytest.mark.parametrize("status,times", [(429, 1), (500, 2), (529, 3)])
def test_every_retry_is_reserved_before_it_is_sent(
    server: RecordingFake, tmp_path: Path, status: int, times: int
) -> None:
    handler, _, ledger = watched(tmp_path)
    server.fail_next(status, times=times)
    run(handler)
    attempts = len(server.requests)
    assert attempts == len(server.usages) + times
    assert ledger.events.count("reserve") == attempts  # one reservation per HTTP attempt
    assert ledger.events.count("error") == times and ledger.events.count("settle") == len(server.usages)
    totals = ledger.totals()
    assert (totals.attempts, totals.errors, totals.requests, totals.unconfirmed) == (
        attempts,
        times,
        len(server.usages),
        0,
    )
    assert totals.reserved == 0 and totals.charged == pytest.approx(billed(server), rel=1e-9)


def test_exhausted_retries_are_each_reserved(server: RecordingFake, tmp_path: Path) -> None:
    import anthropic

    handler, _, ledger = watched(tmp_path)
    server.fail_next(500, times=50)
    with pytest.raises(claude.OutOfRetries) as caught:  # left for the next run, not scored
        run(handler)
    assert isinstance(caught.value.__cause__, anthropic.InternalServerError)
    assert len(server.requests) == claude.MAX_RETRIES + 1
    assert ledger.events == ["reserve", "error"] * (claude.MAX_RETRIES + 1)
    totals = ledger.totals()
    assert (totals.attempts, totals.errors, totals.charged, totals.reserved) == (
        claude.MAX_RETRIES + 1,
        claude.MAX_RETRIES + 1,
        0,
        0,
    )


def test_an_error_the_server_says_not_to_retry_is_not_retried(server: RecordingFake, tmp_path: Path) -> None:
    import anthropic

    handler, _, ledger = watched(tmp_path)
    server.fail_next(500, headers={"x-should-retry": "false"})
    with pytest.raises(anthropic.InternalServerError):
        run(handler)
    assert len(server.requests) == 1 and ledger.events == ["reserve", "error"]


def test_a_timed_out_request_is_counted_at_its_bound(server: RecordingFake, tmp_path: Path) -> None:
    handler, _, ledger = watched(tmp_path, timeout=1.5)  # ample for the answers not delayed
    server.delay_next(4.0)  # handled and billed at once, answered after the client gave up
    run(handler)
    attempts = len(server.requests)
    assert len(server.usages) == attempts  # the server billed every attempt, the timed-out one too
    assert ledger.events[:3] == ["reserve", "keep", "reserve"]
    assert ledger.events.count("reserve") == attempts
    totals = ledger.totals()
    assert (totals.attempts, totals.requests, totals.unconfirmed) == (attempts, attempts - 1, 1)
    assert totals.unconfirmed_usd == pytest.approx(first_bound(server), rel=1e-9)
    assert totals.charged >= billed(server)  # never less than the bill


def test_a_dropped_connection_is_counted_at_its_bound(server: RecordingFake, tmp_path: Path) -> None:
    handler, _, ledger = watched(tmp_path)
    server.drop_next()  # handled and billed, then the connection closes without an answer
    run(handler)
    assert ledger.events[:3] == ["reserve", "keep", "reserve"] and server.undelivered == 1
    totals = ledger.totals()
    assert (totals.attempts, totals.unconfirmed) == (len(server.requests), 1)
    assert totals.unconfirmed_usd == pytest.approx(first_bound(server), rel=1e-9)
    assert totals.charged >= billed(server)


def test_a_connection_never_made_is_not_counted(
    server: RecordingFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import anthropic

    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("ANTHROPIC_BASE_URL", closed)
    handler, _, ledger = watched(tmp_path, max_retries=1)
    with pytest.raises(claude.OutOfRetries) as caught:
        run(handler)
    assert isinstance(caught.value.__cause__, anthropic.APIConnectionError)
    assert ledger.events == ["reserve", "not sent"] * 2
    totals = ledger.totals()
    assert (totals.attempts, totals.charged, totals.reserved) == (0, 0, 0)


def test_time_outs_cannot_cross_the_cap(server: RecordingFake, tmp_path: Path) -> None:
    handler, _ = configured(tmp_path / "probe")
    run(handler)
    bound, probe = first_bound(server), len(server.usages)

    cap = 2.5 * bound
    _, source, ledger = watched(tmp_path / "capped", cap, timeout=0.3)
    server.delay_next(1.0, times=20)  # every attempt billed, none answered in time
    with pytest.raises(BudgetExceeded, match="2 unanswered attempts counted at their bound"):
        source.result("standard", dataset.get(CONVERSATION))
    assert ledger.events == ["reserve", "keep", "reserve", "keep"]
    assert len(server.usages) == probe + 2  # the third attempt was never sent
    totals = ledger.totals()
    assert totals.unconfirmed == 2 and totals.charged == pytest.approx(2 * bound, rel=1e-9)
    assert totals.charged <= cap
    assert hand_cost(summed(server.usages[probe:]))[1] <= cap  # what the server billed for them


# ------------------------------------------------------------ one cap per folder


def test_a_rerun_continues_under_the_folders_cap(
    server: RecordingFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handler, _ = configured(tmp_path / "probe")
    run(handler)
    bound = first_bound(server)
    probe = len(server.usages)
    sessions = itertools.count()

    def session(budget_usd: float | None) -> tuple[Any, LiveSource, WatchedLedger]:
        """A new session on the folder, as a rerun is: its own session id (an earlier one's stop is not its own)."""
        monkeypatch.setenv(SESSION_ENV, f"rerun-{next(sessions)}")
        return watched(tmp_path, budget_usd)

    cap = 3.5 * bound
    _, first, _ = session(cap)
    with pytest.raises(BudgetExceeded):
        first.result("standard", dataset.get(CONVERSATION))
    sent = len(server.requests)
    assert sent > probe

    # A second session on the same folder (a rerun resuming it): a new run id, the same cap.
    _, again, ledger = session(cap)
    assert ledger.session != ledger_of(first).session
    with pytest.raises(BudgetExceeded, match=r"by earlier or other sessions"):
        again.result("standard", dataset.get(CONVERSATION))
    assert len(server.requests) == sent  # nothing more was sent

    # Forgetting the option does not lift the cap: the one last given in the folder holds.
    _, forgot, ledger = session(None)
    with pytest.raises(BudgetExceeded, match="recorded in the folder"):
        forgot.result("standard", dataset.get(CONVERSATION))
    assert len(server.requests) == sent
    assert any("recorded by an earlier session" in line for line in ledger.summary())

    # A lower cap stops at once; only a larger one, given explicitly, lets it go on.
    _, lower, _ = session(bound)
    with pytest.raises(BudgetExceeded):
        lower.result("standard", dataset.get(CONVERSATION))
    assert len(server.requests) == sent
    _, larger, ledger = session(100.0)
    larger.result("standard", dataset.get(CONVERSATION))
    assert len(server.requests) > sent
    folder = ledger.totals()
    assert folder.charged == pytest.approx(hand_cost(summed(server.usages[probe:]))[1], rel=1e-9)
    assert folder.sessions == 2 and folder.cap_usd == 100.0  # sessions that sent something
    first_session, this_session = ledger.summary()
    assert first_session.startswith("spend this run: $")
    assert "earlier or concurrent sessions" in this_session and "of a $100.00 cap" in this_session


def test_spend_recorded_by_an_earlier_version_is_refused(server: RecordingFake, tmp_path: Path) -> None:
    """An unreleased version kept one ``spend-<run id>.json`` per run: this one does not read them, and
    refuses the folder in one line rather than begin a ledger that leaves their spend uncounted."""
    old = tmp_path / ".careful" / "spend-auto-20250101-000000-abcd.json"
    old.parent.mkdir(parents=True)
    old.write_text(
        json.dumps(
            {
                "version": 1,
                "spent_list": 0.2,
                "spent_conservative": 0.9,
                "requests": 40,
                "reservations": {"x": {"bound": 0.05, "pid": 1}},
                "cap_usd": 1.0,
            }
        )
    )
    _, source, ledger = watched(tmp_path, 100.0)  # a cap the old spend is far from: not the cap refuses
    with pytest.raises(StopRun) as refused:
        source.result("standard", dataset.get(CONVERSATION))
    message = str(refused.value)
    assert not isinstance(refused.value, BudgetExceeded)
    assert message.startswith(f"{old}: spend recorded by an earlier, unreleased version") and "\n" not in message
    assert "--careful-budget-usd" in message and "nothing is sent" in message
    assert server.requests == []
    assert not ledger.path.exists()  # no ledger begun without the old spend


def _reserve_and_die(path: str) -> None:
    SpendLedger(Path(path), 1.0, "killed").reserve(0.25)
    os._exit(0)  # killed mid-request: never settled


def test_a_dead_process_reservation_stays_spent(tmp_path: Path) -> None:
    path = tmp_path / "spend.json"
    child = multiprocessing.get_context("fork").Process(target=_reserve_and_die, args=(str(path),))
    child.start()
    child.join(timeout=30)
    ledger = SpendLedger(path, 1.0, "survivor")
    totals = ledger.totals()
    assert (totals.reserved, totals.unconfirmed, totals.charged) == (0, 1, 0.25)
    with pytest.raises(BudgetExceeded):
        ledger.reserve(0.76)
    ledger.reserve(0.75)


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[]",
        '{"version": 1, "spent_list": 0, "spent_conservative": 0, "requests": 0, "reservations": {}}',
        '{"version": 2, "cap_usd": NaN, "sessions": {}, "reservations": {}}',
        '{"version": 2, "cap_usd": null, "sessions": {"s": {"spent_conservative": -5}}, "reservations": {}}',
        '{"version": 2, "cap_usd": null, "sessions": {"s": {"spent_conservative": "0"}}, "reservations": {}}',
        '{"version": 2, "cap_usd": null, "sessions": [], "reservations": {}}',
        '{"version": 2, "cap_usd": null, "sessions": {}, "reservations": {"r": {"bound": 1}}}',
        "[" * 100_000,
    ],
)
def test_an_unreadable_ledger_sends_nothing(server: RecordingFake, tmp_path: Path, content: str) -> None:
    path = budget.ledger_file(tmp_path)
    path.parent.mkdir(parents=True)
    path.write_text(content)
    _, source, ledger = watched(tmp_path, 5.0)
    with pytest.raises(StopRun, match="nothing is sent"):
        source.result("standard", dataset.get(CONVERSATION))
    assert server.requests == []
    [line] = ledger.summary()  # the summary reports it, never raises
    assert "could not be read" in line


def test_retry_delay_follows_the_sdk_policy() -> None:
    import anthropic
    import httpx

    def status_error(status: int, headers: dict[str, str]) -> anthropic.APIStatusError:
        request = httpx.Request("POST", "http://x/v1/messages")
        response = httpx.Response(status, headers=headers, request=request)
        return anthropic.APIStatusError("e", response=response, body=None)  # type: ignore[arg-type]

    assert claude.retry_delay(status_error(429, {"retry-after-ms": "250"}), 0) == 0.25
    assert claude.retry_delay(status_error(529, {"retry-after": "3"}), 0) == 3.0
    assert claude.retry_delay(status_error(400, {}), 0) is None
    assert claude.retry_delay(status_error(400, {"x-should-retry": "true"}), 0) is not None
    assert claude.retry_delay(status_error(503, {"x-should-retry": "false"}), 0) is None
    assert claude.retry_delay(ValueError("not an API error"), 0) is None
    # An hour asked for: one wait is capped (the run's other workers wait too; the next run retries).
    assert claude.retry_delay(status_error(500, {"retry-after": "3600"}), 5) == ratelimit.MAX_WAIT == 60
    first = claude.retry_delay(status_error(408, {}), 0)
    assert first is not None and 0.375 <= first <= 0.5


# ------------------------------------------------------------ whole sessions (plugin)


def _pytest(tmp_path: Path, server: RecordingFake, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": server.url}
    env.pop("CAREFUL_RUN_ID", None)
    return subprocess.run(_command(tmp_path, *args), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def _command(tmp_path: Path, *args: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--rootdir",
        str(tmp_path),
        f"--careful-output={tmp_path / 'result'}",
        f"--careful-model={KEY}",
        "--careful-max-output-tokens=200",
        *args,
        *IDS,
    ]


CAP = 0.05  # about five of these requests (conservative), not all of them


def test_resumed_sessions_cannot_exceed_the_cap(tmp_path: Path) -> None:
    """What the cap promises, whatever order the conversations reserve in: never billed past it, and
    a rerun, with the option or without it, gets no fresh cap (the folder's own holds).

    Not how many requests each rerun sends: the first run stops at the first refusal, so which of
    the conversations left reserves first decides whether one more request still fits a rerun.
    """
    with RecordingFake(replay_any_conversation) as server:
        # One request in flight per worker: the session stops where the next request could cross the cap.
        # (Many in flight stop it earlier, on what they reserved: test_many_in_flight_never_cross_the_cap.)
        first = _pytest(tmp_path, server, "-n", "2", "--careful-concurrency=2", f"--careful-budget-usd={CAP}")
        assert first.returncode == 1 and "reached for" in first.stdout, first.stdout[-3000:]
        assert len(server.requests) >= 2 and billed(server) <= CAP
        again = _pytest(tmp_path, server, "-p", "no:xdist", f"--careful-budget-usd={CAP}")
        assert billed(server) <= CAP, again.stdout[-3000:]
        forgot = _pytest(tmp_path, server, "-p", "no:xdist")
        ledger = SpendLedger(budget.ledger_file(tmp_path / "result"))
        assert ledger.totals().attempts == len(server.requests)
    assert "earlier or concurrent sessions" in again.stdout
    # Without the option the folder's cap applies (no cap at all would run every conversation to its end).
    assert "recorded by an earlier session" in forgot.stdout, forgot.stdout[-3000:]
    assert billed(server) <= CAP
    store = next((tmp_path / "result").rglob("BFCL_v4_multi_turn_base_result.json"))
    complete = {e["id"] for e in map(json.loads, store.read_text().splitlines()) if isinstance(e["result"], list)}
    assert complete < set(IDS), "every conversation ran to its end: the reruns were not capped"


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")], ids=["no-xdist", "n2"])
def test_many_in_flight_never_cross_the_cap(tmp_path: Path, xdist: tuple[str, str]) -> None:
    """Every attempt reserves its worst case before it is sent: in flight together, they still fit."""
    with RecordingFake(replay_any_conversation) as server:
        first = _pytest(tmp_path, server, *xdist, "--careful-concurrency=16", f"--careful-budget-usd={CAP}")
        assert first.returncode == 1 and "reached for" in first.stdout, first.stdout[-3000:]
        assert len(server.requests) >= 2 and billed(server) <= CAP
        again = _pytest(tmp_path, server, *xdist, "--careful-concurrency=16")  # resumes under the same cap
        assert billed(server) <= CAP, again.stdout[-3000:]
        ledger = SpendLedger(budget.ledger_file(tmp_path / "result"))
        assert ledger.totals().attempts == len(server.requests)


class Held:
    """The replaying model, holding every request until released (a session stays in flight)."""

    def __init__(self) -> None:
        self.released = threading.Event()
        self.arrived = threading.Event()

    def __call__(self, body: dict[str, Any]) -> list[dict[str, Any]]:
        self.arrived.set()
        self.released.wait(60)
        return replay_any_conversation(body)


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")], ids=["no-xdist", "n2"])
def test_a_second_session_on_the_folder_is_refused_and_the_cap_holds(tmp_path: Path, xdist: tuple[str, str]) -> None:
    """One output folder, one run at a time (issue 31): the second command sends nothing, so two
    sessions never race for the cap; the first one's spend stays under it."""
    model = Held()
    with RecordingFake(model) as server:
        env = {**os.environ, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": server.url}
        env.pop("CAREFUL_RUN_ID", None)

        def session(i: int) -> list[str]:
            return _command(
                tmp_path, *xdist, f"--careful-budget-usd={CAP}", f"--careful-scorecards={tmp_path / f'c{i}'}"
            )

        first = subprocess.Popen(
            session(0), cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            assert model.arrived.wait(120), "the first session sent nothing"
            second = subprocess.run(session(1), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
        finally:
            model.released.set()
            output = first.communicate(timeout=600)[0]
        totals = SpendLedger(budget.ledger_file(tmp_path / "result")).totals()
        # Every request the server saw was the first session's: the second sent nothing.
        assert totals.attempts == len(server.requests) and totals.reserved == 0 and totals.sessions == 1
    assert second.returncode == 4, second.stdout[-2000:] + second.stderr[-2000:]
    assert f"is being written by another run (pid {first.pid}" in second.stderr
    assert first.returncode == 1 and "reached for" in output, output[-3000:]
    assert billed(server) <= CAP


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-1"])
def test_a_cap_that_is_not_a_positive_number_is_refused(pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--careful-model={KEY}", f"--careful-budget-usd={value}", IDS[0], timeout=120
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--careful-budget-usd must be a positive number of dollars" in "\n".join(result.errlines)
