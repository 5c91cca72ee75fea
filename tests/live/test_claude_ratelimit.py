"""Rate limits, account-wide errors and BFCL-comparable settings, against the loopback Messages API.

* a 429's ``retry-after`` pauses every process of the run (one shared state file), one wait capped;
* a conversation still rate-limited after every retry is skipped, not scored, and the next run runs it;
* a spend-limit 400, a 404 for the model and a refused key stop the run once, with one line;
* what each request carries is recorded (no temperature), and ``max_tokens`` is BFCL's own.

BFCL's figures are read from bfcl-eval's own ``ClaudeHandler`` here, never typed in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from fake_anthropic import FakeAnthropic, error_body
from test_claude_live import RecordingFake, configured, run, server  # noqa: F401
from test_claude_plugin import IDS, KEY, replay_any_conversation

from pytest_careful.live.backends.claude import client as claude
from pytest_careful.live.backends.claude import ratelimit
from pytest_careful.live.backends.claude.ratelimit import SharedLimiter

SPEND_LIMIT = "You have reached your specified API usage limits. You will regain access on 2026-12-01 at 00:00 UTC."


def bfcl_max_tokens() -> int:
    """What bfcl-eval's ClaudeHandler itself sends as max_tokens for the model (its own method)."""
    from bfcl_eval.model_handler.api_inference.claude import ClaudeHandler

    handler = ClaudeHandler(KEY.removesuffix("-FC"), 0.001, KEY, True)
    return int(handler._get_max_tokens())


def _pytest(tmp_path: Path, fake: FakeAnthropic, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": fake.url}
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
            "-rs",
            f"--careful-output={tmp_path / 'result'}",
            f"--careful-model={KEY}",
            f"--careful-scorecards={tmp_path / 'cards'}",
            *args,
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _result_ids(tmp_path: Path) -> list[str]:
    files = list((tmp_path / "result").rglob("BFCL_v4_multi_turn_base_result.json"))
    return [json.loads(line)["id"] for f in files for line in f.read_text().splitlines()]


# ---------------------------------------------------------------- the shared limiter


def test_a_throttle_halves_the_shared_limit_and_pauses_every_process(tmp_path: Path) -> None:
    path = ratelimit.limiter_file(tmp_path)
    one, other = SharedLimiter(path, maximum=4), SharedLimiter(path, maximum=4)  # two workers
    assert one.throttled(0.6) == 0.6
    assert other.snapshot()["limit"] == 2
    started = time.monotonic()
    with other.slot():  # the other worker waits out the pause the first one met
        waited = time.monotonic() - started
    assert waited >= 0.5
    for _ in range(2):  # as many answers in a row as the limit: one more slot
        one.answered()
    assert other.snapshot()["limit"] == 3
    assert one.throttled(3600) == ratelimit.MAX_WAIT  # one wait is capped


def test_no_more_requests_in_flight_than_the_limit(tmp_path: Path) -> None:
    limiter = SharedLimiter(ratelimit.limiter_file(tmp_path), maximum=2)
    inside, most = [0], [0]
    lock = threading.Lock()

    def attempt() -> None:
        with SharedLimiter(limiter.path, maximum=2).slot():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.3)
            with lock:
                inside[0] -= 1

    threads = [threading.Thread(target=attempt) for _ in range(5)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert most[0] == 2 and limiter.snapshot()["in_flight"] == {}


# ---------------------------------------------------------------- through the SDK


def test_retry_after_is_obeyed_by_every_worker(server: RecordingFake, tmp_path: Path) -> None:  # noqa: F811
    handler, _ = configured(tmp_path)
    server.fail_next(429, headers={"retry-after": "1"})
    started = time.monotonic()
    run(handler)
    assert time.monotonic() - started >= 0.9  # the server's wait, not the SDK's backoff
    state = SharedLimiter(ratelimit.limiter_file(tmp_path)).snapshot()
    assert state["throttles"] == 1 and state["in_flight"] == {}


def test_a_long_retry_after_is_capped(
    server: RecordingFake,
    tmp_path: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for module in (claude, ratelimit):
        monkeypatch.setattr(module, "MAX_WAIT", 0.5)
    monkeypatch.setattr(claude, "MAX_RETRY_AFTER", 0.5)
    handler, _ = configured(tmp_path)
    server.fail_next(429, headers={"retry-after": "3600"})
    waits: list[float] = []
    sleep = time.sleep

    def recorded(seconds: float) -> None:  # the waits asked for; an uncapped one is cut short, and seen
        waits.append(seconds)
        sleep(min(seconds, 1.0))

    monkeypatch.setattr(time, "sleep", recorded)
    run(handler)
    assert server.requests_failed == 1
    assert 0.5 in waits and max(waits) <= 0.5, waits  # the capped wait, and nothing longer


def test_a_rate_limit_the_server_says_not_to_retry_is_left_for_the_next_run(  # noqa: F811
    server: RecordingFake, tmp_path: Path
) -> None:
    """``x-should-retry: false`` on a 429 ends the retries, but the conversation is still not the
    model's failure: not run (skipped, nothing written), not BFCL's inference error."""
    handler, _ = configured(tmp_path)
    server.fail_next(429, headers={"x-should-retry": "false"})
    with pytest.raises(claude.OutOfRetries, match="said not to retry"):
        run(handler)
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "status, message, says",
    [
        (400, SPEND_LIMIT, "reached its API usage limit"),
        (404, "model: claude-haiku-4-5-20251001", "does not know the model"),
        (401, "invalid x-api-key", "refused this key"),
    ],
)
def test_account_wide_errors_stop_at_the_first_request(
    server: RecordingFake,
    tmp_path: Path,  # noqa: F811
    status: int,
    message: str,
    says: str,
) -> None:
    handler, _ = configured(tmp_path)
    server.fail_next(status, body=error_body("error", message), times=10)
    with pytest.raises(claude.AccountProblem, match=says) as caught:
        run(handler)
    assert len(server.requests) == 1 and "\n" not in str(caught.value)


# ---------------------------------------------------------------- whole runs (plugin)


def test_items_out_of_retries_are_skipped_unscored_and_run_next_time(tmp_path: Path) -> None:
    with FakeAnthropic(replay_any_conversation) as fake:
        fake.fail_next(429, headers={"retry-after-ms": "1"}, times=claude.MAX_RETRIES + 1)
        first = _pytest(tmp_path, fake, "-p", "no:xdist", IDS[0])
        assert first.returncode == 0, first.stdout[-3000:]  # not a model failure
        assert "1 skipped" in first.stdout and "RateLimitError" in first.stdout
        assert "1 conversation(s) not run and skipped (not scored)" in first.stdout
        assert _result_ids(tmp_path) == []  # nothing written: not scored as BFCL's inference error
        again = _pytest(tmp_path, fake, "-p", "no:xdist", IDS[0])
    assert again.returncode == 0 and "1 passed" in again.stdout, again.stdout[-3000:]
    assert _result_ids(tmp_path) == [IDS[0]]


@pytest.mark.parametrize("xdist", [("-p", "no:xdist"), ("-n", "2")], ids=["no-xdist", "n2"])
@pytest.mark.parametrize("concurrency", [1, 3])
def test_a_spend_limit_stops_the_run_once(tmp_path: Path, xdist: tuple[str, str], concurrency: int) -> None:
    with FakeAnthropic(replay_any_conversation) as fake:
        fake.fail_next(400, body=error_body("invalid_request_error", SPEND_LIMIT), times=100)
        run = _pytest(tmp_path, fake, *xdist, f"--careful-concurrency={concurrency}", *IDS)
        sent = len(fake.requests)
    out = run.stdout
    assert run.returncode == 1, out[-3000:]
    # One conversation fails with the reason; the others are skipped: those in flight when the
    # answer came had sent one request each, the rest none.
    in_flight = concurrency if xdist[0] == "-p" else max(concurrency, 2)
    assert "1 failed" in out and "2 skipped" in out and sent <= in_flight
    assert out.count("run stopped: the Anthropic account reached its API usage limit") == 1


def test_what_is_sent_is_recorded_and_compared_with_bfcl(tmp_path: Path) -> None:
    with FakeAnthropic(replay_any_conversation) as fake:
        default = _pytest(tmp_path, fake, "-p", "no:xdist", IDS[0])
        bodies = [r.body for r in fake.requests if r.body]
    assert default.returncode == 0, default.stdout[-3000:]
    assert bodies and all(b["max_tokens"] == bfcl_max_tokens() and "temperature" not in b for b in bodies)
    settings = json.loads(next((tmp_path / "result").rglob("careful_settings.json")).read_text())
    assert "temperature" not in settings and settings["max_output_tokens"] == bfcl_max_tokens()
    card = json.loads(next((tmp_path / "cards").rglob("scorecard.json")).read_text())
    live = card["provenance"]["live"]
    assert live["sent"]["temperature"] is None and live["sent"]["max_tokens"] == bfcl_max_tokens()
    assert live["resolution"]["registry_key"] == KEY and live["resolution"]["mode"] == "FC"
    assert "no temperature sent" in card["provenance"]["sampling"]
    assert "differs from BFCL: Claude: no temperature is sent" in default.stdout
    assert "max_tokens" not in default.stdout.split("differs from BFCL")[-1].split("\n")[0]
    (tmp_path / "b").mkdir()
    with FakeAnthropic(replay_any_conversation) as fake:
        smaller = _pytest(tmp_path / "b", fake, "-p", "no:xdist", "--careful-max-output-tokens=300", IDS[0])
    assert (
        f"max_tokens 300 (--careful-max-output-tokens); BFCL's handler sends {bfcl_max_tokens()}" in smaller.stdout
    ), smaller.stdout[-3000:]
