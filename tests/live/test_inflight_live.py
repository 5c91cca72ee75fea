"""Many conversations in flight against a real HTTP server (issue 22, point 2), observed, not assumed.

The loopback server (tests/helpers/loopback_vllm.py) counts what it sees: how many requests were in
flight at once, when each arrived, what it answered. The model is ``gpt-4.1-2025-04-14-FC``
(BFCL's OpenAI Responses handler) reached through ``OPENAI_BASE_URL``, as a model team reaches a
gateway; its answers depend only on the request, so a concurrent run must file exactly what a
run of one conversation at a time files.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from careful_cli import careful_command, filed_once, interruptible, result_lines
from loopback_vllm import LoopbackVLLM

MODEL = "gpt-4.1-2025-04-14"
IDS = [f"multi_turn_base_{i}" for i in range(8)]


def _command(tmp_path: Path, *args: str) -> list[str]:
    return careful_command(tmp_path, f"--careful-model={MODEL}-FC", "--careful-gate=none", *args)


def _env(server: LoopbackVLLM) -> dict[str, str]:
    return {**os.environ, "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "sk-loopback"}


def _run(tmp_path: Path, server: LoopbackVLLM, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    tmp_path.mkdir(exist_ok=True)
    proc = subprocess.run(
        _command(tmp_path, *args), cwd=tmp_path, capture_output=True, text=True, env=_env(server), timeout=timeout
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _lines(tmp_path: Path) -> list[dict[str, Any]]:
    return result_lines(tmp_path / "result")


def _results(tmp_path: Path) -> dict[str, Any]:
    return filed_once(tmp_path / "result")


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_the_server_sees_the_concurrency_asked_for_and_the_entries_are_a_serial_runs(
    tmp_path: Path, xdist: list[str]
) -> None:
    ids = IDS[:6]
    # A second per request: far longer than the client's own work between two requests, however
    # loaded the machine, so that four conversations' requests do overlap at the server.
    with LoopbackVLLM(latency=1.0, models=[MODEL]) as server:
        _run(tmp_path / "many", server, *xdist, "--careful-concurrency=4", *ids)
        many = server.stats()
    with LoopbackVLLM(latency=0.02, models=[MODEL]) as server:
        _run(tmp_path / "one", server, "-p", "no:xdist", "--careful-concurrency=1", *ids)
        one = server.stats()
    # Four at once (two per worker under -n 2), never more; one at a time means one.
    assert many["max_in_flight"] == 4, many
    assert one["max_in_flight"] == 1, one
    assert many["requests"] == one["requests"]
    serial = _results(tmp_path / "one")
    assert sorted(serial) == sorted(ids) and _results(tmp_path / "many") == serial


def test_a_rate_limit_pauses_every_conversation_in_flight(tmp_path: Path) -> None:
    """The first request gets 429 with retry-after 2 s: nobody sends until it has passed."""
    with LoopbackVLLM(latency=0.2, models=[MODEL], rate_limited=1, retry_after=2) as server:
        _run(tmp_path, server, "-p", "no:xdist", "--careful-concurrency=4", *IDS[:4])
        records = server.records
    [limited] = [r for r in records if r.status == 429]
    # The four first requests (one per conversation) were on their way with it, however late a busy
    # machine delivered them; every later request waited out the pause (a lower bound only).
    during = [r for r in records if r.number > 4 and r.received < limited.received + 1.9]
    assert not during, [(r.number, round(r.received - limited.received, 2)) for r in during]
    assert sorted(_results(tmp_path)) == IDS[:4]  # the limited one was sent again, and every conversation ran


def _wait_for(condition: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_ctrl_c_stops_requests_in_flight_promptly_and_the_rerun_completes(tmp_path: Path, xdist: list[str]) -> None:
    ids = [f"multi_turn_base_{i}" for i in range(12)]
    with LoopbackVLLM(latency=0.05, models=[MODEL], hang_from=25) as server:
        log = tmp_path / "first.log"
        with log.open("w") as out_file:  # a file, not a pipe nobody reads while it runs
            proc = subprocess.Popen(
                _command(tmp_path, *xdist, "--careful-concurrency=4", *ids),
                cwd=tmp_path,
                env=_env(server),
                stdout=out_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=interruptible,  # the suite may run with SIGINT ignored (nohup)
            )
        # Requests from number 25 on hang, as a stuck server's do: four are held when Ctrl-C comes.
        try:
            _wait_for(lambda: server.stats()["in_flight_now"] >= 4 or proc.poll() is not None)
        except AssertionError:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"{server.stats()}\n{log.read_text()[-3000:]}") from None
        assert proc.poll() is None, log.read_text()[-3000:]
        os.killpg(proc.pid, signal.SIGINT)  # what the terminal sends to the foreground group
        try:  # the held requests never end on their own: only a run that waited for them hangs here
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"still running 120 s after Ctrl-C\n{log.read_text()[-3000:]}") from None
        out = log.read_text()
        assert proc.returncode != 0, out[-3000:]
        before = _results(tmp_path)  # whole lines only, none twice
        assert len(before) < len(ids)
        server.hang_from = None
        server.release()
        _run(tmp_path, server, *xdist, "--careful-concurrency=4", *ids)
    after = _results(tmp_path)
    assert sorted(after) == sorted(ids)
    assert all(after[i] == result for i, result in before.items())  # what was filed stays as it was


def test_kill_9_mid_run_with_workers_in_flight_then_rerun_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    ids = [f"multi_turn_base_{i}" for i in range(24)]
    args = ("-n", "2", "--careful-concurrency=6", *ids)
    with LoopbackVLLM(latency=0.1, models=[MODEL]) as server:
        proc = subprocess.Popen(
            _command(tmp_path, *args),
            cwd=tmp_path,
            env=_env(server),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_for(lambda: len(result_lines(tmp_path / "result", running=True)) >= 4 or proc.poll() is not None)
        os.killpg(proc.pid, signal.SIGKILL)  # the controller and both workers, mid-write or not
        proc.wait()
        before = _results(tmp_path)
        assert 4 <= len(before) < len(ids), f"the kill landed outside the run ({len(before)} filed)"
        server.reset()
        _run(tmp_path, server, *args)
        rerun = server.stats()
    after = _results(tmp_path)
    assert sorted(after) == sorted(ids)
    assert all(after[i] == result for i, result in before.items())
    [card] = (tmp_path / "cards").rglob("scorecard.json")
    rows = json.loads(card.read_text())["rows"]
    assert sorted(r["id"] for r in rows if r["resumed"]) == sorted(before)  # read back, not run again
    assert rerun["requests"] > 0


def test_a_live_run_starts_no_more_workers_than_usable_cpus(tmp_path: Path) -> None:
    """-n 2 on a process pinned to one CPU: one worker, said in a line; it still runs everything."""
    with LoopbackVLLM(latency=0.05, models=[MODEL]) as server:
        proc = subprocess.run(
            _command(tmp_path, "-n", "2", "--careful-concurrency=4", *IDS[:2]),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=_env(server),
            timeout=180,
            preexec_fn=lambda: os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}),
        )
    assert proc.returncode in (0, 1), proc.stdout[-3000:]
    assert "careful: 1 xdist workers, not 2: this machine has 1 usable CPUs" in proc.stdout
    assert sorted(_results(tmp_path)) == IDS[:2]


def test_cap_workers_leaves_scripted_models_remote_specs_and_small_counts_alone() -> None:
    from types import SimpleNamespace

    from pytest_careful.live.inflight import cap_workers

    eight = SimpleNamespace(tx=["popen"] * 8, numprocesses=8)
    assert cap_workers(eight, "vllm", cpus=2) and eight.tx == ["popen"] * 2 and eight.numprocesses == 2
    for kind, tx in (("scripted", ["popen"] * 8), ("vllm", ["popen"] * 2), ("api", ["ssh=host"] * 8), ("api", [])):
        option = SimpleNamespace(tx=list(tx), numprocesses=len(tx))
        assert cap_workers(option, kind, cpus=2) is None and option.tx == tx
