"""A loopback HTTP server that speaks enough of the Anthropic Messages API.

Why a real server rather than mocks: the code under test talks to Anthropic
through the real ``anthropic`` SDK, and the behaviour worth testing (retries,
backoff, error classes, response parsing, the headers the SDK sends) lives in
the SDK's HTTP layer. Pointing ``Anthropic(base_url=server.url, ...)`` at this
server exercises all of that without network access, credentials or cost.

What it simulates:

* ``POST /v1/messages`` (non-streaming), answered from a pluggable responder;
* ``POST /v1/messages/count_tokens``;
* deterministic token counts (ceil(len(UTF-8 JSON) / 4) per prompt element);
* prompt caching: ``cache_control`` breakpoints, reads of prefixes written
  by earlier requests (with the API's 20-block lookback), writes;
* scripted faults (429, 500, 529, credit exhaustion, ...) and a permanent
  "out of credit" mode;
* scripted deliveries: a request answered late (so a client time-out fires
  after the server completed, and billed, it) or never (the connection is
  closed after the server completed it), the way a real API call can be billed
  with no answer reaching the client. ``requests`` records every HTTP attempt
  as it arrives.

Usage::

    with FakeAnthropic(lambda body: [text_block("hi")]) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="test")
        client.messages.create(model="m", max_tokens=16, messages=[...])
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from typing_extensions import Self  # typing.Self is 3.11+; the project supports 3.10

Responder = Callable[[dict[str, Any]], list[dict[str, Any]]]
"""Maps a parsed request body to the assistant's content blocks."""

CREDIT_EXHAUSTED_MESSAGE = (
    "Your credit balance is too low to access the Anthropic API. "
    "Please go to Plans & Billing to upgrade or purchase credits."
)
MAX_CACHE_BREAKPOINTS = 4  # the API rejects requests with more
CACHE_LOOKBACK_BLOCKS = 20  # the API looks this many boundaries back per breakpoint

# Error "type" the API uses for each status, so SDK error classes line up.
ERROR_TYPES: dict[int, str] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}

MESSAGES_PATH = "/v1/messages"
COUNT_TOKENS_PATH = "/v1/messages/count_tokens"


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class Fault:
    """One scripted failure, answered instead of the next request."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Delivery:
    """How one answer reaches the client: after ``delay`` seconds, or not at all (``drop``)."""

    delay: float = 0.0
    drop: bool = False


@dataclass(frozen=True)
class RecordedRequest:
    """What the SDK sent, kept so tests can assert on it."""

    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: dict[str, Any] | None  # None when the body was not a JSON object
    received_at: float  # time.monotonic(), to measure retry gaps

    @property
    def anthropic_version(self) -> str | None:
        return self.headers.get("anthropic-version")

    @property
    def api_key(self) -> str | None:
        """The key from ``x-api-key``, or from ``Authorization: Bearer`` (SDK 2.x sends that)."""
        if "x-api-key" in self.headers:
            return self.headers["x-api-key"]
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return token if scheme.lower() == "bearer" and token else None

    @property
    def anthropic_beta(self) -> str | None:
        return self.headers.get("anthropic-beta")

    @property
    def has_temperature(self) -> bool:
        """Whether the body carried ``temperature`` (some models reject it)."""
        return self.body is not None and "temperature" in self.body


@dataclass(frozen=True)
class PromptElement:
    """One cacheable unit of the prompt: a tool, system block or content block."""

    canonical: str  # canonical JSON without cache_control, for hashing
    tokens: int
    breakpoint: bool


@dataclass(frozen=True)
class Usage:
    """The three input-token figures; they always add up to the whole prompt."""

    input_tokens: int
    cache_creation_input_tokens: int
    cache_read_input_tokens: int


@dataclass(frozen=True)
class Reply:
    """An HTTP answer before it is written to the socket."""

    status: int
    payload: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)


class InvalidRequest(Exception):
    """Raised while validating a body; becomes a 400 invalid_request_error."""


# --------------------------------------------------------------------- helpers


def text_block(text: str) -> dict[str, Any]:
    """A text content block, for responders."""
    return {"type": "text", "text": text}


def tool_use_block(name: str, tool_input: dict[str, Any], block_id: str | None = None) -> dict[str, Any]:
    """A tool_use content block, for responders; the server fills a missing id."""
    block: dict[str, Any] = {"type": "tool_use", "name": name, "input": tool_input}
    if block_id is not None:
        block["id"] = block_id
    return block


def echo_responder(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Default responder: a text block naming how many messages came in."""
    return [text_block(f"fake reply to {len(body.get('messages', []))} message(s)")]


def error_body(error_type: str, message: str) -> dict[str, Any]:
    """An error payload shaped exactly like the API's."""
    return {"type": "error", "error": {"type": error_type, "message": message}}


def credit_exhausted_fault() -> Fault:
    """The 400 Anthropic sends when the account is out of credit."""
    return Fault(400, error_body("invalid_request_error", CREDIT_EXHAUSTED_MESSAGE))


def canonical_json(part: Any) -> str:
    """Stable JSON, so equal prompts hash and count identically."""
    return json.dumps(part, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def count_tokens(part: Any) -> int:
    """Deterministic stand-in for a tokenizer: ceil(UTF-8 JSON bytes / 4)."""
    return math.ceil(len(canonical_json(part).encode("utf-8")) / 4)


def _without_cache_control(part: Any) -> Any:
    """Markers do not change cached content: moving one must still hit the cache."""
    if isinstance(part, dict):
        return {k: v for k, v in part.items() if k != "cache_control"}
    return part


def _has_marker(part: Any) -> bool:
    return isinstance(part, dict) and isinstance(part.get("cache_control"), dict)


def _element(part: Any, marked: bool) -> PromptElement:
    content = _without_cache_control(part)
    return PromptElement(canonical_json(content), count_tokens(content), marked)


def _as_blocks(content: Any) -> list[Any]:
    """The API treats a plain string as a single text block."""
    return [text_block(content)] if isinstance(content, str) else list(content or [])


def prompt_elements(body: dict[str, Any]) -> list[PromptElement]:
    """The prompt in cache order: tools, then system, then messages."""
    elements = [_element(tool, _has_marker(tool)) for tool in body.get("tools") or []]
    elements += [_element(b, _has_marker(b)) for b in _as_blocks(body.get("system"))]
    for message in body.get("messages") or []:
        role = message.get("role") if isinstance(message, dict) else None
        content = message.get("content") if isinstance(message, dict) else message
        for block in _as_blocks(content):
            wrapped = {"role": role, "block": _without_cache_control(block)}
            elements.append(_element(wrapped, _has_marker(block)))
    return _apply_automatic_breakpoint(body, elements)


def _apply_automatic_breakpoint(body: dict[str, Any], elements: list[PromptElement]) -> list[PromptElement]:
    """Top-level ``cache_control`` caches the whole prompt, as the API does."""
    if not _has_marker({"cache_control": body.get("cache_control")}) or not elements:
        return elements
    last = elements[-1]
    return [*elements[:-1], PromptElement(last.canonical, last.tokens, True)]


def _check_breakpoints(elements: list[PromptElement]) -> None:
    found = sum(e.breakpoint for e in elements)
    if found > MAX_CACHE_BREAKPOINTS:
        raise InvalidRequest(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. Found {found}."
        )


def _prefix_hashes(model: str, elements: list[PromptElement]) -> list[str]:
    """Chained hashes: entry i identifies the prompt through element i (per model)."""
    digest = hashlib.sha256(model.encode("utf-8")).hexdigest()
    hashes = []
    for element in elements:
        digest = hashlib.sha256((digest + element.canonical).encode("utf-8")).hexdigest()
        hashes.append(digest)
    return hashes


def _instant_retry_headers(headers: dict[str, str]) -> dict[str, str]:
    """Make the SDK retry at once unless the script asked for a real delay.

    The SDK honours ``retry-after-ms`` / ``retry-after`` only when the value
    is > 0; ``retry-after: 0`` falls back to exponential backoff (0.5 s, 1 s,
    ... with jitter). So a 1 ms ``retry-after-ms`` is added, which the SDK
    prefers over ``retry-after``.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    if "retry-after-ms" in lowered or _positive_seconds(lowered.get("retry-after")):
        return headers
    return {**headers, "retry-after-ms": "1"}


def _positive_seconds(value: str | None) -> bool:
    try:
        return value is not None and float(value) > 0
    except ValueError:
        return True  # an HTTP date: the script wants a real wait


def _require(body: dict[str, Any], *names: str) -> None:
    for name in names:
        if name not in body:
            raise InvalidRequest(f"{name}: Field required")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages: at least one message is required")


def _validate_message_request(body: dict[str, Any]) -> None:
    _require(body, "model", "max_tokens", "messages")
    if not isinstance(body["max_tokens"], int) or body["max_tokens"] < 1:
        raise InvalidRequest("max_tokens: Input should be a positive integer")
    if body.get("stream"):
        raise InvalidRequest("stream: the fake server does not implement streaming")


# ----------------------------------------------------------------- prompt cache


class PromptCache:
    """Remembers prefixes written at breakpoints and splits usage like the API."""

    def __init__(self, min_cacheable_tokens: int = 0) -> None:
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self._min_tokens = min_cacheable_tokens

    def reset(self) -> None:
        """Forget everything, as if every cache entry expired."""
        with self._lock:
            self._seen.clear()

    def account(self, model: str, elements: list[PromptElement]) -> Usage:
        """Read the longest cached prefix, write up to the last breakpoint."""
        ends = list(itertools.accumulate(e.tokens for e in elements))
        total = ends[-1] if ends else 0
        breakpoints = [i for i, e in enumerate(elements) if e.breakpoint and ends[i] >= self._min_tokens]
        if not breakpoints:
            return Usage(total, 0, 0)
        hashes = _prefix_hashes(model, elements)
        with self._lock:
            hit = self._longest_hit(hashes, breakpoints)
            self._seen.update(hashes[b] for b in breakpoints)
        read = ends[hit] if hit is not None else 0
        written = ends[breakpoints[-1]]
        return Usage(total - written, written - read, read)

    def _longest_hit(self, hashes: list[str], breakpoints: list[int]) -> int | None:
        """Index of the longest cached prefix reachable from some breakpoint."""
        candidates = {i for b in breakpoints for i in range(max(0, b - CACHE_LOOKBACK_BLOCKS + 1), b + 1)}
        hits = [i for i in candidates if hashes[i] in self._seen]
        return max(hits) if hits else None


# ----------------------------------------------------------------------- server


class FakeAnthropic:
    """The fake API: start it, point the SDK at ``url``, script and inspect it."""

    def __init__(
        self,
        responder: Responder | None = None,
        *,
        min_cacheable_tokens: int = 0,
        instant_retries: bool = True,
    ) -> None:
        self.responder: Responder = responder or echo_responder
        self.cache = PromptCache(min_cacheable_tokens)
        self.instant_retries = instant_retries
        self.requests_served = 0
        self.requests_failed = 0
        self.responder_errors: list[BaseException] = []
        self._records: list[RecordedRequest] = []
        self._faults: deque[Fault] = deque()
        self._deliveries: deque[Delivery] = deque()
        self.undelivered = 0  # answers dropped or written to a client that had gone
        self._credit_exhausted = False
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------- lifecycle

    def start(self) -> Self:
        """Bind an ephemeral loopback port and serve from a daemon thread."""
        if self._httpd is not None:
            return self
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._thread = threading.Thread(target=self._serve, name="fake-anthropic", daemon=True)
        self._thread.start()
        return self

    def _serve(self) -> None:
        """Short poll interval: shutdown() waits one poll, 0.5 s by default."""
        assert self._httpd is not None
        self._httpd.serve_forever(poll_interval=0.01)

    def stop(self) -> None:
        """Stop serving and release the port."""
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @property
    def url(self) -> str:
        """Base URL for ``Anthropic(base_url=...)``."""
        if self._httpd is None:
            raise RuntimeError("FakeAnthropic is not running; use start() or a with-block")
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    # ------------------------------------------------------------- scripting

    def fail_next(
        self,
        status: int = 500,
        body: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests with this error, in queue order."""
        if body is None:
            body = error_body(ERROR_TYPES.get(status, "api_error"), f"Fake error {status}")
        fault = Fault(status, body, dict(headers or {}))
        with self._lock:
            self._faults.extend([fault] * times)

    def fail_next_credit_exhausted(self, times: int = 1) -> None:
        """Queue the API's out-of-credit 400 for the next ``times`` requests."""
        fault = credit_exhausted_fault()
        with self._lock:
            self._faults.extend([fault] * times)

    def exhaust_credit(self, exhausted: bool = True) -> None:
        """From now on (after queued faults) every request fails out of credit."""
        with self._lock:
            self._credit_exhausted = exhausted

    def delay_next(self, seconds: float, times: int = 1) -> None:
        """Answer the next ``times`` requests only after ``seconds`` (handled, and billed, at once)."""
        with self._lock:
            self._deliveries.extend([Delivery(delay=seconds)] * times)

    def drop_next(self, times: int = 1) -> None:
        """Handle the next ``times`` requests, then close the connection without answering."""
        with self._lock:
            self._deliveries.extend([Delivery(drop=True)] * times)

    def next_delivery(self) -> Delivery:
        """How to deliver the answer to the request just received (scripted, else at once)."""
        with self._lock:
            return self._deliveries.popleft() if self._deliveries else Delivery()

    def clear_faults(self) -> None:
        """Drop faults not yet consumed."""
        with self._lock:
            self._faults.clear()

    @property
    def pending_faults(self) -> int:
        with self._lock:
            return len(self._faults)

    # ------------------------------------------------------------ inspection

    @property
    def requests(self) -> list[RecordedRequest]:
        """A snapshot of every request received, in arrival order."""
        with self._lock:
            return list(self._records)

    # -------------------------------------------------------------- handling

    def handle(self, method: str, path: str, headers: dict[str, str], raw: bytes) -> Reply:
        """Record, inject a fault if scripted, else route; called per request."""
        body = _parse_body(raw)
        self._record(RecordedRequest(method, path, headers, body, time.monotonic()))
        reply = self._scripted_fault() or self._route(method, urlsplit(path).path, headers, body)
        return self._count(self._finish(reply))

    def _record(self, request: RecordedRequest) -> None:
        with self._lock:
            self._records.append(request)

    def _scripted_fault(self) -> Reply | None:
        with self._lock:
            fault = self._faults.popleft() if self._faults else None
            if fault is None and self._credit_exhausted:
                fault = credit_exhausted_fault()
        return Reply(fault.status, fault.body, fault.headers) if fault else None

    def _route(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: dict[str, Any] | None,
    ) -> Reply:
        routes = {MESSAGES_PATH: self._messages, COUNT_TOKENS_PATH: self._count_tokens}
        handler = routes.get(path.rstrip("/"))
        if handler is None or method != "POST":
            return _error_reply(404, f"Not found: {path}")
        if not headers.get("x-api-key") and not headers.get("authorization"):
            return _error_reply(401, "x-api-key header is required")
        if body is None:
            return _error_reply(400, "The request body is not valid JSON.")
        try:
            return handler(body)
        except InvalidRequest as exc:
            return _error_reply(400, str(exc))

    def _messages(self, body: dict[str, Any]) -> Reply:
        _validate_message_request(body)
        elements = prompt_elements(body)
        _check_breakpoints(elements)
        try:
            content = self._fill_tool_ids(self.responder(body))
        except Exception as exc:  # noqa: BLE001 - any responder bug must reach the test, not retry
            self.responder_errors.append(exc)
            return _error_reply(500, f"responder raised {exc!r}", {"x-should-retry": "false"})
        usage = self.cache.account(str(body["model"]), elements)
        return Reply(200, self._message(body, content, usage))

    def _count_tokens(self, body: dict[str, Any]) -> Reply:
        _require(body, "model", "messages")
        elements = prompt_elements(body)
        _check_breakpoints(elements)
        return Reply(200, {"input_tokens": sum(e.tokens for e in elements)})

    def _fill_tool_ids(self, content: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Responders may omit tool_use ids; the SDK and callers need them."""
        return [
            {**b, "id": f"toolu_{next(self._ids):022d}"} if b.get("type") == "tool_use" and "id" not in b else b
            for b in content
        ]

    def _message(self, body: dict[str, Any], content: list[dict[str, Any]], usage: Usage) -> dict[str, Any]:
        uses_tool = any(b.get("type") == "tool_use" for b in content)
        return {
            "id": f"msg_{next(self._ids):024d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": "tool_use" if uses_tool else "end_turn",
            "stop_sequence": None,
            "usage": {
                "input_tokens": usage.input_tokens,
                "output_tokens": count_tokens(content),
                "cache_creation_input_tokens": usage.cache_creation_input_tokens,
                "cache_read_input_tokens": usage.cache_read_input_tokens,
                "service_tier": "standard",
            },
        }

    def _finish(self, reply: Reply) -> Reply:
        headers = {"request-id": f"req_fake_{next(self._ids):020d}", **reply.headers}
        if reply.status >= 400 and self.instant_retries:
            headers = _instant_retry_headers(headers)
        return Reply(reply.status, reply.payload, headers)

    def _count(self, reply: Reply) -> Reply:
        with self._lock:
            if reply.status < 400:
                self.requests_served += 1
            else:
                self.requests_failed += 1
        return reply


def _parse_body(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw or b"null")
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return body if isinstance(body, dict) else None


def _error_reply(status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
    return Reply(
        status,
        error_body(ERROR_TYPES.get(status, "api_error"), message),
        dict(headers or {}),
    )


def _handler_for(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    """A handler class bound to one FakeAnthropic (http.server wants a class)."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, like the real API over httpx
        disable_nagle_algorithm = True  # headers and body go out in two writes: avoid 40 ms stalls

        def do_POST(self) -> None:  # http.server's naming
            self._serve("POST")

        def do_GET(self) -> None:  # http.server's naming
            self._serve("GET")

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            delivery = fake.next_delivery()
            reply = fake.handle(method, self.path, headers, raw)  # handled (billed) either way
            time.sleep(delivery.delay)
            if delivery.drop:
                self._undelivered()
                return
            self._send(reply)

        def _send(self, reply: Reply) -> None:
            data = json.dumps(reply.payload).encode("utf-8")
            try:
                self.send_response(reply.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for name, value in reply.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
                self.wfile.flush()
            except OSError:  # the client timed out and closed the connection
                self._undelivered()

        def _undelivered(self) -> None:
            self.close_connection = True
            with fake._lock:
                fake.undelivered += 1

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: pytest output should not fill with access logs."""

    return Handler
