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

from pytest_careful.live import pacing
from pytest_careful.live.backends.vllm import client as vllm_client
from pytest_careful.live.backends.vllm import server as vllm_server
from pytest_careful.live.backends.vllm.fleet_client import Failover, FleetClient
from pytest_careful.live.backends.vllm.server import MODULE, SERVE, BfclServer, ServerDied, ServerPlan, engine_from

# Serves /v1/models like vLLM, after a short load time; argv as vLLM's api_server gets it.
FAKE_VLLM = """#!{python}
import json, os, sys, time
from http.server import BaseHTTPRequestHandler, HTTPServer
args = sys.argv[1:]
length = int(os.environ.get("FAKE_MAX_MODEL_LEN", "4096"))
port, name = int(args[args.index("--port") + 1]), args[args.index("--served-model-name") + 1]
print("loading weights", flush=True)
time.sleep(1.5)

class H(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        body = {{"version": "0.99.1"}} if self.path == "/version" else {{"data": [{{"id": name, "max_model_len": length}}]}}
        data = json.dumps(body).encode()
        self.send_response(200); self.send_header("content-length", str(len(data))); self.end_headers()
        self.wfile.write(data)

HTTPServer(("127.0.0.1", port), H).serve_forever()
"""

CRASHING = "#!/bin/sh\necho 'RuntimeError: no CUDA device and no CPU backend'\nexit 3\n"


def _connection_error(url: str = "http://127.0.0.1:9/v1") -> openai.APIConnectionError:
    """What the SDK raises for a server that is gone, made by the SDK itself (its constructor's
    signature changes between openai releases): a request to ``url``, where nothing listens."""
    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0)
    try:
        client.models.list()
    except openai.APIConnectionError as exc:
        return exc
    raise AssertionError("a request to port 9 was answered")


def _program(tmp_path: Path, text: str) -> str:
    path = tmp_path / "python"
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def _plan(tmp_path: Path, python: str, **kwargs: object) -> ServerPlan:
    # A local model directory: nothing to fetch from a hub (test_hub.py tests the fetch).
    (tmp_path / "model").mkdir(exist_ok=True)
    # The stand-in is started as vllm-cpu is (the module): it has no `vllm` distribution either.
    kwargs.setdefault("engine", engine_from(python, {}))
    return ServerPlan(
        model=str(tmp_path / "model"), python=python, log_path=tmp_path / "logs" / "vllm-server.log", **kwargs
    )  # type: ignore[arg-type]


def bfcl_generate_command(model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The command bfcl-eval's own ``spin_up_local_server`` runs (caught at Popen; its tokenizer load stubbed)."""
    import types

    from bfcl_eval.model_handler.local_inference import base_oss_handler
    from bfcl_eval.model_handler.local_inference.qwen import QwenHandler

    class Caught(Exception):
        pass

    def popen(args: list[str], **kwargs: object) -> None:
        raise Caught(args)

    config = types.SimpleNamespace(max_position_embeddings=8192)
    stub = types.SimpleNamespace(
        AutoTokenizer=types.SimpleNamespace(from_pretrained=lambda **kw: object()),
        AutoConfig=types.SimpleNamespace(from_pretrained=lambda **kw: config),
    )
    monkeypatch.setitem(sys.modules, "transformers", stub)  # the handler imports it when called
    monkeypatch.setattr(base_oss_handler.subprocess, "Popen", popen)
    handler = QwenHandler("Qwen/Qwen3-8B", 0.001, "Qwen/Qwen3-8B", False)
    with pytest.raises(Caught) as caught:
        handler.spin_up_local_server(
            num_gpus=1,
            gpu_memory_utilization=0.9,
            backend="vllm",
            skip_server_setup=False,
            local_model_path=str(model_dir),
        )
    return list(caught.value.args[0])


def _flags(args: list[str]) -> dict[str, str | None]:
    """``--flag value`` and bare ``--flag`` pairs of a command line."""
    out: dict[str, str | None] = {}
    for i, arg in enumerate(args):
        if arg.startswith("--"):
            following = args[i + 1] if i + 1 < len(args) else None
            out[arg] = following if following is not None and not following.startswith("--") else None
    return out


def test_the_server_is_started_as_bfcl_generate_starts_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "model").mkdir()
    for name in ("config.json", "tokenizer_config.json"):
        (tmp_path / "model" / name).write_text("{}")
    theirs = bfcl_generate_command(tmp_path / "model", monkeypatch)
    from pytest_careful.live.handles import resolve

    dtype = vllm_client.handler_dtype(resolve("Qwen/Qwen3-8B", None))  # what the plugin reads off the handler
    plan = _plan(
        tmp_path,
        sys.executable,
        bfcl=BfclServer(dtype=dtype),
        engine=engine_from(sys.executable, {"vllm": "0.32.0", "script": "/nonexistent/vllm"}),
    )
    ours = plan.command(int(_flags(theirs)["--port"] or 0))
    assert theirs[:3] == ["vllm", "serve", str(tmp_path / "model")]
    assert ours[ours.index("serve") + 1] == str(tmp_path / "model")  # `vllm serve MODEL`, through this Python
    # Every setting bfcl generate passes, with its value; ours adds only where it listens and the
    # served name (vLLM's default is the model argument, the same).
    assert _flags(theirs).items() <= _flags(ours).items()
    assert set(_flags(ours)) - set(_flags(theirs)) == {"--served-model-name", "--host"}
    assert plan.differences() == []


def test_overrides_are_passed_and_named_as_differences(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model/config.json").write_text(json.dumps({"max_position_embeddings": 131072}))
    plan = _plan(tmp_path, sys.executable, dtype="float32", max_model_len=4096, extra_args=("--enforce-eager",))
    command = plan.command(8123)
    model = str(tmp_path / "model")
    assert command[command.index("--model") + 1] == command[command.index("--served-model-name") + 1] == model
    assert _flags(command)["--max-model-len"] == "4096" and _flags(command)["--dtype"] == "float32"
    assert command[-1] == "--enforce-eager"  # last: vLLM's parser lets it override ours
    differ = plan.differences()
    assert len(differ) == 3 and "dtype float32" in differ[0] and "bfloat16" in differ[0]
    assert "max-model-len 4096" in differ[1] and "131072" in differ[1] and "--enforce-eager" in differ[2]
    assert plan.provenance()["differs_from_bfcl_generate"] == differ


def test_vllm_serve_where_the_cli_runs_else_the_module(tmp_path: Path) -> None:
    script = tmp_path / "vllm"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    full = engine_from("/venv/bin/python", {"vllm": "0.32.0", "script": str(script)})
    assert full.launcher == (str(script), "serve") and full.name == SERVE and full.version == "0.32.0"
    cpu = engine_from("/venv/bin/python", {"vllm": None, "vllm-cpu": "0.32.0", "module": True})
    assert cpu.launcher == ("/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server")
    assert cpu.name == MODULE and cpu.version == "0.32.0" and "no distribution named 'vllm'" in cpu.note
    # The probe itself, on this Python (which has neither distribution).
    here = vllm_server.detect_engine(sys.executable)
    assert here.name == MODULE and here.version is None and here.note == ""


def test_start_waits_with_progress_then_stops_the_process_group(tmp_path: Path) -> None:
    plan = _plan(tmp_path, _program(tmp_path, FAKE_VLLM.format(python=sys.executable)))
    lines: list[str] = []
    endpoint = vllm_server.start(plan, lines.append)
    try:
        assert lines[0].startswith("waiting for the vLLM server") and lines[-1].startswith("vLLM server ready")
        assert vllm_server.served_models(endpoint) == [plan.model]
        assert vllm_server.server_version(endpoint) == "0.99.1"
        assert "not been tested" in (vllm_server.version_warning("0.99.1") or "")
        assert vllm_server.version_warning(vllm_server.TESTED_VLLM + "7") is None
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
        vllm_client.endpoint_of(_plan(tmp_path, sys.executable))


def test_the_server_is_stopped_when_pytest_gets_sigterm(tmp_path: Path) -> None:
    """A CI timeout sends SIGTERM: the server must not outlive the session."""
    script = tmp_path / "session.py"
    program = _program(tmp_path, FAKE_VLLM.format(python=sys.executable))
    script.write_text(
        "import sys, time\n"
        "from pathlib import Path\n"
        "from pytest_careful.live.backends.vllm import server as v\n"
        f"plan = v.ServerPlan(model={str(tmp_path)!r}, python={program!r},"
        f" log_path=Path({str(tmp_path / 'log')!r}), engine=v.engine_from({program!r}, {{}}))\n"
        "assert v.start_for_session(plan, print) is None\n"
        "print('PID', plan.process.pid, flush=True)\n"
        "time.sleep(60)\n"
    )
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


def test_connection_error_with_the_server_gone_ends_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(vllm_server.LOG_ENV, raising=False)
    plan = _plan(tmp_path, sys.executable, endpoints=("http://127.0.0.1:9/v1",))  # nothing listens there
    error = _connection_error()
    died = vllm_client.classify_error(error, plan)
    assert isinstance(died, ServerDied)
    assert vllm_client.classify_error(ValueError("bad output"), plan) is None
    # A server started elsewhere (--careful-endpoint) has no log here: the stop line names none.
    assert "log" not in str(died) and "stopped answering" in str(died)
    # The one the plugin started has one: named where it exists.
    started = _plan(tmp_path, sys.executable)
    started.log_path.parent.mkdir(parents=True, exist_ok=True)
    started.log_path.write_text("vLLM said something\n")
    monkeypatch.setattr(vllm_client, "endpoints_of", lambda plan: ("http://127.0.0.1:9/v1",))
    assert str(vllm_client.classify_error(error, started)).endswith(f"; its log: {started.log_path}")


def _serve(tmp_path: Path, name: str, max_model_len: int = 4096) -> tuple[subprocess.Popen[bytes], str]:
    """A stand-in server (FAKE_VLLM) for ``name`` on a free port; returns it and its /v1 URL."""
    port = vllm_server.free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-c",
            FAKE_VLLM.format(python="").split("\n", 1)[1],
            "--port",
            str(port),
            "--served-model-name",
            name,
        ],
        stdout=subprocess.DEVNULL,
        env={**os.environ, "FAKE_MAX_MODEL_LEN": str(max_model_len)},
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 30
    while not vllm_server.healthy(url, timeout=1) and time.monotonic() < deadline:
        time.sleep(0.2)
    return process, url


def _fleet(tmp_path: Path, urls: tuple[str, ...], name: str, total: int = 10) -> FleetClient:
    """A fleet client over ``urls`` whose stations are plain handler copies pointed at each server."""

    def station(handler: object, url: str) -> object:
        return vllm_client.station(handler, url, name, pacing.share)

    return FleetClient(urls, name, total, tmp_path / "result", station)


def _handler(context: int = 32768) -> object:
    handler = type("Handler", (), {"max_context_length": context, "tokenizer": None})()
    vllm_client.point_handler(handler, "http://127.0.0.1:9/v1", pacing.share)
    return handler


def test_a_fleet_moves_the_conversations_off_a_server_that_died_and_stops_when_none_is_left(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    name = str(tmp_path / "model")
    servers = [_serve(tmp_path, name) for _ in range(2)]
    urls = tuple(url for _, url in servers)
    try:
        fleet = _fleet(tmp_path, urls, name)
        servers[1][0].kill()
        servers[1][0].wait()
        moved = fleet.classify(_connection_error(urls[1]))
        assert isinstance(moved, Failover) and urls[0] in str(moved) and urls[1] in str(moved)
        assert [s.url for s in fleet.fleet.live()] == [urls[0]]
        assert fleet.classify(ValueError("bad output")) is None
        servers[0][0].kill()
        servers[0][0].wait()
        gone = fleet.classify(_connection_error(urls[0]))
        assert isinstance(gone, ServerDied) and "no --careful-endpoint server is left" in str(gone)
        assert urls[0] in str(gone) and urls[1] in str(gone) and "stopped answering" in str(gone)
        with pytest.raises(ServerDied):
            fleet.seat(("standard", "multi_turn_base_0", 1), lambda: None)
    finally:
        for process, _ in servers:
            process.kill()


def test_conversations_in_flight_on_a_dead_server_all_move_and_it_leaves_once(tmp_path: Path) -> None:
    """Many conversations in flight meet a dead server together: each runs again on the others,
    none is scored as the model's connection error, and the server leaves the fleet once."""
    name = str(tmp_path / "model")
    servers = [_serve(tmp_path, name) for _ in range(3)]
    urls = tuple(url for _, url in servers)
    try:
        fleet = _fleet(tmp_path, urls, name)
        servers[0][0].kill()
        servers[0][0].wait()
        outcomes = [fleet.classify(_connection_error(urls[0])) for _ in range(3)]
        assert all(isinstance(outcome, Failover) for outcome in outcomes), outcomes
        assert [s.url for s in fleet.fleet.live()] == list(urls[1:])
        assert fleet.fleet.servers[urls[0]].down == "stopped answering"
    finally:
        for process, _ in servers:
            process.kill()


def test_a_server_for_another_model_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "model").mkdir()
    process, url = _serve(tmp_path, "some/other-model")
    try:
        plan = _plan(tmp_path, sys.executable, endpoints=(url,))
        with pytest.raises(ServerDied, match="--served-model-name"):
            vllm_client.pick(plan, str(tmp_path / "model"))
    finally:
        process.kill()


def test_requests_are_sized_to_a_shorter_server_context(tmp_path: Path) -> None:
    name = str(tmp_path / "model")
    process, url = _serve(tmp_path, name)  # says max_model_len 4096
    try:
        handler = type("Handler", (), {"max_context_length": 32768})()
        vllm_client.fit_context(handler, url, name)
        assert handler.max_context_length == 4096
        handler.max_context_length = 2048  # a longer server context changes nothing
        vllm_client.fit_context(handler, url, name)
        assert handler.max_context_length == 2048
    finally:
        process.kill()


def test_a_bare_server_address_means_its_v1_root_and_bad_urls_are_refused() -> None:
    import argparse

    from pytest_careful.sources.live_options import endpoint_urls

    # vLLM serves the OpenAI API under /v1 only: http://host:8000 would answer 404 to every request.
    assert endpoint_urls("http://gpu-box:8000,https://node2/") == ("http://gpu-box:8000/v1", "https://node2/v1")
    assert endpoint_urls("http://gpu-box:8000/v1/") == ("http://gpu-box:8000/v1",)
    for bad in ("http://gpu-box:80x0/v1", "http:///v1", "http://gpu box:8000", "http://a:8000,gpu-box:8000"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected http"):
            endpoint_urls(bad)


def test_given_servers_are_checked_once_before_anything_runs(tmp_path: Path) -> None:
    """A server that cannot run the model is one usage error before any request (not a first
    conversation failed and the rest skipped), for one server as for a fleet, where every server
    that cannot gets its own line."""
    name = str(tmp_path / "model")
    good, good_url = _serve(tmp_path, name)
    other, other_url = _serve(tmp_path, "some/other-model")
    dead = f"http://127.0.0.1:{vllm_server.free_port()}/v1"
    said: list[str] = []
    try:
        for endpoints, expected in (((dead,), "not answering (["), ((other_url,), "serves ['some/other-model']")):
            problem = vllm_server.start_for_session(_plan(tmp_path, sys.executable, endpoints=endpoints), said.append)
            assert problem is not None and "no --careful-endpoint server can run it" in problem and expected in problem
        fleet = _plan(tmp_path, sys.executable, endpoints=(good_url, dead, other_url))
        problem = vllm_server.start_for_session(fleet, said.append)
        assert problem is not None
        first, *lines = problem.splitlines()
        assert "2 of the 3 --careful-endpoint servers cannot run it" in first
        assert len(lines) == 2 and dead in lines[0] and "not answering" in lines[0]
        assert other_url in lines[1] and "serves ['some/other-model']" in lines[1]
        assert not [line for line in problem.splitlines() if good_url in line]
        both = _plan(tmp_path, sys.executable, endpoints=(good_url, good_url.replace("/v1", "/v1/")))
        assert vllm_server.start_for_session(both, said.append) is None
    finally:
        good.kill()
        other.kill()


def test_rate_limits_and_a_model_gone_from_its_server_are_not_the_models_failures(tmp_path: Path) -> None:
    """A gateway in front of vLLM answering 429: the conversation is not run (a rerun sends it),
    not scored as the model's inference error; a 500 is no reason to stop or move (the request
    guard sends it again, then leaves the conversation unscored: test_faults.py); a 404 from a
    server restarted with another model stops the run (every conversation would fail alike)."""
    from pytest_careful.live.errors import NotRun

    def answered(kind: type[openai.APIStatusError], status: int) -> openai.APIStatusError:
        error = kind.__new__(kind)  # what the SDK raises, without its HTTP library's response object
        error.status_code = status
        return error

    plan = _plan(tmp_path, sys.executable, endpoints=("http://127.0.0.1:9/v1",))
    for status, kind in ((429, openai.RateLimitError), (529, openai.APIStatusError)):
        assert isinstance(vllm_client.classify_error(answered(kind, status), plan), NotRun)
    failed = answered(openai.InternalServerError, 500)
    assert vllm_client.classify_error(failed, plan) is None
    # A 404 from a server that now serves another model fails every conversation alike: the run stops.
    (tmp_path / "model").mkdir(exist_ok=True)
    process, url = _serve(tmp_path, "some/other-model")
    try:
        plan = _plan(tmp_path, sys.executable, endpoints=(url,))
        stopped = vllm_client.classify_error(answered(openai.NotFoundError, 404), plan)
        assert isinstance(stopped, ServerDied) and "cannot be used" in str(stopped)
        assert "some/other-model" in str(stopped)
    finally:
        process.kill()


def test_server_flags_the_plugin_sets_or_has_options_for_are_refused(pytester: pytest.Pytester) -> None:
    """--careful-vllm-arg=--port=8001 would start a server the plugin waits for elsewhere (for
    --careful-server-timeout, 30 minutes); --dtype there would pass unnamed as a difference from BFCL."""
    from pytest_careful.harness.options import read_options

    config = pytester.parseconfig("--careful-vllm-arg=--max-num-seqs 8", "--careful-vllm-arg=--enforce-eager")
    assert read_options(config).vllm_args == ("--max-num-seqs", "8", "--enforce-eager")
    for arg, says in (
        ("--port=8001", "--port is set by the plugin"),
        ("--host 0.0.0.0", "--host is set by"),
        ("--served-model-name=x", "is set by the plugin"),
        ("--dtype=half", "use --careful-dtype"),
        ("--max-model-len 4096", "use --careful-max-model-len"),
    ):
        result = pytester.runpytest_inprocess(f"--careful-vllm-arg={arg}", "--collect-only")
        assert result.ret == pytest.ExitCode.USAGE_ERROR and says in "\n".join(result.errlines), arg
    for option in ("--careful-dtype=bf16", "--careful-server-timeout=-5"):
        assert pytester.runpytest_inprocess(option, "--collect-only").ret == pytest.ExitCode.USAGE_ERROR


def test_each_conversation_is_sized_to_the_context_of_the_server_it_runs_on(tmp_path: Path) -> None:
    """A fleet whose servers were started with different --max-model-len: each conversation's requests
    are sized to its own server's (else 400s on the shorter one), including after a move."""
    name = str(tmp_path / "model")
    servers = [_serve(tmp_path, name, 8192), _serve(tmp_path, name, 2048)]
    urls = tuple(url for _, url in servers)
    try:
        fleet = _fleet(tmp_path, urls, name, total=2)
        fleet.attach(_handler())
        seats = [fleet.seat(("standard", f"multi_turn_base_{n}", 1), lambda: None) for n in range(2)]
        copies = [_handler() for _ in seats]
        for seat, copy in zip(seats, copies):
            seat.apply(copy)
        assert {seat.server: c.max_context_length for seat, c in zip(seats, copies)} == {urls[0]: 8192, urls[1]: 2048}
        assert {seat.server: str(c.client.base_url).rstrip("/") for seat, c in zip(seats, copies)} == {
            urls[0]: urls[0],
            urls[1]: urls[1],
        }
        servers[0][0].kill()
        servers[0][0].wait()
        assert isinstance(fleet.classify(_connection_error(urls[0])), Failover)
        for seat in seats:
            seat.leave()
        again = fleet.seat(("standard", "multi_turn_base_0", 1), lambda: None)
        moved = _handler()
        again.apply(moved)
        assert again.server == urls[1] and moved.max_context_length == 2048
    finally:
        for process, _ in servers:
            process.kill()


def test_a_fleets_server_that_hangs_leaves_the_fleet_and_the_last_one_stops_the_run(tmp_path: Path) -> None:
    """Twice no answer within --careful-request-timeout (faults.ServerHung, which names the server):
    with others left, the conversation runs again on them; the last server's hang stops the run
    with the hang's own line."""
    from pytest_careful.live.errors import ServerHung

    urls = ("http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1")
    fleet = _fleet(tmp_path, urls, str(tmp_path / "model"))
    moved = fleet.classify(ServerHung("the server at ... did not answer", urls[1]))
    assert isinstance(moved, Failover) and urls[1] in str(moved) and "request-timeout" in str(moved)
    assert [s.url for s in fleet.fleet.live()] == [urls[0]]
    last = ServerHung("the server did not answer within 300 s, twice", urls[0])
    assert fleet.classify(last) is last
    assert fleet.classify(ServerHung("a server of no fleet", "http://elsewhere/v1")) is None


def _seated_order(tmp_path: Path, asks: list[tuple[str, int]]) -> list[str]:
    """Both seats of a two-seat fleet held, each of ``asks`` (conversation, user turns) asks for a
    seat in turn, waiting until the one before it waits; then the seats free: the order they got one."""
    import threading

    urls = ("http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1")
    fleet = _fleet(tmp_path, urls, str(tmp_path / "model"), total=2)
    held = [fleet.seat(("standard", f"held_{n}", 1), lambda: None, 3) for n in range(2)]
    seated: list[str] = []

    def wait_for_seat(cid: str, turns: int) -> None:
        seat = fleet.seat(("standard", cid, 1), lambda: None, turns)
        seated.append(cid)
        seat.leave()

    threads = []
    for cid, turns in asks:
        asked = len(fleet._queue)
        thread = threading.Thread(target=wait_for_seat, args=(cid, turns))
        thread.start()
        threads.append(thread)
        deadline = time.monotonic() + 60  # each asks in turn, however busy the machine
        while len(fleet._queue) == asked and time.monotonic() < deadline:
            time.sleep(0.01)
    for seat in held:
        seat.leave()
    for thread in threads:
        thread.join(timeout=10)
    return seated


def test_conversations_waiting_for_room_are_seated_in_the_order_they_asked(tmp_path: Path) -> None:
    """The flight asks longest first: woken together, waiting conversations must not race for a seat
    (a long one seated late ends the run late)."""
    asks = [(f"multi_turn_base_{n}", 3) for n in range(2, 7)]
    assert _seated_order(tmp_path, asks) == [cid for cid, _ in asks]


def test_a_longer_conversation_that_asks_later_is_seated_first(tmp_path: Path) -> None:
    """The flight starts the longest first, but each thread claims its conversation and copies its
    handler before it asks for a seat: a long one that asks after the short ones must not be
    seated behind all of them (measured: a 10-request conversation seated 18 s late ended the run)."""
    asks = [("short_a", 2), ("short_b", 2), ("long", 7), ("middle", 4)]
    assert _seated_order(tmp_path, asks) == ["long", "middle", "short_a", "short_b"]
