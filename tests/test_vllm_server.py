"""The session server's life cycle, with stand-in server programs (the real engine: test_vllm_cpu.py)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest

from pytest_careful.live import vllm_server
from pytest_careful.live.vllm_server import ServerDied, ServerPlan

# Serves /v1/models like vLLM, after a short load time; argv as vLLM's api_server gets it.
FAKE_VLLM = """#!{python}
import json, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
port, name = int(args[args.index("--port") + 1]), args[args.index("--served-model-name") + 1]
print("loading weights", flush=True)
time.sleep(1.5)

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        data = json.dumps({{"data": [{{"id": name}}]}}).encode()
        self.send_response(200); self.send_header("content-length", str(len(data))); self.end_headers()
        self.wfile.write(data)

HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

CRASHING = "#!/bin/sh\necho 'RuntimeError: no CUDA device and no CPU backend'\nexit 3\n"


def _program(tmp_path: Path, text: str) -> str:
    path = tmp_path / "python"
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _plan(tmp_path: Path, python: str, **kwargs: object) -> ServerPlan:
    # A local model directory: nothing to fetch from a hub (test_hub.py tests the fetch).
    (tmp_path / "model").mkdir(exist_ok=True)
    return ServerPlan(model=str(tmp_path / "model"), endpoint=None, dtype="float32", python=python,
                      log_path=tmp_path / "logs" / "vllm-server.log", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize("own, expected", [(8192, 8192), (131072, 65536), (None, None)])
def test_context_length_is_capped_at_65536(tmp_path: Path, own: int | None, expected: int | None) -> None:
    if own is not None:
        (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": own}))
    assert vllm_server.context_length(str(tmp_path)) == expected


def test_command_serves_the_name_the_handler_sends(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model/config.json").write_text(json.dumps({"max_position_embeddings": 4096}))
    plan = _plan(tmp_path, sys.executable, extra_args=("--enforce-eager",))
    command = plan.command(8123)
    model = str(tmp_path / "model")
    assert command[command.index("--model") + 1] == command[command.index("--served-model-name") + 1] == model
    assert command[command.index("--max-model-len") + 1] == "4096"
    assert command[command.index("--dtype") + 1] == "float32" and command[-1] == "--enforce-eager"


def test_start_waits_with_progress_then_stops_the_process_group(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _program(tmp_path, FAKE_VLLM.format(python=sys.executable)))
    lines: list[str] = []
    endpoint = vllm_server.start(plan, lines.append)
    try:
        assert lines[0].startswith("waiting for the vLLM server") and lines[-1].startswith("vLLM server ready")
        assert vllm_server.served_models(endpoint) == [plan.model]
        assert "loading weights" in plan.log_path.read_text()  # the server's output goes to the log
    finally:
        vllm_server.stop(plan)
    assert plan.process is not None and plan.process.poll() is not None
    assert not vllm_server.healthy(endpoint, timeout=1)


def test_a_server_that_dies_while_starting_is_reported_with_its_log(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _program(tmp_path, CRASHING))
    with pytest.raises(ServerDied, match="exited with code 3") as caught:
        vllm_server.start(plan, lambda line: None)
    assert "no CUDA device" in str(caught.value) and str(plan.log_path) in str(caught.value)


def test_failed_start_is_reported_once_and_sets_nothing_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (vllm_server.ENDPOINT_ENV, vllm_server.LOG_ENV):
        monkeypatch.delenv(name, raising=False)
    plan = _plan(tmp_path, _program(tmp_path, CRASHING))
    problem = vllm_server.start_for_session(plan, lambda line: None)
    assert problem and "exited with code 3" in problem  # the session exits with it (session.py)
    assert vllm_server.ENDPOINT_ENV not in os.environ
    with pytest.raises(ServerDied, match="no vLLM server"):
        vllm_server.endpoint_of(_plan(tmp_path, sys.executable))


def test_the_server_is_stopped_when_pytest_gets_sigterm(tmp_path: Path) -> None:
    """A CI timeout sends SIGTERM: the server must not outlive the session."""
    script = tmp_path / "session.py"
    script.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from pytest_careful.live import vllm_server as v\n"
        f"plan = v.ServerPlan(model={str(tmp_path)!r}, endpoint=None, dtype='float32', python={_program(tmp_path, FAKE_VLLM.format(python=sys.executable))!r},"
        f" log_path=Path({str(tmp_path / 'log')!r}))\n"
        "assert v.start_for_session(plan, print) is None\n"
        "print('PID', plan.process.pid, flush=True)\n"
        "time.sleep(60)\n")
    session = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    assert session.stdout is not None
    pid = next(int(line.split()[1]) for line in session.stdout if line.startswith("PID"))
    session.send_signal(signal.SIGTERM)
    assert session.wait(timeout=60) == -signal.SIGTERM
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.1)
    assert not _alive(pid)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its parent) counts as gone.
    return "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def test_connection_error_with_the_server_gone_ends_the_run(tmp_path: Path) -> None:
    plan = _plan(tmp_path, sys.executable)
    plan.endpoint = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    error = openai.APIConnectionError(request=None)  # type: ignore[arg-type]
    assert isinstance(vllm_server.classify_error(error, plan), ServerDied)
    assert vllm_server.classify_error(ValueError("bad output"), plan) is None
