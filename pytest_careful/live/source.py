"""The live source: run the model for each item, file every result, resume.

Each finished conversation is appended to the condition's BFCL result file
(``<output>/<condition>/<model>/multi_turn/BFCL_v4_<category>_result.json``,
which is ``bfcl generate --result-dir <output>/<condition>``'s layout) before it
is scored, and scored from the entry as written: a live row and the row of the
same file rescored with ``--careful-results`` are computed by the same code on
the same bytes. A rerun of the same command finds completed conversations in
the file and scores them without calling the model; errored ones are retried.

With ``--careful-repeat K`` (K > 1) each conversation runs K times, repeat
``k`` filed under ``<output>/repeat-<k>/<condition>/...``: BFCL's layout inside
each, so that one repeat is rescored (or ``bfcl evaluate``d) alone, and each
repeat resumes on its own.

The source runs the conversations; where their entries are filed and what is
filed already is :mod:`.filing`'s, stopping the run in every process :mod:`.stops`'.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ..data.dataset import Conversation, get
from ..data.result_files import InputProblem, LoggedEntry, LoggedResult, parse_raw_line
from ..data.result_store import ResultStore, is_complete, serialise
from ..data.run_settings import DECODER_KEY, RunSettings
from ..effects import declarations
from ..effects.declarations import Declarations
from ..execution.decoding import Decoder, close_clients, decoder
from ..sources.live_options import BUDGET_USD, ENDPOINT, MAX_OUTPUT_TOKENS, OUTPUT, REQUEST_TIMEOUT, SESSION_HEADER
from ..sources.options import HANDLER, MODEL
from ..sources.reference_logged import LiveDetails, RunAhead, ShowProgress, Source
from ..sources.run_config import RunConfig, SourceError
from . import inflight, runner
from .backend_setup import BackendSettings, BackendSetup, Sent
from .backends.claude.budget import Prices, SpendLedger
from .backends.claude.client import RUN_ID_ENV, estimate
from .backends.registry import SERVER_OPTIONS, backend
from .backends.vllm.fleet import Placement, Seat
from .backends.vllm.server import ENDPOINT_ENV, LOG_ENV, ServerPlan, forget_session, start_for_session, stop
from .errors import LiveError, NotRun, OutputUnwritable, RunAgain, ServerError, ServerStopped, SetupFailed, StopRun
from .faults import Retry, ServerGuard, answers, classify
from .filing import ResultFolders
from .handler import Handler
from .handles import HandleError, ModelHandle, resolution, resolution_line, resolve
from .pacing import Pause, share
from .progress import Display, ServerProbe
from .provenance import LiveProvenance
from .session_key import SessionKeys, run_digest, speaks_openai
from .stops import SESSION_ENV, Stops, unwritable

#: How often one conversation moves to another server before it counts as failed.
MAX_RERUNS = 3
LOG_LINES = 100  # of BFCL's printed loop, what an item's report shows
LOCK_FILE = "run.lock"  # in <output>/.careful: held by the run writing the folder (one at a time)


@dataclass
class LiveSource(Source):
    handle: ModelHandle | None = None
    output: Path = Path("result")
    declarations: Declarations | None = None
    boundary: str = "final"
    script: str = "default"
    detector: str = "strict"
    setup: Callable[[Handler], None] | None = None  # called once per process with the new handler (backend set-up)
    classify_error: Callable[[BaseException], BaseException | None] | None = None  # what ends the run
    alive: Callable[[str | None], bool] | None = None  # (url) -> whether that server still answers; None: server_alive
    guard: ServerGuard | None = None  # vLLM and OpenAI-compatible servers: server faults are not the model's (faults)
    server_plan: ServerPlan | None = None  # vLLM: the session's server
    placement: Placement | None = None  # several servers: where each conversation runs (backends.vllm.fleet_client)
    backend_settings: BackendSettings = field(default_factory=lambda: BackendSettings())  # in careful_settings.json
    sent: Sent = field(default_factory=lambda: Sent())  # what each request carries (provenance)
    differences: list[str] = field(default_factory=list)  # settings that differ from BFCL's own run
    _reruns: dict[str, int] = field(default_factory=dict)
    _handler: Handler = None
    _decoder: Decoder | None = None
    repeats: int = 1  # --careful-repeat
    #: keyed by (condition, conversation id, repeat)
    runs: dict[tuple[str, str, int], runner.LiveRun] = field(default_factory=dict)
    resumed: set[tuple[str, str, int]] = field(default_factory=set)
    concurrency: int = 1  # --careful-concurrency: conversations in flight, all processes together
    flight: inflight.Flight | None = None  # this process's conversations in flight, once its run loop starts
    _handler_lock: threading.Lock = field(default_factory=threading.Lock)
    _lock_fd: int | None = None  # the output folder's run lock (controller), held to the end
    spend_ledger: SpendLedger | None = None  # Claude: the session's ledger (the summary reads its totals)
    server_work: ServerProbe | None = None  # what the servers say they do (vLLM: /metrics), for the progress line
    session_keys: SessionKeys | None = None  # an HTTP backend's: each conversation's key on its requests
    folders: ResultFolders = field(init=False)  # where results are filed, and what is filed (``filing``)
    stops: Stops = field(init=False)  # the session's stop marks, shared by its processes (``stops``)

    def take_in(self, made: BackendSetup) -> None:
        """The backend's set-up of this process's run (``Backend.configure``)."""
        self.setup, self.classify_error, self.alive = made.setup, made.classify_error, made.alive
        self.server_plan, self.placement, self.spend_ledger = made.server_plan, made.placement, made.spend_ledger
        self.server_work = made.server_work
        self.backend_settings = {**self.backend_settings, **made.backend_settings}
        self.sent, self.differences = made.sent, made.differences

    def __post_init__(self) -> None:
        # From the fields the source is opened with: none of output, handle and repeats changes afterwards.
        self.folders = ResultFolders(self.output, self.handle, self.repeats)
        self.stops = Stops(self.output)

    @property
    def is_reference(self) -> bool:
        return False

    @property
    def backend_kind(self) -> str | None:
        return self.handle.kind if self.handle is not None else None

    def sampling(self) -> str:
        handle = self.handle
        if handle is None:
            return super().sampling()
        if not backend(handle.kind).remote:
            return "live: scripted model (deterministic)"
        temperature = self.sent.get("temperature", handle.temperature) if self.sent else handle.temperature
        said = "no temperature sent" if temperature is None else f"temperature {temperature}"
        return f"live: BFCL handler {handle.registry_key}, {said}"

    def live_details(self, key: tuple[str, str, int]) -> LiveDetails:
        return LiveDetails(key in self.resumed, self.runs.get(key))

    def spend_lines(self) -> list[str]:
        return self.spend_ledger.summary() if self.spend_ledger is not None else []  # this session, then the folder

    def result_folder(self) -> Path:
        return self.output

    def default_label(self) -> str:
        """A local model directory's last component (its results: that name plus a hash of its path),
        not the path made one component; otherwise the model as named."""
        name = Path(self.handle.model_path).name if self.handle is not None and self.handle.model_path else ""
        return name or super().default_label()

    @property
    def model_handle(self) -> ModelHandle:
        """The handle the source was opened with (``open_live`` always gives one)."""
        if self.handle is None:
            raise RuntimeError("a LiveSource without a model handle")
        return self.handle

    def protocol(self, condition: str) -> runner.RunProtocol:
        assert self.declarations is not None
        return runner.RunProtocol(condition, self.declarations, self.boundary, self.script, self.detector)

    def settings(self, condition: str) -> RunSettings:
        """How this run makes entries: protocol settings and what each request carries.

        A backend that sends no temperature (Claude) sets it to None: then none is recorded.
        """
        handle = self.model_handle
        made = {**self.protocol(condition).settings(), "temperature": handle.temperature, **self.backend_settings}
        made[DECODER_KEY] = handle.registry_key  # a rescore of the folder needs no --careful-decoder
        return RunSettings.from_json({k: v for k, v in made.items() if v is not None})

    def handler(self) -> Handler:
        with self._handler_lock:  # a flight's threads ask at once: one handler per process
            return self._built_handler()

    def _built_handler(self) -> Handler:
        if self._handler is None:
            assert self.handle is not None
            try:
                handler = self.handle.build()
                if backend(self.handle.kind).guarded:
                    # Every conversation in flight waits out one rate limit together (``pacing``).
                    handler.careful_pause = Pause(
                        self.stops.session_dir() / "flight" / "pause",
                        self.flight.stopping if self.flight is not None else None,
                    )
                    if self.guard is not None:  # each attempt bounded (faults.Deadline), on every client it gets
                        handler.careful_request_timeout = self.guard.retry.timeout
                if self.setup is not None:
                    self.setup(handler)
                share(handler)
            except StopRun:
                raise
            except Exception as exc:  # e.g. an API client without its key: every item would fail alike
                raise StopRun(
                    f"cannot set up {self.handle.registry_key}'s handler: {type(exc).__name__}: {exc}"
                ) from exc
            self._handler = handler
        return self._handler

    def decoder(self) -> Decoder:
        # Decoding needs the handler class only, never the backend (server, API key).
        if self._decoder is None:
            self._decoder = decoder(self.decoder_key)  # built as bfcl evaluate builds it, no key needed
        return self._decoder

    def result(
        self, condition: str, conversation: Conversation, repeat: int = 1
    ) -> tuple[LoggedResult, LoggedEntry | None]:
        store = self.folders.store(condition, repeat)
        done = self.folders.done(condition, conversation.category, repeat)
        entry = done.get(conversation.id)
        if entry is not None:  # read back as --careful-results reads it, with its real line
            self.resumed.add((condition, conversation.id, repeat))
            return entry.result, entry
        key = (condition, conversation.id, repeat)
        # Run ahead by this process's flight (or another process's), or here and now.
        outcome = self.flight.outcome(key) if self.flight is not None else self.execute(key)
        if outcome.kind == "not_run":
            self.stops.mark_not_run(conversation.id, condition, outcome.message)
            raise NotRun(f"{outcome.message}; a rerun of the same command runs it")
        if outcome.kind == "server_error":
            raise ServerError(outcome.message)  # unscored, never the model's verdict; nothing was filed
        if outcome.kind == "setup_failed":
            raise SetupFailed(outcome.message)
        if outcome.kind in ("stopped", "error") and isinstance(outcome.raised, LiveError):
            raise outcome.raised  # run in this process: the exception itself
        if outcome.kind == "stopped":
            raise StopRun(outcome.message)
        if outcome.kind == "error":
            raise LiveError(outcome.message, self._parsed(store, conversation, outcome.line)[0])
        # Scored from the bytes written (what --careful-results would read).
        entry, problem = self._parsed(store, conversation, outcome.line)
        if problem is not None:
            raise LiveError(f"the model's result entry is unusable: {problem}")
        assert entry is not None
        done[conversation.id] = entry
        self.runs[key] = runner.LiveRun(entry.raw, outcome.log, outcome.seconds)
        return entry.result, entry

    @staticmethod
    def _parsed(
        store: ResultStore, conversation: Conversation, line: str | None
    ) -> tuple[LoggedEntry | None, InputProblem | None]:
        if line is None:
            return None, None
        return parse_raw_line(str(store.path(conversation.category)), 0, line.encode("utf-8"), conversation.category)

    def execute(self, key: inflight.Key) -> inflight.Outcome:
        """Run one conversation and file its entry; how it ended, as every process reads it.

        Called on a flight's thread (``inflight``), or on the item's own.
        """
        condition, conversation_id, repeat = key
        conversation = get(conversation_id)
        store = self.folders.store(condition, repeat)
        try:
            data, live = self._run(store, condition, conversation, repeat)
        except NotRun as exc:
            return inflight.Outcome("not_run", str(exc))
        except (ServerError, ServerStopped) as exc:  # the server's fault: unscored, whichever process reports it
            return inflight.Outcome("server_error", str(exc), raised=exc)
        except SetupFailed as exc:  # ours: unscored, nothing filed
            return inflight.Outcome("setup_failed", str(exc), raised=exc)
        except StopRun as exc:
            return inflight.Outcome("stopped", str(exc), raised=exc)
        except LiveError as exc:
            line = serialise(exc.entry.raw).decode("utf-8") if exc.entry is not None else None
            return inflight.Outcome("error", str(exc), line, raised=exc)
        # The item shows the loop's last 100 lines: the rest need not cross processes.
        log = "\n".join(live.log.splitlines()[-LOG_LINES:])
        return inflight.Outcome("entry", line=serialise(data).decode("utf-8"), log=log, seconds=live.seconds)

    def before_request(self) -> None:
        """Before each request to the model: nothing more is sent once the run stopped or was interrupted."""
        self._going_on()
        if self.flight is not None:
            self.flight.request_made()

    def _going_on(self) -> None:
        """Raises NotRun once the run stopped or was interrupted (nothing new is sent then)."""
        if self.flight is not None and self.flight.stopping.is_set():
            raise NotRun("not run: the run was interrupted")
        if self.stops.was_interrupted():  # the controller was (SIGINT to it alone)
            if self.flight is not None:
                self.flight.stop()
            raise NotRun("not run: the run was interrupted")
        if self.stops.is_stopped():
            raise NotRun("not run: the run stopped (why: the summary's 'run stopped' line)")

    def close(self) -> None:
        """The handler's API clients closed, once its conversations are done. Not after a stop: a
        request still in flight then ends with the process, never with a closed client's error."""
        if self._handler is not None and (self.flight is None or not self.flight.stopping.is_set()):
            close_clients(self._handler)

    def worker_env(self) -> dict[str, str]:
        return {k: os.environ[k] for k in (RUN_ID_ENV, ENDPOINT_ENV, LOG_ENV, SESSION_ENV) if k in os.environ}

    def run_ahead(
        self, conversations: list[tuple[str, str]], workerinput: Mapping[str, object] | None, show: ShowProgress | None
    ) -> RunAhead | None:
        flight = inflight.take_off(self, conversations, self.repeats, inflight.worker_count(workerinput))
        display = None
        if workerinput is None:  # the controller (it alone has no workerinput): the line, if shown anywhere
            display = Display(
                self.stops.session_dir() / "flight" / "progress",
                show,
                stopped=self.stops.is_stopped,
                probe=self.server_work,
            )
            display.start()
        return Ahead(flight, display, self.stops)

    def opening_lines(self, start_lines: list[str]) -> list[str]:
        # With a server of the session's own, the differences are said once it has started.
        differences = self.differences if self.server_plan is None else []
        return [resolution_line(self.model_handle), *start_lines] + [f"differs from BFCL: {d}" for d in differences]

    def start_servers(self, say: Callable[[str], None]) -> str | None:
        return start_for_session(self.server_plan, say) if self.server_plan is not None else None

    def cost_lines(self, conversations: list[Conversation], conditions: int, repeat: int) -> list[str]:
        handle = self.model_handle
        if not backend(handle.kind).priced:
            return []
        # --careful-repeat: every conversation runs K times; counted like as many conditions.
        conditions *= repeat
        guess = estimate(
            conversations, handle.registry_key, Prices.load(), self.backend_settings.get("max_output_tokens", 4096)
        )
        cost = guess["cost_usd"]
        return [
            f"estimated cost of {guess['conversations']} conversations x {conditions} "
            f"{'protocol(s) x repeats' if repeat > 1 else 'protocol(s)'} "
            f"on {handle.registry_key}: ${conditions * cost['list']:.2f} at list prices "
            f"(${conditions * cost['conservative']:.2f} with cache reads at the full input price), "
            f"~{conditions * guess['requests']} requests; prices of {guess['prices_read_on']}"
        ] + [f"  assumes {assumption}" for assumption in guess["assumptions"]]

    def compact_results(self, conditions: Iterable[str], categories: Iterable[str]) -> list[str]:
        problems = []
        for condition in conditions:
            for repeat in range(1, self.repeats + 1):  # --careful-repeat: each repeat's files
                store = self.folders.store(condition, repeat)
                for category in categories:
                    try:
                        store.compact(category)
                    except OSError as exc:  # the file stays whole, in append order; a rerun compacts it
                        problems.append(f"could not compact {store.path(category)}: {exc.strerror or exc}")
        return problems

    def stopped(self) -> bool:
        return bool(self.stops.is_stopped())

    def end_session(self) -> None:
        if self.server_plan is not None:
            stop(self.server_plan)
            forget_session()
        self.release_output()

    def release_output(self) -> None:
        """Controller, at the end: the output folder is free for the next run."""
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None
        self.stops.release()

    def server_alive(self, url: str | None = None) -> bool:
        """Whether ``url`` (else the handler's server) still answers anything (an API: ``/models``, any status)."""
        client = getattr(self._handler, "client", None)
        url = url or str(getattr(client, "base_url", "") or "")
        return answers(url) if url else True

    def after_answer(self) -> None:
        """After each answer from the server (the progress line tells a silent server)."""
        if self.flight is not None:
            self.flight.answered()

    def _run(
        self, store: ResultStore, condition: str, conversation: Conversation, repeat: int = 1
    ) -> tuple[dict[str, object], runner.LiveRun]:
        if self.stops.is_stopped():
            raise NotRun("not run: the run stopped (why: the summary's 'run stopped' line)")
        seat: Seat | None = None  # a fleet's server: left once the failure is classified (moved or not)
        try:
            try:
                handler = self.handler()
                seat = (
                    self.placement.seat(
                        (condition, conversation.id, repeat), self._going_on, len(conversation.questions)
                    )
                    if self.placement
                    else None
                )
                live = runner.run(
                    handler,
                    conversation,
                    self.protocol(condition),
                    repeat,
                    self.before_request,
                    guard=self.guard,
                    after_answer=self.after_answer,
                    place=self._placer(seat, (condition, conversation.id, repeat)),
                )
            except (NotRun, ServerError, SetupFailed):
                raise
            except StopRun as exc:
                # A fleet's server that hung or went away leaves the fleet: the conversation runs again on another.
                fleet = isinstance(exc, ServerStopped) and self.placement is not None
                moved = self.classify_error(exc) if fleet and self.classify_error is not None else None
                if isinstance(moved, RunAgain) and self._again(conversation):
                    return self._run(store, condition, conversation, repeat)
                self._stop(store, conversation, exc)
                raise
            except Exception as exc:
                fatal = self.classify_error(exc) if self.classify_error is not None else None
                if isinstance(fatal, RunAgain) and self._again(conversation):
                    return self._run(store, condition, conversation, repeat)  # on the server it moved to
                if isinstance(fatal, StopRun):
                    self._stop(store, conversation, fatal)
                    raise fatal from exc
                if isinstance(fatal, NotRun):  # e.g. rate limited past every retry: left for the next run
                    raise fatal from exc
                written = self._record_error(store, conversation, exc)
                raise LiveError(f"{type(exc).__name__}: {exc}", self._logged(store, written)) from exc
        finally:
            if seat is not None:
                seat.leave()
        if not is_complete(live.entry):  # BFCL's loop returned no turn list
            written = self._record_error(store, conversation, LiveError(str(live.entry.get("result"))))
            raise LiveError(f"inference failed: {live.entry.get('result')}", self._logged(store, written))
        if self.flight is not None and self.flight.stopping.is_set():
            raise NotRun("not run: the run was interrupted")  # nothing filed after Ctrl-C
        self._append(store, conversation, live.entry)
        return live.entry, live

    def _placer(self, seat: Seat | None, key: inflight.Key) -> Callable[[Handler], None] | None:
        """What the run's copy of the handler gets: its fleet server (``seat.apply``), then its session key."""
        keys = self.session_keys
        if keys is None:
            return seat.apply if seat is not None else None

        def place(runner: Handler) -> None:
            if seat is not None:
                seat.apply(runner)
            keys.tag(runner, keys.key(*key))

        return place

    def _again(self, conversation: Conversation) -> bool:
        """Whether the conversation may run again elsewhere (at most ``MAX_RERUNS`` times)."""
        reruns = self._reruns.get(conversation.id, 0)
        self._reruns[conversation.id] = reruns + 1
        return reruns < MAX_RERUNS

    def _append(self, store: ResultStore, conversation: Conversation, entry: dict[str, object]) -> None:
        """File ``entry``; an output that cannot take it stops the run at once (nothing more is sent)."""
        try:
            store.append(conversation.category, entry)
        except OSError as exc:
            fatal = OutputUnwritable(unwritable(store.path(conversation.category), exc))
            self._stop(store, conversation, fatal)
            raise fatal from exc

    def _stop(self, store: ResultStore, conversation: Conversation, exc: StopRun) -> None:
        """The first process to meet an account-wide problem stops the run for every process.

        Its conversation fails, unscored, with the reason; every other one (here, or in
        another xdist worker, which reads the stop file) is skipped without a request.
        A server's fault or an unwritable output files nothing for it: a rerun runs it.
        """
        if not self.stops.first_to_stop(str(exc), conversation.id):
            raise NotRun("not run: the run stopped (why: the summary's 'run stopped' line)") from exc
        if not isinstance(exc, (ServerStopped, OutputUnwritable)):
            self._record_error(store, conversation, exc)

    def summary_lines(self) -> list[str]:
        """The summary's lines about the run itself: settings that differ from BFCL's, what each
        server of a fleet served, what was not run."""
        served = self.placement.summary_lines() if self.placement is not None else []
        return [f"differs from BFCL: {line}" for line in self.differences] + served + self.stops.summary_lines()

    def provenance(self, condition: str = "", keys: Iterable[tuple[str, int]] = ()) -> LiveProvenance:
        """How the live run was made, for the scorecard: what the model name resolved to,
        what each request carried, the server, and what differs from BFCL's own run; with a
        fleet, which server served each of ``keys`` ((conversation id, repeat)) of ``condition``."""
        assert self.handle is not None
        keys = list(keys)  # read by the fleet's record and the session keys'
        out: LiveProvenance = {
            "resolution": resolution(self.handle),
            "sent": self.sent,
            "differs_from_bfcl": list(self.differences),
        }
        if self.server_plan is not None:
            out["server"] = self.server_plan.provenance()
        if self.placement is not None:
            out["fleet"] = self.placement.provenance(keys, condition)
        if self.session_keys is not None and self._sends_session_keys():
            out["session"] = self.session_keys.provenance(condition, keys)
        return out

    def _sends_session_keys(self) -> bool:
        """Whether this run's handler makes its requests with the OpenAI SDK (so each carries its key):
        the handler this process built, else one built to look (the controller of an xdist run)."""
        if self._handler is not None:
            return speaks_openai(self._handler)
        assert self.handle is not None
        try:
            handler = self.handle.build()
        except Exception:  # noqa: BLE001 -- as every process of the run would have failed: nothing was sent
            return False
        try:
            return speaks_openai(handler)
        finally:
            close_clients(handler)

    def _record_error(self, store: ResultStore, conversation: Conversation, exc: BaseException) -> dict[str, object]:
        # BFCL's own error form (a string result), marked so a rerun retries it.
        data: dict[str, object] = {
            "id": conversation.id,
            "result": f"Error during inference: {exc}",
            "error": type(exc).__name__,
            "traceback": traceback.format_exc(limit=5),
        }
        if isinstance(exc, OutputUnwritable):
            return data  # it could not be written a moment ago
        self._append(store, conversation, data)
        return data

    @staticmethod
    def _logged(store: ResultStore, data: dict[str, object]) -> LoggedEntry | None:
        category = str(data["id"]).rsplit("_", 1)[0]
        entry, _ = parse_raw_line(str(store.path(category)), 0, serialise(data), category)
        return entry


def open_live(options: RunConfig) -> LiveSource:
    """The live source of ``options``; user mistakes raise ``SourceError`` (one line)."""
    try:
        handle = resolve(options.model, options.handler)
    except HandleError as exc:
        raise SourceError(f"{MODEL}={options.model}: {exc}") from None
    problem = inapplicable(options, handle)
    if problem:
        raise SourceError(problem)
    source = LiveSource(
        options.model,
        handle.registry_key,
        handle=handle,
        output=options.output,
        declarations=declarations.load(),
        boundary=options.boundary,
        script=options.user_script,
        detector=options.detector,
        repeats=options.repeat,
        concurrency=options.concurrency or backend(handle.kind).default_concurrency(options),
    )
    made = backend(handle.kind).configure(handle, options, source.concurrency, share)
    source.take_in(made)
    if backend(handle.kind).guarded and options.session_header:  # requests over HTTP: a key each (session_key)
        source.session_keys = SessionKeys(options.session_header, run_digest(options.output, handle.result_name))
    if not options.worker and not options.collect_only:  # on the controller, once
        problem = backend(handle.kind).preflight(handle, made)
        if problem:
            raise SourceError(f"{MODEL}={options.model}: {problem}")
    if backend(handle.kind).guarded:
        alive = source.alive or source.server_alive
        source.guard = ServerGuard(Retry(timeout=options.request_timeout), alive=alive)
        if source.classify_error is None:  # an OpenAI-compatible API: rate limits and a server gone
            source.classify_error = lambda exc: classify(exc, alive)
    if not options.worker and not options.collect_only:
        problem = take_output(source, options.output)
        if problem:
            raise SourceError(problem)
    if not options.worker and not options.collect_only:  # --collect-only runs nothing, and writes nothing
        source.stops.start_session()  # this session starts afresh: a stop or a skip of an earlier one is resumed
    if not options.worker:  # checked once, up front
        folders = source.folders
        pairs = [(c, r) for c in options.protocols for r in folders.repeat_indices()]
        paths = [folders.store(c, r).path(category) for c, r in pairs for category in options.categories]
        paths += [folders.settings_file(c, r) for c, r in pairs]
        unusable = [str(path) for path in paths if os.path.lexists(path) and not path.is_file()]
        if unusable:
            raise SourceError(f"{OUTPUT}: not a regular file, results cannot be written to it: " + ", ".join(unusable))
        source.problems.extend(folders.stored_problems(options.categories, options.protocols))
        if options.collect_only:
            return source
        folders.snapshot_filed(options.categories, options.protocols)
        problems = [p for c, r in pairs if (p := folders.claim(c, options.categories, source.settings(c), r))]
        if problems:
            raise SourceError(
                f"{OUTPUT}: resuming would mix runs made under other settings:\n  "
                + "\n  ".join(problems)
                + f"\nchoose another {OUTPUT}, or move those results away"
            )
    return source


def take_output(source: LiveSource, output: Path) -> str | None:
    """Controller: the output folder is this run's, and writable; else why not, in one line.

    One run at a time per folder: the run holds an exclusive ``flock`` on
    ``<output>/.careful/run.lock`` to its end (the kernel drops it with the process), so
    that a second command on the same folder never sends a conversation twice.
    """
    folder = output / ".careful"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".probe-{os.getpid()}"
        try:
            probe.write_bytes(b"ok\n")  # a folder that cannot take a few bytes cannot take results
        finally:
            probe.unlink(missing_ok=True)
        # Held read-only: a lock, not a writer (an output remounted read-only mid-run must not be "busy").
        fd = os.open(folder / LOCK_FILE, os.O_RDONLY | os.O_CREAT, 0o644)
    except OSError as exc:
        return f"{OUTPUT}={output}: cannot write there: {exc.strerror or exc} ({exc.filename or folder})"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip() or "a process that did not say"
        os.close(fd)
        return (
            f"{OUTPUT}={output} is being written by another run ({holder}); "
            f"wait for it to end, or choose another {OUTPUT}"
        )
    with contextlib.suppress(OSError):  # who holds it, for a second command's refusal
        (folder / LOCK_FILE).write_text(
            f"pid {os.getpid()}, since {time.strftime('%H:%M:%S')}: {' '.join(sys.argv)[:300]}"
        )
    source._lock_fd = fd  # held to the end of the process (closing it releases the lock)
    return None


def inapplicable(options: RunConfig, handle: ModelHandle) -> str | None:
    """Why an option given does not apply to this model (refused, not silently ignored), or None."""
    given, model, chosen = options.given, options.model, backend(handle.kind)

    def refused(flag: str) -> bool:
        return flag in given and flag not in chosen.options

    if refused(BUDGET_USD.flag):
        return f"{BUDGET_USD}: the spend guard covers Claude models only; {model} is not one (nothing would be capped)"
    if refused(MAX_OUTPUT_TOKENS.flag):
        return (
            f"{MAX_OUTPUT_TOKENS} sets the output limit of Claude and vLLM-served models; {model} is "
            "neither (BFCL's handler sets its own)"
        )
    if refused(HANDLER.flag):
        return f"{HANDLER} is for a local model directory; {model} is a scripted model"
    if refused(SESSION_HEADER.flag):
        return (
            f"{SESSION_HEADER} names the header of a session key sent to vLLM and OpenAI-compatible servers; "
            f"{model} is not served by one"
            + (" (Claude's requests go through the Anthropic SDK)" if chosen.priced else "")
        )
    if refused(REQUEST_TIMEOUT.flag):
        return (
            f"{REQUEST_TIMEOUT} bounds requests to vLLM and OpenAI-compatible servers; {model} is not "
            "served by one" + (" (Claude's requests are bounded by BFCL's own 1200 s)" if chosen.priced else "")
        )
    vllm_only = [f for f in (ENDPOINT.flag, *SERVER_OPTIONS) if refused(f)]
    if vllm_only:
        return f"{vllm_only[0]} is for vLLM-served models; {model} is not one"
    server = [f for f in SERVER_OPTIONS if f in given]
    if options.endpoint and server:
        return (
            f"{', '.join(server)}: settings of the server the plugin starts; with {ENDPOINT} "
            "the server already runs (set them where it is started)"
        )
    return None


@dataclass
class Ahead:
    """A live run's conversations running ahead of their items (``LiveSource.run_ahead``)."""

    flight: inflight.Flight | None  # None: nothing of this process's to run
    display: Display | None  # the controller's progress line
    stops: Stops

    def between_items(self) -> None:
        if self.display is not None:
            self.display.between_items()

    def land(self, completed: bool) -> None:
        try:
            if not completed and self.display is not None:
                # Interrupted (Ctrl-C to this process alone, or cut short): the workers send nothing new.
                self.stops.interrupted()
            if self.flight is not None:
                inflight.land(self.flight, completed)
        finally:
            if self.display is not None:
                self.display.stop()
