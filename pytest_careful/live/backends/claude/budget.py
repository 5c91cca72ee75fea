"""The spend guard of paid runs: list prices, what a request costs, a shared ledger.

* :class:`Prices` reads ``prices.yaml`` (USD per million tokens, with the date
  the figures were read and where from) and finds a model's row by the longest
  key that is a prefix of its id (``claude-haiku-4-5-20251001`` ->
  ``claude-haiku-4-5``).
* :class:`Usage` is what the API reports for one response (or a sum of them);
  :meth:`ModelPrice.cost` prices it twice:

  - ``list``: what the price list charges: ``input * in + cache_creation *
    cache_write_5m + cache_read * cache_read + output * out``;
  - ``conservative``: the same with cache reads at the full input price, so a
    cache that did not behave as the API reported cannot make the guard look
    better than the bill. The spending cap is enforced on this figure.

* :func:`request_bound` is the most one request can cost, computed before it is
  sent: its prompt (``system`` + ``tools`` + ``messages`` as UTF-8 JSON) at
  ceil(bytes / 3) tokens (real tokenisers need more than 3 bytes a token on
  such text), plus the API's own tool-use system prompt
  (:data:`TOOL_PROMPT_TOKENS`) when tools are sent, all at the cache-write price
  (the most a prompt token can cost), plus ``max_tokens`` at the output price.
* :class:`SpendLedger` is one JSON file per output folder
  (``<output>/.careful/spend.json``), shared by every process that uses the
  folder: xdist workers, a resumed session, a second session started at the
  same time. It is changed only under an exclusive ``fcntl.flock`` and replaced
  atomically (fsynced, then renamed), so a crash leaves the old state or the new
  one. ``--careful-budget-usd`` caps what the *folder* has spent, every session
  together: a rerun continues under the same cap, it does not get a fresh one,
  and a rerun that does not give the option keeps the cap last given there.
* Every HTTP attempt is reserved, not every request: the SDK's own retries are
  off and :mod:`.client` retries, so each attempt's bound goes through
  :meth:`~SpendLedger.reserve` (spent + unconfirmed + reserved + bound <= cap)
  before it is sent. Then exactly one of: :meth:`~SpendLedger.settle` (a
  message came back: its actual cost), :meth:`~SpendLedger.release` (an error
  status came back, or nothing left this process: not billed), or
  :meth:`~SpendLedger.keep` (sent and not answered, a time-out or a dropped
  connection: the server may have completed and billed it, so its bound stays
  spent). A reservation whose process died is kept as spent the same way.

Limits, documented rather than hidden: the bound is an estimate of the token
count (the API's tokeniser is not available offline), so the cap could be
crossed by the difference on a request whose prompt tokenises worse than 3
bytes a token; error statuses are taken as not billed (the API's rule); a
dead process is recognised on the same host only (elsewhere, or with its pid
reused, its reservation stays reserved: still counted, never lost); ``flock``
must work on the folder's file system (local disks do; some network mounts do
not).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import socket
import time
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

import yaml

from ....data.result_store import fsync_dir
from ....sources.live_options import BUDGET_USD, OUTPUT
from ...errors import StopRun

PRICES_FILE = Path(__file__).with_name("prices.yaml")
PER_TOKENS = 1_000_000  # prices are per million tokens
BOUND_BYTES_PER_TOKEN = 3
#: Anthropic adds a tool-use system prompt of a few hundred tokens (346 for the
#: Claude 4 family with ``tool_choice`` auto) to any request that sends tools.
TOOL_PROMPT_TOKENS = 500
LEDGER_VERSION = 2


class UnknownPrice(LookupError):
    """A model with no row in ``prices.yaml``."""

    def __str__(self) -> str:
        return str(self.args[0])


class BudgetExceeded(StopRun):
    """The next request could cross ``--careful-budget-usd``; it was not sent."""


# ---------------------------------------------------------------- prices


@dataclass(frozen=True)
class Usage:
    """Token counts of one response (or a sum); the input ones add up to the prompt."""

    input: int = 0
    output: int = 0
    cache_creation: int = 0
    cache_read: int = 0

    @property
    def prompt(self) -> int:
        """The whole prompt: uncached input, cache writes and cache reads."""
        return self.input + self.cache_creation + self.cache_read

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input + other.input,
            self.output + other.output,
            self.cache_creation + other.cache_creation,
            self.cache_read + other.cache_read,
        )

    @classmethod
    def from_api(cls, usage: object) -> Usage:
        """From an SDK ``Usage`` (absent or null counts are 0)."""

        def get(name: str) -> int:
            return int(getattr(usage, name, None) or 0)

        return cls(
            get("input_tokens"),
            get("output_tokens"),
            get("cache_creation_input_tokens"),
            get("cache_read_input_tokens"),
        )

    def as_dict(self, requests: int) -> dict[str, int]:
        return {
            "input": self.input,
            "output": self.output,
            "cache_creation": self.cache_creation,
            "cache_read": self.cache_read,
            "requests": requests,
        }


@dataclass(frozen=True)
class Cost:
    """USD, twice: the list figure and the conservative one (cache reads at input price)."""

    list: float = 0.0
    conservative: float = 0.0

    def __add__(self, other: Cost) -> Cost:
        return Cost(self.list + other.list, self.conservative + other.conservative)

    def as_dict(self) -> dict[str, float]:
        return {"list": self.list, "conservative": self.conservative}


@dataclass(frozen=True)
class ModelPrice:
    """One row of ``prices.yaml``: USD per million tokens."""

    key: str
    input: float
    output: float
    cache_write: float
    cache_read: float

    def cost(self, usage: Usage) -> Cost:
        common = usage.input * self.input + usage.cache_creation * self.cache_write + usage.output * self.output
        return Cost(
            (common + usage.cache_read * self.cache_read) / PER_TOKENS,
            (common + usage.cache_read * self.input) / PER_TOKENS,
        )

    @property
    def prompt_token_max(self) -> float:
        """The most one prompt token can cost (per million)."""
        return max(self.input, self.cache_write, self.cache_read)


@dataclass(frozen=True)
class Prices:
    """The price list: rows by model-id prefix, with its source and date."""

    models: Mapping[str, ModelPrice]
    source: str
    read_on: str

    @classmethod
    def load(cls, path: Path = PRICES_FILE) -> Prices:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
        models = {
            key: ModelPrice(
                key, float(row["input"]), float(row["output"]), float(row["cache_write_5m"]), float(row["cache_read"])
            )
            for key, row in data["models"].items()
        }
        return cls(models, str(data.get("source", "")), str(data.get("read_on", "")))

    def lookup(self, model: str) -> ModelPrice:
        """The row of ``model`` (an API id or a registry key; ``-FC`` is ignored)."""
        model_id = model.removesuffix("-FC")
        keys = [k for k in self.models if model_id == k or model_id.startswith(k + "-")]
        if not keys:
            known = ", ".join(sorted(self.models))
            raise UnknownPrice(
                f"no list price for {model_id!r} in {PRICES_FILE.name} "
                f"(known: {known}); add its row, read from {self.source}"
            )
        return self.models[max(keys, key=len)]


# ----------------------------------------------------------------- bound


def prompt_bytes(system: object, tools: object, messages: object) -> int:
    """UTF-8 bytes of the prompt as JSON (SDK content blocks dumped as sent)."""
    text = json.dumps([system, tools, messages], default=_jsonable, ensure_ascii=False)
    return len(text.encode("utf-8"))


def _jsonable(value: object) -> object:
    dump = getattr(value, "model_dump", None)  # pydantic: SDK blocks in the history
    if callable(dump):
        return dump(exclude_none=True)
    return str(value)


def bound_tokens(system: object, tools: object, messages: object) -> int:
    """The prompt-token figure the bound uses (see the module docstring)."""
    tokens = math.ceil(prompt_bytes(system, tools, messages) / BOUND_BYTES_PER_TOKEN)
    return tokens + (TOOL_PROMPT_TOKENS if tools else 0)


def request_bound(price: ModelPrice, *, system: object, tools: object, messages: object, max_tokens: int) -> float:
    """The most this request can cost, in USD, before it is sent."""
    return (bound_tokens(system, tools, messages) * price.prompt_token_max + max_tokens * price.output) / PER_TOKENS


# ---------------------------------------------------------------- ledger


#: Counters kept per session; a folder's figures are their sums.
class Reservation(TypedDict):
    """One attempt in flight: its cost bound, and which session, host and process sent it."""

    bound: float
    session: str
    host: str
    pid: int
    since: float


#: A session's figures: each of ``COUNTERS``, and ``started`` (a time stamp).
Counters = dict[str, float]


class LedgerFile(TypedDict):
    """The spend ledger's file (``version`` 2), as ``SpendLedger`` reads, checks and writes it."""

    version: int
    cap_usd: float | None
    sessions: dict[str, Counters]
    reservations: dict[str, Reservation]


COUNTERS = ("spent_list", "spent_conservative", "requests", "attempts", "errors", "unconfirmed", "unconfirmed_usd")


@dataclass(frozen=True)
class SpendTotals:
    """What a scope (the output folder, or one session) has spent and holds reserved.

    Attributes:
        spent_list: answered requests, from their reported usage, at list prices.
        spent_conservative: the same with cache reads at the full input price.
        requests: attempts answered with a message (and its usage).
        reserved: the bounds of attempts in flight now.
        cap_usd: the cap in force (this session's, else the one recorded in the folder).
        attempts: HTTP attempts sent and finished: answered, refused with an error status, or
            unconfirmed.
        errors: attempts answered with an error status (429, 5xx...): not billed.
        unconfirmed: attempts sent with no answer (a time-out, a dropped connection, a
            process that died): they may have been billed, so their bound stays spent.
        unconfirmed_usd: the bounds of the unconfirmed attempts.
        sessions: sessions counted (1 for a session's own totals).
    """

    spent_list: float
    spent_conservative: float
    requests: int
    reserved: float
    cap_usd: float | None
    attempts: int = 0
    errors: int = 0
    unconfirmed: int = 0
    unconfirmed_usd: float = 0.0
    sessions: int = 1

    @property
    def charged(self) -> float:
        """What the cap counts as spent: answered requests (conservative) and unconfirmed bounds."""
        return self.spent_conservative + self.unconfirmed_usd


class SpendLedger:
    """The spend of one output folder, in a JSON file every process using the folder shares.

    One file per folder (:func:`ledger_file`), whichever session or xdist
    worker writes it, so the cap holds across resumed and concurrent sessions.
    Each HTTP attempt goes through :meth:`reserve` before it is sent and then
    exactly one of :meth:`settle` (a message came back: its actual cost),
    :meth:`release` (an error status came back, or nothing was sent: not billed)
    or :meth:`keep` (sent, no answer: its bound stays spent).

    File contents (``version`` 2): ``cap_usd`` (the last cap given here),
    ``sessions`` ({session id: counters, :data:`COUNTERS`, and ``started``}) and
    ``reservations`` ({id: ``bound``, ``session``, ``host``, ``pid``}). Nothing
    is written until the first request.
    """

    def __init__(self, path: Path, cap_usd: float | None = None, session: str | None = None) -> None:
        self.path = Path(path)
        self.cap_usd = cap_usd
        self.session = session or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"

    def reserve(self, bound_usd: float) -> str:
        """Reserve ``bound_usd`` for one attempt, or raise :class:`BudgetExceeded` (nothing sent)."""
        with self._state() as state:
            _sweep_dead(state)
            folder = _totals(state, self._cap(state), None)
            cap = folder.cap_usd
            if cap is not None and folder.charged + folder.reserved + bound_usd > cap:
                raise BudgetExceeded(self._refusal(state, folder, bound_usd))
            reservation = uuid.uuid4().hex
            state["reservations"][reservation] = {
                "bound": bound_usd,
                "session": self.session,
                "host": socket.gethostname(),
                "pid": os.getpid(),
                "since": time.time(),
            }
            self._session(state)
        return reservation

    def settle(self, reservation_id: str, cost: Cost) -> None:
        """A message came back: replace the reservation by its actual cost."""
        with self._state() as state:
            counters = self._finish(state, reservation_id)
            counters["spent_list"] += cost.list
            counters["spent_conservative"] += cost.conservative
            counters["requests"] += 1

    def release(self, reservation_id: str, *, answered: bool = False) -> None:
        """Not billed: an error status came back (``answered``), or the request was never sent."""
        with self._state() as state:
            counters = self._finish(state, reservation_id, counted=answered)
            counters["errors"] += int(answered)

    def keep(self, reservation_id: str) -> None:
        """Sent but not answered (time-out, dropped connection): the bound stays spent."""
        with self._state() as state:
            bound = _bound(state, reservation_id)
            counters = self._finish(state, reservation_id)
            counters["unconfirmed"] += 1
            counters["unconfirmed_usd"] += bound

    def totals(self, session: bool = False) -> SpendTotals:
        """The folder's totals, or this session's (``session=True``)."""
        with self._state(write=False) as state:
            _sweep_dead(state)
            return _totals(state, self._cap(state), self.session if session else None)

    def summary(self) -> list[str]:
        """The session summary's lines: this session, the folder, the cap. Never raises."""
        try:
            with self._state(write=False) as state:
                _sweep_dead(state)
                cap = self._cap(state)
                mine, folder = _totals(state, cap, self.session), _totals(state, cap, None)
                recorded = self.cap_usd is None and cap is not None
                others = sum(1 for name in state["sessions"] if name != self.session)
        except (OSError, StopRun) as exc:
            return [f"spend: the ledger {self.path} could not be read: {exc}"]
        return [_session_line(mine), _folder_line(self.path, folder, mine, recorded, others)]

    # -- internals -------------------------------------------------------------------

    def _cap(self, state: LedgerFile) -> float | None:
        """This session's cap, else the last one given in this folder (a rerun without the
        option cannot lift it by forgetting it)."""
        return self.cap_usd if self.cap_usd is not None else state.get("cap_usd")

    def _session(self, state: LedgerFile) -> Counters:
        sessions = state["sessions"]
        if self.session not in sessions:
            sessions[self.session] = {"started": time.time(), **{k: 0 for k in COUNTERS}}
        return sessions[self.session]

    def _finish(self, state: LedgerFile, reservation_id: str, counted: bool = True) -> Counters:
        state["reservations"].pop(reservation_id, None)
        counters = self._session(state)
        counters["attempts"] += int(counted)
        return counters

    def _refusal(self, state: LedgerFile, folder: SpendTotals, bound_usd: float) -> str:
        mine = _totals(state, folder.cap_usd, self.session)
        earlier = folder.charged - mine.charged
        given = (
            BUDGET_USD.flag
            if self.cap_usd is not None
            else f"recorded in the folder by an earlier session; give {BUDGET_USD} to change it"
        )
        return (
            f"budget ${folder.cap_usd:.4f} ({given}) reached for {self.path.parent.parent}: "
            f"spent ${folder.charged:.4f} (conservative; ${folder.spent_list:.4f} at list prices) "
            f"by {folder.sessions} session(s), ${earlier:.4f} of it by earlier or other sessions"
            + (
                f", ${folder.unconfirmed_usd:.4f} of it by {folder.unconfirmed} unanswered attempts "
                "counted at their bound"
                if folder.unconfirmed
                else ""
            )
            + f", ${folder.reserved:.4f} reserved by requests in flight, and the next request could "
            f"cost up to ${bound_usd:.4f}; it was not sent"
        )

    @contextlib.contextmanager
    def _state(self, write: bool = True) -> Iterator[LedgerFile]:
        """The file's state under the folder's lock; written back (atomically) on success."""
        with flocked(self.path):
            state = self._read()
            yield state
            if write:
                if self.cap_usd is not None:
                    state["cap_usd"] = self.cap_usd
                write_json(self.path, state)

    def _read(self) -> LedgerFile:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            _refuse_per_run_ledgers(self.path)
            return {"version": LEDGER_VERSION, "cap_usd": None, "reservations": {}, "sessions": {}}
        except (OSError, UnicodeDecodeError) as exc:
            raise StopRun(f"{self.path}: the spend ledger cannot be read ({exc}); nothing is sent without it") from None
        try:
            return _checked(json.loads(text))
        except (ValueError, TypeError, KeyError, RecursionError) as exc:
            raise StopRun(
                f"{self.path}: not a pytest-careful spend ledger ({exc}); nothing is sent "
                "while it is unreadable: repair or remove it (removing it forgets what "
                "this folder has spent)"
            ) from None


@contextlib.contextmanager
def flocked(path: Path) -> Iterator[None]:
    """``path``'s folder exists and ``<path>.lock`` is held exclusively: one process of the run at a time."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lock = os.open(str(path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)  # closing releases the flock


def write_json(path: Path, state: Mapping[str, object]) -> None:
    """Replace ``path`` atomically and durably: a reader never sees half a file, a crash never loses it."""
    temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(temporary, "w", encoding="utf-8") as handle:
        json.dump(state, handle, indent=1, sort_keys=True, allow_nan=False)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)
    fsync_dir(path.parent)


def ledger_file(output: Path) -> Path:
    """The spend ledger of an output folder: ``<output>/.careful/spend.json``."""
    return Path(output) / ".careful" / "spend.json"


def _number(value: object, what: str) -> float:
    """A finite, non-negative figure (NaN would make every comparison with the cap false)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} is {value!r}, not a non-negative number")
    return float(value)


def _checked(parsed: object) -> LedgerFile:
    """The parsed file if it has the shape the ledger writes; ValueError otherwise."""
    if not isinstance(parsed, dict) or parsed.get("version") != LEDGER_VERSION:
        version = parsed.get("version") if isinstance(parsed, dict) else None
        raise ValueError(f"version {version!r}, expected {LEDGER_VERSION}")
    if parsed.get("cap_usd") is not None:
        _number(parsed["cap_usd"], "cap_usd")
    sessions, reservations = parsed.get("sessions"), parsed.get("reservations")
    if not isinstance(sessions, dict) or not isinstance(reservations, dict):
        raise ValueError("sessions and reservations must be objects")
    for name, counters in sessions.items():
        if not isinstance(counters, dict):
            raise ValueError(f"session {name!r} is not an object")
        for key in COUNTERS:
            _number(counters.setdefault(key, 0), f"sessions[{name!r}][{key!r}]")
    for name, reservation in reservations.items():
        if not isinstance(reservation, dict) or not isinstance(reservation.get("session"), str):
            raise ValueError(f"reservation {name!r} is malformed")
        _number(reservation.get("bound"), f"reservations[{name!r}]['bound']")
    return parsed  # type: ignore[return-value]  # its shape was checked above


def _bound(state: LedgerFile, reservation_id: str) -> float:
    reservation = state["reservations"].get(reservation_id)
    return float(reservation["bound"]) if reservation else 0.0


def _sweep_dead(state: LedgerFile) -> None:
    """Reservations of processes of this host that died: unconfirmed, their bound stays spent.

    A process killed mid-request may have been billed. Another host's processes
    cannot be checked, nor a reused pid told apart: those stay reserved (counted
    all the same).
    """
    host = socket.gethostname()
    for name, reservation in list(state["reservations"].items()):
        if reservation.get("host") == host and not _alive(reservation.get("pid")):
            del state["reservations"][name]
            counters = state["sessions"].setdefault(reservation["session"], {k: 0 for k in COUNTERS})
            counters["attempts"] += 1
            counters["unconfirmed"] += 1
            counters["unconfirmed_usd"] += float(reservation["bound"])


def _alive(pid: object) -> bool:
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return True  # unknown: keep counting it as in flight
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # e.g. another user's process
        return True
    return True


def _totals(state: LedgerFile, cap: float | None, session: str | None) -> SpendTotals:
    """The folder's totals (``session`` None) or one session's."""
    rows = [c for name, c in state["sessions"].items() if session is None or name == session]
    reserved = sum(
        float(r["bound"]) for r in state["reservations"].values() if session is None or r["session"] == session
    )
    sums = {key: sum(c.get(key, 0) for c in rows) for key in COUNTERS}
    return SpendTotals(
        float(sums["spent_list"]),
        float(sums["spent_conservative"]),
        int(sums["requests"]),
        reserved,
        cap,
        int(sums["attempts"]),
        int(sums["errors"]),
        int(sums["unconfirmed"]),
        float(sums["unconfirmed_usd"]),
        len(rows) if session is None else 1,
    )


def _refuse_per_run_ledgers(path: Path) -> None:
    """StopRun where the folder has no ledger yet but spend that an unreleased earlier version
    recorded, one ``spend-<run id>.json`` per run: this version does not read those files, and a
    ledger begun without their spend would under-count what the folder has spent."""
    old = sorted(path.parent.glob("spend-*.json"))
    if old:
        raise StopRun(
            f"{old[0]}: spend recorded by an earlier, unreleased version ({len(old)} spend-*.json file(s) "
            f"in {path.parent}), which this version does not read; nothing is sent: remove them and lower "
            f"{BUDGET_USD} by what they record as spent, or give another {OUTPUT}"
        )


def _session_line(mine: SpendTotals) -> str:
    line = (
        f"spend this run: ${mine.spent_list:.4f} at list prices, ${mine.spent_conservative:.4f} "
        f"conservative, {mine.requests} requests in {mine.attempts} attempts"
    )
    notes = []
    if mine.errors:
        notes.append(f"{mine.errors} answered with an error status, not billed")
    if mine.unconfirmed:
        notes.append(
            f"{mine.unconfirmed} sent and not answered (time-out, dropped connection), "
            f"counted at their bound: ${mine.unconfirmed_usd:.4f}"
        )
    return line + (f" ({'; '.join(notes)})" if notes else "")


def _folder_line(path: Path, folder: SpendTotals, mine: SpendTotals, recorded: bool, others: int) -> str:
    cap = "no cap"
    if folder.cap_usd is not None:
        cap = f"of a ${folder.cap_usd:.2f} cap" + (" (recorded by an earlier session)" if recorded else "")
    earlier = (
        f"earlier or concurrent sessions: ${folder.charged - mine.charged:.4f} in {others}, counted"
        if others > 0
        else "no earlier session"
    )
    return (
        f"spend in {path.parent.parent} (every session; the figure the cap holds): "
        f"${folder.charged:.4f} {cap}; {earlier}"
    )
