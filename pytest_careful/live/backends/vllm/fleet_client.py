"""Several vLLM servers used as one (``--careful-endpoint=URL,URL,...``): the wiring of :mod:`.fleet`.

Each process that runs conversations builds one station per server from its handler (a copy
pointed at that server: its client, its context length, a tokenizer that sizes requests by it)
and gives each conversation a seat on the server :class:`~.fleet.Fleet` chooses: the
conversation's copy of the handler talks to that server only, for every request
(:class:`FleetSeat`). A thread reads each server's ``/metrics`` twice a second while
conversations run, for what it queues. A server that stops answering leaves the fleet: each of
its conversations is run again, from its start, on the others (:meth:`FleetClient.classify`);
the run stops with one line only when none is left. What each server served goes to the
ledger (``<output>/.careful/fleet.jsonl``), which the summary and the scorecard read.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import ParamSpec, TypeVar

from ....sources.live_options import ENDPOINT, REQUEST_TIMEOUT
from ...errors import NotRun, RunAgain, ServerGone, ServerHung
from ...handler import Handler
from ...runner import QUERIES
from ...stops import SESSION_ENV
from .fleet import Fleet, FleetLedger, FleetProvenance, Visit, queue_of, served_by, summary_lines, visit_key
from .server import ServerDied, unusable

P = ParamSpec("P")
R = TypeVar("R")

#: How often the servers' /metrics are read while conversations run.
POLL_SECONDS = 0.5
#: A conversation waiting for room looks again this often (and whether the run stopped).
WAIT_SECONDS = 0.2
#: The metrics thread ends after this long without a conversation in flight (a later seat restarts it).
IDLE_SECONDS = 10.0
#: Answers that mean "send it later" (gateways in front of vLLM).
RATE_LIMITED = (429, 529)


class Failover(RunAgain):
    """The conversation's server stopped answering and others do: run it again there."""


class FleetClient:
    """This process's seats on every server of the fleet (``fleet.Placement``)."""

    def __init__(
        self,
        urls: Sequence[str],
        model: str,
        total: int,
        output: Path,
        station: Callable[[Handler, str], Handler],
        log_tail: Callable[[], str] = lambda: "",
    ) -> None:
        self.urls = tuple(urls)
        self.model = model
        self.fleet = Fleet(self.urls, total)
        self.ledger = FleetLedger(output)
        self._station = station  # (handler, url) -> a copy of the handler pointed at url
        self._log_tail = log_tail
        self._stations: dict[str, Handler] = {}
        self._changed = threading.Condition()
        self._asked = {url: True for url in self.urls}  # servers whose /metrics is worth reading
        self._poller: threading.Thread | None = None
        self._tickets = itertools.count()  # the order conversations asked for a seat in
        # Those still waiting, as (-user turns, ticket): the first is the next to be seated.
        self._queue: list[tuple[int, int]] = []

    # -- set-up, per process

    def attach(self, handler: Handler) -> None:
        """This process's handler, set up: one station per server (its client and context length)."""
        self._stations = {url: self._station(handler, url) for url in self.urls}

    # -- a conversation's seat

    def seat(self, key: tuple[str, str, int], check: Callable[[], None], turns: int = 0) -> FleetSeat:
        """A seat on the server with the most room, waiting for one; ``check()`` raises to stop waiting.

        Conversations waiting for room are seated the longest (most user ``turns``) first, then in
        the order they asked: the flight's order. Woken together, they would otherwise race for each
        seat; and the order they reach this call is not the flight's (each thread claims and copies
        its handler first), so a long one could be seated behind every short one and end the run late.
        """
        with self._changed:
            ticket = (-turns, next(self._tickets))
            self._queue.append(ticket)
        try:
            while True:
                with self._changed:
                    if not self.fleet.live():
                        raise ServerDied(self._none_left())
                    url = self.fleet.choose(time.monotonic()) if min(self._queue) == ticket else None
                    if url is not None:
                        self.fleet.take(url)
                        break
                    self._changed.wait(WAIT_SECONDS)
                check()
        finally:
            with self._changed:
                self._queue.remove(ticket)
                self._changed.notify_all()  # the next in line may have room now
        self._watch()
        return FleetSeat(self, key, url)

    # -- faults

    def classify(self, exc: BaseException) -> BaseException | None:
        """A server gone (connection refused, hung, the model gone from it): the conversation runs
        again on another (``Failover``), or, with none left, the run stops; rate limited past the
        SDK's retries: not run. Anything else is not the fleet's (None)."""
        # the OpenAI SDK on first use (half a second): importing the registry (handles, inflight)
        # stays off it; a live run loads it anyway, through the source's faults module
        import openai

        url = self._server_of(exc)
        if isinstance(exc, openai.APIStatusError) and exc.status_code in RATE_LIMITED:
            return NotRun(
                f"not run: the server at {url or f'a {ENDPOINT}'} answered {exc.status_code} (rate limited) "
                "after the OpenAI SDK's retries"
            )
        if url is None:
            return None
        if isinstance(exc, ServerHung):
            why = f"stopped answering (no answer within {REQUEST_TIMEOUT}, twice)"
        elif isinstance(exc, ServerGone):
            why = "stopped answering"
        elif isinstance(exc, (openai.APIConnectionError, ConnectionError, openai.NotFoundError)):
            problem = unusable(url, self.model)
            if problem is None:
                return None  # the server is fine: this request's own failure, scored as BFCL scores it
            why = "stopped answering" if not isinstance(exc, openai.NotFoundError) else f"cannot be used: {problem}"
        else:
            return None
        with self._changed:
            self.fleet.drop(url, why)
            left = [s.url for s in self.fleet.live()]
            self._changed.notify_all()
        if not left:
            return exc if isinstance(exc, (ServerHung, ServerGone)) else ServerDied(self._none_left())
        return Failover(f"the vLLM server at {url} {why}; the conversation runs again on {', '.join(left)}")

    def _server_of(self, exc: BaseException) -> str | None:
        """The fleet's server a failed request went to (the SDK's request URL, or the hung fault's)."""
        sent = getattr(exc, "url", None)
        if sent is None:
            try:
                sent = str(exc.request.url)  # type: ignore[attr-defined]
            except (AttributeError, RuntimeError):  # httpx raises RuntimeError for an exception without a request
                return None
        return next((url for url in self.urls if str(sent).startswith(url)), None)

    def _none_left(self) -> str:
        gone = "; ".join(f"{s.url} {s.down}" for s in self.fleet.servers.values() if s.down)
        return f"no {ENDPOINT} server is left: {gone}{self._log_tail()}"

    # -- what the servers queue

    def _watch(self) -> None:
        with self._changed:
            if (self._poller is None or not self._poller.is_alive()) and any(self._asked.values()):
                self._poller = threading.Thread(target=self._poll, name="careful-fleet-metrics", daemon=True)
                self._poller.start()

    def _poll(self) -> None:
        idle = 0.0
        while idle < IDLE_SECONDS and any(self._asked.values()):
            for server in self.fleet.live():
                if self._asked[server.url]:
                    self._observe(server.url)
            with self._changed:
                busy = any(s.in_flight for s in self.fleet.servers.values())
            idle = 0.0 if busy else idle + POLL_SECONDS
            time.sleep(POLL_SECONDS)

    def _observe(self, url: str) -> None:
        try:
            with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=2.0) as response:
                text = response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError:
            self._asked[url] = False  # no /metrics here (not vLLM, or hidden): speeds alone decide
            return
        except (urllib.error.URLError, OSError, ValueError):
            return  # not answering now: its requests will say so
        waiting, running = queue_of(text, self.model)
        if waiting is None and running is None:
            self._asked[url] = False
        with self._changed:
            self.fleet.observed(url, waiting, running)
            self._changed.notify_all()

    # -- what each server served

    def summary_lines(self) -> list[str]:
        return summary_lines(self.ledger.visits(), self.urls, os.environ.get(SESSION_ENV, "local"))

    def provenance(self, keys: Iterable[tuple[str, int]], condition: str) -> FleetProvenance:
        named = {
            visit_key((condition, cid, repeat)): cid if repeat == 1 else f"{cid}@repeat-{repeat}"
            for cid, repeat in keys
        }
        found = served_by(self.ledger.visits(), set(named))
        return {
            "servers": list(self.urls),
            "served_by": {named[k]: url for k, url in sorted(found.items(), key=lambda x: named[x[0]])},
        }


class FleetSeat:
    """One conversation on one server: its copy of the handler talks to that server alone."""

    def __init__(self, client: FleetClient, key: tuple[str, str, int], server: str) -> None:
        self.client = client
        self.key = key
        self.server = server
        self.requests = 0
        self._left = False

    def apply(self, handler: Handler) -> None:
        """Point the conversation's handler copy at the server, and time its requests."""
        station = self.client._stations[self.server]
        for name in ("client", "base_url", "max_context_length", "tokenizer"):
            if hasattr(station, name):
                setattr(handler, name, getattr(station, name))
        for name in QUERIES:
            query = getattr(handler, name, None)
            if query is not None:
                setattr(handler, name, self._timed(query))

    def _timed(self, query: Callable[P, R]) -> Callable[P, R]:
        # the OpenAI SDK on first use (half a second): importing the registry (handles, inflight)
        # stays off it; a live run loads it anyway, through the source's faults module
        import openai

        fleet, changed, url = self.client.fleet, self.client._changed, self.server

        def timed(*args: P.args, **kwargs: P.kwargs) -> R:
            started = time.monotonic()
            with changed:
                fleet.sent(url, started)
            self.requests += 1
            seconds: float | None = None
            try:
                answer = query(*args, **kwargs)
                seconds = time.monotonic() - started
                return answer
            except openai.APIStatusError:
                seconds = time.monotonic() - started  # it answered, with an error status
                raise
            finally:
                with changed:
                    fleet.answered(url, seconds, time.monotonic())
                    changed.notify_all()

        return timed

    def leave(self) -> None:
        """The conversation ended here (or moves on): its room is free, its visit recorded."""
        if self._left:
            return
        self._left = True
        with self.client._changed:
            self.client.fleet.leave(self.server)
            moved = self.client.fleet.servers[self.server].down is not None
            self.client._changed.notify_all()
        self.client.ledger.append(
            Visit(os.environ.get(SESSION_ENV, "local"), visit_key(self.key), self.server, self.requests, moved)
        )
