"""``pytest --careful-model=claude-...`` end to end: plugin, xdist, real SDK, loopback API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from fake_anthropic import FakeAnthropic, text_block, tool_use_block
from open_clients import COUNTING, clients_left

from pytest_careful.data import dataset
from pytest_careful.live.backends.scripted import call_to_fc

KEY = "claude-haiku-4-5-20251001-FC"
IDS = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]


def _first_text(messages: list[dict[str, Any]]) -> str:
    for block in messages[0]["content"]:
        if isinstance(block, dict) and block.get("type") == "text":
            return str(block["text"])
    return ""


def replay_any_conversation(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Find the conversation by its first request, then replay its reference turn by turn."""
    messages = body["messages"]
    first = _first_text(messages)
    conversation = next(
        c for c in dataset.load(["multi_turn_base"]) if c.questions[0] and c.questions[0][-1]["content"] == first
    )
    opened = [
        m
        for m in messages
        if m["role"] == "user" and any(isinstance(b, dict) and b.get("type") == "text" for b in m["content"])
    ]
    calls = conversation.ground_truth[len(opened) - 1]
    if messages[-1] is not opened[-1] or not calls:
        return [text_block("Done.")]
    blocks = []
    for call in calls:
        [(name, arguments)] = call_to_fc(call, conversation.involved_classes).items()
        blocks.append(tool_use_block(name, json.loads(arguments)))
    return blocks


def _pytest(tmp_path: Path, server: FakeAnthropic, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": server.url}
    env.pop("CAREFUL_RUN_ID", None)
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            f"--careful-output={tmp_path / 'result'}",
            *args,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_claude_run_under_xdist_writes_bfcl_results_and_spend(tmp_path: Path) -> None:
    with FakeAnthropic(replay_any_conversation) as server:
        run = _pytest(
            tmp_path,
            server,
            f"--careful-model={KEY}",
            "-n",
            "2",
            "--careful-budget-usd=5",
            f"--careful-scorecards={tmp_path / 'live'}",
            *IDS,
        )
        assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
        assert "spend this run: $" in run.stdout and "of a $5.00 cap" in run.stdout
        sent = len(server.requests)
        # Rerun: everything is read back, no request is made.
        again = _pytest(
            tmp_path, server, f"--careful-model={KEY}", "-n", "2", f"--careful-scorecards={tmp_path / 'again'}", *IDS
        )
        assert again.returncode == 0 and len(server.requests) == sent
    assert "3 of 3 conversations read back" in again.stdout
    folder = tmp_path / "result/standard" / KEY.replace("/", "_") / "multi_turn"
    lines = [json.loads(x) for x in (folder / "BFCL_v4_multi_turn_base_result.json").read_text().splitlines()]
    assert sorted(e["id"] for e in lines) == IDS
    assert all(e["careful_cost_usd"]["list"] <= e["careful_cost_usd"]["conservative"] for e in lines)
    assert all(isinstance(e["result"], list) for e in lines)
    rescored = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            f"--careful-results={folder.parent}",
            f"--careful-model={KEY}",
            f"--careful-scorecards={tmp_path / 're'}",
            *IDS,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert rescored.returncode == 0, rescored.stdout[-2000:]
    name = KEY.replace("/", "_")
    live = json.loads((tmp_path / "live" / name / "standard/scorecard.json").read_text())["rows"]
    again_rows = json.loads((tmp_path / "re" / name / "standard/scorecard.json").read_text())["rows"]
    drop = ("resumed", "seconds", "cost_usd")
    assert [{k: v for k, v in r.items() if k not in drop} for r in sorted(live, key=lambda r: r["id"])] == [
        {k: v for k, v in r.items() if k not in drop} for r in sorted(again_rows, key=lambda r: r["id"])
    ]


def test_budget_cap_stops_the_run_with_a_clear_message(tmp_path: Path) -> None:
    with FakeAnthropic(replay_any_conversation) as server:
        run = _pytest(tmp_path, server, f"--careful-model={KEY}", "-p", "no:xdist", "--careful-budget-usd=0.01", *IDS)
    assert run.returncode == 1
    assert "budget" in run.stdout.lower() and "model run failed" in run.stdout
    # The run stops once: the conversation that met the cap fails, the others are not sent.
    assert "1 failed" in run.stdout and "2 skipped" in run.stdout and "run stopped: budget" in run.stdout


@pytest.mark.parametrize("concurrency", [1, len(IDS)])
def test_exhausted_credit_stops_at_once(tmp_path: Path, concurrency: int) -> None:
    with FakeAnthropic(replay_any_conversation) as server:
        server.exhaust_credit()
        run = _pytest(
            tmp_path, server, f"--careful-model={KEY}", "-p", "no:xdist", f"--careful-concurrency={concurrency}", *IDS
        )
        # No retry: one request per conversation in flight when the answer came, none after it.
        assert len(server.requests) <= concurrency
    assert run.returncode == 1 and "credit balance is too low" in run.stdout
    assert "1 failed" in run.stdout and f"{len(IDS) - 1} skipped" in run.stdout


def test_a_rejected_request_is_scored_as_bfcl_scores_it_and_retried_next_time(tmp_path: Path) -> None:
    too_long = {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "prompt is too long: 250000 tokens > 200000 maximum"},
    }
    with FakeAnthropic(replay_any_conversation) as server:
        server.fail_next(status=400, body=too_long)
        run = _pytest(
            tmp_path,
            server,
            f"--careful-model={KEY}",
            "-p",
            "no:xdist",
            f"--careful-scorecards={tmp_path / 'cards'}",
            IDS[0],
        )
        assert run.returncode == 1 and "scored as an inference error" in run.stdout, run.stdout[-2000:]
        card = json.loads((tmp_path / "cards" / KEY / "standard/scorecard.json").read_text())
        # The row exists, as BFCL's verdict on the error entry (bfcl evaluate counts it too).
        assert [r["bfcl"]["valid"] for r in card["rows"]] == [False]
        again = _pytest(tmp_path, server, f"--careful-model={KEY}", "-p", "no:xdist", IDS[0])
    assert again.returncode == 0, again.stdout[-2000:]  # retried, not served from the file


CLIENT_MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}


@pytest.mark.parametrize("mode", list(CLIENT_MODES))
def test_a_live_claude_run_leaves_no_client_alive(
    pytester: pytest.Pytester, mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Claude on the loopback API: the preflight's client, the probe's, the handler's and the decoder's."""
    pytester.makeconftest(COUNTING)
    with FakeAnthropic(replay_any_conversation) as server:
        monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", server.url)
        monkeypatch.delenv("CAREFUL_RUN_ID", raising=False)
        result = pytester.runpytest_subprocess(
            "-p",
            "no:cacheprovider",
            *CLIENT_MODES[mode],
            f"--careful-model={KEY}",
            f"--careful-output={pytester.path / 'result'}",
            "multi_turn_base_0",
            "multi_turn_base_1",
        )
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stdout.str()[-2000:]
    assert os.listdir(pytester.path / "result")  # it ran live
    assert clients_left(pytester.path, 1 if mode == "no-xdist" else 3) == []
