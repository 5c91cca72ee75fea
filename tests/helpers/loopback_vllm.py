"""A loopback OpenAI-compatible server that behaves like vLLM under continuous batching.

Why: how many conversations a client keeps in flight, and what that does to its throughput,
can only be seen against a server whose answer time does not grow with concurrency, as a
GPU's does not far past 8 sequences. Here every request waits ``latency`` seconds however
many others are in flight, up to ``max_num_seqs`` at once (vLLM's ``--max-num-seqs``;
beyond it requests queue for a slot). The server counts what it saw: requests, the most and
the time-weighted mean in flight, its first request and last response, one record per request.

What it answers, read off bfcl-eval 2026.3.23's handlers:

* ``POST /v1/completions``: BFCL's local handlers (``Qwen/Qwen3-8B-FC``) send a raw prompt
  they formatted themselves; the answer is Qwen's Hermes form
  ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>``.
* ``POST /v1/chat/completions``: OpenAI ``tool_calls`` (BFCL's ``OpenAICompletionsHandler``).
* ``POST /v1/responses``: ``function_call`` items (``OpenAIResponsesHandler``, which
  ``gpt-4.1-2025-04-14-FC`` uses, reached through ``OPENAI_BASE_URL``).
* ``GET /v1/models`` (the names it was started with, with ``max_model_len``), ``GET /version``,
  ``GET /metrics`` (vLLM's ``vllm:num_requests_running`` and ``vllm:num_requests_waiting`` gauges
  and its ``vllm:generation_tokens_total`` counter, labelled with the first model name, as vLLM
  0.32 labels them; 404 with ``metrics=False``), ``GET /loopback/stats``, ``POST /loopback/reset``.
  A request generates ``token_rate`` tokens a second while it holds a sequence slot (its latency),
  counted as it goes, as vLLM counts each engine step: a slow request is seen generating before
  it is answered; a hung one (``hang_from``) holds no slot and generates nothing.

The policy (:func:`answer_for`) is the same on every path: after a user message, one call of a
function from the request's own tools that changes no state (``effect: read`` in
declarations/*.yaml), chosen by a hash of the user's message and the tool names, preferring
functions without required arguments; after a tool result, plain text, which ends BFCL's turn.
Any model name is accepted. Token counts in ``usage`` are characters / 4.

Faults for tests, settable before or while it runs: the first ``rate_limited`` model requests
get 429 with ``retry-after``; the next ``server_errors`` get ``error_status``; requests from
number ``hang_from`` on (1-based) hang until :meth:`LoopbackVLLM.release` or :meth:`stop`.

In a test::

    with LoopbackVLLM(latency=0.05, models=["gpt-4.1-2025-04-14"]) as server:
        ...  # OPENAI_BASE_URL=server.url
    server.stats()["max_in_flight"]

As a process (bench/live_loopback.py)::

    python tests/helpers/loopback_vllm.py --port 0 --latency 1.0 --max-num-seqs 256 \\
        --model DIR --stats-file stats.json       # prints "ready http://127.0.0.1:P/v1"

It writes the stats (with every request's record) to ``--stats-file`` when it gets SIGTERM or
SIGINT. Plain threads: a waiting request costs a sleeping thread and no CPU, so the server
stays light beside the clients it measures.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import itertools
import json
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any
from urllib.parse import urlsplit

from serving import Serving, serve, shut
from typing_extensions import Self  # typing.Self is 3.11+; the project supports 3.10

VERSION = "0.32.0+loopback"  # the vLLM line the plugin is tested with, marked as this server
MAX_MODEL_LEN = 40960  # Qwen3-8B's context; tests/helpers/loopback_model.py's config says the same
MODEL_PATHS = {"/v1/completions": "completions", "/v1/chat/completions": "chat", "/v1/responses": "responses"}
TEXT_ANSWER = "Done: I looked it up for you."
_HERMES_TOOLS = re.compile(r"<tools>\n(.*?)\n</tools>", re.DOTALL)
_USER_BLOCK = "<|im_start|>user\n"


# ---------------------------------------------------------------- the answer policy


@functools.cache
def read_only_functions() -> frozenset[str]:
    """Functions that change no state, as the declarations say (inferred by running them)."""
    from pytest_careful.effects import declarations

    loaded = declarations.load()
    return frozenset(d.name for group in loaded.by_class().values() for d in group if d.effect == declarations.READ)


@dataclass(frozen=True)
class Request:
    """What the policy reads from a request, whatever its API."""

    tools: list[tuple[str, dict[str, Any]]]  # (name, JSON-schema parameters)
    user_text: str  # the latest user message, not a tool result
    after_tool_result: bool  # the last message is a tool result: the turn should end
    prompt_chars: int
    tool_result: str | None = None  # that result's text (tests check that calls ran)
    first_user: str = ""  # the conversation's first user message: which conversation a request is of


@dataclass(frozen=True)
class Answer:
    call: tuple[str, dict[str, Any]] | None  # (function, arguments), or None for text
    text: str
    prompt_tokens: int

    @property
    def completion_tokens(self) -> int:
        return max(1, len(self.text if self.call is None else json.dumps(self.call)) // 4)


def answer_for(request: Request) -> Answer:
    """A read-only call after a user message, text after a tool result (or without a candidate)."""
    tokens = max(1, request.prompt_chars // 4)
    call = None if request.after_tool_result else choose_call(request.tools, request.user_text)
    return Answer(call, TEXT_ANSWER if call is None else "", tokens)


def choose_call(tools: Sequence[tuple[str, Mapping[str, Any]]], user_text: str) -> tuple[str, dict[str, Any]] | None:
    """One read-only function of ``tools`` and its arguments, the same for the same request."""
    readable = [(name, params) for name, params in tools if name in read_only_functions()]
    bare = [(name, params) for name, params in readable if not params.get("required")]
    candidates = sorted(bare or readable, key=lambda tool: tool[0])
    if not candidates:
        return None
    key = "\n".join([user_text, *sorted(name for name, _ in tools)]).encode()
    name, params = candidates[int(hashlib.sha256(key).hexdigest(), 16) % len(candidates)]
    return name, _arguments(params)


def _arguments(params: Mapping[str, Any]) -> dict[str, Any]:
    """A plain value for each required argument (the call may fail; it changes nothing either way)."""
    properties = params.get("properties") or {}
    return {name: _plain_value((properties.get(name) or {}).get("type")) for name in params.get("required") or ()}


def _plain_value(kind: object) -> Any:
    values: dict[object, Any] = {
        "integer": 1,
        "number": 1.0,
        "float": 1.0,
        "boolean": False,
        "array": [1.0, 2.0],
        "dict": {},
        "object": {},
    }
    return values.get(kind, "a")


# ---------------------------------------------------------------- reading each API's request


def read_completion(body: Mapping[str, Any]) -> Request:
    """A raw prompt in Qwen's template: tools between <tools> tags, tool results as user turns."""
    prompt = body.get("prompt") or ""
    prompt = prompt[0] if isinstance(prompt, list) and prompt else prompt
    prompt = prompt if isinstance(prompt, str) else ""
    tools: list[tuple[str, dict[str, Any]]] = []
    found = _HERMES_TOOLS.search(prompt)
    for line in found.group(1).splitlines() if found else ():
        tool = _json_object(line)
        tool = tool.get("function", tool)  # some templates wrap each tool as {"type", "function"}
        if isinstance(tool.get("name"), str):
            tools.append((tool["name"], tool.get("parameters") or {}))
    users = [block.split("<|im_end|>", 1)[0] for block in prompt.split(_USER_BLOCK)[1:]]
    asked = [text for text in users if not text.startswith("<tool_response>")]
    after_tool = bool(users) and users[-1].startswith("<tool_response>")
    result = users[-1].removeprefix("<tool_response>\n").split("\n</tool_response>", 1)[0] if after_tool else None
    return Request(tools, asked[-1] if asked else "", after_tool, len(prompt), result, asked[0] if asked else "")


def read_chat(body: Mapping[str, Any]) -> Request:
    """Chat completions: ``tools`` as {"type": "function", "function": {...}}; tool results have role tool."""
    messages = [m for m in body.get("messages") or () if isinstance(m, dict)]
    tools = [
        (t["function"]["name"], t["function"].get("parameters") or {})
        for t in body.get("tools") or ()
        if isinstance(t, dict) and isinstance(t.get("function"), dict) and "name" in t["function"]
    ]
    users = [_text(m.get("content")) for m in messages if m.get("role") == "user"]
    after_tool = bool(messages) and messages[-1].get("role") == "tool"
    result = _text(messages[-1].get("content")) if after_tool else None
    return Request(
        tools, users[-1] if users else "", after_tool, len(json.dumps(messages)), result, users[0] if users else ""
    )


def read_responses(body: Mapping[str, Any]) -> Request:
    """Responses API: ``input`` items; tool results are ``function_call_output`` items."""
    raw = body.get("input") or []
    items = [{"role": "user", "content": raw}] if isinstance(raw, str) else [i for i in raw if isinstance(i, dict)]
    tools = [
        (t["name"], t.get("parameters") or {})
        for t in body.get("tools") or ()
        if isinstance(t, dict) and t.get("type") == "function" and "name" in t
    ]
    users = [_text(i.get("content")) for i in items if i.get("role") == "user"]
    after_tool = bool(items) and items[-1].get("type") == "function_call_output"
    result = str(items[-1].get("output")) if after_tool else None
    return Request(
        tools, users[-1] if users else "", after_tool, len(json.dumps(items)), result, users[0] if users else ""
    )


def conversation_digest(first_user: str) -> str:
    """Which conversation a request is of: every request of one re-sends its first user message."""
    return hashlib.sha256(first_user.encode()).hexdigest()[:12] if first_user else ""


def _text(content: object) -> str:
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


# ---------------------------------------------------------------- writing each API's answer


def _content_number(body: Mapping[str, Any]) -> int:
    """A number for a request that depends on its content only."""
    digest = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
    return int(digest[:12], 16)


def completion_body(model: str, answer: Answer, number: int) -> dict[str, Any]:
    text = answer.text if answer.call is None else hermes(*answer.call)
    return {
        "id": f"cmpl-loopback-{number}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "text": text, "logprobs": None, "finish_reason": "stop", "stop_reason": None}],
        "usage": _usage(answer),
    }


def hermes(name: str, arguments: Mapping[str, Any]) -> str:
    """Qwen's (Hermes) tool-call text, as QwenFCHandler._extract_tool_calls reads it."""
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def chat_body(model: str, answer: Answer, number: int) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": answer.text or None}
    if answer.call is not None:
        name, arguments = answer.call
        message["tool_calls"] = [
            {
                "id": f"call_loopback_{number}",
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ]
    return {
        "id": f"chatcmpl-loopback-{number}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "stop" if answer.call is None else "tool_calls",
            }
        ],
        "usage": _usage(answer),
    }


def responses_body(model: str, answer: Answer, number: int) -> dict[str, Any]:
    if answer.call is None:
        output: list[dict[str, Any]] = [
            {
                "type": "message",
                "id": f"msg_loopback_{number}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": answer.text, "annotations": []}],
            }
        ]
    else:
        name, arguments = answer.call
        output = [
            {
                "type": "function_call",
                "id": f"fc_loopback_{number}",
                "call_id": f"call_loopback_{number}",
                "name": name,
                "arguments": json.dumps(arguments),
                "status": "completed",
            }
        ]
    usage = {
        "input_tokens": answer.prompt_tokens,
        "output_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    return {
        "id": f"resp_loopback_{number}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "completed",
        "model": model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "error": None,
        "incomplete_details": None,
        "usage": usage,
    }


def _usage(answer: Answer) -> dict[str, int]:
    return {
        "prompt_tokens": answer.prompt_tokens,
        "completion_tokens": answer.completion_tokens,
        "total_tokens": answer.prompt_tokens + answer.completion_tokens,
    }


READERS: dict[str, Callable[[Mapping[str, Any]], Request]] = {
    "completions": read_completion,
    "chat": read_chat,
    "responses": read_responses,
}
WRITERS: dict[str, Callable[[str, Answer, int], dict[str, Any]]] = {
    "completions": completion_body,
    "chat": chat_body,
    "responses": responses_body,
}


# ---------------------------------------------------------------- the server


@dataclass
class RequestRecord:
    """One model request as the server saw it (times: ``time.time()``, seconds since the epoch)."""

    number: int
    api: str  # completions, chat, responses
    model: str
    received: float
    in_flight: int  # model requests held by the server on arrival, this one included
    started: float | None = None  # when it got a sequence slot
    queued: bool = False  # it waited for a slot (max_num_seqs were running)
    answered: float | None = None
    status: int = 0
    function: str | None = None  # the call answered, None for text or an error
    tool_result: str | None = None  # the tool result this request carried (its first 300 characters)
    max_tokens: object = None  # the request's max_tokens, as sent
    conversation: str = ""  # a digest of the conversation's first user message (stickiness is counted by it)


@dataclass
class _Counters:
    """In-flight bookkeeping, changed under the server's lock."""

    in_flight: int = 0
    running: int = 0
    waiting: int = 0  # requests queued for a slot (max_num_seqs running)
    max_in_flight: int = 0
    max_running: int = 0
    area: float = 0.0  # integral of in_flight over time, for the time-weighted mean
    last_change: float = 0.0
    first_request: float | None = None
    last_response: float | None = None
    records: list[RequestRecord] = field(default_factory=list)

    def change(self, delta: int, now: float) -> None:
        if self.in_flight:
            self.area += self.in_flight * (now - self.last_change)
        self.in_flight += delta
        self.last_change = now
        self.max_in_flight = max(self.max_in_flight, self.in_flight)


class LoopbackVLLM(Serving):
    """The server; see the module docstring. Knobs may be changed while it runs."""

    def __init__(
        self,
        *,
        latency: float = 0.0,
        max_num_seqs: int | None = None,
        models: Iterable[str] = ("loopback",),
        max_model_len: int = MAX_MODEL_LEN,
        rate_limited: int = 0,
        retry_after: float = 1.0,
        server_errors: int = 0,
        error_status: int = 500,
        hang_from: int | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        lifetime: float | None = 600.0,
        keep_bodies: bool = False,
        metrics: bool = True,
        token_rate: float = 20.0,
    ) -> None:
        self.latency = latency
        #: Every model request's body as it came, bytes and all (``keep_bodies``): what a client sent.
        self.bodies: list[bytes] | None = [] if keep_bodies else None
        self.max_num_seqs = max_num_seqs
        self.models = list(models)
        self.max_model_len = max_model_len
        self.rate_limited = rate_limited
        self.retry_after = retry_after
        self.server_errors = server_errors
        self.error_status = error_status
        self.hang_from = hang_from
        self.host, self.port = host, port
        self.lifetime = lifetime  # None: until stopped (the bench's process)
        self.metrics = metrics  # GET /metrics answers (a server that hides them: 404)
        self.token_rate = token_rate  # tokens a second each running request generates (/metrics)
        self._generated = 0.0  # tokens generated by requests that left their slot (never reset: a counter)
        self._generating: dict[int, float] = {}  # running request -> when it got its slot
        self._created = time.time()  # the counter's _created sample, as prometheus_client writes one
        self._lock = threading.Lock()
        self._slot_free = threading.Condition(self._lock)
        self._numbers = itertools.count(1)
        self._counters = _Counters()
        self._stopping = threading.Event()
        self._released = threading.Event()
        self._httpd: ThreadingHTTPServer | None = None
        self._timer: threading.Timer | None = None

    # -- life cycle

    def start(self) -> Self:
        read_only_functions()  # loaded before the first request is timed
        self._stopping.clear()
        httpd = _Server((self.host, self.port), _handler_for(self))
        self._httpd, self.port = httpd, httpd.server_address[1]
        self._timer = serve(httpd, "loopback-vllm", self.lifetime, self.stop)
        return self

    def stop(self) -> None:
        """Stop serving; requests still waiting (latency, queue, hang) are cut short."""
        self._stopping.set()
        with self._lock:
            self._slot_free.notify_all()
        httpd, self._httpd = self._httpd, None
        shut(httpd, self._timer)

    @property
    def url(self) -> str:
        """The OpenAI base URL (``.../v1``)."""
        return f"http://{self.host}:{self.port}/v1"

    def release(self) -> None:
        """Let hung requests go on (they are then answered normally)."""
        self._released.set()

    # -- statistics

    def reset(self) -> None:
        """Forget what was counted (requests still in flight stay counted as in flight)."""
        with self._lock:
            now = time.time()
            self._counters = _Counters(
                in_flight=self._counters.in_flight,
                running=self._counters.running,
                max_in_flight=self._counters.in_flight,
                max_running=self._counters.running,
                last_change=now,
            )

    @property
    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._counters.records)

    def stats(self, records: bool = False) -> dict[str, Any]:
        """requests, by_status, calls, texts, max_in_flight, mean_in_flight (time-weighted over
        first_request .. last_response), max_running, queued, in_flight_now, first_request,
        last_response (epoch seconds), latency, max_num_seqs; with ``records``, every request."""
        with self._lock:
            counters = self._counters
            done = [r for r in counters.records if r.answered is not None]
            span = (counters.last_response or 0.0) - (counters.first_request or 0.0)
            area = counters.area
            if counters.in_flight and counters.last_response is not None:  # still open: up to the last answer
                area += counters.in_flight * max(0.0, counters.last_response - counters.last_change)
            by_status: dict[str, int] = {}
            for record in done:
                by_status[str(record.status)] = by_status.get(str(record.status), 0) + 1
            out: dict[str, Any] = {
                "requests": len(counters.records),
                "by_status": by_status,
                "calls": sum(r.function is not None for r in done),
                "texts": sum(r.status == 200 and r.function is None for r in done),
                "max_in_flight": counters.max_in_flight,
                "mean_in_flight": area / span if span > 0 else 0.0,
                "max_running": counters.max_running,
                "queued": sum(r.queued for r in counters.records),
                "in_flight_now": counters.in_flight,
                "first_request": counters.first_request,
                "last_response": counters.last_response,
                "latency": self.latency,
                "max_num_seqs": self.max_num_seqs,
            }
            if records:
                out["records"] = [asdict(r) for r in counters.records]
        return out

    # -- one model request

    def serve(self, api: str, body: Mapping[str, Any]) -> tuple[int, dict[str, str], dict[str, Any]]:
        """Status, headers and JSON body for one model request; holds it for its latency."""
        record = self._arrive(api, str(body.get("model") or ""))
        record.max_tokens = body.get("max_tokens")
        try:
            status, headers, payload = self._answer(record, api, body)
        finally:
            self._leave(record)
        return status, headers, payload

    def _arrive(self, api: str, model: str) -> RequestRecord:
        with self._lock:
            now = time.time()
            counters = self._counters
            counters.change(+1, now)
            if counters.first_request is None:
                counters.first_request = now
            record = RequestRecord(next(self._numbers), api, model, now, counters.in_flight)
            counters.records.append(record)
        return record

    def _leave(self, record: RequestRecord) -> None:
        with self._lock:
            now = time.time()
            record.answered = now
            self._counters.change(-1, now)
            self._counters.last_response = now

    def _answer(
        self, record: RequestRecord, api: str, body: Mapping[str, Any]
    ) -> tuple[int, dict[str, str], dict[str, Any]]:
        request = READERS[api](body)
        record.tool_result = None if request.tool_result is None else request.tool_result[:300]
        record.conversation = conversation_digest(request.first_user)
        fault = self._fault(record.number)
        if fault is not None:
            record.status = fault[0]
            return fault
        if self.hang_from is not None and record.number >= self.hang_from:
            while not (self._released.is_set() or self._stopping.is_set()):
                self._released.wait(0.05)
        answer = answer_for(request)
        if not self._run_for_latency(record):
            record.status = 503
            return 503, {}, {"error": {"message": "server stopping", "type": "loopback"}}
        record.status = 200
        record.function = answer.call[0] if answer.call else None
        # Keeping bodies (a comparison of two clients): ids the answer carries come from the request,
        # not its arrival order, so that the same conversation gets the same ids from either client.
        number = _content_number(body) if self.bodies is not None else record.number
        return 200, {}, WRITERS[api](record.model or self.models[0], answer, number)

    def _fault(self, number: int) -> tuple[int, dict[str, str], dict[str, Any]] | None:
        if number <= self.rate_limited:
            return (
                429,
                {"retry-after": f"{self.retry_after:g}"},
                {"error": {"message": "rate limited (loopback)", "type": "rate_limit_error", "code": 429}},
            )
        if number <= self.rate_limited + self.server_errors:
            return self.error_status, {}, {"error": {"message": "server error (loopback)", "type": "server_error"}}
        return None

    def _run_for_latency(self, record: RequestRecord) -> bool:
        """Wait for a sequence slot, then ``latency`` seconds; False if the server stops meanwhile."""
        with self._lock:
            queued = False
            while self.max_num_seqs is not None and self._counters.running >= self.max_num_seqs:
                if self._stopping.is_set():
                    self._counters.waiting -= queued
                    return False
                if not queued:
                    queued = record.queued = True
                    self._counters.waiting += 1
                self._slot_free.wait(0.1)
            self._counters.waiting -= queued
            self._counters.running += 1
            self._counters.max_running = max(self._counters.max_running, self._counters.running)
            record.started = time.time()
            self._generating[record.number] = record.started
        try:
            return not self._stopping.wait(self.latency)
        finally:
            with self._lock:
                self._counters.running -= 1
                self._generated += (time.time() - self._generating.pop(record.number)) * self.token_rate
                self._slot_free.notify()

    # -- the other routes

    def metrics_text(self) -> str:
        """vLLM's two queue gauges and its generated-token counter, in Prometheus' text format, as
        vLLM 0.32 writes them (a counter ``vllm:generation_tokens`` is exposed as ``..._total``)."""
        with self._lock:
            now = time.time()
            running, waiting = self._counters.running, self._counters.waiting
            generated = self._generated + sum((now - t) * self.token_rate for t in self._generating.values())
        label = f'{{engine="0",model_name="{self.models[0]}"}}'
        return (
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
            "# TYPE vllm:num_requests_running gauge\n"
            f"vllm:num_requests_running{label} {float(running)}\n"
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
            "# TYPE vllm:num_requests_waiting gauge\n"
            f"vllm:num_requests_waiting{label} {float(waiting)}\n"
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.\n"
            "# TYPE vllm:generation_tokens_total counter\n"
            f"vllm:generation_tokens_total{label} {float(int(generated))}\n"
            f"vllm:generation_tokens_created{label} {self._created}\n"
        )

    def models_body(self) -> dict[str, Any]:
        created = int(time.time())
        return {
            "object": "list",
            "data": [
                {
                    "id": name,
                    "object": "model",
                    "created": created,
                    "owned_by": "loopback",
                    "root": name,
                    "parent": None,
                    "max_model_len": self.max_model_len,
                }
                for name in self.models
            ],
        }


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False  # stop() must not wait for a hung request's thread
    request_queue_size = 1024  # bfcl generate opens 100 connections at once; the default 5 drops SYNs


def _handler_for(server: LoopbackVLLM) -> Callable[..., BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:  # http.server's naming
            path = urlsplit(self.path).path.rstrip("/")
            if path == "/v1/models":
                self._send(200, {}, server.models_body())
            elif path in ("/version", "/v1/version"):
                self._send(200, {}, {"version": VERSION})
            elif path == "/health":
                self._send(200, {}, {})
            elif path == "/metrics" and server.metrics:
                self._send_text(200, server.metrics_text())
            elif path == "/loopback/stats":
                self._send(200, {}, server.stats(records="records" in self.path))
            else:
                self._send(404, {}, {"error": {"message": f"no route {path}", "type": "not_found"}})

        def do_POST(self) -> None:  # http.server's naming
            path = urlsplit(self.path).path.rstrip("/")
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            if path == "/loopback/reset":
                server.reset()
                self._send(200, {}, {})
            elif path in MODEL_PATHS:
                if server.bodies is not None:
                    server.bodies.append(raw)
                self._send(*server.serve(MODEL_PATHS[path], _json_object(raw.decode("utf-8", "replace"))))
            else:
                self._send(404, {}, {"error": {"message": f"no route {path}", "type": "not_found"}})

        def _send(self, status: int, headers: Mapping[str, str], body: Mapping[str, Any]) -> None:
            data = json.dumps(body).encode()
            try:
                self.send_response(status)
                for name, value in headers.items():
                    self.send_header(name, value)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):  # the client gave up (Ctrl-C, timeout)
                self.close_connection = True

        def _send_text(self, status: int, text: str) -> None:
            data = text.encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "text/plain; version=0.0.4")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: no access log."""

    return Handler


# ---------------------------------------------------------------- as a process


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Loopback OpenAI-compatible server emulating continuous batching")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0: a free port (printed)")
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per request, however many in flight")
    parser.add_argument("--max-num-seqs", type=int, default=256, help="requests running at once (vLLM's default 256)")
    parser.add_argument("--model", action="append", default=[], help="a model name /v1/models lists (repeatable)")
    parser.add_argument("--max-model-len", type=int, default=MAX_MODEL_LEN)
    parser.add_argument("--stats-file", type=Path, help="written (with every request) on SIGTERM/SIGINT")
    parser.add_argument("--rate-limited", type=int, default=0, help="answer 429 to the first K requests")
    parser.add_argument("--retry-after", type=float, default=1.0)
    parser.add_argument("--server-errors", type=int, default=0, help="then answer --error-status to K requests")
    parser.add_argument("--error-status", type=int, default=500)
    parser.add_argument("--hang-from", type=int, help="requests from this number on never get an answer")
    parser.add_argument("--no-metrics", action="store_true", help="answer 404 to GET /metrics")
    args = parser.parse_args(argv)
    server = LoopbackVLLM(
        latency=args.latency,
        max_num_seqs=args.max_num_seqs,
        models=args.model or ["loopback"],
        max_model_len=args.max_model_len,
        rate_limited=args.rate_limited,
        retry_after=args.retry_after,
        server_errors=args.server_errors,
        error_status=args.error_status,
        hang_from=args.hang_from,
        host=args.host,
        port=args.port,
        lifetime=None,
        metrics=not args.no_metrics,
    ).start()
    done = threading.Event()

    def finish(signum: int, frame: FrameType | None) -> None:
        done.set()

    signal.signal(signal.SIGTERM, finish)
    signal.signal(signal.SIGINT, finish)
    print(f"ready {server.url}", flush=True)
    while not done.wait(0.5):
        pass
    stats = server.stats(records=True)
    server.stop()
    if args.stats_file is not None:
        tmp = args.stats_file.with_name(args.stats_file.name + ".tmp")
        tmp.write_text(json.dumps(stats))
        tmp.replace(args.stats_file)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # pytest_careful from this checkout
    sys.exit(main())
