"""One session key per conversation and repeat, as a router in front of several servers sees it (issue 49).

Loopback vLLM stand-ins (tests/helpers/loopback_vllm.py) behind a loopback router that hashes on the
session header (tests/helpers/loopback_router.py), the plugin in its own process. Which conversation a
request is of is read from its body by the router (a digest of the first user message, as the servers
count it), never from the key, so "one key per conversation" and "every request of a conversation on
one server" are checked against what was sent.

The lean venv's model is ``gpt-4.1-2025-04-14-FC`` (BFCL's OpenAI Responses handler) reached through
``OPENAI_BASE_URL``, as tests/live/test_faults_live.py runs it; the fleet's failover needs a vLLM-served
model (transformers), so that test is marked ``vllm_cpu`` as tests/live/test_fleet_live.py is.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from careful_cli import careful_command, filed_once
from fault_proxy import FaultProxy
from loopback_router import LoopbackRouter, RouteRecord
from loopback_vllm import LoopbackVLLM, conversation_digest

from pytest_careful.data import dataset

MODEL = "gpt-4.1-2025-04-14"
IDS = [f"multi_turn_base_{i}" for i in range(8)]  # no two begin alike
DIGESTS = {conversation_digest(dataset.get(i).questions[0][0]["content"]): i for i in IDS}
MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}


@contextlib.contextmanager
def _servers(count: int, model: str = MODEL, **kwargs: Any) -> Iterator[list[LoopbackVLLM]]:
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(LoopbackVLLM(latency=0.02, models=[model], **kwargs)) for _ in range(count)]


def _run(tmp_path: Path, url: str, *args: str) -> subprocess.CompletedProcess[str]:
    tmp_path.mkdir(exist_ok=True)
    env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-loopback"}
    command = careful_command(tmp_path, f"--careful-model={MODEL}-FC", "--careful-gate=none", *args)
    proc = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=600)
    assert "Traceback" not in proc.stdout + proc.stderr, (proc.stdout + proc.stderr)[-3000:]
    return proc


def _by_key(records: list[RouteRecord]) -> dict[str | None, list[RouteRecord]]:
    out: dict[str | None, list[RouteRecord]] = defaultdict(list)
    for record in records:
        out[record.key].append(record)
    return out


def _sessions(tmp_path: Path) -> list[dict[str, Any]]:
    """``provenance.live.session`` of every scorecard the run wrote."""
    cards = sorted((tmp_path / "cards").rglob("scorecard.json"))
    assert cards
    return [json.loads(card.read_text())["provenance"]["live"].get("session") for card in cards]


def _one_server_per_key(records: list[RouteRecord]) -> dict[str, tuple[str, int]]:
    """Each key's conversation (by the body's digest) and server: exactly one of each, or the assertion says which."""
    out = {}
    for key, sent in _by_key(records).items():
        assert key is not None, [r for r in sent][:3]  # every model request carried a key
        conversations = {DIGESTS[r.conversation] for r in sent}
        backends = {r.backend for r in sent}
        assert len(conversations) == 1 and len(backends) == 1, (key, conversations, backends)
        [conversation], [backend] = conversations, backends
        assert backend is not None
        out[key] = (conversation, backend)
    return out


@pytest.mark.parametrize("mode", list(MODES))
def test_every_request_of_a_conversation_carries_its_key_and_reaches_one_server(tmp_path: Path, mode: str) -> None:
    # Each server's first two requests fail (500): the OpenAI SDK sends them again, with the same key.
    with _servers(3, server_errors=2) as servers, LoopbackRouter([s.url for s in servers]) as router:
        proc = _run(tmp_path, router.url, *MODES[mode], "--careful-concurrency=4", "--careful-repeat=2", *IDS)
    assert proc.returncode == 0, proc.stdout[-3000:]
    records = router.records
    assert {DIGESTS[r.conversation] for r in records} == set(IDS)
    placed = _one_server_per_key(records)
    # One key per conversation and repeat: 2 per conversation, 16 in all, none shared.
    keys_of: dict[str, set[str]] = defaultdict(set)
    for key, (conversation, _) in placed.items():
        keys_of[conversation].add(key)
    assert {c: len(k) for c, k in keys_of.items()} == dict.fromkeys(IDS, 2)
    assert len({r.backend for r in records}) > 1  # the keys spread over the servers
    retried = [r for r in records if r.status == 500]
    assert retried  # the servers did fail some requests...
    for failed in retried:  # ...and each was sent again with its key, to its server, and answered there
        answered = [r for r in _by_key(records)[failed.key] if r.number > failed.number and r.status == 200]
        assert answered and answered[0].backend == failed.backend
    # The scorecards record the header and each conversation's key: the keys the router saw.
    for session in _sessions(tmp_path):
        assert session["header"] == "x-session-id"
        assert set(session["keys"]) == set(IDS) | {f"{i}@repeat-2" for i in IDS}
        for name, key in session["keys"].items():
            assert placed[key][0] == name.split("@")[0], (name, key)
            assert key.startswith(session["run"] + ":") and key.endswith(":2" if "@" in name else ":1")


def test_without_a_session_header_the_router_spreads_a_conversation_over_its_servers(tmp_path: Path) -> None:
    """The control: the same router, no key sent (``--careful-session-header=none``)."""
    with _servers(3) as servers, LoopbackRouter([s.url for s in servers]) as router:
        proc = _run(
            tmp_path, router.url, "-p", "no:xdist", "--careful-concurrency=4", "--careful-session-header=none", *IDS
        )
    assert proc.returncode == 0, proc.stdout[-3000:]
    records = router.records
    assert records and all(r.key is None for r in records)
    where: dict[str, set[int | None]] = defaultdict(set)
    for record in records:
        where[DIGESTS[record.conversation]].add(record.backend)
    assert any(len(backends) > 1 for backends in where.values()), where
    assert _sessions(tmp_path) == [None]  # nothing recorded as sent


def test_the_key_survives_the_guards_retries_and_a_rerun_sends_each_conversation_its_key_again(
    tmp_path: Path,
) -> None:
    """Every request fails at first (each sent 5 times by the fault guard, each time with the SDK's 2
    retries): the conversations are left unscored, and the rerun sends them again; another header name."""
    ids = IDS[:3]
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(LoopbackVLLM(latency=0.02, models=[MODEL])) for _ in range(2)]
        proxies = [stack.enter_context(FaultProxy(s.url, faults={"status": 1.0})) for s in servers]
        router = stack.enter_context(LoopbackRouter([p.url for p in proxies], header="x-user-id"))
        args = ("-p", "no:xdist", "--careful-concurrency=3", "--careful-session-header=X-User-Id", *ids)
        first = _run(tmp_path, router.url, *args)
        filed_first = filed_once(tmp_path / "result")
        failing = router.records
        router.reset()
        for proxy in proxies:
            proxy.faults = {}
        again = _run(tmp_path, router.url, *args)
        rerun = router.records
    assert first.returncode == 1 and not filed_first, first.stdout[-3000:]
    assert again.returncode == 0, again.stdout[-3000:]
    assert sorted(filed_once(tmp_path / "result")) == sorted(ids)
    before, after = _one_server_per_key(failing), _one_server_per_key(rerun)
    assert {DIGESTS[r.conversation] for r in failing} == set(ids)
    # Each conversation's first request: 5 x 3 attempts, all with one key, all to one server.
    assert sorted(len(sent) for sent in _by_key(failing).values()) == [15] * len(ids)
    assert all(r.status == 500 for r in failing)
    # The rerun sent each conversation the key it had, and the router put it on the same server.
    assert {c: k for k, (c, _) in after.items()} == {c: k for k, (c, _) in before.items()}
    assert after == before
    [session] = _sessions(tmp_path)
    assert session["header"] == "x-user-id"
    assert {session["keys"][c] for c in ids} == set(after)


# ---------------------------------------------------------------- a fleet's failover


def _wait_for(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@pytest.mark.vllm_cpu
@pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None, reason="a vLLM-served model needs transformers installed"
)
def test_a_conversation_moved_to_another_server_of_a_fleet_sends_the_same_key_there(
    tmp_path: Path, loopback_model_dir: Path
) -> None:
    """Two servers used as a fleet (``--careful-endpoint=A,B``), each seen through a router of its own
    (one backend: it records what arrives); A's router stops mid-run, and its conversations run again on B."""
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(LoopbackVLLM(latency=0.2, models=[str(loopback_model_dir)])) for _ in range(2)]
        routers = [stack.enter_context(LoopbackRouter([s.url])) for s in servers]
        command = careful_command(
            tmp_path,
            f"--careful-model={loopback_model_dir}",
            "--careful-handler=Qwen/Qwen3-8B-FC",
            "--careful-endpoint=" + ",".join(r.url for r in routers),
            "--careful-gate=none",
            "-n",
            "2",
            "--careful-concurrency=6",
            *IDS,
        )
        proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        _wait_for(lambda: len(routers[0].records) >= 3 or proc.poll() is not None)
        routers[0].stop()  # mid-run: A is gone for the plugin (connection refused)
        out, _ = proc.communicate(timeout=600)
    assert proc.returncode in (0, 1), out[-3000:]
    assert sorted(filed_once(tmp_path / "result")) == sorted(IDS), out[-3000:]
    seen: dict[str, dict[int, set[str | None]]] = defaultdict(lambda: defaultdict(set))
    for n, router in enumerate(routers):
        for record in router.records:
            seen[DIGESTS[record.conversation]][n].add(record.key)
    moved = [c for c, where in seen.items() if len(where) == 2]
    assert moved, seen  # A had conversations in flight: they ran again on B
    for conversation, where in seen.items():  # one key per conversation, on both servers
        keys = set().union(*where.values())
        assert len(keys) == 1 and None not in keys, (conversation, where)
    assert len({next(iter(set().union(*w.values()))) for w in seen.values()}) == len(IDS)
    assert f"server {routers[0].url} stopped answering" in out
