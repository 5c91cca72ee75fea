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
* :class:`SpendLedger` is one JSON file shared by every process of a run
  (xdist workers included), changed only under an exclusive ``fcntl.flock``
  and replaced atomically. A request is sent only after
  :meth:`~SpendLedger.reserve` accepted its bound (spent + outstanding
  reservations + bound <= cap); afterwards :meth:`~SpendLedger.settle` replaces
  the reservation by the actual cost, or :meth:`~SpendLedger.release` drops it
  when the request failed (a failed request is not billed). So concurrent
  workers can never together send requests that could cross the cap, as long
  as every response costs no more than its bound.

Limits, documented rather than hidden: the bound is an estimate of the token
count (the API's tokeniser is not available offline), so the cap could be
crossed by the difference on a request whose prompt tokenises worse than 3
bytes a token; a process killed between reserve and settle leaves its
reservation in the file, where it keeps counting against the cap (safe, not
lost money).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import math
import os
import uuid
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from .source import StopRun

PRICES_FILE = Path(__file__).with_name("prices.yaml")
PER_TOKENS = 1_000_000  # prices are per million tokens
BOUND_BYTES_PER_TOKEN = 3
#: Anthropic adds a tool-use system prompt of a few hundred tokens (346 for the
#: Claude 4 family with ``tool_choice`` auto) to any request that sends tools.
TOOL_PROMPT_TOKENS = 500
LEDGER_VERSION = 1


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
        return Usage(self.input + other.input, self.output + other.output,
                     self.cache_creation + other.cache_creation, self.cache_read + other.cache_read)

    @classmethod
    def from_api(cls, usage: Any) -> Usage:
        """From an SDK ``Usage`` (absent or null counts are 0)."""
        def get(name: str) -> int:
            return int(getattr(usage, name, None) or 0)
        return cls(get("input_tokens"), get("output_tokens"),
                   get("cache_creation_input_tokens"), get("cache_read_input_tokens"))

    def as_dict(self, requests: int) -> dict[str, int]:
        return {"input": self.input, "output": self.output, "cache_creation": self.cache_creation,
                "cache_read": self.cache_read, "requests": requests}


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
        common = usage.input * self.input + usage.cache_creation * self.cache_write \
            + usage.output * self.output
        return Cost((common + usage.cache_read * self.cache_read) / PER_TOKENS,
                    (common + usage.cache_read * self.input) / PER_TOKENS)

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
        models = {key: ModelPrice(key, float(row["input"]), float(row["output"]),
                                  float(row["cache_write_5m"]), float(row["cache_read"]))
                  for key, row in data["models"].items()}
        return cls(models, str(data.get("source", "")), str(data.get("read_on", "")))

    def lookup(self, model: str) -> ModelPrice:
        """The row of ``model`` (an API id or a registry key; ``-FC`` is ignored)."""
        model_id = model.removesuffix("-FC")
        keys = [k for k in self.models if model_id == k or model_id.startswith(k + "-")]
        if not keys:
            known = ", ".join(sorted(self.models))
            raise UnknownPrice(f"no list price for {model_id!r} in {PRICES_FILE.name} "
                               f"(known: {known}); add its row, read from {self.source}")
        return self.models[max(keys, key=len)]


# ----------------------------------------------------------------- bound


def prompt_bytes(system: Any, tools: Any, messages: Any) -> int:
    """UTF-8 bytes of the prompt as JSON (SDK content blocks dumped as sent)."""
    text = json.dumps([system, tools, messages], default=_jsonable, ensure_ascii=False)
    return len(text.encode("utf-8"))


def _jsonable(value: Any) -> Any:
    dump = getattr(value, "model_dump", None)  # pydantic: SDK blocks in the history
    if callable(dump):
        return dump(exclude_none=True)
    return str(value)


def bound_tokens(system: Any, tools: Any, messages: Any) -> int:
    """The prompt-token figure the bound uses (see the module docstring)."""
    tokens = math.ceil(prompt_bytes(system, tools, messages) / BOUND_BYTES_PER_TOKEN)
    return tokens + (TOOL_PROMPT_TOKENS if tools else 0)


def request_bound(price: ModelPrice, *, system: Any, tools: Any, messages: Any, max_tokens: int) -> float:
    """The most this request can cost, in USD, before it is sent."""
    return (bound_tokens(system, tools, messages) * price.prompt_token_max
            + max_tokens * price.output) / PER_TOKENS


# ---------------------------------------------------------------- ledger


@dataclass(frozen=True)
class Totals:
    """What a run has spent so far (settled requests) and what is reserved."""

    spent_list: float
    spent_conservative: float
    requests: int
    reserved: float
    cap_usd: float | None


class SpendLedger:
    """The spend of one run, in a JSON file all its processes share.

    File contents: ``spent_list``, ``spent_conservative``, ``requests`` (settled),
    ``reservations`` ({id: {"bound": usd, "pid": pid}}) and the ``cap_usd`` of
    the last writer. Nothing touches the disk until the first request.
    """

    def __init__(self, path: Path, cap_usd: float | None = None) -> None:
        self.path = Path(path)
        self.cap_usd = cap_usd

    def reserve(self, bound_usd: float) -> str:
        """Reserve ``bound_usd`` for one request, or raise :class:`BudgetExceeded`."""
        with self._state() as state:
            reserved = sum(r["bound"] for r in state["reservations"].values())
            spent = state["spent_conservative"]
            if self.cap_usd is not None and spent + reserved + bound_usd > self.cap_usd:
                raise BudgetExceeded(
                    f"budget ${self.cap_usd:.4f} (--careful-budget-usd) reached: spent "
                    f"${spent:.4f} (conservative; ${state['spent_list']:.4f} at list prices) in "
                    f"{state['requests']} requests, ${reserved:.4f} reserved by requests in flight, "
                    f"and the next request could cost up to ${bound_usd:.4f}; it was not sent")
            reservation = uuid.uuid4().hex
            state["reservations"][reservation] = {"bound": bound_usd, "pid": os.getpid()}
        return reservation

    def settle(self, reservation_id: str, cost: Cost) -> None:
        """Replace the reservation by the request's actual cost."""
        with self._state() as state:
            state["reservations"].pop(reservation_id, None)
            state["spent_list"] += cost.list
            state["spent_conservative"] += cost.conservative
            state["requests"] += 1

    def release(self, reservation_id: str) -> None:
        """Drop the reservation of a request that failed (not billed)."""
        with self._state() as state:
            state["reservations"].pop(reservation_id, None)

    def totals(self) -> Totals:
        with self._state(write=False) as state:
            reserved = sum(r["bound"] for r in state["reservations"].values())
            return Totals(state["spent_list"], state["spent_conservative"], state["requests"],
                          reserved, self.cap_usd)

    @contextlib.contextmanager
    def _state(self, write: bool = True) -> Iterator[dict[str, Any]]:
        """The file's state under the run's lock; written back (atomically) on success."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock = os.open(str(self.path) + ".lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._read()
            yield state
            if write:
                state["cap_usd"] = self.cap_usd
                self._write(state)
        finally:
            os.close(lock)  # closing releases the flock

    def _read(self) -> dict[str, Any]:
        try:
            state: dict[str, Any] = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {"version": LEDGER_VERSION, "spent_list": 0.0, "spent_conservative": 0.0,
                    "requests": 0, "reservations": {}, "cap_usd": self.cap_usd}
        if state.get("version") != LEDGER_VERSION:
            raise StopRun(f"{self.path}: not a pytest-careful spend ledger (version {state.get('version')!r})")
        return state

    def _write(self, state: dict[str, Any]) -> None:
        temporary = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(state, handle, indent=1, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)
