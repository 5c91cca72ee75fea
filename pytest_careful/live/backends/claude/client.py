"""Claude through bfcl-eval's own ``ClaudeHandler``, with what stops real use fixed.

:func:`careful_claude_class` subclasses the registry's handler class and
changes only this (prompts, tools, prompt-caching markers, parsing and the
multi-turn loop stay bfcl-eval's):

* the model id is ``model_name.removesuffix("-FC")`` (bfcl-eval's
  ``.strip("-FC")`` strips characters, not a suffix);
* no ``temperature`` is sent: current Claude models do not take a sampling
  temperature with tools, and the installed SDK's ``messages.create`` has no
  such parameter (bfcl-eval passes it anyway, a ``TypeError``); the run's
  settings record none, and the summary says that BFCL's handler sends 0.001;
* ``max_tokens`` is BFCL's own (``_get_max_tokens`` of the registry's handler,
  64,000 for the three models it knows) unless ``--careful-max-output-tokens``
  sets another, which the summary then names as a difference from BFCL;
* the logged input tokens are the whole prompt, ``input_tokens +
  cache_creation_input_tokens + cache_read_input_tokens`` (bfcl-eval logs the
  uncached part only, a few tokens once the cache is warm);
* ``generate_with_backoff`` no longer retries forever with tenacity (which
  also retried "credit balance is too low"): it makes at most
  ``1 + MAX_RETRIES`` attempts, under the SDK's own policy (:func:`retry_delay`:
  408/409/429/5xx/529, connection errors and time-outs; ``x-should-retry`` and
  ``retry-after`` obeyed; 0.5 s doubling to 8 s otherwise). The SDK's retries
  are off so that each attempt, not each request, is priced; out of credit
  raises :class:`CreditExhausted` at once, and so do the other problems of the
  account rather than of one request (:func:`account_problem`: a spend limit
  reached, a retired model id, a refused key): the run stops once, with one
  line. Rate limits are the run's, not the worker's: every attempt waits for a
  slot of the :class:`~.ratelimit.SharedLimiter` all xdist workers share, a 429
  or 529 halves their concurrency and pauses them all for its ``retry-after``
  (one wait at most :data:`~.ratelimit.MAX_WAIT`). A conversation still failing
  so after every retry raises :class:`OutOfRetries`: it is skipped, not scored,
  and the next run runs it. Other errors propagate (the conversation is
  recorded as errored, scored as BFCL scores it, and retried next run);
* every attempt is priced: before it is sent, the request's upper bound is
  reserved in the output folder's :class:`~.budget.SpendLedger`
  (``--careful-budget-usd``: an attempt that could cross the cap is not sent,
  :class:`~.budget.BudgetExceeded`). Afterwards the reservation is settled with
  the actual cost (a message came back), released (an error status came back,
  or the connection was never made: not billed), or kept at its bound (sent
  and not answered: a time-out or a dropped connection may still be billed).

Per conversation, the runner calls ``careful_begin()`` on its copy of the
handler before BFCL's loop and ``careful_end()`` after it; the keys
``careful_end`` returns go into the conversation's result entry:
``careful_cost_usd`` (``{"list", "conservative"}``) and ``careful_usage``
(``{"input", "output", "cache_creation", "cache_read", "requests"}``).

:func:`estimate` is a rough cost estimate of a selection, for ``--collect-only``.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import secrets
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ....data.dataset import Conversation
from ....execution.decoding import close_clients, import_handler_class, registry_entry
from ....sources.live_options import MAX_OUTPUT_TOKENS
from ....sources.options import MODEL, RESULTS
from ....sources.run_config import RunConfig, SourceError
from ...backend_setup import BackendSetup, ModelSpec
from ...errors import NotRun, StopRun
from ...handler import BfclDict
from .budget import (
    BOUND_BYTES_PER_TOKEN,
    PER_TOKENS,
    Cost,
    ModelPrice,
    Prices,
    SpendLedger,
    UnknownPrice,
    Usage,
    ledger_file,
    request_bound,
)

if TYPE_CHECKING:  # the SDK is imported on first use (an optional heavy dependency)
    from anthropic import Anthropic
from .ratelimit import MAX_WAIT, Headers, SharedLimiter, limiter_file, retry_after

MAX_RETRIES = 6  # backoff 0.5 s doubling to 8 s: ~30 s of retries, longer with retry-after
INITIAL_RETRY_DELAY = 0.5  # the SDK's figures
MAX_RETRY_DELAY = 8.0
MAX_RETRY_AFTER = MAX_WAIT  # a longer retry-after is waited for this long, then tried again
#: Exception names (httpx and httpx2 alike) raised before a request's bytes left this process.
NOT_SENT = frozenset({"ConnectError", "ConnectTimeout", "PoolTimeout", "UnsupportedProtocol"})
DEFAULT_MAX_OUTPUT_TOKENS = 4096  # only for a handler that names no limit of its own
CREDIT_MESSAGE = "credit balance is too low"
SPEND_LIMIT_MESSAGE = "reached your specified api usage limits"
BFCL_TIMEOUT = 1200  # seconds: what ClaudeHandler passes with every request
RATE_LIMITED = (429, 529)
RUN_ID_ENV = "CAREFUL_RUN_ID"
AUTO_RUN_ID_PREFIX = "auto-"


class CreditExhausted(StopRun):
    """The Anthropic account is out of credit: nothing more can run."""


class MissingApiKey(StopRun):
    """No Anthropic credentials in the environment."""


class AccountProblem(StopRun):
    """An answer that every request of the run would get alike: spend limit, retired model, key refused."""


class OutOfRetries(NotRun):
    """Rate-limited or failing transiently after every retry: left for the next run, not scored."""


@dataclass
class Tally:
    """One conversation's requests: summed usage and cost, and each request's."""

    usage: Usage = field(default_factory=Usage)
    cost: Cost = field(default_factory=Cost)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def add(self, usage: Usage, cost: Cost) -> None:
        self.usage += usage
        self.cost += cost
        self.requests.append({"usage": usage.as_dict(1), "cost_usd": cost.as_dict()})

    def entry_keys(self) -> BfclDict:
        return {"careful_cost_usd": self.cost.as_dict(), "careful_usage": self.usage.as_dict(len(self.requests))}


def _client() -> Anthropic:
    """The SDK client, its own retries off: ``generate_with_backoff`` retries, pricing each attempt."""
    # the Anthropic SDK on first use: only a Claude run needs it
    from anthropic import Anthropic

    # Explicit: ANTHROPIC_BASE_URL (a proxy, or the tests' loopback server).
    return Anthropic(
        api_key=os.environ.get("ANTHROPIC_API_KEY") or None,
        base_url=os.environ.get("ANTHROPIC_BASE_URL") or None,
        max_retries=0,
    )


def _has_credentials(client: object) -> bool:
    return bool(
        getattr(client, "api_key", None) or getattr(client, "auth_token", None) or getattr(client, "credentials", None)
    )


def missing_credentials() -> str | None:
    """Controller, before any item: no key means every request would fail alike."""
    client = _client()
    try:
        if _has_credentials(client):
            return None
    finally:
        client.close()
    return (
        "ANTHROPIC_API_KEY is not set: export it to run Claude (or ANTHROPIC_AUTH_TOKEN). "
        f"Without a key, --collect-only estimates the cost, and {RESULTS}=DIR "
        "rescores results already written"
    )


def retry_delay(exc: BaseException, retries_taken: int) -> float | None:
    """Seconds to wait before sending again after ``exc``, or None: not retried.

    The SDK's policy: an error status is retried when the server says so
    (``x-should-retry``), else on 408, 409, 429 and 5xx; a time-out or a
    connection error always. The wait is the server's ``retry-after-ms`` or
    ``retry-after``, capped at :data:`MAX_RETRY_AFTER` (the SDK would wait any
    length), else 0.5 s doubling to 8 s, less up to a quarter of jitter.
    """
    # the Anthropic SDK on first use: only a Claude run needs it
    from anthropic import APIConnectionError, APIStatusError

    if isinstance(exc, APIStatusError):
        if not _should_retry(exc.response):
            return None
        after = _retry_after(exc.response.headers)
        if after is not None:
            return after
    elif not isinstance(exc, APIConnectionError):  # APITimeoutError is one
        return None
    return min(INITIAL_RETRY_DELAY * 2.0**retries_taken, MAX_RETRY_DELAY) * (1 - 0.25 * random.random())


def _should_retry(response: Any) -> bool:
    header = response.headers.get("x-should-retry")
    if header in ("true", "false"):
        return header == "true"
    return response.status_code in (408, 409, 429) or response.status_code >= 500


def _retry_after(headers: Headers) -> float | None:
    """The server's requested wait in seconds (at most :data:`MAX_RETRY_AFTER`), when positive."""
    return retry_after(headers, MAX_RETRY_AFTER)


def _api_message(exc: BaseException) -> str:
    """The API's own error message (one line), else the exception's text."""
    body = getattr(exc, "body", None)
    error = body.get("error") if isinstance(body, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    text = str(message or exc).strip()
    return " ".join(text.split())[:300]


def account_problem(exc: BaseException, model_id: str) -> StopRun | None:
    """An answer every request of the run would get alike, as the one line that stops the run.

    Out of credit, a spend limit reached (400 "reached your specified API usage
    limits"), a model id the API does not know (404: retired or mistyped), a key
    refused (401, 403). Sending the next conversations would only repeat it.
    """
    # the Anthropic SDK on first use: only a Claude run needs it
    import anthropic

    if not isinstance(exc, anthropic.APIStatusError):
        return None
    said = _api_message(exc)
    if CREDIT_MESSAGE in said.lower():
        return CreditExhausted(
            f'the Anthropic account is out of credit ("{said}"); the run stops here: add credit, then rerun to resume'
        )
    if exc.status_code == 400 and SPEND_LIMIT_MESSAGE in said.lower():
        return AccountProblem(
            f'the Anthropic account reached its API usage limit ("{said}"); the run stops '
            "here: raise the limit in the Console, then rerun to resume"
        )
    if isinstance(exc, anthropic.NotFoundError):
        return AccountProblem(
            f'the Anthropic API does not know the model {model_id!r} (404: "{said}"), '
            "retired or mistyped; the run stops here"
        )
    if isinstance(exc, (anthropic.AuthenticationError, anthropic.PermissionDeniedError)):
        return AccountProblem(f'the Anthropic API refused this key ({exc.status_code}: "{said}"); the run stops here')
    return None


def _rate_limited(exc: BaseException) -> bool:
    # the Anthropic SDK on first use: only a Claude run needs it
    from anthropic import APIStatusError

    return isinstance(exc, APIStatusError) and exc.status_code in RATE_LIMITED


def bfcl_max_tokens(handler_class: type, model_name: str) -> int | None:
    """The ``max_tokens`` BFCL's handler sends for ``model_name`` (its ``_get_max_tokens``); None if none."""
    probe: Any = object.__new__(handler_class)  # the method reads model_name only: no client is built
    probe.model_name = model_name
    try:
        return int(getattr(handler_class, "_get_max_tokens")(probe))  # noqa: B009 (a bare type to mypy)
    except Exception:  # e.g. ValueError("Unsupported model"): BFCL itself could not run it
        return None


def _account_failure(ledger: SpendLedger, reservation: str, exc: BaseException) -> None:
    """Settle a failed attempt's reservation by what may have been billed.

    An error status: the server answered and did not bill. A connection never
    made: nothing was sent. Anything else (a time-out, a dropped connection, an
    interrupt mid-request) may have reached a server that completed and billed
    it: the bound stays spent.
    """
    # the Anthropic SDK on first use: only a Claude run needs it
    from anthropic import APIStatusError

    if isinstance(exc, APIStatusError):
        ledger.release(reservation, answered=True)
    elif any(type(cause).__name__ in NOT_SENT for cause in _causes(exc)):
        ledger.release(reservation)
    else:
        ledger.keep(reservation)


def _causes(exc: BaseException) -> list[BaseException]:
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        current = current.__cause__  # only what the SDK wrapped: an unrelated __context__ proves nothing
    return chain


_CLASSES: dict[type, type] = {}


def careful_claude_class(base: type) -> type:
    """``base`` (bfcl-eval's ``ClaudeHandler`` or a subclass) with the fixes above."""
    cached = _CLASSES.get(base)
    if cached is not None:
        return cached

    class CarefulClaudeHandler(base):  # type: ignore[valid-type,misc]
        careful_max_output_tokens: int = DEFAULT_MAX_OUTPUT_TOKENS
        careful_max_retries: int = MAX_RETRIES
        careful_timeout: float | None = None  # seconds per attempt; None: bfcl-eval's (1200)
        careful_ledger: SpendLedger | None = None
        careful_prices: Prices | None = None
        careful_limiter: SharedLimiter | None = None
        careful_tally: Tally | None = None  # set per conversation copy by careful_begin

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.careful_configure()

        def careful_configure(
            self,
            *,
            max_output_tokens: int | None = None,
            ledger: SpendLedger | None = None,
            prices: Prices | None = None,
            max_retries: int = MAX_RETRIES,
            timeout: float | None = None,
            limiter: SharedLimiter | None = None,
        ) -> None:
            """Per-process set-up: client (base URL, time-out), retries, limits, prices, ledger."""
            close_clients(self)  # the one BFCL's initialiser opened, replaced here
            self.client = _client()
            self.careful_limiter = limiter
            self.careful_max_retries = max_retries
            self.careful_timeout = timeout
            if max_output_tokens is not None:
                self.careful_max_output_tokens = max_output_tokens
            self.careful_ledger = ledger
            self.careful_prices = prices

        @property
        def careful_model_id(self) -> str:
            return str(self.model_name).removesuffix("-FC")

        def careful_price(self) -> ModelPrice:
            prices = self.careful_prices or Prices.load()
            try:
                return prices.lookup(self.careful_model_id)
            except UnknownPrice as exc:
                raise StopRun(str(exc)) from None

        # -- per conversation (called by runner.run on its copy) ----------------

        def careful_begin(self) -> None:
            self.careful_tally = Tally()

        def careful_end(self) -> BfclDict:
            tally, self.careful_tally = self.careful_tally, None
            return tally.entry_keys() if tally is not None else {}

        # -- the fixes -----------------------------------------------------------

        def _get_max_tokens(self) -> int:
            return self.careful_max_output_tokens

        def generate_with_backoff(self, **kwargs: Any) -> tuple[Any, float]:
            kwargs.pop("temperature", None)
            kwargs["model"] = self.careful_model_id
            kwargs["max_tokens"] = self.careful_max_output_tokens
            if self.careful_timeout is not None:
                kwargs["timeout"] = self.careful_timeout
            if not _has_credentials(self.client):
                raise MissingApiKey(
                    "ANTHROPIC_API_KEY is not set: export it to run Claude "
                    "(results already in the result files are still scored)"
                )
            price = self.careful_price()
            bound = request_bound(
                price,
                system=kwargs.get("system"),
                tools=kwargs.get("tools"),
                messages=kwargs["messages"],
                max_tokens=kwargs["max_tokens"],
            )
            start = time.time()
            retries_taken = 0
            while True:
                try:
                    response = self.careful_attempt(kwargs, price, bound)
                    return response, time.time() - start
                except Exception as exc:
                    stop = account_problem(exc, kwargs["model"])
                    if stop is not None:
                        raise stop from exc
                    delay = retry_delay(exc, retries_taken)
                    if delay is None and _rate_limited(exc):  # "do not retry" a rate limit: later, not never
                        raise OutOfRetries(
                            f"not run: {_api_message(exc)} ({type(exc).__name__}), the server said not to retry"
                        ) from exc
                    if delay is None:
                        raise
                    if _rate_limited(exc) and self.careful_limiter is not None:
                        delay = self.careful_limiter.throttled(delay)  # everyone waits, and sends less
                    if retries_taken >= self.careful_max_retries:
                        raise OutOfRetries(
                            f"not run: {_api_message(exc)} ({type(exc).__name__}) after {retries_taken + 1} "
                            f"attempts over {time.time() - start:.0f} s"
                        ) from exc
                time.sleep(min(delay, MAX_WAIT))
                retries_taken += 1

        def careful_attempt(self, kwargs: dict[str, Any], price: ModelPrice, bound: float) -> Any:
            """One HTTP attempt: reserved before it is sent, accounted for whatever happens."""
            ledger = self.careful_ledger
            reservation = ledger.reserve(bound) if ledger is not None else None
            try:
                with self.careful_limiter.slot() if self.careful_limiter else contextlib.nullcontext():
                    response = self.client.messages.create(**kwargs)
                usage = Usage.from_api(response.usage)
            except BaseException as exc:
                if ledger is not None and reservation is not None:
                    _account_failure(ledger, reservation, exc)
                if self.careful_limiter is not None and not _rate_limited(exc):
                    self.careful_limiter.answered()
                raise
            if self.careful_limiter is not None:
                self.careful_limiter.answered()
            cost = price.cost(usage)
            if ledger is not None and reservation is not None:
                ledger.settle(reservation, cost)
            if self.careful_tally is not None:
                self.careful_tally.add(usage, cost)
            return response

        def _parse_query_response_FC(self, api_response: Any) -> BfclDict:
            data: BfclDict = super()._parse_query_response_FC(api_response)
            data["input_token"] = Usage.from_api(api_response.usage).prompt
            return data

        def _parse_query_response_prompting(self, api_response: Any) -> BfclDict:
            data: BfclDict = super()._parse_query_response_prompting(api_response)
            data["input_token"] = Usage.from_api(api_response.usage).prompt
            return data

    CarefulClaudeHandler.__name__ = CarefulClaudeHandler.__qualname__ = f"Careful{base.__name__}"
    _CLASSES[base] = CarefulClaudeHandler
    return CarefulClaudeHandler


# ---------------------------------------------------------------- set-up


def run_id(worker: bool = False) -> str:
    """This run's id, shared by the controller and its xdist workers.

    It names the session in the output folder's spend ledger (the cap itself
    is per folder, whatever the id). ``CAREFUL_RUN_ID`` if the user set it;
    otherwise the controller makes one and exports it, and the workers it
    spawns afterwards inherit it. An id this function made (``auto-...``) is
    never reused by a later controller, e.g. a nested run.
    """
    value = os.environ.get(RUN_ID_ENV, "")
    if worker:
        if not value:
            raise StopRun(
                f"xdist worker: {RUN_ID_ENV} is not set; the controller sends it when it configures a Claude run"
            )
        return value
    if value and not value.startswith(AUTO_RUN_ID_PREFIX):
        return value
    value = f"{AUTO_RUN_ID_PREFIX}{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(4)}"
    os.environ[RUN_ID_ENV] = value
    return value


def configure(handle: ModelSpec, options: RunConfig, concurrency: int) -> BackendSetup:
    """Per-process set-up of a Claude run (``backends.Claude.configure``, every process); ``SourceError``
    for a model without a price or a bad run id."""
    prices = Prices.load()
    try:
        prices.lookup(handle.registry_key)
    except UnknownPrice as exc:
        raise SourceError(f"{MODEL}={options.model}: {exc}") from None
    try:
        run = run_id(options.worker)
    except StopRun as exc:
        raise SourceError(str(exc)) from None
    ledger = SpendLedger(ledger_file(options.output), options.budget_usd, session=run)
    # The run's concurrency is the most the limiter lets out; a 429 halves what it lets.
    limiter = SharedLimiter(limiter_file(options.output), maximum=concurrency)
    bfcl_max = _bfcl_max_tokens(handle.registry_key)
    max_output_tokens = options.max_output_tokens or bfcl_max or DEFAULT_MAX_OUTPUT_TOKENS
    return BackendSetup(
        spend_ledger=ledger,  # for the summary: ledger.totals()
        # What every request carries, exactly: no temperature (recorded as none).
        backend_settings={"max_output_tokens": max_output_tokens, "temperature": None},
        sent={
            "model": handle.probe().careful_model_id,
            "max_tokens": max_output_tokens,
            "temperature": None,
            "timeout_s": BFCL_TIMEOUT,
        },
        differences=differences(max_output_tokens, bfcl_max, handle.temperature),
        setup=lambda handler: handler.careful_configure(
            max_output_tokens=max_output_tokens, ledger=ledger, prices=prices, limiter=limiter
        ),
    )


def _bfcl_max_tokens(registry_key: str) -> int | None:
    entry = registry_entry(registry_key)
    return bfcl_max_tokens(import_handler_class(entry), entry.model_name)


def differences(max_output_tokens: int, bfcl_max: int | None, bfcl_temperature: float) -> list[str]:
    """How a Claude request here differs from the one BFCL's ClaudeHandler sends, one line each."""
    lines = [
        f"Claude: no temperature is sent (BFCL's handler passes temperature={bfcl_temperature}, which "
        "the installed anthropic SDK does not take)"
    ]
    if bfcl_max is None:
        lines.append(
            f"Claude: max_tokens {max_output_tokens}; BFCL's handler names no limit for this model "
            "(it would refuse to run it)"
        )
    elif max_output_tokens != bfcl_max:
        lines.append(f"Claude: max_tokens {max_output_tokens} ({MAX_OUTPUT_TOKENS}); BFCL's handler sends {bfcl_max}")
    return lines


# -------------------------------------------------------------- estimate

EST_BYTES_PER_TOKEN = 4
EST_OUTPUT_TOKENS = 150  # per request
EST_TOOL_RESULT_TOKENS = 100  # per call step's tool results
EST_TOOL_PROMPT_TOKENS = 350  # the API's tool-use system prompt


def _tokens(value: object) -> int:
    return math.ceil(len(json.dumps(value, ensure_ascii=False).encode("utf-8")) / EST_BYTES_PER_TOKEN)


def estimate(
    conversations: Iterable[Conversation], model: str, prices: Prices, max_output_tokens: int
) -> dict[str, Any]:
    """A rough cost estimate of running ``conversations`` on ``model`` (for ``--collect-only``).

    The model is assumed to behave like the reference: per turn, one request
    per reference call and one closing request. See ``assumptions`` in the
    result; real runs differ (models retry, explore, or stop early).
    """
    price = prices.lookup(model)
    total = Usage()
    requests = 0
    largest_bound = 0.0
    count = 0
    for conversation in conversations:
        count += 1
        prompt = _tokens(conversation.all_functions()) + EST_TOOL_PROMPT_TOKENS
        cached = 0  # the prompt the previous request wrote to the cache
        for turn, calls in enumerate(conversation.ground_truth):
            question = conversation.questions[turn] if turn < len(conversation.questions) else []
            prompt += _tokens(question) if question else _tokens("(new functions are available)")
            for step in range(len(calls) + 1):
                requests += 1
                # BFCL marks the newest user message: the prompt is written, the
                # previous request's prompt is read.
                total += Usage(0, EST_OUTPUT_TOKENS, prompt - cached, cached)
                bound = (
                    math.ceil(prompt * EST_BYTES_PER_TOKEN / BOUND_BYTES_PER_TOKEN) * price.prompt_token_max
                    + max_output_tokens * price.output
                ) / PER_TOKENS
                largest_bound = max(largest_bound, bound)
                cached = prompt
                prompt += EST_OUTPUT_TOKENS + (EST_TOOL_RESULT_TOKENS if step < len(calls) else 0)
    cost = price.cost(total)
    return {
        "model": model,
        "price_row": price.key,
        "prices_read_on": prices.read_on,
        "prices_source": prices.source,
        "conversations": count,
        "requests": requests,
        "usage": total.as_dict(requests),
        "cost_usd": cost.as_dict(),
        "largest_request_bound_usd": largest_bound,
        "assumptions": [
            "per turn: one request per reference call, plus one closing request",
            f"tokens: UTF-8 JSON bytes / {EST_BYTES_PER_TOKEN} (function docs, questions), plus "
            f"{EST_TOOL_PROMPT_TOKENS} for the API's tool-use system prompt",
            f"each request answers with {EST_OUTPUT_TOKENS} output tokens; each call step adds "
            f"{EST_TOOL_RESULT_TOKENS} tokens of tool results",
            "prompt caching works as bfcl-eval marks it: each request writes its prompt to the "
            "cache and reads the previous request's prompt (the list figure)",
            "conservative: the same tokens with cache reads at the full input price",
            f"largest_request_bound_usd: the most the spend guard reserves for one request "
            f"(prompt at 3 bytes a token and the cache-write price, plus {max_output_tokens} "
            "output tokens); a budget below it stops before the first such request",
        ],
    }
