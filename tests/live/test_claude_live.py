"""Claude live runs end to end: bfcl-eval's loop, the real SDK, a loopback API.

Each conversation goes through ``runner.run`` (bfcl-eval's own multi-turn loop
and ``ClaudeHandler``, with :mod:`pytest_careful.live.backends.claude.client`'s fixes) and the
real ``anthropic`` SDK, which talks HTTP to :class:`fake_anthropic.FakeAnthropic`.
The fake "model" replays the conversation's reference calls as ``tool_use``
blocks, turn by turn, then closes the turn with a text block; the result entry
is then scored like any logged run and must get BFCL's "valid" verdict.

Expected costs are computed here from the usage the server reported and the
rates read straight from ``prices.yaml``, never from the code under test.
"""

from __future__ import annotations

import json
import multiprocessing
import os
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from fake_anthropic import FakeAnthropic, text_block, tool_use_block

from pytest_careful.data import dataset
from pytest_careful.effects import declarations
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.execution.decoding import Decoder
from pytest_careful.live import runner
from pytest_careful.live.backends.claude import budget
from pytest_careful.live.backends.claude import client as claude
from pytest_careful.live.backends.claude.budget import BudgetExceeded, Cost, Prices, SpendLedger, UnknownPrice, Usage
from pytest_careful.live.backends.claude.client import CreditExhausted, MissingApiKey
from pytest_careful.live.backends.scripted import call_to_fc, keyword_call
from pytest_careful.live.errors import NotRun, StopRun
from pytest_careful.live.handles import resolve
from pytest_careful.live.source import LiveSource

KEY = "claude-haiku-4-5-20251001-FC"
MODEL_ID = "claude-haiku-4-5-20251001"
CONVERSATION = "multi_turn_base_0"
MAX_OUTPUT = 1234
RATES = yaml.safe_load(budget.PRICES_FILE.read_text())["models"]["claude-haiku-4-5"]


# ---------------------------------------------------------------- the fake model


def is_turn_message(message: dict[str, Any]) -> bool:
    """A user message that opens a turn (text), not one that returns tool results."""
    content = message.get("content")
    return (
        message.get("role") == "user"
        and isinstance(content, list)
        and any(isinstance(b, dict) and b.get("type") == "text" for b in content)
    )


def reference_responder(conversation_id: str):  # type: ignore[no-untyped-def]
    """Per turn: the reference calls as tool_use blocks, then a closing text."""
    conversation = dataset.get(conversation_id)

    def respond(body: dict[str, Any]) -> list[dict[str, Any]]:
        messages = body["messages"]
        turn = sum(1 for m in messages if is_turn_message(m)) - 1
        calls = conversation.ground_truth[turn]
        if is_turn_message(messages[-1]) and calls:
            blocks = []
            for call in calls:
                [(name, arguments)] = call_to_fc(call, conversation.involved_classes).items()
                blocks.append(tool_use_block(name, json.loads(arguments)))
            return blocks
        return [text_block("Done.")]

    return respond


class RecordingFake(FakeAnthropic):
    """The fake server, also keeping the ``usage`` of every message it answered."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.usages: list[dict[str, int]] = []

    def _message(self, body: dict[str, Any], content: list[dict[str, Any]], usage: Any) -> dict[str, Any]:
        message = super()._message(body, content, usage)
        self.usages.append(message["usage"])
        return message


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[RecordingFake]:
    with RecordingFake(reference_responder(CONVERSATION)) as fake:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
        # An id of the kind the controller makes: claude.configure makes a fresh one
        # (and exports it; monkeypatch restores the variable afterwards).
        monkeypatch.setenv(claude.RUN_ID_ENV, claude.AUTO_RUN_ID_PREFIX + "previous")
        yield fake


def configured(tmp_path: Path, budget_usd: float | None = None) -> tuple[Any, LiveSource]:
    """A handler set up exactly as a Claude run's source sets it up."""
    handle = resolve(KEY, None)
    assert handle.kind == "claude" and handle.registry_key == KEY
    source = LiveSource(KEY, KEY, handle=handle, output=tmp_path, declarations=declarations.load())
    options = SimpleNamespace(
        model=KEY, output=tmp_path, budget_usd=budget_usd, max_output_tokens=MAX_OUTPUT, worker=False
    )
    source.take_in(claude.configure(handle, options, source.concurrency))
    return source.handler(), source


def run(handler: Any, conversation_id: str = CONVERSATION) -> runner.LiveRun:
    protocol = runner.RunProtocol("standard", declarations.load())
    return runner.run(handler, dataset.get(conversation_id), protocol)


def messages(server: FakeAnthropic) -> list[dict[str, Any]]:
    bodies = [r.body for r in server.requests if r.path == "/v1/messages"]
    assert all(b is not None for b in bodies)
    return bodies  # type: ignore[return-value]


def hand_cost(usage: dict[str, int]) -> tuple[float, float]:
    """(list, conservative) USD of summed usage, at prices.yaml's haiku rates."""
    inp, out, write, read = (usage["input"], usage["output"], usage["cache_creation"], usage["cache_read"])
    listed = (
        inp * RATES["input"] + write * RATES["cache_write_5m"] + read * RATES["cache_read"] + out * RATES["output"]
    ) / 1e6
    conservative = (
        inp * RATES["input"] + write * RATES["cache_write_5m"] + read * RATES["input"] + out * RATES["output"]
    ) / 1e6
    return listed, conservative


def summed(usages: list[dict[str, int]]) -> dict[str, int]:
    return {
        "input": sum(u["input_tokens"] for u in usages),
        "output": sum(u["output_tokens"] for u in usages),
        "cache_creation": sum(u["cache_creation_input_tokens"] for u in usages),
        "cache_read": sum(u["cache_read_input_tokens"] for u in usages),
        "requests": len(usages),
    }


def ledger_of(source: LiveSource) -> SpendLedger:
    ledger = source.spend_ledger  # type: ignore[attr-defined]
    assert isinstance(ledger, SpendLedger)
    return ledger


# ------------------------------------------------------------- the whole loop


def test_conversation_runs_through_bfcl_and_scores_valid(server: RecordingFake, tmp_path: Path) -> None:
    handler, source = configured(tmp_path)
    live = run(handler)
    entry = json.loads(json.dumps(live.entry))  # as the result file holds it
    conversation = dataset.get(CONVERSATION)

    evaluation = evaluate(conversation, entry["result"], Decoder(KEY, handler))
    assert evaluation.verdict.valid, evaluation.verdict
    assert len(entry["result"]) == conversation.n_turns

    bodies = messages(server)
    assert len(bodies) == sum(2 if calls else 1 for calls in conversation.ground_truth)
    assert server.requests_failed == 0 and not server.responder_errors
    for body in bodies:
        assert "temperature" not in body
        assert body["max_tokens"] == MAX_OUTPUT
        assert body["model"] == MODEL_ID
        # bfcl-eval's prompt-caching markers are kept: last tool, newest user messages.
        assert body["tools"][-1]["cache_control"] == {"type": "ephemeral"}
        marked = [m for m in body["messages"] if m["role"] == "user" and "cache_control" in m["content"][0]]
        assert 1 <= len(marked) <= 2 and body["messages"][-1] in marked
    assert all(not r.has_temperature for r in server.requests)

    # Logged input tokens are the whole prompt, as the server reported it.
    usages = list(server.usages)
    assert [t for turn in entry["input_token_count"] for t in turn] == [
        u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"] for u in usages
    ]
    assert [t for turn in entry["output_token_count"] for t in turn] == [u["output_tokens"] for u in usages]
    assert usages[0]["cache_read_input_tokens"] == 0
    assert all(u["cache_read_input_tokens"] > 0 for u in usages[1:])

    # Per-conversation figures in the entry, and the run's ledger.
    expected = summed(usages)
    assert entry["careful_usage"] == expected
    listed, conservative = hand_cost(expected)
    assert entry["careful_cost_usd"] == {
        "list": pytest.approx(listed, rel=1e-9),
        "conservative": pytest.approx(conservative, rel=1e-9),
    }
    assert entry["careful_cost_usd"]["list"] < entry["careful_cost_usd"]["conservative"]
    totals = ledger_of(source).totals()
    assert totals.requests == len(usages) and totals.reserved == 0
    assert totals.spent_list == pytest.approx(listed, rel=1e-9)
    assert totals.spent_conservative == pytest.approx(conservative, rel=1e-9)

    # The shared handler keeps no per-conversation state; a second run counts afresh.
    assert handler.careful_tally is None
    again = run(handler)
    assert again.entry["careful_usage"]["requests"] == len(usages)
    assert ledger_of(source).totals().requests == 2 * len(usages)


def test_prompting_style_runs_and_scores_valid(
    server: RecordingFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conversation = dataset.get(CONVERSATION)

    def respond(body: dict[str, Any]) -> list[dict[str, Any]]:
        def turn_text(m: dict[str, Any]) -> bool:  # execution results come back as user text too
            return m["role"] == "user" and not m["content"][0]["text"].startswith("[{'role': 'tool'")

        turn = sum(1 for m in body["messages"] if turn_text(m)) - 1
        calls = conversation.ground_truth[turn]
        if turn_text(body["messages"][-1]) and calls:
            return [text_block("[" + ", ".join(keyword_call(c, conversation.involved_classes) for c in calls) + "]")]
        return [text_block("Done.")]  # does not decode: bfcl-eval ends the turn

    server.responder = respond
    handle = resolve(MODEL_ID, None)  # the prompting entry of the same model
    source = LiveSource(MODEL_ID, MODEL_ID, handle=handle, output=tmp_path, declarations=declarations.load())
    options = SimpleNamespace(
        model=MODEL_ID, output=tmp_path, budget_usd=None, max_output_tokens=MAX_OUTPUT, worker=False
    )
    source.take_in(claude.configure(handle, options, source.concurrency))
    handler = source.handler()
    assert not handler.is_fc_model
    entry = run(handler).entry
    assert evaluate(conversation, entry["result"], Decoder(MODEL_ID, handler)).verdict.valid
    bodies = messages(server)
    assert all(
        "temperature" not in b and "tools" not in b and b["model"] == MODEL_ID and b["max_tokens"] == MAX_OUTPUT
        for b in bodies
    )
    assert bodies[0]["system"][0]["cache_control"] == {"type": "ephemeral"}
    assert [t for turn in entry["input_token_count"] for t in turn] == [
        u["input_tokens"] + u["cache_creation_input_tokens"] + u["cache_read_input_tokens"] for u in server.usages
    ]
    assert entry["careful_usage"] == summed(server.usages)


@pytest.mark.parametrize("status,times", [(429, 1), (500, 2), (529, 1)])
def test_transient_errors_are_retried_by_the_sdk(
    server: RecordingFake, tmp_path: Path, status: int, times: int
) -> None:
    handler, source = configured(tmp_path)
    server.fail_next(status, times=times)
    live = run(handler)
    assert server.requests_failed == times
    assert len(server.requests) == len(server.usages) + times
    assert evaluate(dataset.get(CONVERSATION), live.entry["result"], Decoder(KEY, handler)).verdict.valid
    # Failed attempts cost nothing: the entry and the ledger count answered requests only.
    assert live.entry["careful_usage"]["requests"] == len(server.usages)
    totals = ledger_of(source).totals()
    assert totals.requests == len(server.usages) and totals.reserved == 0


def test_retries_are_bounded(server: RecordingFake, tmp_path: Path) -> None:
    import anthropic

    handler, source = configured(tmp_path)
    server.fail_next(500, times=50)
    with pytest.raises(claude.OutOfRetries, match=f"after {claude.MAX_RETRIES + 1} attempts") as caught:
        run(handler)
    assert isinstance(caught.value.__cause__, anthropic.InternalServerError)
    assert len(server.requests) == claude.MAX_RETRIES + 1
    assert ledger_of(source).totals().reserved == 0


def test_credit_exhaustion_stops_at_once(server: RecordingFake, tmp_path: Path) -> None:
    handler, source = configured(tmp_path, budget_usd=5.0)
    server.exhaust_credit()
    with pytest.raises(CreditExhausted, match="out of credit"):
        run(handler)
    assert len(server.requests) == 1  # no retry loop
    totals = ledger_of(source).totals()
    assert (totals.requests, totals.reserved, totals.spent_conservative) == (0, 0, 0)


def test_missing_api_key_is_an_error_at_first_request(
    server: RecordingFake, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    handler, _ = configured(tmp_path)  # building and decoding need no key
    with pytest.raises(MissingApiKey, match="ANTHROPIC_API_KEY"):
        run(handler)
    assert server.requests == []


# ---------------------------------------------------------------- the budget


def test_budget_cap_stops_before_the_request_that_could_cross_it(server: RecordingFake, tmp_path: Path) -> None:
    # What one request may cost at most, with this conversation's first prompt.
    handler, _ = configured(tmp_path / "probe")
    run(handler)
    first = messages(server)[0]
    first_bound = budget.request_bound(
        Prices.load().lookup(MODEL_ID),
        system=first.get("system"),
        tools=first["tools"],
        messages=first["messages"],
        max_tokens=MAX_OUTPUT,
    )
    served = len(server.usages)

    cap = 2.5 * first_bound  # room for two requests' bounds, not for all of them
    handler, source = configured(tmp_path / "capped", budget_usd=cap)
    handler.careful_ledger = ledger = WatchedLedger(ledger_of(source).path, cap)
    with pytest.raises(BudgetExceeded, match="not sent"):
        source.result("standard", dataset.get(CONVERSATION))
    sent = len(server.usages) - served
    assert 2 <= sent < served
    # Every request sent fitted under the cap with its bound; the first that did not
    # was refused before it reached the server.
    *granted, refused = ledger.asked
    assert len(granted) == sent and all(ok for *_, ok in granted) and not refused[-1]
    assert all(spent + reserved + bound <= cap for spent, reserved, bound, _ in granted)
    spent, reserved, bound, _ = refused
    assert reserved == 0 and spent + bound > cap
    totals = ledger_of(source).totals()
    assert totals.requests == sent and totals.reserved == 0
    spent = summed(server.usages[served:])
    assert totals.spent_conservative == pytest.approx(hand_cost(spent)[1], rel=1e-9)
    assert totals.spent_conservative <= cap

    # The source stops the run: the next conversation is not even started; NotRun says why (its item is
    # skipped with that reason by harness/item.py).
    before = len(server.requests)
    with pytest.raises(NotRun, match="not run: the run stopped"):
        source.result("standard", dataset.get("multi_turn_base_1"))
    assert len(server.requests) == before


class WatchedLedger(SpendLedger):
    """Records (spent, reserved, bound, granted) as each reservation is asked for."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.asked: list[tuple[float, float, float, bool]] = []

    def reserve(self, bound_usd: float) -> str:
        before = self.totals()
        try:
            reservation = super().reserve(bound_usd)
        except BudgetExceeded:
            self.asked.append((before.spent_conservative, before.reserved, bound_usd, False))
            raise
        self.asked.append((before.spent_conservative, before.reserved, bound_usd, True))
        return reservation


def test_tiny_budget_sends_nothing(server: RecordingFake, tmp_path: Path) -> None:
    handler, source = configured(tmp_path, budget_usd=0.0001)
    with pytest.raises(StopRun) as raised:
        source.result("standard", dataset.get(CONVERSATION))
    assert isinstance(raised.value, BudgetExceeded)
    assert server.requests == []
    assert source.stops.stopped and "budget" in source.stops.stopped


def _worker(path: str, cap: float, rounds: int, queue: Any) -> None:
    ledger = SpendLedger(Path(path), cap)
    granted = refused = 0
    for _ in range(rounds):
        try:
            reservation = ledger.reserve(0.01)
        except BudgetExceeded:
            refused += 1
            continue
        granted += 1
        ledger.settle(reservation, Cost(0.005, 0.01))
    queue.put((granted, refused))


def test_ledger_is_shared_between_processes(tmp_path: Path) -> None:
    path = tmp_path / "spend.json"
    a, b = SpendLedger(path, 1.0), SpendLedger(path, 1.0)  # two workers, one file
    first = a.reserve(0.6)
    with pytest.raises(BudgetExceeded):
        b.reserve(0.5)  # 0.6 reserved elsewhere + 0.5 > 1.0
    a.release(first)
    second = b.reserve(0.5)
    a.settle(second, Cost(0.2, 0.3))
    with pytest.raises(BudgetExceeded):
        a.reserve(0.71)  # spent (conservative) 0.3 + 0.71 > 1.0
    assert a.reserve(0.7)
    totals = b.totals()
    assert (totals.requests, totals.spent_list, totals.spent_conservative) == (1, 0.2, 0.3)
    assert totals.reserved == pytest.approx(0.7)

    # Four processes racing for a cap of 30 requests' worth: exactly 30 are granted.
    shared = tmp_path / "race.json"
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_worker, args=(str(shared), 0.3 + 1e-9, 15, queue)) for _ in range(4)]
    for worker in workers:
        worker.start()
    results = [queue.get(timeout=30) for _ in workers]
    for worker in workers:
        worker.join(timeout=30)
    assert sum(g for g, _ in results) == 30 and sum(r for _, r in results) == 30
    totals = SpendLedger(shared).totals()
    assert totals.requests == 30 and totals.reserved == 0
    assert totals.spent_conservative == pytest.approx(0.3)


# ---------------------------------------------------------------- prices, costs


def test_prices_by_longest_prefix() -> None:
    prices = Prices.load()
    assert prices.read_on and "anthropic.com/pricing" in prices.source
    for key, (inp, out) in {
        "claude-haiku-4-5": (1, 5),
        "claude-sonnet-4-5": (3, 15),
        "claude-opus-4-5": (5, 25),
    }.items():
        row = prices.lookup(key)
        assert (row.input, row.output) == (inp, out)
        assert row.cache_write == pytest.approx(1.25 * inp) and row.cache_read == pytest.approx(0.1 * inp)
    assert prices.lookup("claude-opus-4-5-20251101").key == "claude-opus-4-5"
    assert prices.lookup("claude-sonnet-4-5-20250929-FC").key == "claude-sonnet-4-5"
    assert prices.lookup("claude-haiku-4-5-20251001").key == "claude-haiku-4-5"
    with pytest.raises(UnknownPrice, match="claude-haiku-4-5.*claude-opus-4-5.*claude-sonnet-4-5"):
        prices.lookup("claude-3-haiku-20240307")
    with pytest.raises(UnknownPrice):
        prices.lookup("claude-haiku-4-50")  # a prefix must end at a dash


def test_usage_costs_by_hand() -> None:
    row = Prices.load().lookup(MODEL_ID)
    usage = Usage(input=1000, output=200, cache_creation=3000, cache_read=50_000)
    cost = row.cost(usage)
    assert cost.list == pytest.approx((1000 * 1 + 200 * 5 + 3000 * 1.25 + 50_000 * 0.1) / 1e6)
    assert cost.conservative == pytest.approx((1000 * 1 + 200 * 5 + 3000 * 1.25 + 50_000 * 1) / 1e6)
    assert usage.prompt == 54_000


def test_request_bound_by_hand() -> None:
    row = Prices.load().lookup(MODEL_ID)
    system = [{"type": "text", "text": "é" * 10}]
    tools = [{"name": "f"}]
    messages = [{"role": "user", "content": "hi"}]
    size = len(json.dumps([system, tools, messages], ensure_ascii=False).encode())
    tokens = -(-size // 3) + budget.TOOL_PROMPT_TOKENS
    assert budget.request_bound(row, system=system, tools=tools, messages=messages, max_tokens=100) == pytest.approx(
        (tokens * 1.25 + 100 * 5) / 1e6
    )


def test_estimate_for_collect_only() -> None:
    conversations = [dataset.get(CONVERSATION), dataset.get("multi_turn_base_1")]
    figures = claude.estimate(conversations, KEY, Prices.load(), MAX_OUTPUT)
    assert figures["conversations"] == 2
    assert figures["requests"] == sum(len(t) + 1 for c in conversations for t in c.ground_truth)
    assert 0 < figures["cost_usd"]["list"] < figures["cost_usd"]["conservative"]
    assert figures["usage"]["cache_read"] > 0 and figures["assumptions"]
    assert figures["largest_request_bound_usd"] > MAX_OUTPUT * 5 / 1e6


# ---------------------------------------------------------------- run id


def test_run_id_is_shared_with_workers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(claude.RUN_ID_ENV, "")  # restored afterwards, whatever run_id() exports
    made = claude.run_id()  # the controller makes one and exports it
    assert made.startswith(claude.AUTO_RUN_ID_PREFIX) and os.environ[claude.RUN_ID_ENV] == made
    assert claude.run_id(worker=True) == made  # a worker gets it (workerinput -> environment)
    assert claude.run_id() != made  # a later controller in this process makes its own
    monkeypatch.setenv(claude.RUN_ID_ENV, "nightly-7")
    assert claude.run_id() == "nightly-7"  # the user's id names the session in the ledger
    monkeypatch.delenv(claude.RUN_ID_ENV)
    with pytest.raises(StopRun, match=claude.RUN_ID_ENV):
        claude.run_id(worker=True)
