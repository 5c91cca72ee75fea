"""A fleet of servers used as one: which server each conversation goes to, and what each one served.

With ``--careful-endpoint=URL,URL,...`` every conversation of a live run is assigned to one
server when it starts and keeps all of its requests there: every request re-sends the whole
conversation, and vLLM's automatic prefix caching pays only when the next request lands where
the last one did. This module holds the decision, as a pure object (:class:`Fleet`: no threads,
no HTTP, the time passed in), and the record of what each server served (:class:`FleetLedger`);
:mod:`.fleet_client` wires it to the handler's clients and to the servers' ``/metrics``.

The rule. Each server has a share of ``--careful-concurrency`` (the run's total), in proportion
to its speed (one over its recent seconds per request; a server that has not answered for a
while counts as that slow), and a limit: the conversations it has shown it runs at once.

* The limit starts at :data:`START`. Where the server says what it queues (vLLM's
  ``vllm:num_requests_waiting`` in ``/metrics``, read twice a second), each reading that finds
  no queue and the limit used grows it by an eighth (:data:`GROWTH`); a queue brings it down to
  the conversations the server runs, plus :data:`SLACK`, and past that it grows only while the
  server has slots idle that it ran when it queued: a queue on one server slows each of its
  conversations, and the last of them end the run. A server that says nothing of its queue
  grows its limit with each answer.
* A new conversation goes to the server with the most free room (fewest conversations in flight
  against the smaller of its share and its limit); a server that queues gets one only when no
  other has room, and when none has room the conversation waits for one.

So a faster server gets more conversations, a queue is not filled blindly before the servers'
speeds are known, and the last conversations go where they finish first.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypedDict

from ...handler import Handler
from . import metrics as vllm_metrics

#: Conversations a server takes before it has answered: enough to fill a small server, few
#: enough that a fleet's speeds are known before most of the run is committed to one of them.
START = 16
#: Conversations beyond what a server was seen to run when it queued that it keeps: a
#: conversation is between two requests (its calls executed, its next prompt counted) part of
#: the time, and a queue of its own would slow each of its conversations.
SLACK = 0
#: A limit that holds a server back grows by 1/GROWTH (at least one) with each reading of its queue.
GROWTH = 8
#: Weight of the newest answer in a server's seconds per request (an exponential mean).
SMOOTHING = 0.2


@dataclass
class ServerState:
    """One server of the fleet as this process sees it."""

    url: str
    limit: int = START
    full: int | None = None  # this process's conversations it held when it last queued (None: not seen)
    capacity: int | None = None  # the requests it ran then, everyone's: what it runs at once
    metered: bool = False  # its /metrics has said what it queues
    in_flight: int = 0  # conversations assigned here and not yet ended
    seconds: float | None = None  # recent seconds per request (None: no answer yet)
    waiting: int | None = None  # requests the server queues (vLLM's /metrics; None: not exposed)
    running: int | None = None  # requests it runs (likewise)
    pending: int = 0  # requests sent and not answered
    busy_since: float = 0.0  # when ``pending`` last went from 0 to 1
    last_answer: float = 0.0
    down: str | None = None  # why it left the fleet (stopped answering, hung)

    def pace(self, now: float) -> float | None:
        """Seconds per request: the recent mean, or, while it answers nothing, the time it has been silent."""
        silent = now - max(self.last_answer, self.busy_since) if self.pending else 0.0
        if self.seconds is None:
            return silent or None
        return max(self.seconds, silent)


class Fleet:
    """Which server the next conversation goes to (see the module docstring); not thread-safe."""

    def __init__(self, urls: Sequence[str], total: int, start: int = START) -> None:
        if not urls:
            raise ValueError("a fleet needs a server")
        self.total = max(1, total)
        self.servers = {url: ServerState(url, limit=max(1, min(start, self.total))) for url in urls}

    def live(self) -> list[ServerState]:
        return [s for s in self.servers.values() if s.down is None]

    def shares(self, now: float) -> dict[str, float]:
        """Each live server's share of the total, in proportion to its speed (equal until they answer)."""
        live = self.live()
        paces = {s.url: s.pace(now) for s in live}
        known = [p for p in paces.values() if p]
        typical = sum(known) / len(known) if known else 1.0
        speed = {url: 1.0 / (pace or typical) for url, pace in paces.items()}
        whole = sum(speed.values())
        return {url: self.total * v / whole for url, v in speed.items()}

    def capacities(self, now: float) -> dict[str, float]:
        """The most conversations each live server takes now: the smaller of its share and its limit."""
        shares = self.shares(now)
        return {s.url: min(shares[s.url], s.limit) for s in self.live()}

    def choose(self, now: float) -> str | None:
        """The server for a new conversation, or None: none has room now (or none is left)."""
        capacities = self.capacities(now)
        room = [s for s in self.live() if s.in_flight < capacities[s.url]]
        quiet = [s for s in room if not s.waiting]  # a server that queues: only when no other has room
        pool = quiet or room
        if not pool:
            return None
        return min(pool, key=lambda s: s.in_flight / capacities[s.url]).url

    def take(self, url: str) -> None:
        self.servers[url].in_flight += 1

    def leave(self, url: str) -> None:
        self.servers[url].in_flight -= 1

    def sent(self, url: str, now: float) -> None:
        server = self.servers[url]
        if not server.pending:
            server.busy_since = now
        server.pending += 1

    def answered(self, url: str, seconds: float | None, now: float) -> None:
        """A request to ``url`` ended: answered after ``seconds``, or (None) failed without an answer."""
        server = self.servers[url]
        server.pending = max(0, server.pending - 1)
        if seconds is None:
            return
        server.last_answer = now
        server.seconds = seconds if server.seconds is None else (1 - SMOOTHING) * server.seconds + SMOOTHING * seconds
        # A server that says nothing of its queue: the limit is a ramp, grown with each answer while
        # it is what holds the server back (a limit nobody uses says nothing of the server).
        if not server.metered and server.in_flight >= server.limit:
            server.limit = min(self.total, server.limit + 1)

    def observed(self, url: str, waiting: int | None, running: int | None) -> None:
        """What the server's ``/metrics`` says it queues and runs (None: it does not say).

        Read twice a second, this paces the limit: answers arrive in waves (conversations started
        together answer together), and a limit grown with each would overshoot by a wave before the
        next reading showed the queue.
        """
        server = self.servers[url]
        server.waiting, server.running = waiting, running
        server.metered = server.metered or waiting is not None
        if waiting:
            # Of what it runs, this process's part (other processes or users may send to it too).
            held = (
                server.in_flight * running / (running + waiting) if running is not None else server.in_flight - waiting
            )
            server.full, server.capacity = max(0, int(held)), running
            server.limit = max(1, min(server.limit, server.full + SLACK))
        elif waiting == 0:
            if running is not None and server.capacity is not None:
                if running > server.capacity:
                    server.full = server.capacity = None  # it runs more than it did when it queued
                elif running < server.capacity:
                    # Slots idle that it ran when it queued: this process's conversations spend longer
                    # between requests than then (a busy client): room for as many more.
                    server.limit = min(self.total, max(server.limit, server.in_flight + server.capacity - running))
                    return
            if server.in_flight >= server.limit and (server.full is None or server.limit < server.full + SLACK):
                server.limit = min(self.total, server.limit + max(1, server.limit // GROWTH))

    def drop(self, url: str, why: str) -> bool:
        """``url`` left the fleet (first time: True); its conversations run again elsewhere."""
        server = self.servers[url]
        if server.down is not None:
            return False
        server.down = why
        return True


def queue_of(metrics: str, model: str) -> tuple[int | None, int | None]:
    """(waiting, running) from a vLLM server's Prometheus text for ``model``; None where it says nothing.

    vLLM labels each engine's gauge (``engine="0"`` ... under data parallel) and model
    (``model_name``): the engines of ``model`` are summed, other models' left out.
    """
    found = vllm_metrics.sums(metrics, model)
    waiting, running = found.get(vllm_metrics.WAITING), found.get(vllm_metrics.RUNNING)
    return (None if waiting is None else int(waiting)), (None if running is None else int(running))


# -- what each server served ---------------------------------------------------


class Seat(Protocol):
    """One conversation's place on one server, from its start to its end there."""

    @property
    def server(self) -> str: ...

    def apply(self, handler: Handler) -> None:
        """Point the conversation's copy of the handler at the server (client, context length, counts)."""
        ...

    def leave(self) -> None: ...


class Placement(Protocol):
    """Where a backend with several servers runs each conversation (``fleet_client.FleetClient``)."""

    def seat(self, key: tuple[str, str, int], check: Callable[[], None], turns: int = 0) -> Seat:
        """A server with room for the conversation ``key`` (of ``turns`` user turns: the longest are
        seated first), waiting for one; ``check()`` raises to stop waiting."""
        ...

    def summary_lines(self) -> list[str]: ...

    def provenance(self, keys: Iterable[tuple[str, int]], condition: str) -> FleetProvenance: ...


class FleetProvenance(TypedDict):
    """``provenance.live.fleet`` of a scorecard: the servers, and which one served each conversation.

    ``served_by``: conversation id (``id@repeat-k`` for repeat k > 1) to the server its filed
    entry came from, as the ledger recorded it; a conversation filed by a run of another kind
    (one server) is not there.
    """

    servers: list[str]
    served_by: dict[str, str]


LEDGER_FILE = "fleet.jsonl"  # in <output>/.careful: a line per conversation's time on one server


@dataclass(frozen=True)
class Visit:
    """One conversation's time on one server (a line of the ledger)."""

    session: str
    key: str  # inflight.key_name: condition.repeat.conversation_id
    server: str
    requests: int
    moved: bool  # it left the server before its end (the server stopped answering)


def visit_key(key: tuple[str, str, int]) -> str:
    """A conversation's name in the ledger: condition.repeat.conversation_id (``inflight.key_name``'s form)."""
    condition, conversation_id, repeat = key
    return f"{condition}.{repeat}.{conversation_id}"


class FleetLedger:
    """``<output>/.careful/fleet.jsonl``: what each server of a fleet served, across sessions.

    One line per conversation's time on one server, appended (one short write: lines of
    several threads or processes do not mix), read back for the summary (this session's lines)
    and the scorecard (the last line of each conversation that ended where it was).
    """

    def __init__(self, output: Path) -> None:
        self.path = output / ".careful" / LEDGER_FILE

    def append(self, visit: Visit) -> None:
        line = json.dumps(visit.__dict__) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode("utf-8"))
            finally:
                os.close(fd)
        except OSError:
            pass  # a full disk stops the run where results are filed; this record is a courtesy

    def visits(self) -> list[Visit]:
        try:
            text = self.path.read_text(encoding="utf-8")
        except OSError:
            return []
        out = []
        for line in text.splitlines():
            try:
                data = json.loads(line)
                out.append(
                    Visit(
                        str(data["session"]),
                        str(data["key"]),
                        str(data["server"]),
                        int(data["requests"]),
                        bool(data["moved"]),
                    )
                )
            except (ValueError, KeyError, TypeError):
                continue  # a line cut short by a full disk or a kill
        return out


def summary_lines(visits: Iterable[Visit], servers: Sequence[str], session: str) -> list[str]:
    """The summary's lines: conversations and requests per server this session, and what moved."""
    counts = {url: [0, 0] for url in servers}
    moved: dict[str, int] = {}
    for visit in visits:
        if visit.session != session or visit.server not in counts:
            continue
        counts[visit.server][1] += visit.requests
        if visit.moved:
            moved[visit.server] = moved.get(visit.server, 0) + 1
        else:
            counts[visit.server][0] += 1
    if not any(c + r for c, r in counts.values()):
        return []
    parts = [f"{url} {_counted(c, 'conversation')}, {_counted(r, 'request')}" for url, (c, r) in counts.items()]
    lines = ["servers: " + "; ".join(parts)]
    lines += [
        f"server {url} stopped answering: {_counted(n, 'conversation')} moved to the others and ran again there"
        for url, n in moved.items()
    ]
    return lines


def served_by(visits: Iterable[Visit], keys: set[str]) -> dict[str, str]:
    """Each key's server: the last visit that ended where it was."""
    out: dict[str, str] = {}
    for visit in visits:
        if visit.key in keys and not visit.moved:
            out[visit.key] = visit.server
    return out


def _counted(n: int, what: str) -> str:
    return f"{n:,} {what}{'' if n == 1 else 's'}"
