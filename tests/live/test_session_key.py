"""One session key per conversation (``live/session_key.py``): the header option, the key's stability,
and the per-conversation view of a client that many threads share.

Whole runs against a router are in tests/live/test_session_key_live.py.
"""

from __future__ import annotations

import argparse
import threading
import types
from pathlib import Path
from typing import Any

import openai
import pytest
from loopback_router import LoopbackRouter
from loopback_vllm import LoopbackVLLM

from pytest_careful.live.pacing import Pause, share
from pytest_careful.live.session_key import SessionKeys, run_digest, speaks_openai
from pytest_careful.sources.live_options import session_header


def test_a_header_name_is_a_token_and_not_one_the_sdk_sets() -> None:
    assert session_header("X-Session-Id") == "x-session-id"  # lowercase, as HTTP/2 sends it
    assert session_header("x-user-id") == "x-user-id"
    assert session_header("None") == ""  # sends none
    for bad in ("x session", "x-session-id:", "", "sessión"):
        with pytest.raises(argparse.ArgumentTypeError, match="not an HTTP header name"):
            session_header(bad)
    for taken in ("Authorization", "content-type", "x-stainless-retry-count"):
        with pytest.raises(argparse.ArgumentTypeError, match="sets that header itself"):
            session_header(taken)


def test_a_bad_header_name_is_one_usage_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "--careful-model=gpt-4.1-2025-04-14-FC", "--careful-session-header=x y", timeout=120
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--careful-session-header: 'x y': not an HTTP header name" in "\n".join(result.errlines)


def test_the_run_part_is_the_same_for_the_same_folder_and_model_and_names_no_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    run = run_digest(tmp_path / "result", "gpt-4.1-2025-04-14-FC")
    assert run_digest(Path("result"), "gpt-4.1-2025-04-14-FC") == run  # a relative folder is the same folder
    assert run_digest(tmp_path / "other", "gpt-4.1-2025-04-14-FC") != run
    assert run_digest(tmp_path / "result", "Qwen_Qwen3-8B-FC") != run
    assert len(run) == 12 and int(run, 16) >= 0 and str(tmp_path) not in run
    keys = SessionKeys("x-session-id", run)
    made = {
        keys.key(c, i, r)
        for c in ("standard", "hints")
        for i in ("multi_turn_base_0", "multi_turn_base_1")
        for r in (1, 2)
    }
    assert len(made) == 8  # one per condition, conversation and repeat
    assert keys.key("hints", "multi_turn_base_1", 2) == f"{run}:hints:multi_turn_base_1:2"


def _handler(url: str, cap: int | None = None) -> Any:
    """What the live source holds of a handler for an OpenAI-compatible server: its client, shared."""
    handler = types.SimpleNamespace(client=openai.OpenAI(base_url=url, api_key="unused"), careful_pause=Pause())
    handler.careful_max_tokens = cap
    share(handler)
    return handler


def test_threads_sharing_one_client_each_send_their_own_key_on_every_request() -> None:
    """As a flight runs them: each conversation's copy of the handler tagged, one client under them all."""
    keys = SessionKeys("x-session-id", "0123456789ab")
    with LoopbackVLLM(latency=0.02) as server, LoopbackRouter([server.url]) as router:
        shared = _handler(router.url, cap=7)
        client = shared.client
        start = threading.Barrier(8)

        def conversation(number: int) -> None:
            own = types.SimpleNamespace(**vars(shared))  # runner.run's copy.copy of the handler
            keys.tag(own, keys.key("standard", f"multi_turn_base_{number}"))
            start.wait()
            for turn in range(3):
                messages = [
                    {"role": "user", "content": f"conversation {number}"},  # the router's digest: the first one
                    {"role": "assistant", "content": "ok"},
                    {"role": "user", "content": f"turn {turn}"},
                ]
                own.client.chat.completions.create(model="m", messages=messages, max_tokens=99)

        threads = [threading.Thread(target=conversation, args=(n,)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        records = router.records
    assert len(records) == 24
    sent = {(r.key, r.conversation) for r in records}
    assert len(sent) == 8 and len({key for key, _ in sent}) == 8  # one key per conversation, never crossed
    assert all(r.status == 200 for r in records)
    assert [r.max_tokens for r in server.records] == [7] * 24  # the cap still applies on each view
    assert shared.client is client and "x-session-id" not in {k.lower() for k in client.default_headers}


def test_a_view_keeps_the_shared_clients_pause_and_connections() -> None:
    with LoopbackVLLM() as server:
        shared = _handler(server.url)
        own = types.SimpleNamespace(**vars(shared))
        SessionKeys("x-user-id", "0123456789ab").tag(own, "k")
        assert own.client is not shared.client
        assert own.client._client is shared.client._client  # one connection pool, one pause hook, one deadline
        assert own.client.default_headers["x-user-id"] == "k"
        assert speaks_openai(own)


def test_a_handler_whose_client_is_another_sdks_is_left_as_it_is() -> None:
    other = types.SimpleNamespace(client=object())
    before = other.client
    SessionKeys("x-session-id", "0123456789ab").tag(other, "k")
    assert other.client is before and not speaks_openai(other)
    assert not speaks_openai(types.SimpleNamespace())  # a scripted model holds no client
