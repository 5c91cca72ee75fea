"""Faults never become verdicts (issue 31), tried as a user meets them: whole commands against a
loopback server, with a fault-injecting proxy in front of it (tests/helpers/fault_proxy.py), a small
tmpfs for a full disk, a read-only remount, a second command, a signal to the controller alone.

The model is ``gpt-4.1-2025-04-14-FC`` (BFCL's OpenAI Responses handler) reached through
``OPENAI_BASE_URL``; the loopback server's answers depend only on the request, so a run through a
faulty server must file exactly what a run through a healthy one files.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from careful_cli import careful_command, filed_once, interruptible, result_lines
from fault_proxy import FaultProxy
from loopback_vllm import LoopbackVLLM

MODEL = "gpt-4.1-2025-04-14"
IDS = [f"multi_turn_base_{i}" for i in range(6)]


def _command(tmp_path: Path, *args: str) -> list[str]:
    return careful_command(tmp_path, f"--careful-model={MODEL}-FC", "--careful-gate=none", *args)


def _env(url: str) -> dict[str, str]:
    return {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-loopback"}


def _run(tmp_path: Path, url: str, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    tmp_path.mkdir(exist_ok=True)
    return subprocess.run(
        _command(tmp_path, *args), cwd=tmp_path, capture_output=True, text=True, env=_env(url), timeout=timeout
    )


def _start(
    tmp_path: Path, url: str, log: Path, *args: str, session: bool = False, sigint: bool = False
) -> subprocess.Popen[bytes]:
    """The command in the background, its output to ``log``; ``session``: a process group of its own;
    ``sigint``: it takes Ctrl-C even where the suite runs with SIGINT ignored."""
    with log.open("w") as out_file:
        return subprocess.Popen(
            _command(tmp_path, *args),
            cwd=tmp_path,
            env=_env(url),
            stdout=out_file,
            stderr=subprocess.STDOUT,
            start_new_session=session,
            preexec_fn=interruptible if sigint else None,
        )


def _lines(output: Path) -> list[dict[str, Any]]:
    return result_lines(output)


def _filed(output: Path) -> dict[str, Any]:
    """The complete entries, by id; none filed twice."""
    return {i: r for i, r in filed_once(output).items() if isinstance(r, list)}


def _rows(tmp_path: Path) -> dict[str, dict[str, Any]]:
    [card] = (tmp_path / "cards").rglob("scorecard.json")
    return {r["id"]: r for r in json.loads(card.read_text())["rows"]}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """What a run through a healthy server files for IDS: what every faulty run must file too."""
    tmp_path = tmp_path_factory.mktemp("healthy")
    with LoopbackVLLM(latency=0.02, models=[MODEL]) as server:
        run = _run(tmp_path, server.url, "-p", "no:xdist", "--careful-concurrency=4", *IDS)
    assert run.returncode == 0, run.stdout[-3000:]
    filed = _filed(tmp_path / "result")
    assert sorted(filed) == sorted(IDS)
    return filed


@pytest.mark.parametrize(
    "faults",
    [{"status": 0.2}, {"not_json": 0.05, "html": 0.05, "empty_json": 0.05}, {"truncated": 0.3}, {"reset": 0.2}],
    ids=["http-500", "garbled-bodies", "truncated-bodies", "resets"],
)
def test_a_flaky_server_changes_no_verdict(tmp_path: Path, healthy: dict[str, Any], faults: dict[str, float]) -> None:
    with LoopbackVLLM(latency=0.02, models=[MODEL]) as server, FaultProxy(server.url, faults=faults, seed=3) as proxy:
        run = _run(tmp_path, proxy.url, "-p", "no:xdist", "--careful-concurrency=4", *IDS)
        injected = proxy.stats()["faults"]
    assert sum(injected.values()) >= 3, injected  # the server did misbehave
    assert run.returncode == 0, run.stdout[-3000:]
    # Every conversation filed, whole and once, exactly as through the healthy server; nothing unscored.
    assert _filed(tmp_path / "result") == healthy
    assert not [line for line in _lines(tmp_path / "result") if not isinstance(line["result"], list)]
    assert all(row["bfcl"]["error_type"] != "careful:server_error" for row in _rows(tmp_path).values())


def test_a_server_that_keeps_failing_leaves_the_conversations_unscored_and_a_rerun_scores_them(
    tmp_path: Path, healthy: dict[str, Any]
) -> None:
    ids = IDS[:2]
    with LoopbackVLLM(latency=0.02, models=[MODEL]) as server, FaultProxy(server.url, faults={"status": 1.0}) as proxy:
        first = _run(tmp_path, proxy.url, "-p", "no:xdist", "--careful-concurrency=2", *ids)
        sent = proxy.stats()["model_requests"]
        rows = _rows(tmp_path)
        assert not _lines(tmp_path / "result")  # nothing filed as the model's: bfcl evaluate sees no error entry
        proxy.faults = {}
        again = _run(tmp_path, proxy.url, "-p", "no:xdist", "--careful-concurrency=2", *ids)
    out = first.stdout
    assert first.returncode == 1, out[-3000:]
    # Bounded: each conversation's first request, sent five times with backoff, each with the SDK's two
    # retries, then nothing more.
    assert sent == len(ids) * 5 * 3, sent
    assert {i: r["bfcl"]["error_type"] for i, r in rows.items()} == dict.fromkeys(ids, "careful:server_error")
    assert all("unscored" in r and not r["bfcl"]["valid"] for r in rows.values())
    assert f"server error: the server at {proxy.url} failed this request 5 times" in out
    assert "HTTP 500" in out and "not the model's answer" in out
    assert "2 unscored (server errors: counted as failures; a rerun of the same command runs the server errors)" in out
    assert again.returncode == 0, again.stdout[-3000:]
    assert _filed(tmp_path / "result") == {i: healthy[i] for i in ids}


def test_a_hung_server_is_sent_each_request_twice_then_the_run_stops_naming_it(
    tmp_path: Path, healthy: dict[str, Any]
) -> None:
    ids = IDS[:4]
    with LoopbackVLLM(latency=0.02, models=[MODEL]) as server, FaultProxy(server.url) as proxy:
        proxy.hang = True  # takes every request and never answers
        first = _run(
            tmp_path, proxy.url, "-p", "no:xdist", "--careful-concurrency=2", "--careful-request-timeout=1.5", *ids
        )
        sent = proxy.stats()["model_requests"]
        rows = _rows(tmp_path)
        proxy.hang = False
        proxy.release()
        again = _run(tmp_path, proxy.url, "-p", "no:xdist", "--careful-concurrency=2", *ids)
    out = first.stdout
    assert first.returncode == 1, out[-3000:]
    assert sent == 4  # two conversations in flight, each request sent twice, then nothing
    [stop] = [line for line in out.splitlines() if line.startswith("run stopped: ")]  # one line, in the summary
    assert stop.startswith(
        f"run stopped: the server at {proxy.url} did not answer within 1.5 s, twice (--careful-request-timeout)"
    ), out[-3000:]
    # The conversations that met it are unscored as the server's; the others were never sent.
    assert {r["bfcl"]["error_type"] for r in rows.values()} == {"careful:server_error"}
    assert "selected but not run" in out or "not run and skipped" in out
    assert again.returncode == 0, again.stdout[-3000:]
    assert _filed(tmp_path / "result") == {i: healthy[i] for i in ids}


def test_two_commands_on_one_output_folder_the_second_refuses_in_one_line_and_sends_nothing(
    tmp_path: Path, healthy: dict[str, Any]
) -> None:
    # The first command's one request in flight hangs: it holds the folder, and sends nothing more.
    with LoopbackVLLM(latency=0.02, models=[MODEL], hang_from=1) as server:
        log = tmp_path / "first.log"
        first = _start(tmp_path, server.url, log, "-p", "no:xdist", "--careful-concurrency=1", *IDS)
        try:
            _wait_for(lambda: server.stats()["in_flight_now"] >= 1 or first.poll() is not None)
            before = server.stats()["requests"]
            second = _run(tmp_path, server.url, "-p", "no:xdist", "--careful-concurrency=2", *IDS, timeout=120)
            assert server.stats()["requests"] == before  # the second sent nothing
        finally:
            server.hang_from = None
            server.release()
            first.wait(timeout=180)
    assert second.returncode == 4, second.stdout[-2000:] + second.stderr[-2000:]
    [error] = [line for line in second.stderr.splitlines() if line.strip()]
    assert f"is being written by another run (pid {first.pid}, since" in error, error
    assert "Traceback" not in second.stdout + second.stderr
    assert first.returncode == 0, log.read_text()[-3000:]
    assert _filed(tmp_path / "result") == healthy  # every conversation once


def _wait_for(condition: Any, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


# ------------------------------------------------------------ signals and crashes (xdist)


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(p) for p in text.split()]


@pytest.mark.slow
def test_sigint_to_the_controller_alone_stops_the_workers_requests_within_a_second(tmp_path: Path) -> None:
    ids = [f"multi_turn_base_{i}" for i in range(30)]
    with LoopbackVLLM(latency=0.3, models=[MODEL]) as server:
        log = tmp_path / "run.log"
        proc = _start(tmp_path, server.url, log, "-n", "2", "--careful-concurrency=6", *ids, session=True, sigint=True)
        try:
            _wait_for(lambda: len(_lines(tmp_path / "result")) >= 3 or proc.poll() is not None)
            assert proc.poll() is None, log.read_text()[-3000:]
            interrupted = time.time()
            os.kill(proc.pid, signal.SIGINT)  # the controller alone, not its process group
            proc.wait(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        late = [round(r.received - interrupted, 2) for r in server.records if r.received > interrupted + 1.0]
    assert not late, f"requests this long after SIGINT: {late}\n{log.read_text()[-3000:]}"
    filed = _filed(tmp_path / "result")
    assert 3 <= len(filed) < len(ids)
    # The scorecard written after the interrupt counts every filed conversation.
    assert set(_rows(tmp_path)) >= set(filed), log.read_text()[-3000:]


@pytest.mark.slow
def test_a_scorecard_after_a_worker_crash_counts_every_filed_conversation(tmp_path: Path) -> None:
    ids = [f"multi_turn_base_{i}" for i in range(24)]
    with LoopbackVLLM(latency=0.1, models=[MODEL]) as server:
        proc = subprocess.Popen(
            _command(tmp_path, "-n", "2", "--careful-concurrency=4", *ids),
            cwd=tmp_path,
            env=_env(server.url),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        _wait_for(lambda: len(_lines(tmp_path / "result")) >= 4 or proc.poll() is not None)
        workers = _children(proc.pid)
        assert workers, "no xdist worker found"
        os.kill(workers[0], signal.SIGKILL)
        out, _ = proc.communicate(timeout=300)
    filed = _filed(tmp_path / "result")
    rows = _rows(tmp_path)
    assert set(rows) >= set(filed), out[-3000:]
    assert "crashed" in out


# ------------------------------------------------------------ the output folder (a small tmpfs)


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Any]:
    """Mounts a tmpfs of a given size (root only), unmounted at the end."""
    mounted: list[Path] = []

    def mount(size: str, name: str = "out") -> Path:
        where = tmp_path / name
        where.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)], capture_output=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here (needs root): {done.stderr.decode().strip()}")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", "-l", str(where)], check=False)


def _remount(where: Path, mode: str) -> None:
    """Remount, again and again while a file is open for writing there (the kernel says "busy")."""
    deadline = time.monotonic() + 30
    while subprocess.run(["mount", "-o", f"remount,{mode}", str(where)], capture_output=True).returncode != 0:
        assert time.monotonic() < deadline, f"could not remount {where} {mode}"
        time.sleep(0.01)


def _stopped_at(output: Path) -> float:
    """When the run stopped: its stop mark's time in the session folder."""
    marks = list(output.rglob("stopped.json"))
    assert marks, "no stop mark"
    return min(m.stat().st_mtime for m in marks)


@pytest.mark.slow
def test_a_full_disk_stops_the_run_at_once_with_whole_lines_and_no_temporary_files(tmp_path: Path, tmpfs: Any) -> None:
    disk = tmpfs("320k")
    output = disk / "result"
    ids = [f"multi_turn_base_{i}" for i in range(60)]
    with LoopbackVLLM(latency=0.05, models=[MODEL]) as server:
        run = _run(tmp_path, server.url, f"--careful-output={output}", "-n", "2", "--careful-concurrency=4", *ids)
        records = server.records
    out = run.stdout
    assert run.returncode == 1, out[-3000:]
    [stop] = [line for line in out.splitlines() if line.startswith("run stopped: ")]  # one line, in the summary
    assert stop.startswith("run stopped: cannot write") and "No space left on device" in stop, out[-3000:]
    assert not [p for p in disk.rglob("*") if p.name.endswith(".tmp")]
    filed = _filed(output)  # whole lines only (a half-written one would not parse)
    assert 0 < len(filed) < len(ids)
    stopped = _stopped_at(output)
    late = [round(r.received - stopped, 2) for r in records if r.received > stopped + 1.0]
    assert not late, f"sent after the stop: {late}"
    # With room again, the same command resumes: nothing filed twice, nothing lost.
    subprocess.run(["cp", "-a", str(output), str(tmp_path / "roomy")], check=True)
    with LoopbackVLLM(latency=0.02, models=[MODEL]) as server:
        again = _run(tmp_path, server.url, f"--careful-output={tmp_path / 'roomy'}", "-n", "2", *ids, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:]
    after = _filed(tmp_path / "roomy")
    assert sorted(after) == sorted(ids) and all(after[i] == r for i, r in filed.items())


@pytest.mark.slow
def test_an_output_made_read_only_mid_run_stops_it_at_once(tmp_path: Path, tmpfs: Any) -> None:
    disk = tmpfs("64m")
    output = disk / "result"
    ids = [f"multi_turn_base_{i}" for i in range(40)]
    marks = Path(tempfile.gettempdir())
    earlier = set(marks.glob("careful-stopped-*"))  # another run's, left by a crash
    with LoopbackVLLM(latency=0.1, models=[MODEL]) as server:
        proc = subprocess.Popen(
            _command(tmp_path, f"--careful-output={output}", "-n", "2", "--careful-concurrency=4", *ids),
            cwd=tmp_path,
            env=_env(server.url),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        _wait_for(lambda: len(_lines(output)) >= 4 or proc.poll() is not None)
        _remount(disk, "ro")
        # The stop mark goes to the temporary folder (the output takes no file now), removed at the end.
        stopped = _first_seen(lambda: bool(set(marks.glob("careful-stopped-*")) - earlier), proc)
        out, _ = proc.communicate(timeout=180)
        records = server.records
    assert proc.returncode == 1, out[-3000:]
    [stop] = [line for line in out.splitlines() if line.startswith("run stopped: ")]  # one line, in the summary
    assert stop.startswith("run stopped: cannot write") and "Read-only file system" in stop, out[-3000:]
    assert stopped is not None, "the run stopped with no mark its other process could see"
    late = [round(r.received - stopped, 2) for r in records if r.received > stopped + 1.0]
    assert not late, f"sent after the stop: {late}"
    assert _filed(output)  # whole lines


def _first_seen(condition: Any, proc: subprocess.Popen[str], timeout: float = 180) -> float | None:
    """When ``condition`` first held while ``proc`` ran (time.time()), or None if it never did."""
    deadline = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < deadline:
        if condition():
            return time.time()
        time.sleep(0.01)
    return None


def test_a_read_only_output_folder_is_refused_in_one_line(tmp_path: Path, tmpfs: Any) -> None:
    disk = tmpfs("1m")
    _remount(disk, "ro")
    with LoopbackVLLM(latency=0.02, models=[MODEL]) as server:
        run = _run(tmp_path, server.url, f"--careful-output={disk / 'result'}", "-p", "no:xdist", *IDS[:1])
        sent = server.stats()["requests"]
    assert run.returncode == 4, run.stdout[-2000:] + run.stderr[-2000:]
    [error] = [line for line in run.stderr.splitlines() if line.strip()]
    assert error.startswith(f"ERROR: --careful-output={disk / 'result'}: cannot write there: Read-only file system")
    assert "INTERNALERROR" not in run.stdout + run.stderr and sent == 0


def test_a_4xx_about_the_request_is_the_models_inference_error_as_bfcl_scores_it(tmp_path: Path) -> None:
    """A prompt past the context length is answered 400: what the model run produced, filed and scored
    as BFCL files and scores it (an inference error), not sent again and not unscored."""
    with LoopbackVLLM(latency=0.02, models=[MODEL]) as server:
        with FaultProxy(server.url, faults={"status": 1.0}, only=[1], status=400) as proxy:
            run = _run(tmp_path, proxy.url, "-p", "no:xdist", "--careful-concurrency=1", IDS[0])
            sent = proxy.stats()["model_requests"]
    assert run.returncode == 1, run.stdout[-3000:]
    assert sent == 1  # not sent again
    [entry] = _lines(tmp_path / "result")
    assert entry["result"].startswith("Error during inference:") and "400" in entry["result"]
    assert _rows(tmp_path)[IDS[0]]["bfcl"]["error_type"] == "multi_turn:inference_error"


@pytest.mark.slow
def test_while_the_server_is_silent_a_ci_log_still_gets_a_line_every_30_s_saying_so(tmp_path: Path) -> None:
    """No item reports while every request hangs: the plain progress line comes all the same (about 75 s)."""
    with LoopbackVLLM(latency=0.02, models=[MODEL]) as server, FaultProxy(server.url) as proxy:
        proxy.hang = True
        run = _run(
            tmp_path, proxy.url, "-p", "no:xdist", "--careful-concurrency=2", "--careful-request-timeout=36", *IDS[:2]
        )
        proxy.release()
    lines = [line for line in run.stdout.splitlines() if "conversations done" in line]
    assert any("2 in flight" in line and "no answer from the server for" in line for line in lines), run.stdout[-3000:]
    assert lines[-1].endswith("; the run stopped"), lines  # and no ETA once it stopped
