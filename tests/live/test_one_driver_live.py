"""One driver against a vLLM server under xdist (``live/inflight.py``), end to end.

A local model folder (SmolLM2's real tokenizer, no weights: tests/helpers/loopback_model.py)
served by the loopback vLLM stand-in, BFCL's ``Qwen/Qwen3-8B-FC`` handler. Each process of a
session writes its counts to ``flight/progress/<pid>.json``: how many requests it sent is read
from there, what was filed from the result file, what the server saw from the server.

Runs in the venv ``.ci/setup-vllm-cpu`` builds (a vLLM-served model needs transformers
installed, for the counts that decide a request), marked ``vllm_cpu``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from careful_cli import careful_command, filed_once, result_lines
from loopback_vllm import LoopbackVLLM

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None, reason="a vLLM-served model needs transformers installed"
    ),
]

HANDLER = "Qwen/Qwen3-8B-FC"
IDS = [f"multi_turn_base_{i}" for i in range(16)]


def _command(tmp_path: Path, model: Path, server: LoopbackVLLM, *args: str) -> list[str]:
    return careful_command(
        tmp_path,
        f"--careful-model={model}",
        f"--careful-handler={HANDLER}",
        f"--careful-endpoint={server.url}",
        "--careful-gate=none",
        *args,
    )


def _requests_by_process(tmp_path: Path) -> dict[str, int]:
    """Requests each process of the last session sent, from its progress file."""
    [session] = sorted((tmp_path / "result" / ".careful" / "sessions").iterdir())[-1:]
    return {
        f.stem: int(json.loads(f.read_text())["requests"]) for f in (session / "flight" / "progress").glob("*.json")
    }


def _wait_for(condition: Callable[[], bool], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_one_process_sends_every_request_and_files_what_a_single_process_files(
    tmp_path: Path, loopback_model_dir: Path
) -> None:
    filed = {}
    for name, xdist in (("alone", ["-p", "no:xdist"]), ("n2", ["-n", "2"])):
        folder = tmp_path / name
        folder.mkdir()
        with LoopbackVLLM(latency=0.05, models=[str(loopback_model_dir)]) as server:
            proc = subprocess.run(
                _command(folder, loopback_model_dir, server, *xdist, *IDS),
                cwd=folder,
                capture_output=True,
                text=True,
                timeout=600,
            )
            seen = server.stats()
        assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
        filed[name] = filed_once(folder / "result")
        sent = _requests_by_process(folder)
        assert sum(sent.values()) == seen["requests"] > 0
        if name == "n2":
            assert len(sent) == 2 and sorted(sent.values())[0] == 0, sent  # two workers, one of them drives
    assert filed["n2"] == filed["alone"] and sorted(filed["alone"]) == sorted(IDS)


def test_the_driver_killed_mid_run_is_taken_over_and_the_rerun_completes(
    tmp_path: Path, loopback_model_dir: Path
) -> None:
    with LoopbackVLLM(latency=0.3, models=[str(loopback_model_dir)]) as server:
        proc = subprocess.Popen(
            _command(tmp_path, loopback_model_dir, server, "-n", "2", "--careful-concurrency=4", *IDS),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        _wait_for(lambda: len(result_lines(tmp_path / "result", running=True)) >= 3 or proc.poll() is not None)
        drivers = [pid for pid, sent in _requests_by_process(tmp_path).items() if sent > 0]
        assert len(drivers) == 1, drivers
        os.kill(int(drivers[0]), signal.SIGKILL)  # the driver alone: the controller and the other worker go on
        out, _ = proc.communicate(timeout=600)
        assert proc.returncode in (0, 1), out[-3000:]
        took_over = [pid for pid, sent in _requests_by_process(tmp_path).items() if sent > 0 and pid != drivers[0]]
        assert took_over, "nobody took over from the killed driver"
        first = filed_once(tmp_path / "result")  # nothing filed twice, whatever the kill cut
        subprocess.run(
            _command(tmp_path, loopback_model_dir, server, "-n", "2", *IDS),
            cwd=tmp_path,
            capture_output=True,
            timeout=600,
        )
    after = filed_once(tmp_path / "result")
    assert sorted(after) == sorted(IDS)
    assert all(after[i] == result for i, result in first.items())


def test_a_local_model_s_scorecards_are_named_after_its_folder(tmp_path: Path, loopback_model_dir: Path) -> None:
    """``--careful-model=/path/to/DIR``: scorecards in ``cards/DIR/``, results in ``result/standard/DIR-<hash>/``
    (the label was the path made one component, ``_root_.cache_pytest-careful_models_DIR``)."""
    with LoopbackVLLM(latency=0.0, models=[str(loopback_model_dir)]) as server:
        proc = subprocess.run(
            _command(tmp_path, loopback_model_dir, server, "-p", "no:xdist", "multi_turn_base_0"),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=600,
        )
    assert proc.returncode in (0, 1), proc.stdout[-3000:] + proc.stderr[-3000:]
    assert [p.name for p in (tmp_path / "cards").iterdir()] == [loopback_model_dir.name]
    card = json.loads((tmp_path / "cards" / loopback_model_dir.name / "standard" / "scorecard.json").read_text())
    assert card["provenance"]["label"] == loopback_model_dir.name
    [filed] = (tmp_path / "result" / "standard").iterdir()
    assert filed.name.startswith(f"{loopback_model_dir.name}-")
    assert card["provenance"]["result_files"] == str(filed)
