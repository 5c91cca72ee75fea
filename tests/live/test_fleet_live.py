"""A fleet of servers used as one (``--careful-endpoint=URL,URL,...``, issue 40), end to end.

Loopback vLLM stand-ins (tests/helpers/loopback_vllm.py) on the loopback interface, the plugin in
its own process with a local model folder (SmolLM2's real tokenizer, no weights) and BFCL's
``Qwen/Qwen3-8B-FC`` handler. The servers count what they saw: every request names its
conversation by a digest of its first user message, so where each conversation's requests went
is read from the servers, not from the plugin.

Runs in the venv ``.ci/setup-vllm-cpu`` builds (a vLLM-served model needs transformers
installed), marked ``vllm_cpu``, as test_one_driver_live.py.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import signal
import subprocess
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from careful_cli import careful_command, filed_once, result_lines
from loopback_vllm import LoopbackVLLM, conversation_digest

from pytest_careful.data import dataset

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None, reason="a vLLM-served model needs transformers installed"
    ),
]

HANDLER = "Qwen/Qwen3-8B-FC"
IDS = [f"multi_turn_base_{i}" for i in range(16)]  # no two begin alike (40 and 43 do)
DIGESTS = {conversation_digest(dataset.get(i).questions[0][0]["content"]): i for i in IDS}


@contextlib.contextmanager
def _servers(model: Path, count: int, latency: float, **kwargs: Any) -> Iterator[list[LoopbackVLLM]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(LoopbackVLLM(latency=latency, models=[str(model)], **kwargs)) for _ in range(count)]


def _command(tmp_path: Path, model: Path, servers: list[LoopbackVLLM], *args: str) -> list[str]:
    return careful_command(
        tmp_path,
        f"--careful-model={model}",
        f"--careful-handler={HANDLER}",
        "--careful-endpoint=" + ",".join(s.url for s in servers),
        "--careful-gate=none",
        *args,
    )


def _run(tmp_path: Path, model: Path, servers: list[LoopbackVLLM], *args: str) -> subprocess.CompletedProcess[str]:
    tmp_path.mkdir(exist_ok=True)
    proc = subprocess.run(
        _command(tmp_path, model, servers, *args), cwd=tmp_path, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def _start(tmp_path: Path, model: Path, servers: list[LoopbackVLLM], *args: str, **popen: Any) -> subprocess.Popen[str]:
    """The command in the background, its output together on a pipe (unless ``popen`` says otherwise)."""
    popen.setdefault("stdout", subprocess.PIPE)
    return subprocess.Popen(
        _command(tmp_path, model, servers, *args), cwd=tmp_path, stderr=subprocess.STDOUT, text=True, **popen
    )


def _where(servers: list[LoopbackVLLM]) -> dict[str, Counter[int]]:
    """Each conversation's requests, per server (by index), as the servers counted them."""
    out: dict[str, Counter[int]] = defaultdict(Counter)
    for n, server in enumerate(servers):
        for record in server.records:
            out[DIGESTS[record.conversation]][n] += 1
    return out


def _provenance(tmp_path: Path) -> dict[str, Any]:
    [card] = (tmp_path / "cards").rglob("scorecard.json")
    return dict(json.loads(card.read_text())["provenance"]["live"])


def _wait_for(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_conversations_spread_over_every_server_and_each_stays_on_one(
    tmp_path: Path, loopback_model_dir: Path, xdist: list[str]
) -> None:
    with _servers(loopback_model_dir, 4, 0.05) as servers:
        proc = _run(tmp_path, loopback_model_dir, servers, *xdist, "--careful-concurrency=8", *IDS)
    where = _where(servers)
    assert sorted(where) == sorted(IDS)
    # Sticky: every request of a conversation went to one server.
    assert {i: len(counts) for i, counts in where.items()} == dict.fromkeys(IDS, 1)
    # Spread: every server of the fleet served conversations.
    served = Counter(next(iter(counts)) for counts in where.values())
    assert sorted(served) == [0, 1, 2, 3], served
    assert sorted(filed_once(tmp_path / "result")) == sorted(IDS)
    # The summary says what the servers counted; the scorecard, which server served each conversation.
    line = next(x for x in proc.stdout.splitlines() if x.startswith("servers: "))
    for n, server in enumerate(servers):
        assert f"{server.url} {served[n]} conversation{'s' * (served[n] != 1)}, {len(server.records)} requests" in line
    fleet = _provenance(tmp_path)["fleet"]
    assert fleet["servers"] == [s.url for s in servers]
    assert fleet["served_by"] == {i: servers[next(iter(where[i]))].url for i in IDS}


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory, loopback_model_dir: Path) -> tuple[dict[str, Any], Counter[str]]:
    """What one healthy server files for IDS, and each conversation's requests: what a fleet that lost a server must match."""
    tmp_path = tmp_path_factory.mktemp("healthy")
    with _servers(loopback_model_dir, 1, 0.02) as [alone]:
        _run(tmp_path, loopback_model_dir, [alone], "-p", "no:xdist", *IDS)
    return filed_once(tmp_path / "result"), Counter(DIGESTS[r.conversation] for r in alone.records)


def test_one_server_of_four_stopped_mid_run_its_conversations_move_and_nothing_is_scored_as_a_fault(
    tmp_path: Path, loopback_model_dir: Path, healthy: tuple[dict[str, Any], Counter[str]]
) -> None:
    healthy_filed, healthy_requests = healthy
    run = tmp_path / "fleet"
    run.mkdir()
    with _servers(loopback_model_dir, 4, 0.2) as servers:
        proc = _start(run, loopback_model_dir, servers, "-n", "2", "--careful-concurrency=8", *IDS)
        _wait_for(lambda: len(servers[1].records) >= 3 or proc.poll() is not None)
        servers[1].stop()  # mid-run: requests in flight there are cut, new ones refused
        out, _ = proc.communicate(timeout=600)
    assert proc.returncode in (0, 1), out[-3000:]
    # Every conversation filed once, exactly as through a healthy server; none unscored, no error entry.
    assert filed_once(run / "result") == healthy_filed, out[-3000:]
    assert all(isinstance(line["result"], list) for line in result_lines(run / "result"))
    [card] = (run / "cards").rglob("scorecard.json")
    assert not [r for r in json.loads(card.read_text())["rows"] if "unscored" in r]
    where = _where(servers)
    moved = [i for i, counts in where.items() if 1 in counts and len(counts) > 1]
    assert moved, where  # the stopped server had conversations in flight: they ran again elsewhere
    assert all(len(counts) == 1 for i, counts in where.items() if i not in moved)  # the rest stayed put
    assert all(len(counts) == 2 for i, counts in where.items() if i in moved)  # moved once, to one server
    # Nothing sent twice on the healthy servers: each conversation's requests there are a healthy run's.
    for i, counts in where.items():
        assert sum(c for n, c in counts.items() if n != 1) == healthy_requests[i], (i, counts)
    assert f"server {servers[1].url} stopped answering: {len(moved)} conversation" in out
    assert "run stopped" not in out


def test_a_fleet_run_cut_short_resumes_exactly_and_records_every_conversations_server(
    tmp_path: Path, loopback_model_dir: Path
) -> None:
    with _servers(loopback_model_dir, 2, 0.3) as servers:
        first = _start(
            tmp_path,
            loopback_model_dir,
            servers,
            "-n",
            "2",
            "--careful-concurrency=4",
            *IDS,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )
        _wait_for(lambda: len(result_lines(tmp_path / "result", running=True)) >= 4 or first.poll() is not None)
        os.killpg(first.pid, signal.SIGKILL)  # the whole command, mid-run
        first.wait()
        before = filed_once(tmp_path / "result")
        assert 0 < len(before) < len(IDS)
        sent_first = _where(servers)
        for server in servers:
            server.reset()  # counts afresh: what the rerun sends
        _run(tmp_path, loopback_model_dir, servers, "-n", "2", "--careful-concurrency=4", *IDS)
        again = _where(servers)
    after = filed_once(tmp_path / "result")
    assert sorted(after) == sorted(IDS)
    assert all(after[i] == result for i, result in before.items())  # resumed, not run again
    assert not set(again) & set(before)  # the rerun sent nothing for what was filed
    assert all(len(counts) == 1 for counts in again.values())
    served = _provenance(tmp_path)["fleet"]["served_by"]
    assert sorted(served) == sorted(IDS)
    for i in IDS:  # the server each filed entry came from, in the run that filed it
        where = again[i] if i in again else sent_first[i]
        assert served[i] == servers[next(iter(where))].url, i


def test_a_server_that_hangs_leaves_the_fleet_and_its_conversations_run_on_the_other(
    tmp_path: Path, loopback_model_dir: Path, healthy: tuple[dict[str, Any], Counter[str]]
) -> None:
    """Twice no answer within --careful-request-timeout: one server of two hangs from its third request
    on; its conversations move to the other instead of stopping the run."""
    ids = IDS[:8]
    with _servers(loopback_model_dir, 2, 0.05) as servers:
        servers[1].hang_from = 3
        proc = _run(
            tmp_path,
            loopback_model_dir,
            servers,
            "-p",
            "no:xdist",
            "--careful-concurrency=4",
            "--careful-request-timeout=1",
            *ids,
        )
        where = _where(servers)
    assert filed_once(tmp_path / "result") == {i: healthy[0][i] for i in ids}
    moved = [i for i, counts in where.items() if len(counts) > 1]
    assert moved and all(set(where[i]) == {0, 1} for i in moved)
    assert f"server {servers[1].url} stopped answering: {len(moved)} conversation" in proc.stdout
    assert "run stopped" not in proc.stdout
    [card] = (tmp_path / "cards").rglob("scorecard.json")
    assert not [r for r in json.loads(card.read_text())["rows"] if "unscored" in r]
