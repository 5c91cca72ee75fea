"""One rate limit for every conversation in flight against an OpenAI-compatible server.

With many conversations in flight (``live.inflight``), a gateway's 429 (or 529)
answers one request, but it is about all of them: the server or the account is
saturated. Each request would otherwise retry on its own schedule (the OpenAI
SDK's retries, BFCL's backoff), and the others keep sending meanwhile. So every
attempt of every conversation goes through a :class:`Pause`:

* a rate-limited answer pauses everyone for the wait it asks for (``retry-after``,
  capped at ``backends.claude.ratelimit.MAX_WAIT``; one second when it names none);
* before each attempt (the SDK's own retries included: the hook sits on the HTTP
  client) a request waits for the pause to end;
* the pause is shared with the run's other processes through a small file in the
  session folder (``<session>/flight/pause``), read when it changed.

Claude has its own, stricter limiter (``backends.claude.ratelimit.SharedLimiter``, adaptive
concurrency); this is the lighter rule for vLLM servers and OpenAI-style gateways.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import openai

from .backends.claude.ratelimit import MAX_WAIT, Headers, retry_after
from .faults import Deadline
from .handler import Handler

#: Answers that pause everyone (the same as ``backends.vllm.client.RATE_LIMITED``).
RATE_LIMITED = (429, 529)
#: The pause after a rate-limited answer that names no wait.
DEFAULT_WAIT = 1.0
#: How often a waiting request looks again (and at ``stopping``).
POLL = 0.1


class Pause:
    """Until when nobody sends, in this process and (through ``path``) the run's others."""

    def __init__(self, path: Path | None = None, stopping: threading.Event | None = None) -> None:
        self.path = path
        self.stopping = stopping
        self._until = 0.0  # time.time() at which sending may resume
        self._seen: float | None = None  # the shared file's mtime when last read
        self._lock = threading.Lock()
        self.paused = 0  # rate-limited answers seen here (for tests and the summary)

    def until(self) -> float:
        """The later of this process's pause and the shared one."""
        if self.path is not None:
            try:
                mtime = os.stat(self.path).st_mtime
            except OSError:
                mtime = None
            if mtime is not None and mtime != self._seen:
                try:
                    shared = float(self.path.read_text(encoding="ascii"))
                except (OSError, ValueError):
                    shared = 0.0
                with self._lock:
                    self._seen, self._until = mtime, max(self._until, shared)
        return self._until

    def wait(self) -> None:
        """Block until the pause ends (or the run is being stopped: the request then goes and ends)."""
        while (left := self.until() - time.time()) > 0:
            if self.stopping is not None and self.stopping.is_set():
                return
            time.sleep(min(left, POLL))

    def rate_limited(self, headers: Headers) -> None:
        """A rate-limited answer: everyone waits what it asks for."""
        seconds = retry_after(headers, MAX_WAIT) or DEFAULT_WAIT
        until = time.time() + seconds
        with self._lock:
            self.paused += 1
            if until <= self._until:
                return
            self._until = until
        if self.path is not None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.{threading.get_ident()}")
                try:
                    temporary.write_text(repr(until), encoding="ascii")
                    os.replace(temporary, self.path)
                finally:
                    temporary.unlink(missing_ok=True)  # a full disk leaves no temporary behind
            except OSError:
                pass  # the other processes learn it from their own 429s


def share(handler: Handler) -> None:
    """Route ``handler``'s OpenAI client through its ``careful_pause`` (every attempt, the SDK's retries
    too) and bound each attempt by its ``careful_request_timeout`` (``faults.Deadline``); a handler
    without a pause is left as it is."""
    pause: Pause | None = getattr(handler, "careful_pause", None)
    client = getattr(handler, "client", None)
    if pause is None:
        return
    if not isinstance(client, openai.OpenAI) or getattr(client, "_careful_pause", None) is pause:
        return

    def before(request: object) -> None:
        pause.wait()

    def after(response: Any) -> None:
        if response.status_code in RATE_LIMITED:
            pause.rate_limited(response.headers)

    hooks: dict[str, list[Callable[..., Any]]] = {"request": [before], "response": [after]}
    seconds: float | None = getattr(handler, "careful_request_timeout", None)
    if seconds is None:
        http = openai.DefaultHttpxClient(event_hooks=hooks)
    else:
        http = openai.DefaultHttpxClient(event_hooks=hooks, transport=Deadline(seconds))
    shared = client.with_options(http_client=http)
    shared._careful_pause = pause  # type: ignore[attr-defined]  # marks it done (a failover re-points it)
    cap: int | None = getattr(handler, "careful_max_tokens", None)
    if cap is not None:
        cap_max_tokens(shared, cap)
    handler.client = shared


def cap_max_tokens(client: Any, cap: int) -> None:
    """Send at most ``cap`` as ``max_tokens`` (``--careful-max-output-tokens`` on vLLM).

    BFCL's OSS handler sizes ``max_tokens`` inside its ``_query_*`` (the context left,
    up to 4096); the smaller of that and ``cap`` goes out, the rest of the request as BFCL
    builds it. On the client, so both the completions (prompting) and chat (FC) paths
    are covered.
    """
    for resource in (client.completions, client.chat.completions):
        create = resource.create

        def capped(*args: Any, _create: Callable[..., Any] = create, **kwargs: Any) -> Any:
            if isinstance(kwargs.get("max_tokens"), int):
                kwargs["max_tokens"] = min(kwargs["max_tokens"], cap)
            return _create(*args, **kwargs)

        resource.create = capped
