"""The loopback server (tests/helpers/loopback_vllm.py) that bench/live_loopback.py and the concurrency
tests run against: it must batch as vLLM does, and BFCL's own handlers must read its answers as
calls that then run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import openai
import pytest
from loopback_vllm import LoopbackVLLM, RequestRecord, read_only_functions

from pytest_careful.data import dataset
from pytest_careful.effects import declarations
from pytest_careful.live import runner


def _post_many(server: LoopbackVLLM, count: int) -> list[float]:
    """``count`` chat requests at once (one thread each); the seconds each took."""
    client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
    took: list[float] = []

    def one() -> None:
        started = time.monotonic()
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        took.append(time.monotonic() - started)

    threads = [threading.Thread(target=one) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return took


def test_latency_does_not_grow_with_concurrency_up_to_the_cap() -> None:
    with LoopbackVLLM(latency=1.0) as server:
        took = _post_many(server, 8)
        stats = server.stats()
    assert len(took) == 8 and min(took) >= 1.0  # the latency is kept: never early
    # Together, not one after another: all eight were served at once.
    assert stats["requests"] == 8 and stats["max_in_flight"] == 8 and stats["max_running"] == 8
    assert stats["queued"] == 0
    assert 4 < stats["mean_in_flight"] <= 8  # time-weighted over first request .. last response
    assert stats["first_request"] < stats["last_response"]


def test_beyond_max_num_seqs_requests_queue() -> None:
    with LoopbackVLLM(latency=0.5, max_num_seqs=2) as server:
        _post_many(server, 6)
        stats = server.stats()
        records = server.records
    assert stats["max_running"] == 2 and stats["max_in_flight"] >= 3 and stats["queued"] >= 1
    # 6 x 0.5 s of work on 2 slots: at least 1.5 s however the requests arrived
    assert stats["last_response"] - stats["first_request"] >= 1.5 - 0.01
    assert all(r.started is not None and r.answered is not None and r.answered - r.started >= 0.5 for r in records)


def _qwen_handler(url: str) -> Any:
    """BFCL's Qwen/Qwen3-8B-FC handler pointed at ``url``, as spin_up_local_server leaves it
    (its tokenizer only counts prompt tokens to size max_tokens: a word count stands in)."""
    # The class that bfcl-eval's MODEL_CONFIG_MAPPING names for the key (importing the mapping
    # imports every handler: seconds).
    from bfcl_eval.model_handler.local_inference.qwen_fc import QwenFCHandler

    handler = QwenFCHandler(
        model_name="Qwen/Qwen3-8B", temperature=0.001, registry_name="Qwen/Qwen3-8B-FC", is_fc_model=True
    )
    handler.client = openai.OpenAI(base_url=url, api_key="EMPTY")
    handler.tokenizer = type("Words", (), {"tokenize": staticmethod(str.split)})()
    handler.max_context_length, handler.model_path_or_id = 40960, "loopback"
    return handler


def test_qwen_fc_handler_reads_hermes_answers_as_calls_that_run() -> None:
    """Through BFCL's own prompting loop (live/runner): each user turn gets one read-only call of
    the conversation's functions, the call executes on the conversation's simulators, and the
    answer after its result is text, which ends the turn."""
    conversation = dataset.get("multi_turn_base_0")
    names = {f["name"] for f in conversation.functions}
    with LoopbackVLLM(latency=0.0) as server:
        live = runner.run(_qwen_handler(server.url), conversation, runner.RunProtocol("standard", declarations.load()))
        records = server.records
    turns = live.entry["result"]
    assert len(turns) == len(conversation.questions)
    for turn in turns:  # per turn: the call, then the text that ends it
        assert len(turn) == 2 and turn[0].startswith("<tool_call>\n") and "<tool_call>" not in turn[1]
        call = json.loads(turn[0].split("\n")[1])
        assert call["name"] in names and call["name"] in read_only_functions()
    assert [r.api for r in records] == ["completions"] * 2 * len(turns)
    # What the simulators answered each call (a JSON object; BFCL writes "Error during execution:
    # ..." for a call that raised or did not parse). A read may still refuse: not logged in.
    results = [json.loads(r.tool_result or "") for r in records[1::2]]
    assert all(isinstance(r, dict) for r in results) and any("error" not in r for r in results), results
    assert [r.function is None for r in records] == [False, True] * len(turns)


def test_max_output_tokens_caps_what_bfcls_handler_sizes() -> None:
    """--careful-max-output-tokens on vLLM: the smaller of BFCL's own max_tokens and the cap goes out,
    on every request of the loop; without a cap, BFCL's own size (its handler computes it)."""
    from pytest_careful.live.pacing import Pause, share

    conversation = dataset.get("multi_turn_base_0")
    sent: dict[int | None, list[object]] = {}
    for cap in (None, 7):
        with LoopbackVLLM(latency=0.0) as server:
            handler = _qwen_handler(server.url)
            handler.careful_pause, handler.careful_max_tokens = Pause(), cap
            share(handler)
            runner.run(handler, conversation, runner.RunProtocol("standard", declarations.load()))
            sent[cap] = [r.max_tokens for r in server.records]
    assert sent[None] and all(isinstance(m, int) and m > 7 for m in sent[None]), sent
    assert sent[7] == [7] * len(sent[None])


def test_the_same_request_gets_the_same_call() -> None:
    def tool(name: str, *required: str) -> dict[str, Any]:
        properties = {arg: {"type": "string"} for arg in required}
        return {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {"type": "object", "properties": properties, "required": list(required)},
            },
        }

    tools = [tool("rm", "file_name"), tool("ls"), tool("pwd"), tool("cat", "file_name"), tool("touch", "file_name")]
    asked: list[Any] = [{"role": "user", "content": "Tidy my folder"}]
    with LoopbackVLLM() as server:
        chat: Any = openai.OpenAI(base_url=server.url, api_key="unused").chat.completions  # dict messages
        calls = [chat.create(model="m", messages=asked, tools=tools).choices[0].message.tool_calls for _ in range(2)]
        after = chat.create(
            model="m",
            tools=tools,
            messages=[
                *asked,
                {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in calls[0]]},
                {"role": "tool", "tool_call_id": calls[0][0].id, "content": "{}"},
            ],
        )
    first, second = (c[0].function for c in calls)
    assert first.name == second.name and first.name in {"ls", "pwd"}  # read-only, no argument needed (cat's)
    assert after.choices[0].message.tool_calls is None and after.choices[0].message.content


def test_faults_rate_limit_then_server_error_then_normal() -> None:
    with LoopbackVLLM(rate_limited=2, retry_after=7, server_errors=1, error_status=503) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        for expected in (openai.RateLimitError, openai.RateLimitError, openai.InternalServerError):
            with pytest.raises(expected) as caught:
                client.completions.create(model="m", prompt="x")
            if expected is openai.RateLimitError:
                assert caught.value.response.headers["retry-after"] == "7"
        assert client.completions.create(model="m", prompt="x").choices[0].text
        assert server.stats()["by_status"] == {"429": 2, "503": 1, "200": 1}


def test_a_hung_request_waits_until_released_and_stop_ends_it() -> None:
    with LoopbackVLLM(hang_from=1) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=0.5)
        with pytest.raises(openai.APITimeoutError):
            client.completions.create(model="m", prompt="x")
        assert server.stats()["in_flight_now"] == 1
        server.release()
        deadline = time.monotonic() + 60
        while server.stats()["in_flight_now"] and time.monotonic() < deadline:
            time.sleep(0.02)
        assert server.stats()["in_flight_now"] == 0
    with LoopbackVLLM(hang_from=1) as server:
        client = openai.OpenAI(base_url=server.url, api_key="unused", max_retries=0)
        answers: list[object] = []
        threading.Thread(target=lambda: answers.append(_status_of(client)), daemon=True).start()
        while not server.stats()["in_flight_now"]:
            time.sleep(0.01)
        started = time.monotonic()
    # stop() does not wait for the hung request, which would wait for release() for ever.
    assert time.monotonic() - started < 30
    while not answers and time.monotonic() - started < 60:
        time.sleep(0.01)
    record: RequestRecord = server.records[0]
    assert answers == [503] and record.status == 503 and record.answered is not None


def _status_of(client: openai.OpenAI) -> int:
    try:
        client.completions.create(model="m", prompt="x")
    except openai.APIStatusError as error:
        return error.status_code
    return 200


def test_the_plugin_scores_an_openai_fc_model_served_through_openai_base_url(tmp_path: Path) -> None:
    """gpt-4.1-2025-04-14-FC is BFCL's OpenAIResponsesHandler (POST /v1/responses), reached as a
    model team reaches a gateway: OPENAI_BASE_URL and OPENAI_API_KEY."""
    with LoopbackVLLM(latency=0.01, models=["gpt-4.1-2025-04-14"]) as server:
        env = {**os.environ, "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "sk-loopback"}
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-p",
                "no:cacheprovider",
                "-p",
                "no:xdist",
                "-q",
                "--rootdir",
                str(tmp_path),
                f"--careful-output={tmp_path / 'result'}",
                f"--careful-scorecards={tmp_path / 'cards'}",
                "--careful-model=gpt-4.1-2025-04-14-FC",
                "multi_turn_base_1",
                "multi_turn_base_2",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        stats = server.stats()
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    [card] = (tmp_path / "cards").rglob("scorecard.json")
    rows = json.loads(card.read_text())["rows"]
    assert sorted(r["id"] for r in rows) == ["multi_turn_base_1", "multi_turn_base_2"]
    assert all(r["calls"] >= 1 for r in rows)  # the server's calls were decoded and scored
    [results] = (tmp_path / "result").rglob("BFCL_v4_multi_turn_base_result.json")
    entries = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(entries) == 2 and all(isinstance(e["result"], list) for e in entries)
    assert stats["by_status"] == {"200": stats["requests"]} and stats["calls"] == stats["texts"] >= 2
