"""Nothing of a live run outlives its command (issue 49): no worker, server or other child process,
and no result line left unwritten, however soon after the last response the command exits.

The run's processes are found by a mark in their environment (``careful_cli.exit_marked``), which
every child inherits; Linux's /proc tells which are still alive once the command has returned.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from careful_cli import careful_command, exit_marked, filed_once, survivors
from loopback_vllm import LoopbackVLLM

MODEL = "gpt-4.1-2025-04-14"
IDS = [f"multi_turn_base_{i}" for i in range(6)]

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_no_process_and_no_unwritten_result_line_survives_the_exit(tmp_path: Path, xdist: list[str]) -> None:
    env, mark = exit_marked({**os.environ, "OPENAI_API_KEY": "sk-loopback"})
    # Latency: every conversation's requests are in flight together, so that the last responses
    # come close to the end and the exit follows them at once.
    with LoopbackVLLM(latency=0.2, models=[MODEL]) as server:
        run = subprocess.run(
            careful_command(tmp_path, f"--careful-model={MODEL}-FC", "--careful-gate=none", *xdist, *IDS),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env={**env, "OPENAI_BASE_URL": server.url},
            timeout=300,
        )
        answered = server.stats()["requests"]
    assert run.returncode in (0, 1), run.stdout[-3000:] + run.stderr[-3000:]
    assert survivors(mark) == []
    # Every conversation filed once, its line whole (a torn last line fails to parse or lacks its newline).
    assert sorted(filed_once(tmp_path / "result")) == IDS
    (result,) = (tmp_path / "result").rglob("BFCL_v4_multi_turn_base_result.json")
    assert result.read_text().endswith("\n")
    card = json.loads(next((tmp_path / "cards").rglob("scorecard.json")).read_text())
    assert card["totals"]["all"]["conversations"] == len(IDS) and answered > len(IDS)
    # A thread or client that outlived the session would print at the interpreter's teardown.
    assert "Exception ignored" not in run.stderr and "Traceback" not in run.stderr, run.stderr[-3000:]


def test_the_mark_finds_a_child_that_outlives_its_parent(tmp_path: Path) -> None:
    """The check above can fail: a command that leaves a sleeping grandchild behind is caught."""
    env, mark = exit_marked(dict(os.environ))
    leave = "import subprocess, sys; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])"
    subprocess.run([sys.executable, "-c", leave], env=env, timeout=60, check=True)
    left = survivors(mark)
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    assert [line.strip() for _, line in left] == [f"{sys.executable} -c import time; time.sleep(30)"]
