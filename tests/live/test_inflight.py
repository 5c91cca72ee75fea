"""Many conversations in flight per process (``live/inflight.py``, ``live/progress.py``).

The oracle of a concurrent run is the serial one: each conversation run alone
through ``runner.run``, one after another. A concurrent run must file the same
entries, test by test, with and without xdist.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import subprocess
import sys
import threading
import time
import types
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from careful_cli import careful_command
from loopback_vllm import LoopbackVLLM

from pytest_careful.data import dataset
from pytest_careful.data.result_store import ResultStore
from pytest_careful.effects import declarations
from pytest_careful.live import inflight, progress, runner
from pytest_careful.live.backends import registry as backends
from pytest_careful.live.backends import scripted
from pytest_careful.live.backends.vllm import metrics as vllm_metrics
from pytest_careful.live.inflight import Board, Flight, Outcome

DECL = declarations.load()


def _cli(tmp_path: Path, *args: str) -> list[str]:
    return careful_command(tmp_path, "-p", "no:randomly", *args)


def _serial(handle: str, ids: list[str], condition: str, repeat: int = 1) -> dict[str, dict[str, Any]]:
    """Each conversation alone, one after another: what a run without concurrency files."""
    handler = scripted.make_handler(handle)
    return {i: runner.run(handler, dataset.get(i), runner.RunProtocol(condition, DECL), repeat).entry for i in ids}


def _filed(path: Path) -> dict[str, dict[str, Any]]:
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]
    assert len(lines) == len({e["id"] for e in lines}), "an id was filed twice"
    return {e["id"]: e for e in lines}


# Conversations of every class, of two categories (miss_func reveals functions later: hints).
IDS = [f"multi_turn_base_{i}" for i in range(0, 200, 17)] + [f"multi_turn_miss_func_{i}" for i in (3, 40, 77, 150)]


@pytest.mark.parametrize(
    ("handle", "condition", "xdist"),
    [
        ("scripted:reference", "hints", ["-p", "no:xdist"]),
        ("scripted:ask-after", "confirm", ["-n", "2"]),
        ("scripted:destructive-prompting", "confirm", ["-p", "no:xdist"]),
        ("scripted:ask-wrong", "standard", ["-n", "2"]),
    ],
)
def test_a_concurrent_run_files_what_a_serial_run_files(
    tmp_path: Path, handle: str, condition: str, xdist: list[str]
) -> None:
    proc = subprocess.run(
        _cli(
            tmp_path,
            f"--careful-model={handle}",
            f"--careful-protocol={condition}",
            "--careful-category=base,miss_func",
            "--careful-concurrency=6",
            *xdist,
            *[f"{i}[{condition}]" for i in IDS],
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    name = handle.replace(":", "_")
    filed = {}
    for category in ("multi_turn_base", "multi_turn_miss_func"):
        filed.update(_filed(ResultStore(tmp_path / "result" / condition, name).path(category)))
    serial = _serial(handle, IDS, condition)
    assert sorted(filed) == sorted(serial)
    for conversation_id in IDS:  # test by test: the first difference names its conversation
        assert filed[conversation_id] == json.loads(json.dumps(serial[conversation_id])), conversation_id


def test_repeats_run_concurrently_are_each_repeat_of_a_serial_run(tmp_path: Path) -> None:
    ids = [f"multi_turn_base_{i}" for i in range(6)]  # flaky: n % 3 decides which repeats fail
    proc = subprocess.run(
        _cli(
            tmp_path, "--careful-model=scripted:flaky", "--careful-repeat=2", "--careful-concurrency=4", "-n", "2", *ids
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:]
    for repeat in (1, 2):
        store = ResultStore(tmp_path / "result" / f"repeat-{repeat}" / "standard", "scripted_flaky")
        filed = _filed(store.path("multi_turn_base"))
        serial = _serial("scripted:flaky", ids, "standard", repeat)
        assert {i: filed[i] for i in ids} == json.loads(json.dumps(serial)), repeat


def test_conversations_of_one_class_at_once_in_one_process_stay_apart() -> None:
    """Threads of one process run conversations that share TwitterAPI's module state
    (a mutable default argument that ``mention`` extends): each must see only its own."""
    ids = [c.id for c in dataset.load(("multi_turn_base",)) if "TwitterAPI" in c.involved_classes][:8]
    assert len(ids) == 8
    serial = _serial("scripted:reference", ids, "standard")
    handler = scripted.make_handler("scripted:reference")
    together: dict[str, dict[str, Any]] = {}
    start = threading.Barrier(len(ids))

    def interleave() -> None:  # every request yields to the other threads: their calls interleave
        time.sleep(0.002)

    def one(conversation_id: str) -> None:
        start.wait()
        live = runner.run(
            handler, dataset.get(conversation_id), runner.RunProtocol("standard", DECL), before_request=interleave
        )
        together[conversation_id] = live.entry

    threads = [threading.Thread(target=one, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for conversation_id in ids:
        assert together[conversation_id] == serial[conversation_id], conversation_id


def test_each_threads_loop_log_is_its_own() -> None:
    """BFCL's loop prints each step: a conversation's log holds its own steps only."""
    ids = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2", "multi_turn_base_3"]
    handler = scripted.make_handler("scripted:reference")
    logs: dict[str, str] = {}

    def one(conversation_id: str) -> None:
        logs[conversation_id] = runner.run(
            handler,
            dataset.get(conversation_id),
            runner.RunProtocol("standard", DECL),
            before_request=lambda: time.sleep(0.002),
        ).log

    threads = [threading.Thread(target=one, args=(i,)) for i in ids]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    alone = {i: runner.run(handler, dataset.get(i), runner.RunProtocol("standard", DECL)).log for i in ids}
    assert logs == alone


# --- the flight itself, with a stand-in for the model ------------------------------


def _keys(n: int) -> list[inflight.Key]:
    return [("standard", f"multi_turn_base_{i}", 1) for i in range(n)]


class Recorder:
    """Runs a conversation by sleeping; counts who ran what, and the most at once."""

    def __init__(self, seconds: float = 0.02) -> None:
        self.seconds = seconds
        self.ran: list[tuple[str, inflight.Key]] = []
        self.now = self.most = 0
        self.lock = threading.Lock()

    def runner(self, who: str) -> Any:
        def run(key: inflight.Key) -> Outcome:
            with self.lock:
                self.now += 1
                self.most = max(self.most, self.now)
                self.ran.append((who, key))
            time.sleep(self.seconds)
            with self.lock:
                self.now -= 1
            return Outcome("entry", line=json.dumps({"id": key[1], "by": who}))

        return run


def test_two_processes_run_each_conversation_once_and_share_outcomes(tmp_path: Path) -> None:
    """Two flights on one session folder stand for two xdist workers (flock is per open file)."""
    recorder = Recorder()
    keys = _keys(40)
    a = Flight(keys, 5, Board(tmp_path), recorder.runner("a"))
    b = Flight(keys, 5, Board(tmp_path), recorder.runner("b"))
    a.start()
    b.start()
    # Items are dealt to the workers as xdist deals them: each takes its own from either.
    got = {key: (a if n % 2 else b).outcome(key) for n, key in enumerate(keys)}
    for flight in (a, b):
        flight.close()
        flight.drain()
    ran = [key for _, key in recorder.ran]
    assert sorted(ran) == sorted(keys)  # each conversation once, by one of them
    assert {who for who, _ in recorder.ran} == {"a", "b"}
    assert all(json.loads(o.line or "")["id"] == key[1] for key, o in got.items())
    assert 5 < recorder.most <= 10  # both flights' slots were used, never more


def test_one_driver_runs_every_conversation_and_the_other_process_only_waits(tmp_path: Path) -> None:
    """A vLLM run under xdist: the process holding the driver lock runs all, with all the slots."""
    recorder = Recorder()
    keys = _keys(30)
    driver = Flight(keys, 10, Board(tmp_path), recorder.runner("driver"), driver=Board(tmp_path).drive())
    waiter = Flight(keys, 10, Board(tmp_path), recorder.runner("waiter"), driver=Board(tmp_path).drive())
    assert driver.drives_all and not waiter.drives_all  # the lock is taken once
    driver.start()
    waiter.start()
    # The waiter's items come first and want the last conversations the driver will start.
    got = {key: waiter.outcome(key) for key in reversed(keys[15:])}
    got |= {key: driver.outcome(key) for key in keys[:15]}
    inflight.land(driver, completed=True)
    inflight.land(waiter, completed=True)
    assert sorted(key for _, key in recorder.ran) == sorted(keys)
    assert {who for who, _ in recorder.ran} == {"driver"}
    assert 5 < recorder.most <= 10
    assert all(json.loads(o.line or "")["id"] == key[1] for key, o in got.items())
    assert not Board(tmp_path).driven()  # landed: the lock is let go


def test_a_driver_whose_items_are_done_runs_on_only_while_another_process_runs_items(tmp_path: Path) -> None:
    """Its run loop over, the driver keeps running the queue for the items still to come elsewhere;
    once no other process runs items (all done, or stopped after -x) it starts nothing more."""
    recorder = Recorder(seconds=0.2)
    keys = _keys(20)
    driver = Flight(keys, 2, Board(tmp_path), recorder.runner("driver"), driver=Board(tmp_path).drive())
    waiter = Flight(keys, 2, Board(tmp_path), recorder.runner("waiter"), driver=Board(tmp_path).drive())
    driver.start()
    waiter.start()
    landing = threading.Thread(target=inflight.land, args=(driver, True))
    landing.start()  # the driver's own items are done at once
    assert waiter.outcome(keys[5]).kind == "entry"  # still run for the other process's item
    inflight.land(waiter, completed=True)  # that process is done (or was stopped)
    landing.join(timeout=10)
    assert not landing.is_alive()
    ran = [key for _, key in recorder.ran]
    assert keys[5] in ran and len(ran) <= 10, len(ran)  # the rest was not run for nobody
    assert {who for who, _ in recorder.ran} == {"driver"}


def test_a_dead_driver_is_taken_over_by_a_waiting_process(tmp_path: Path) -> None:
    held = Board(tmp_path).drive()  # a driver that claimed the run, then was killed before running anything
    assert held is not None
    recorder = Recorder()
    keys = _keys(12)
    waiter = Flight(keys, 4, Board(tmp_path), recorder.runner("waiter"), driver=Board(tmp_path).drive())
    waiter.start()
    waited: list[Outcome] = []
    thread = threading.Thread(target=lambda: waited.append(waiter.outcome(keys[-1])))
    thread.start()
    time.sleep(3 * inflight.PROBE_SECONDS)
    assert not waited and recorder.ran == []  # a live driver will run it: wait
    Board.release(held)  # killed: its flock goes with it
    thread.join(timeout=10)
    assert waited
    got = [waiter.outcome(key) for key in keys]
    inflight.land(waiter, completed=True)
    assert sorted(key for _, key in recorder.ran) == sorted(keys)  # it drives the rest, not only what it needs
    assert all(o.kind == "entry" for o in got) and 1 < recorder.most <= 4


def test_a_probe_of_a_claim_at_the_wrong_moment_does_not_make_the_driver_drop_it(tmp_path: Path) -> None:
    """A waiting process's probe (``held``) takes a claim for a moment; the driver tries again."""
    keys = _keys(3)
    probe = Board(tmp_path).claim(keys[1])  # held while the driver reaches it
    recorder = Recorder(seconds=0.05)
    driver = Flight(keys, 1, Board(tmp_path), recorder.runner("driver"), driver=Board(tmp_path).drive())
    waiter = Flight(keys, 1, Board(tmp_path), recorder.runner("waiter"), driver=Board(tmp_path).drive())
    driver.start()
    time.sleep(0.3)
    Board.release(probe)
    got: list[Outcome] = []
    thread = threading.Thread(target=lambda: got.append(waiter.outcome(keys[1])), daemon=True)
    thread.start()
    thread.join(timeout=10)
    assert got and got[0].kind == "entry", "the driver dropped it: the item waits until the driver is gone"
    inflight.land(driver, completed=False)
    inflight.land(waiter, completed=True)
    assert ("driver", keys[1]) in recorder.ran and all(who == "driver" for who, _ in recorder.ran)


def test_a_driver_cut_short_is_not_taken_over_an_item_runs_only_its_own(tmp_path: Path) -> None:
    """-x or Ctrl-C stopped the driver: a waiting item still gets its conversation, and nothing else starts."""
    recorder = Recorder()
    keys = _keys(20)
    driver = Flight(keys, 2, Board(tmp_path), recorder.runner("driver"), driver=Board(tmp_path).drive())
    waiter = Flight(keys, 8, Board(tmp_path), recorder.runner("waiter"), driver=Board(tmp_path).drive())
    inflight.land(driver, completed=False)  # stopped before it ran anything
    assert waiter.outcome(keys[-1]).kind == "entry"
    inflight.land(waiter, completed=True)
    assert recorder.ran == [("waiter", keys[-1])]


def test_only_a_vllm_run_under_xdist_has_one_driver() -> None:
    # One server or a fleet alike: the driver spreads the conversations over every server (live.backends.vllm.fleet_client).
    assert inflight.one_driver("vllm", 2)
    assert inflight.one_driver("vllm", 8)
    assert not inflight.one_driver("vllm", 1)
    assert not any(inflight.one_driver(kind, 8) for kind in ("scripted", "claude", "api"))


def test_a_conversation_whose_process_died_is_run_by_the_item_that_needs_it(tmp_path: Path) -> None:
    board = Board(tmp_path)
    key = _keys(1)[0]
    held = board.claim(key)  # another process runs it...
    assert held is not None
    recorder = Recorder()
    flight = Flight([key], 2, Board(tmp_path), recorder.runner("here"))
    flight.start()
    waited: list[Outcome] = []
    waiter = threading.Thread(target=lambda: waited.append(flight.outcome(key)))
    waiter.start()
    time.sleep(2 * inflight.PROBE_SECONDS)
    assert not waited and recorder.ran == []  # ...so the item waits for it
    Board.release(held)  # ...and is killed (its flock goes with it) before filing an outcome
    waiter.join(timeout=10)
    assert waited and recorder.ran == [("here", key)]


def test_an_outcome_filed_by_another_process_is_read_not_rerun(tmp_path: Path) -> None:
    key = _keys(1)[0]
    Board(tmp_path).write(key, Outcome("error", "boom", None))
    recorder = Recorder()
    flight = Flight([key], 1, Board(tmp_path), recorder.runner("here"))
    flight.start()
    assert flight.outcome(key) == Outcome("error", "boom", None)
    flight.close()
    flight.drain()
    assert recorder.ran == []


def test_stopping_starts_nothing_more(tmp_path: Path) -> None:
    keys = _keys(30)
    recorder = Recorder(seconds=0.2)
    flight = Flight(keys, 3, Board(tmp_path), recorder.runner("here"))
    flight.start()
    time.sleep(0.05)
    flight.stop()
    flight.drain(timeout=5)
    assert len(recorder.ran) == 3  # the three in flight, nothing after the stop
    assert Board(tmp_path).finished() == 3


def test_slots_split_the_concurrency_over_the_workers() -> None:
    assert [inflight.slots(100, w) for w in (1, 2, 3, 8)] == [100, 50, 34, 13]
    assert inflight.slots(1, 8) == 1
    from bfcl_eval.constants.eval_config import LOCAL_SERVER_MAX_CONCURRENT_REQUEST

    def given(*urls: str) -> Any:
        return types.SimpleNamespace(endpoint=urls)  # what default_concurrency reads of a RunConfig

    vllm = backends.backend("vllm")
    assert vllm.default_concurrency(given()) == LOCAL_SERVER_MAX_CONCURRENT_REQUEST  # the server it starts
    # --careful-concurrency stays the total; its default is BFCL's per server, for each server of a fleet.
    for urls in (("http://a/v1",), ("http://a/v1", "http://b/v1"), tuple(f"http://s{n}/v1" for n in range(4))):
        assert vllm.default_concurrency(given(*urls)) == LOCAL_SERVER_MAX_CONCURRENT_REQUEST * len(urls)
    assert backends.backend("claude").default_concurrency(given("http://a/v1", "http://b/v1")) == 16


# --- progress -------------------------------------------------------------------


def test_progress_adds_up_the_processes_and_estimates_the_rest(tmp_path: Path) -> None:
    board = Board(tmp_path)
    board.write_progress({"total": 10, "done": 2, "failed": 1, "running": 3, "requests": 20})
    other = tmp_path / "progress" / "99999999.json"
    other.write_text(json.dumps({"total": 10, "done": 2, "failed": 0, "running": 4, "requests": 10}))
    totals = progress.read_totals(tmp_path / "progress")
    assert totals == progress.ProgressCounts(10, 4, 1, 7, 30)
    meter = progress.ProgressMeter()
    meter.line(progress.ProgressCounts(10, 0, 0, 7, 0), now=meter.started + 1)
    line = meter.line(totals, now=meter.started + 11)
    assert line == "careful: 5/10 conversations done, 7 in flight, 1 failed, 3.0 requests/s, ETA 11s"


def test_the_line_says_when_the_server_is_silent_and_gives_no_eta_once_the_run_stopped() -> None:
    meter = progress.ProgressMeter()
    wall = 1_000_000.0
    waiting = progress.ProgressCounts(10, 2, 0, 4, 12, last_answer=wall - 40, started=wall - 100)
    line = meter.line(waiting, now=meter.started + 60, wall=wall)
    assert ", no answer from the server for 40s, ETA" in line
    answering = progress.ProgressCounts(10, 2, 0, 4, 12, last_answer=wall - 1, started=wall - 100)
    assert "no answer" not in meter.line(answering, now=meter.started + 61, wall=wall)
    stopped = meter.line(waiting, now=meter.started + 62, stopped="the server at X did not answer", wall=wall)
    assert stopped.endswith("; the run stopped") and "ETA" not in stopped


def test_the_eta_counts_down_until_the_next_conversation_ends_and_then_says_it_is_overdue() -> None:
    """One long generation holds the last conversation: the estimate made when the first one ended
    counts down, and once it has run out the line says by how much, instead of growing every second."""
    meter = progress.ProgressMeter()
    start = meter.started
    running = progress.ProgressCounts(3, 0, 0, 2, 4)
    assert "ETA" not in meter.line(running, now=start + 10)  # nothing ended: nothing to estimate from
    one_done = progress.ProgressCounts(3, 1, 0, 2, 6)
    assert meter.line(one_done, now=start + 60).endswith(", ETA 2m00s")  # 60 s per conversation, 2 left
    assert meter.line(one_done, now=start + 90).endswith(", ETA 1m30s")
    assert meter.line(one_done, now=start + 180).endswith(", ETA 0s")
    assert meter.line(one_done, now=start + 200).endswith(", ETA overdue by 20s")
    two_done = progress.ProgressCounts(3, 1, 1, 1, 8)  # a failed conversation ended too
    assert meter.line(two_done, now=start + 240).endswith(", ETA 2m00s")  # 120 s each now, 1 left
    assert "ETA" not in meter.line(progress.ProgressCounts(3, 2, 1, 0, 9), now=start + 250)  # all ended


class Readings:
    """Stands in for the servers' /metrics: the readings given, one per call, then the last again."""

    def __init__(self, *readings: tuple[int, float] | None) -> None:
        self.readings = list(readings)
        self.calls = 0

    def __call__(self) -> progress.ServerWork | None:
        self.calls += 1
        reading = self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]
        return None if reading is None else vllm_metrics.ServerLoad(reading[0], 0, reading[1])


def _watched(meter: progress.ProgressMeter, watch: progress.GenerationWatch, totals: Any, wall: float) -> str:
    watch.observe(totals, wall)
    return meter.line(totals, now=meter.started + 1, wall=wall, generating=watch.generating(wall))


def test_a_long_generation_is_told_from_a_silent_server_by_the_servers_token_counter() -> None:
    wall = 1_000_000.0
    totals = progress.ProgressCounts(2, 0, 0, 1, 3, last_answer=wall, started=wall - 100)
    # The counter when the last answer came is the base; the tokens past it are the request's so far.
    readings = Readings((1, 5000.0), (1, 5100.0), (1, 5312.0), (1, 5312.0))
    watch, meter = progress.GenerationWatch(readings), progress.ProgressMeter()
    assert "generating" not in _watched(meter, watch, totals, wall + 1)  # answered a second ago: nothing to say
    line = _watched(meter, watch, totals, wall + 30)
    assert ", 1 request generating (100 tokens so far, no answer for 30s)" in line, line
    line = _watched(meter, watch, totals, wall + 160)
    assert ", 1 request generating (312 tokens so far, no answer for 2m40s)" in line, line
    # The counter stands still: an engine that stopped generating is a silent server again.
    line = _watched(meter, watch, totals, wall + 160 + progress.STALL_SECONDS)
    assert "generating" not in line and ", no answer from the server for 2m55s" in line, line
    # A new answer takes a new base: the next request's tokens count from there.
    answered = progress.ProgressCounts(2, 0, 0, 1, 4, last_answer=wall + 200, started=wall - 100)
    watch.probe = Readings((2, 5400.0), (2, 5450.0))
    _watched(meter, watch, answered, wall + 200)
    line = _watched(meter, watch, answered, wall + 220)
    assert ", 2 requests generating (50 tokens so far, no answer for 20s)" in line, line


@pytest.mark.parametrize(
    "readings",
    [(None,), ((0, 10.0), (0, 10.0)), ((1, 900.0), (1, 10.0))],
    ids=["no-metrics", "nothing-running", "counter-restarted"],
)
def test_without_a_word_from_the_servers_the_line_is_what_it_was(readings: tuple[Any, ...]) -> None:
    wall = 1_000_000.0
    totals = progress.ProgressCounts(2, 0, 0, 1, 3, last_answer=wall - 40, started=wall - 100)
    watch, meter = progress.GenerationWatch(Readings(*readings)), progress.ProgressMeter()
    _watched(meter, watch, totals, wall - 1)
    line = _watched(meter, watch, totals, wall)
    assert line.endswith(", no answer from the server for 40s"), line


def test_nothing_is_asked_of_the_servers_while_nothing_is_in_flight() -> None:
    readings = Readings((1, 10.0))
    watch = progress.GenerationWatch(readings)
    watch.observe(progress.ProgressCounts(2, 2, 0, 0, 9, last_answer=1.0, started=0.5), 100.0)
    assert readings.calls == 0 and watch.generating(100.0) is None


def _progress_file(tmp_path: Path) -> None:
    # One request in flight for a minute, never answered: the line has something to say about it.
    Board(tmp_path).write_progress({"total": 2, "running": 1, "requests": 1, "started": time.time() - 60})


def _plain_lines(tmp_path: Path, probe: progress.ServerProbe, seconds: float) -> list[str]:
    written: list[str] = []
    display = progress.Display(
        tmp_path / "progress", types.SimpleNamespace(isatty=False, write_line=written.append), probe=probe
    )
    display.start()
    time.sleep(seconds)
    display.stop()
    return written


def _request(server: LoopbackVLLM) -> threading.Thread:
    body = json.dumps({"model": "m", "prompt": "<|im_start|>user\nhello<|im_end|>\n", "max_tokens": 8}).encode()
    request = urllib.request.Request(f"{server.url}/completions", body, {"content-type": "application/json"})

    def send() -> None:
        with contextlib.suppress(OSError):  # cut short when the server stops (503, a reset)
            urllib.request.urlopen(request, timeout=30).read()

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("server_kind", ["generating", "hung", "stalled", "no-metrics"], ids=lambda kind: str(kind))
def test_the_line_says_generating_while_the_loopback_server_generates_and_no_answer_while_it_hangs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, server_kind: str
) -> None:
    """The loopback vLLM's /metrics, read by the probe a vLLM run gives the display: a slow request
    counts its tokens as it goes; a hung one (no sequence slot), one whose counter stands still and
    a server without /metrics leave the line as it was."""
    monkeypatch.setattr(progress, "PLAIN_SECONDS", 0.3)
    monkeypatch.setattr(progress, "TTY_SECONDS", 0.05)
    monkeypatch.setattr(progress, "STALL_SECONDS", 0.5)
    _progress_file(tmp_path)
    settings: dict[str, Any] = {
        "generating": {"latency": 5.0},
        "hung": {"latency": 5.0, "hang_from": 1},
        "stalled": {"latency": 5.0, "token_rate": 0.0},
        "no-metrics": {"latency": 5.0, "metrics": False},
    }[server_kind]
    with LoopbackVLLM(models=["m"], **settings) as server:
        request = _request(server)
        probe = vllm_metrics.MetricsProbe(lambda: [server.url], "m")
        lines = _plain_lines(tmp_path, probe, 2.0)
        server.stop()
        request.join(timeout=5)
    assert len(lines) >= 3, lines
    last = lines[-2]  # the one before stop()'s own final line
    if server_kind == "generating":
        assert ", 1 request generating (" in last and "tokens so far, no answer for 1m0" in last, lines
        tokens = [int(line.split("generating (")[1].split()[0]) for line in lines if "generating (" in line]
        assert tokens == sorted(tokens) and tokens[-1] > 0, tokens  # counted up as the request goes
    else:
        assert "generating" not in "".join(lines) and ", no answer from the server for 1m0" in last, lines


def test_ci_logs_get_a_plain_line_even_while_no_item_reports(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A silent server holds every item: the line still comes, from the display's own thread."""
    monkeypatch.setattr(progress, "PLAIN_SECONDS", 0.2)
    monkeypatch.setattr(progress, "TTY_SECONDS", 0.05)
    Board(tmp_path).write_progress({"total": 4, "running": 2, "requests": 2, "started": time.time() - 60})
    written: list[str] = []
    reporter = types.SimpleNamespace(isatty=False, write_line=written.append)
    display = progress.Display(tmp_path / "progress", reporter)
    display.start()
    time.sleep(1.0)
    display.stop()
    assert len(written) >= 3, written  # between_items was never called
    assert "no answer from the server for 1m" in written[0]


def test_ci_logs_get_plain_progress_lines(
    tmp_path: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(progress, "PLAIN_SECONDS", 0.0)
    result = pytester.runpytest(
        "-p",
        "no:randomly",
        "--careful-model=scripted:reference",
        "--careful-concurrency=3",
        f"--careful-output={tmp_path / 'result'}",
        "multi_turn_base_1",
        "multi_turn_base_2",
    )
    lines = [x for x in result.outlines if x.startswith("careful: ") and "conversations done" in x]
    assert lines and lines[-1].startswith("careful: 2/2 conversations done"), result.outlines


def test_a_terminal_gets_a_status_row_and_gets_it_back(tmp_path: Path) -> None:
    """Under a pseudo-terminal: the scroll region that keeps the last row, redrawn, then reset."""
    args = _cli(tmp_path, "--careful-model=scripted:reference", "--careful-category=base", "-p", "no:xdist")
    pid, fd = pty.fork()
    if pid == 0:  # the child: pytest with the pty as its controlling terminal
        os.chdir(tmp_path)
        os.execv(sys.executable, args)
    chunks = []
    while True:
        try:
            data = os.read(fd, 65536)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    os.waitpid(pid, 0)
    out = b"".join(chunks).decode("utf-8", "replace")
    assert "\x1b[1;" in out and "r\x1b8" in out  # the region set
    assert "conversations done" in out  # the row drawn
    assert out.rfind("\x1b[r") > out.rfind("conversations done")  # and given back at the end
