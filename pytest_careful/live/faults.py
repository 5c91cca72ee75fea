"""A server's fault is never the model's answer: what each request to an OpenAI-compatible server
(vLLM, a gateway) may meet, and what is done about it.

BFCL's loop scores whatever its handler returns or raises: an exception there becomes an
"Error during inference" entry, a failure of the model. But a 500, a body that is not JSON,
half a body, a reset connection or a server that never answers says nothing about the model.
So every request of a live run on vLLM or an OpenAI-compatible API goes through a
:class:`ServerGuard`, around the handler's ``_query_FC`` / ``_query_prompting``:

* **A server fault** (5xx other than 529, a connection reset or cut short by a server that
  still answers ``/models``, a body that does not parse, a completion without choices) is
  sent again with backoff, up to :attr:`Retry.attempts` times (the OpenAI SDK's own two
  retries of a 5xx or a connection error come first, within each). If it keeps failing the
  conversation is unscored (:class:`~.errors.ServerError`, ``careful:server_error``), nothing
  is filed, and a rerun of the same command runs it.
* **A time-out** (``--careful-request-timeout``, each attempt; BFCL itself passes
  ``timeout=72000``) is sent again once; a second one stops the run as a dead server does
  (:class:`ServerHung`), with one line naming the server.
* **A server that stopped answering** (connection refused, or an error status and then ``/models``
  silent: :class:`ServerGone`) is left to the backend: a fleet's conversation moves to another
  server (``backends.vllm.fleet_client``), else the run stops (``backends.vllm.client.classify_error``).
* Everything else is the model's, scored as BFCL scores it: an answer that parses, however
  empty, and the server's 4xx about the request itself (a prompt past the context length).

Rate limits (429, 529) are not faults: ``pacing`` pauses everyone and the SDK retries them.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, ParamSpec, TypeVar

import httpx2
import openai
from openai._constants import DEFAULT_CONNECTION_LIMITS

from ..sources.live_options import REQUEST_TIMEOUT
from .errors import DEFAULT_REQUEST_TIMEOUT, NotRun, ServerError, ServerGone, ServerHung, ServerStopped

#: Connecting is bounded apart: a server that does not take the connection is not busy, it is gone.
CONNECT_TIMEOUT = 10.0
#: Rate-limited answers: not faults (``pacing`` and the SDK handle them).
RATE_LIMITED = (429, 529)

P = ParamSpec("P")
R = TypeVar("R")


class RequestTimedOut(openai.APITimeoutError):
    """One attempt ran past ``--careful-request-timeout``.

    An ``OpenAIError``: the SDK passes those on without retrying (its own retries would
    wait the time-out three times over), so the :class:`ServerGuard` decides: once more, then stop.
    """

    def __init__(self, request: httpx2.Request, seconds: float) -> None:
        super().__init__(request=request)
        self.message = f"no answer within {seconds:g} s ({REQUEST_TIMEOUT})"
        self.args = (self.message,)


class Deadline(httpx2.BaseTransport):
    """Every attempt bounded by the run's request time-out, whatever time-out the caller passed."""

    def __init__(self, seconds: float, inner: httpx2.BaseTransport | None = None) -> None:
        self.seconds = seconds
        self.inner = inner or httpx2.HTTPTransport(limits=DEFAULT_CONNECTION_LIMITS)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        seconds = self.seconds
        request.extensions["timeout"] = {
            "connect": min(seconds, CONNECT_TIMEOUT),
            "read": seconds,
            "write": seconds,
            "pool": seconds,
        }
        try:
            response = self.inner.handle_request(request)
        except httpx2.TimeoutException as exc:
            raise RequestTimedOut(request, seconds) from exc
        response.stream = _Bounded(response.stream, request, seconds)  # the body is read after this returns
        return response

    def close(self) -> None:
        self.inner.close()


class _Bounded(httpx2.SyncByteStream):
    """A response body whose read time-out is final too."""

    def __init__(self, inner: Any, request: httpx2.Request, seconds: float) -> None:
        self.inner, self.request, self.seconds = inner, request, seconds

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.inner
        except httpx2.TimeoutException as exc:
            raise RequestTimedOut(self.request, self.seconds) from exc

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()


@dataclass(frozen=True)
class Retry:
    """How a request meeting a server fault is sent again."""

    timeout: float = DEFAULT_REQUEST_TIMEOUT  # each attempt (--careful-request-timeout)
    attempts: int = 5  # a request's attempts through the guard, each with the SDK's own retries
    backoff: float = 0.5  # the first wait, in seconds; doubled after each fault
    max_backoff: float = 8.0


@dataclass(frozen=True)
class Fault:
    """One failed attempt that is the server's, not the model's."""

    kind: str  # timeout, connection, status, malformed
    text: str  # what the server did, in words (HTTP 500, a body that is not JSON, ...)
    url: str | None = None  # where the request went, when known


def server_fault(exc: BaseException) -> Fault | None:
    """What ``exc`` says about the server, if it is the server's fault; None when it is not."""
    url = _sent_to(exc)
    if isinstance(exc, openai.APITimeoutError):
        return Fault("timeout", str(getattr(exc, "message", "") or "no answer in time"), url)
    if isinstance(exc, openai.APIStatusError):
        status = exc.status_code
        if status >= 500 and status not in RATE_LIMITED:
            return Fault("status", f"HTTP {status}", url)
        return None  # 4xx: about the request (a prompt past the context), scored as BFCL scores it
    if isinstance(exc, openai.APIConnectionError):
        return Fault("connection", f"connection error ({_cause(exc)})", url)
    if isinstance(exc, openai.APIResponseValidationError):
        return Fault("malformed", "an answer that is not a completion", url)
    if isinstance(exc, json.JSONDecodeError) and _raised_in_sdk(exc):
        return Fault("malformed", "a body that is not JSON", url)
    return None


def malformed(answer: Any) -> str | None:
    """Why a query's answer is no completion at all (the server's fault), or None.

    ``answer`` is what a handler's ``_query_*`` returns: ``(api_response, latency)``. Only the
    shape is checked, never the model's text: an empty answer is the model's, and scored.
    """
    response = answer[0] if isinstance(answer, tuple) and answer else answer
    if isinstance(response, (str, bytes)):
        return "a body that is not JSON"  # the SDK hands back the text of a non-JSON content type
    choices = getattr(response, "choices", _ABSENT)
    if choices is not _ABSENT:  # completions, chat completions
        if not isinstance(choices, list) or not choices:
            return "a completion without choices"
        first = choices[0]
        if getattr(first, "text", None) is None and getattr(first, "message", None) is None:
            return "a choice without text or message"
        if getattr(response, "usage", None) is None:
            return "a completion without usage"
        return None
    output = getattr(response, "output", _ABSENT)
    if output is not _ABSENT and not isinstance(output, list):  # the Responses API
        return "a response without output"
    return None


_ABSENT = object()


class ServerGuard:
    """Sends each request of one process's conversations, telling the server's faults from the model's answers."""

    def __init__(
        self,
        retry: Retry,
        alive: Callable[[str | None], bool] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.retry = retry
        # Whether the server a request went to (its /v1 URL, None: unknown) still answers (/models);
        # None: not asked. That server, not the process's current one: after a failover, a request
        # sent before it went to the one that died.
        self.alive = alive
        self.sleep = sleep

    def wrap(
        self, query: Callable[P, R], before: Callable[[], None], after: Callable[[], None] | None = None
    ) -> Callable[P, R]:
        """``query`` sent through the guard; ``before`` runs before every attempt (it raises to send
        nothing more: the run stopped or was interrupted), ``after`` after every answer."""

        def guarded(*args: P.args, **kwargs: P.kwargs) -> R:
            return self.send(query, before, after, *args, **kwargs)

        return guarded

    def send(
        self,
        query: Callable[P, R],
        before: Callable[[], None],
        after: Callable[[], None] | None,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> R:
        faults: list[Fault] = []
        timeouts = 0
        started = time.monotonic()
        while True:
            before()
            try:
                answer = query(*args, **kwargs)
            except Exception as exc:
                fault = server_fault(exc)
                if fault is None:
                    raise
                if fault.kind == "timeout":
                    timeouts += 1
                    if timeouts > 1:
                        raise ServerHung(_hung(fault, self.retry.timeout), fault.url) from exc
                    continue  # once more, at once: a lost request, or a server that is gone
                if fault.kind == "connection" and self.alive is not None and not self.alive(fault.url):
                    raise  # not a fault of this request: the server is gone (the backend moves or stops)
                if fault.kind == "status" and self.alive is not None and not self.alive(fault.url):
                    # A server shutting down answers 503 on the connections it still holds, and takes no new one.
                    raise ServerGone(_gone(fault), fault.url) from exc
            else:
                if after is not None:
                    after()
                problem = malformed(answer)
                if problem is None:
                    return answer
                fault = Fault("malformed", problem)
            faults.append(fault)
            if len(faults) >= self.retry.attempts:
                raise ServerError(_failed(faults, time.monotonic() - started))
            self.sleep(self.delay(len(faults)))

    def delay(self, faults: int) -> float:
        """Exponential backoff with jitter: many conversations in flight do not come back at once."""
        base = min(self.retry.backoff * 2 ** (faults - 1), self.retry.max_backoff)
        return base * random.uniform(0.75, 1.25)


def _failed(faults: list[Fault], seconds: float) -> str:
    url = next((f.url for f in reversed(faults) if f.url), None)
    kinds = ", ".join(dict.fromkeys(f.text for f in faults))
    return (
        f"server error: the server{f' at {url}' if url else ''} failed this request {len(faults)} times "
        f"in {seconds:.0f} s ({kinds}): not the model's answer, not scored; a rerun of the same command runs it"
    )


def _gone(fault: Fault) -> str:
    where = f"the server at {fault.url}" if fault.url else "the server"
    return (
        f"{where} answered {fault.text} and then stopped answering: the run stopped, a rerun of the same "
        "command resumes it"
    )


def _hung(fault: Fault, seconds: float) -> str:
    where = f"the server at {fault.url}" if fault.url else "the server"
    return (
        f"{where} did not answer within {seconds:g} s, twice ({REQUEST_TIMEOUT}): "
        "it is hung or overloaded; the run stopped, a rerun of the same command resumes it"
    )


def _sent_to(exc: BaseException) -> str | None:
    """The server the failed request went to (scheme, host, port and path up to /v1), if known."""
    try:
        url = str(exc.request.url)  # type: ignore[attr-defined]
    except (AttributeError, RuntimeError):
        return None
    head, found, _ = url.partition("/v1/")
    return head + "/v1" if found else url


def _cause(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    text = " ".join(str(cause).split()) if cause is not None else ""
    return (text or type(cause).__name__ if cause is not None else "no detail")[:120]


def _raised_in_sdk(exc: BaseException) -> bool:
    """Whether the exception came from the SDK's reading of a response (not from BFCL's own code)."""
    tb = exc.__traceback__
    while tb is not None:
        if str(tb.tb_frame.f_globals.get("__name__", "")).startswith("openai."):
            return True
        tb = tb.tb_next
    return False


def answers(url: str, timeout: float = 5.0) -> bool:
    """Whether a server answers anything at ``url``/models (any HTTP status: an API without the key says 401)."""
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/models", timeout=timeout):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, OSError, ValueError):
        return False


def classify(exc: BaseException, alive: Callable[[str | None], bool]) -> BaseException | None:
    """An OpenAI-compatible API's problems that are not the model's, past the guard and the SDK's retries.

    Rate limited still: not run (a rerun sends it). A connection failure with the server gone:
    the run stops. Anything else: None (the model's, scored as BFCL scores it).
    """
    if isinstance(exc, openai.APIStatusError) and exc.status_code in RATE_LIMITED:
        return NotRun(f"not run: the server answered {exc.status_code} (rate limited) after every retry")
    url = _sent_to(exc)
    if isinstance(exc, openai.APIConnectionError) and not alive(url):
        return ServerStopped(
            f"the server{f' at {url}' if url else ''} stopped answering ({_cause(exc)}); "
            "the run stopped, a rerun of the same command resumes it"
        )
    return None
