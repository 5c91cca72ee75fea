"""Each process's BFCL handler and the vLLM server(s) it talks to.

In every process the handler is set up as BFCL's own ``spin_up_local_server(skip_server_setup=True)``
sets it up (tokenizer, context length: :mod:`.tokens` reads them without transformers where the
files allow it), pointed at the session's server (:mod:`.server`). ``--careful-endpoint``
names servers someone else runs: one is used as the session's own; several are a fleet
(:mod:`.fleet_client`), over which the conversations spread, each on one server for all of its
requests, and which a server that stops answering leaves (``classify_error``: the conversation
runs again elsewhere, the run's end, or a conversation not run).
"""

from __future__ import annotations

import contextlib
import copy
import io
import os
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from ....execution.decoding import registry_entry
from ....sources.live_options import MAX_OUTPUT_TOKENS
from ....sources.run_config import RunConfig
from ...backend_setup import BackendSetup, ModelSpec, Share
from ...errors import NotRun, StopRun
from ...handler import Handler
from . import hub, tokens
from . import metrics as vllm_metrics
from .fleet_client import FleetClient
from .server import ENDPOINT_ENV, BfclServer, ServerDied, ServerPlan, log_tail_of, served, unusable

#: Answers that mean "send it later", as the Anthropic API and gateways in front of vLLM give them.
RATE_LIMITED = (429, 529)


def configure(handle: ModelSpec, options: RunConfig, concurrency: int, share: Share) -> BackendSetup:
    """Plan the server (controller) and set up each process's handler against it; ``share``: what
    each new OpenAI client of a handler goes through (``pacing.share``)."""
    model = handle.model_path or _hub_id(handle)
    plan = ServerPlan(
        model=model,
        endpoints=tuple(options.endpoint or ()),
        dtype=options.dtype,
        max_model_len=options.max_model_len,
        extra_args=tuple(options.vllm_args),
        timeout=options.server_timeout,
        bfcl=BfclServer(dtype=handler_dtype(handle)),
        log_path=Path(options.output).resolve() / ".careful" / "vllm-server.log",
    )
    made = BackendSetup(server_plan=plan)
    cap = options.max_output_tokens
    made.differences = plan.differences() + (
        [f"max_tokens at most {cap} ({MAX_OUTPUT_TOKENS}); bfcl generate: up to 4096, the context left"]
        if cap is not None
        else []
    )
    bfcl_size = "min(4096, context length - prompt tokens - 2), as BFCL's handler sizes it"
    made.sent = {
        "model": model,
        "temperature": handle.temperature,
        "max_tokens": bfcl_size if cap is None else f"{bfcl_size}, at most {cap} ({MAX_OUTPUT_TOKENS})",
    }
    if cap is not None:  # recorded beside the result files: a resume under another cap is refused
        made.backend_settings = {"max_output_tokens": cap}
    fleet = None
    if len(plan.endpoints) > 1:  # a fleet: each conversation on one of them (fleet_client)
        fleet = FleetClient(
            tuple(url.rstrip("/") for url in plan.endpoints),
            model,
            concurrency,
            Path(options.output),
            lambda handler, url: station(handler, url, model, share),
            lambda: log_tail_of(plan),
        )
        made.placement = fleet
    made.setup = lambda handler: setup_handler(handler, plan, model, share, cap, fleet)
    made.classify_error = fleet.classify if fleet is not None else lambda exc: classify_error(exc, plan)
    # A fault, or the server gone: the one the request went to (after a failover, maybe not the current one).
    made.alive = lambda url: unusable((url or endpoint_of(plan)).rstrip("/"), plan.model) is None
    # A non-streamed request says nothing until answered: the servers' /metrics tell a long generation
    # from a silent server (a started server's URL is known once it runs: asked each time).
    made.server_work = vllm_metrics.MetricsProbe(lambda: endpoints_of(plan), plan.model)
    return made


def _hub_id(handle: ModelSpec) -> str:
    """The hub id BFCL's handler sends as the model name (some drop a "-FC" from the registry's)."""
    name = getattr(handle.probe(), "model_name_huggingface", None)
    return str(name) if name else registry_entry(handle.registry_key).model_name


def handler_dtype(handle: ModelSpec) -> str:
    """The dtype BFCL's handler passes to ``vllm serve`` (its ``dtype`` attribute)."""
    return str(getattr(handle.probe(), "dtype", None) or BfclServer.dtype)


# -- the servers a process uses ----------------------------------------------------


def endpoints_of(plan: ServerPlan) -> tuple[str, ...]:
    """The given servers, else the one the controller started (its URL in the environment)."""
    urls = plan.endpoints or tuple(u for u in os.environ.get(ENDPOINT_ENV, "").split(",") if u)
    if not urls:
        raise ServerDied("no vLLM server was started for this session")
    return tuple(u.rstrip("/") for u in urls)


def endpoint_of(plan: ServerPlan) -> str:
    """The server this process uses now (its first choice until it fails over)."""
    return plan.current or endpoints_of(plan)[0]


def pick(plan: ServerPlan, model: str, exclude: str | None = None) -> str:
    """The first server that answers and serves ``model``; else ServerDied."""
    why = []
    for url in endpoints_of(plan):
        if url == exclude:
            continue
        problem = unusable(url, model)
        if problem is None:
            return url
        why.append(problem)
    raise ServerDied("no vLLM server to use: " + "; ".join(why or [f"{exclude} stopped answering"]) + log_tail_of(plan))


def point_handler(handler: Handler, url: str, share: Share) -> None:
    # the OpenAI SDK on first use (half a second): importing the registry (handles, inflight)
    # stays off it; a live run loads it anyway, through the source's faults module
    from openai import OpenAI

    handler.base_url = url
    handler.client = OpenAI(base_url=url, api_key=os.environ.get("REMOTE_OPENAI_API_KEY", "EMPTY"))
    share(handler)  # a failover's new client waits out the same rate limits


def setup_handler(
    handler: Handler,
    plan: ServerPlan,
    model: str,
    share: Share,
    max_tokens: int | None = None,
    fleet: FleetClient | None = None,
) -> None:
    """Point BFCL's OSS handler at a server, with the tokenizer and context length BFCL's would load;
    with a ``fleet``, each conversation's copy is pointed at its own server (``station``)."""
    handler.careful_max_tokens = max_tokens  # pacing.share caps each request's max_tokens with it
    endpoint = plan.current or pick(plan, model)
    point_handler(handler, endpoint, share)
    local = model if Path(model).is_dir() else None
    with contextlib.redirect_stdout(io.StringIO()), _tokenizer_from_cache(endpoint, local or model):
        # The files' own tokenizer and context length, without transformers (and torch) where
        # they allow it (tokens.py); else BFCL's own set-up, which loads them through transformers.
        if not tokens.light_setup(handler, local):
            handler.spin_up_local_server(
                num_gpus=1, gpu_memory_utilization=0.9, backend="vllm", skip_server_setup=True, local_model_path=local
            )
            tokens.without_length_warning(handler.tokenizer)  # transformers' own (light_setup's: exact_loader)
    if fleet is not None:  # the model's own context here; each server's on its station
        fleet.attach(handler)
        return
    fit_context(handler, endpoint, model)
    plan.current = endpoint
    plan.handlers.append(handler)


def station(handler: Handler, url: str, model: str, share: Share) -> Handler:
    """A copy of the set-up ``handler`` for one server of a fleet: its client, its context length,
    and a tokenizer that sizes each request by that length (as BFCL sizes it for that server)."""
    own = copy.copy(handler)
    point_handler(own, url, share)
    fit_context(own, url, model)
    if isinstance(own.tokenizer, tokens.LightTokenizer):
        own.tokenizer = own.tokenizer.sized_by(lambda: int(own.max_context_length))
    return own


def fit_context(handler: Handler, endpoint: str, model: str) -> None:
    """Size requests to the server's context length where it is shorter than the model's own.

    BFCL sizes each request's ``max_tokens`` from the model's config; a server started
    with a smaller ``--max-model-len`` would answer 400 where bfcl generate's succeeds.
    """
    try:
        length = served(endpoint).get(model, {}).get("max_model_len")
    except (urllib.error.URLError, OSError, ValueError, AttributeError, TypeError):  # not vLLM's model list
        return
    if isinstance(length, int) and 0 < length < getattr(handler, "max_context_length", length + 1):
        handler.max_context_length = length


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
    """The session's one server: a connection failure with it gone, or a 404 with the model gone
    from it (restarted with another), ends the run; rate limited past the SDK's retries: not run
    (NotRun), the next run sends it. (A fleet's: ``fleet_client.FleetClient.classify``.)"""
    # the OpenAI SDK on first use (half a second): importing the registry (handles, inflight)
    # stays off it; a live run loads it anyway, through the source's faults module
    import openai

    if isinstance(exc, openai.APIStatusError) and exc.status_code in RATE_LIMITED:
        # A gateway in front of the server said "later" past the SDK's retries: not the model's failure.
        return NotRun(
            f"not run: the server at {endpoint_of(plan)} answered {exc.status_code} (rate limited) "
            "after the OpenAI SDK's retries"
        )
    connection = isinstance(exc, (openai.APIConnectionError, ConnectionError))
    if not connection and not isinstance(exc, openai.NotFoundError):
        return None
    endpoint = endpoint_of(plan)
    problem = unusable(endpoint, plan.model)
    if problem is None:
        return None  # the server is fine: this request's own failure, scored as BFCL scores it
    why = f"the vLLM server at {endpoint} " + ("stopped answering" if connection else f"cannot be used: {problem}")
    return ServerDied(f"{why}{log_tail_of(plan)}")
