"""Many conversations in flight per process, each still reported by its own test item.

pytest runs one item at a time per process. A live run whose item ran its own
conversation kept one request in flight per xdist worker, while ``bfcl generate``
keeps up to 100 conversations in flight for a vLLM server from one process, and
vLLM's throughput grows with concurrent sequences far past that.

So every process that runs items (an xdist worker, or the only process without
xdist) keeps up to ``slots`` conversations running on threads (:class:`Flight`),
started with its run loop, in the order the items were collected. Every xdist
worker collects the same items in the same order, so the processes of a session
take the conversations from one list:

- a conversation is run by exactly one process of the session: the one holding
  its claim, an exclusive ``flock`` on ``<session>/claims/<key>`` taken without
  waiting and held while it runs (the kernel drops it if that process dies);
- when it ends, its outcome (the result entry as filed, or why there is none) is
  written atomically to ``<session>/outcomes/<key>.json``;
- an item takes its conversation's outcome from its own process's run, or from
  the outcome file another process wrote, waiting for either; one that nobody
  runs (not started yet, or its process was killed) the item's process claims and
  runs itself, on the item's thread.

Against vLLM (one server or a fleet) under xdist one process drives (:func:`one_driver`): the
first to take the session's driver lock (another ``flock``) runs every conversation
on all the slots, and the others only score their items from the outcomes it files,
never building a handler, tokenizer or client. If the driver dies, its lock goes
with it and a waiting process takes over the rest. Once its own items are done the
driver goes on with the queue while another process still runs items (each holds
a mark of life on the board), since those wait for it; after that, nothing new.

xdist's scheduling, node ids, ``-k``, ``--lf``, JUnit and the item's report are
untouched: only where the conversation runs moved. A worker whose items are done
keeps its threads on the conversations still unclaimed, then waits for those it
runs: another worker's items need them.
"""

from __future__ import annotations

import collections
import contextlib
import fcntl
import itertools
import json
import os
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol, TypedDict

from ..data.dataset import UnknownConversation, get
from ..sources.live_options import CONCURRENCY
from .backends.registry import backend
from .stops import Stops

#: (condition, conversation id, repeat)
Key = tuple[str, str, int]

#: How often an item waiting for another process's conversation looks for its outcome.
POLL_SECONDS = 0.05
#: How often it checks that the process running it is still alive (its claim is held).
PROBE_SECONDS = 0.5
#: How often, and how long apart, the process that must run a conversation tries its claim again.
CLAIM_TRIES = 200
CLAIM_WAIT = 0.005
#: Numbers this process's flights (tests run several in one process).
_FLIGHTS = itertools.count()
#: How often each process writes its counts for the progress display.
PROGRESS_SECONDS = 1.0


@dataclass(frozen=True)
class Outcome:
    """How one conversation's run ended, as every process of the session reads it.

    ``kind``: ``entry`` (``line`` is the result entry as written), ``error`` (an
    inference error: ``line`` is the error entry written, when one was), ``not_run``
    (nothing written; a rerun runs it), ``server_error`` (the server's fault, not the
    model's: nothing written, unscored, a rerun runs it), ``setup_failed`` (this
    plugin's own, likewise) or ``stopped`` (the run stopped: budget, credit, an
    output that cannot be written).
    """

    kind: str
    message: str = ""
    line: str | None = None
    log: str = ""
    seconds: float = 0.0
    #: In the process that ran it: the exception itself (``BudgetExceeded``, not just its text).
    raised: BaseException | None = field(default=None, compare=False, repr=False)

    def to_json(self) -> str:
        data = asdict(self)
        del data["raised"]
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Outcome:
        data = json.loads(text)
        return cls(
            str(data["kind"]),
            str(data.get("message", "")),
            data.get("line"),
            str(data.get("log", "")),
            float(data.get("seconds", 0.0)),
        )


def key_name(key: Key) -> str:
    """A file name for ``key`` (conditions and BFCL ids are plain ASCII words)."""
    condition, conversation_id, repeat = key
    return f"{condition}.{repeat}.{conversation_id}"


class Board:
    """The session folder's claims and outcomes, shared by every process of the session."""

    def __init__(self, directory: Path) -> None:
        self.claims = directory / "claims"
        self.outcomes = directory / "outcomes"
        self.claims.mkdir(parents=True, exist_ok=True)
        self.outcomes.mkdir(parents=True, exist_ok=True)

    def claim(self, key: Key) -> int | None:
        """An open descriptor holding ``key``'s claim, or None when another process holds it."""
        # Read-only: a claim is a lock, not a writer (an output remounted read-only mid-run must not be "busy").
        fd = os.open(self.claims / key_name(key), os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return None
        return fd

    @staticmethod
    def release(fd: int) -> None:
        os.close(fd)  # also drops the flock

    def held(self, key: Key) -> bool:
        """Whether some process holds ``key``'s claim now (a dead process holds none)."""
        fd = self.claim(key)
        if fd is None:
            return True
        self.release(fd)
        return False

    def claim_soon(self, key: Key) -> int | None:
        """``claim``, tried again for a moment: another process's probe (``held``) takes a claim
        for microseconds, which must not make the one process that would run ``key`` drop it."""
        for _ in range(CLAIM_TRIES):
            fd = self.claim(key)
            if fd is not None or self.read(key) is not None:
                return fd
            time.sleep(CLAIM_WAIT)
        return None

    def alive(self, name: str) -> int | None:
        """A flight's mark of life on the board, held until its process's run loop has landed."""
        return self.claim_soon(("alive", name, 0))

    def stop_driving(self) -> None:
        """The driver was cut short (Ctrl-C, -x): a waiting process runs what its item needs, no more."""
        (self.outcomes.parent / "driver-stopped").touch()

    def driving_stopped(self) -> bool:
        return (self.outcomes.parent / "driver-stopped").exists()

    def others_alive(self, mine: str) -> bool:
        """Whether another flight of the session still runs its items (it holds its mark)."""
        for name in os.listdir(self.claims):
            other = name.removeprefix("alive.0.")
            if other != name and other != mine and self.held(("alive", other, 0)):
                return True
        return False

    def drive(self) -> int | None:
        """The session's driver lock (held while this process runs the conversations), or None: another has it."""
        return self.claim(("driver", "session", 0))

    def driven(self) -> bool:
        """Whether a live process drives the session's conversations (a dead one holds no lock)."""
        return self.held(("driver", "session", 0))

    def read(self, key: Key) -> Outcome | None:
        try:
            text = (self.outcomes / f"{key_name(key)}.json").read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        return Outcome.from_json(text)

    def write(self, key: Key, outcome: Outcome) -> None:
        """Atomically (a reader sees the whole outcome or none)."""
        _write_atomically(self.outcomes / f"{key_name(key)}.json", outcome.to_json())

    def write_progress(self, counts: ProgressFile) -> None:
        folder = self.outcomes.parent / "progress"
        folder.mkdir(exist_ok=True)
        _write_atomically(folder / f"{os.getpid()}.json", json.dumps(counts))

    def finished(self) -> int:
        """How many conversations of this session have an outcome (any process's)."""
        try:
            return sum(1 for name in os.listdir(self.outcomes) if name.endswith(".json"))
        except OSError:
            return 0


def _write_atomically(path: Path, text: str) -> None:
    """``text`` to ``path`` by a rename; on an error (a full disk) no temporary file is left behind."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class ProgressFile(TypedDict):
    """One process's progress file (``Board.write_progress``), which ``live.progress`` sums."""

    done: int
    failed: int
    running: int
    requests: int
    last_answer: float
    started: float
    total: int  # the run's conversations to run, as this process counts them
    time: float


@dataclass
class Counts:
    """This process's share of the run, for the progress display."""

    done: int = 0
    failed: int = 0
    running: int = 0
    requests: int = 0
    last_answer: float = 0.0  # time.time() of the server's last answer (0: none yet)
    started: float = 0.0  # time.time() when the flight took off


class Flight:
    """Up to ``slots`` conversations of ``keys`` running at once in this process.

    ``run`` runs one conversation and returns its outcome (``LiveSource.execute``),
    on one of this process's ``slots`` threads: never more at once, so that
    ``--careful-concurrency`` is what the server sees. An item whose conversation
    has not started moves it to the front of the queue.
    """

    def __init__(
        self,
        keys: Iterable[Key],
        slots: int,
        board: Board,
        run: Callable[[Key], Outcome],
        unwritable: Callable[[OSError], None] | None = None,
        driver: int | None | bool = True,
    ) -> None:
        self.board = board
        # True: every process drives (each its share); an fd: this process holds the session's
        # driver lock and runs every conversation; None: another process drives, this one waits.
        self._driver = driver
        self._run = run
        self._unwritable = unwritable  # the session folder cannot be written: the run stops
        every = collections.deque(dict.fromkeys(keys))
        # A waiting process runs nothing of its own: only what its items need and nobody runs
        # (pushed), or the whole rest once the driver died (taken over from ``_rest``).
        self._queue = every if driver is not None else collections.deque()
        self._rest = every
        self._outcomes: dict[Key, Outcome | None] = {}  # run here (None: filed on the board)
        self._running: set[Key] = set()
        self._lock = threading.Condition()
        self._closed = False  # the run loop ended: threads leave once the queue is empty
        self.stopping = threading.Event()  # interrupted: no new conversation, no new request
        self.counts = Counts()
        self.total = len(every)
        self._slots = max(1, min(slots, len(every)))
        self._threads = [
            threading.Thread(target=self._work, name=f"careful-flight-{n}", daemon=True)
            for n in range(self._slots if driver is not None else 0)
        ]
        self._landed = threading.Event()
        self._finishing = False  # the run loop ended: run the rest only while other processes need it
        self._name = f"{os.getpid()}-{next(_FLIGHTS)}"
        self._alive = board.alive(self._name) if driver is not True else None

    def start(self) -> None:
        self.counts.started = time.time()
        for thread in self._threads:
            thread.start()
        threading.Thread(target=self._report, name="careful-flight-progress", daemon=True).start()

    def _report(self) -> None:
        """This process's counts, for the controller's progress display (``live.progress``), every second."""
        while not self._landed.wait(PROGRESS_SECONDS):
            self.write_progress()
        self.write_progress()

    def write_progress(self) -> None:
        with self._lock:
            c = self.counts
            counts: ProgressFile = {
                "done": c.done,
                "failed": c.failed,
                "running": c.running,
                "requests": c.requests,
                "last_answer": c.last_answer,
                "started": c.started,
                "total": self.total,
                "time": time.time(),
            }
        try:
            self.board.write_progress(counts)
        except OSError:
            pass  # the display is a courtesy: a full disk must not end the run here

    def _next(self) -> Key | None:
        """The next conversation to run; None when there is none and will be none."""
        with self._lock:
            while not self._queue and not self._closed and not self.stopping.is_set():
                self._lock.wait()
            if self._finishing and self._queue and not self.board.others_alive(self._name):
                self._queue.clear()  # no process is left whose items could need them (-x, a crash)
            return self._queue.popleft() if self._queue and not self.stopping.is_set() else None

    def _work(self) -> None:
        while (key := self._next()) is not None:
            self._run_claimed(key)

    def _run_claimed(self, key: Key) -> None:
        """Run ``key`` if nobody else does or did (another process's claim, or its outcome)."""
        try:
            if self.board.read(key) is not None:
                return
            # The driver is the only process meant to run it: a claim it does not get is a probe's.
            fd = self.board.claim_soon(key) if self.drives_all else self.board.claim(key)
        except OSError as exc:  # the session folder is gone or unwritable: the run stops
            self._cannot_write(exc)
            with self._lock:
                self._outcomes[key] = Outcome("not_run", f"not run: cannot write {exc.filename}: {exc.strerror}")
                self._lock.notify_all()
            return
        if fd is None:
            return
        try:
            if self.board.read(key) is not None:  # it ended between the look and the claim
                return
            with self._lock:
                self._running.add(key)
                self.counts.running += 1
            outcome = Outcome("error", "not run: an internal error")
            try:
                outcome = self._safe_run(key)
            finally:
                self._land(key, outcome)
        finally:
            self.board.release(fd)

    def _land(self, key: Key, outcome: Outcome) -> None:
        """File ``key``'s outcome for every process, and hand it to this process's item.

        Never raises: a thread that died here would leave the item waiting forever.
        """
        # Interrupted, nothing was filed: the next session's processes must not read "not run".
        filed = outcome.kind != "not_run" or not self.stopping.is_set()
        if filed:
            try:
                self.board.write(key, outcome)
            except OSError as exc:  # a full disk: this process's item still gets it, from memory
                filed = False
                self._cannot_write(exc)
        with self._lock:
            self._running.discard(key)
            self.counts.running -= 1
            self.counts.done += outcome.kind == "entry"
            self.counts.failed += outcome.kind in ("error", "stopped", "server_error", "setup_failed")
            # A filed entry is read back by its item: entries need not wait in memory for
            # items of other processes, which never come for them here. The rest keep the
            # exception itself for an item of this process (``BudgetExceeded``, not its text).
            self._outcomes[key] = None if filed and outcome.kind == "entry" else outcome
            self._lock.notify_all()
        self.write_progress()

    def _cannot_write(self, exc: OSError) -> None:
        if self._unwritable is not None:
            with contextlib.suppress(Exception):
                self._unwritable(exc)

    def _safe_run(self, key: Key) -> Outcome:
        try:
            return self._run(key)
        except Exception as exc:  # a bug must reach the item, not kill the thread silently
            return Outcome("error", f"{type(exc).__name__}: {exc}")

    def answered(self) -> None:
        """The server answered a request (the progress line tells a silent server)."""
        with self._lock:
            self.counts.last_answer = time.time()

    def outcome(self, key: Key) -> Outcome:
        """``key``'s outcome, waiting for it: run here or by another process, or queued first now."""
        probed = 0.0
        while True:
            with self._lock:
                if key in self._outcomes:
                    kept = self._outcomes.pop(key)
                    if kept is not None:
                        return kept
                queued = key in self._queue
                if queued and self._queue[0] != key:
                    self._queue.remove(key)  # not started: it is the one this process needs next
                    self._queue.appendleft(key)
                mine = queued or key in self._running
            if not mine:
                found = self.board.read(key)
                if found is not None:
                    return found
                now = time.monotonic()
                # Claimed by nobody: not started by the process that took it off its queue,
                # or that process died (its claim went with it). Run it here, unless a live
                # driver will (it runs every conversation; this process only scores).
                if now - probed >= PROBE_SECONDS:
                    probed = now
                    waits = self._driver is None and self.board.driven()  # a live driver will run it
                    if self._driver is None and not waits and not self.board.driving_stopped():
                        self._take_over()  # the driver died: drive the rest from here
                        waits = self._driver is None  # another process took over first
                    if not waits and not self.board.held(key):
                        self._push(key)
                        continue
            with self._lock:
                if key not in self._outcomes:
                    self._lock.wait(POLL_SECONDS)

    def _take_over(self) -> None:
        """The driver is gone (killed, or cut short): drive the rest from here, if no other process does."""
        fd = self.board.drive()
        if fd is None:
            return
        with self._lock:
            self._driver = fd
            self._queue.extend(key for key in self._rest if key not in self._queue)
            for _ in range(self._slots):
                self._revive()
            self._lock.notify_all()

    def _push(self, key: Key) -> None:
        with self._lock:
            if key not in self._queue and key not in self._running:
                self._queue.appendleft(key)
                if not any(t.is_alive() for t in self._threads):
                    self._revive()
                self._lock.notify_all()

    def _revive(self) -> None:
        """A thread again for what an item still needs after the queue ran dry."""
        thread = threading.Thread(target=self._work, name="careful-flight-late", daemon=True)
        self._threads.append(thread)
        thread.start()

    def request_made(self) -> None:
        with self._lock:
            self.counts.requests += 1

    def drain(self, timeout: float | None = None) -> None:
        """Wait for the threads to finish what they run."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in list(self._threads):
            if thread.is_alive():
                thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def landed(self) -> None:
        """The last progress write; the progress thread ends; another process may drive now."""
        self._landed.set()
        self.write_progress()
        if self.drives_all:
            if self.stopping.is_set():
                self.board.stop_driving()  # cut short: nobody takes over the whole queue
            self.board.release(self._driver)  # type: ignore[arg-type]
            self._driver = True
        if self._alive is not None:
            self.board.release(self._alive)
            self._alive = None

    @property
    def drives_all(self) -> bool:
        """This process holds the driver lock: other processes' items wait for its conversations."""
        return isinstance(self._driver, int) and not isinstance(self._driver, bool)

    def finish(self) -> None:
        """The run loop ended whole: run the rest of the queue while another process runs items
        (they wait for it), then end."""
        with self._lock:
            self._closed = self._finishing = True
            self._lock.notify_all()

    def close(self) -> None:
        """Start nothing more; what is running goes on."""
        with self._lock:
            self._closed = True
            self._queue.clear()
            self._lock.notify_all()

    def stop(self) -> None:
        """Interrupted: start nothing more; requests in flight end with the process."""
        self.stopping.set()
        self.close()


def slots(concurrency: int, workers: int) -> int:
    """This process's share of ``concurrency`` over ``workers`` processes (at least one each)."""
    return max(1, -(-concurrency // max(1, workers)))


class Filed(Protocol):
    def filed(self, key: Key) -> bool:
        """Whether ``key``'s entry is filed already (``filing.ResultFolders``)."""
        ...


class Kinded(Protocol):
    @property
    def kind(self) -> str:
        """The backend's name (``handles.ModelHandle``)."""
        ...


class Flown(Protocol):
    """What a flight needs of the live source (``source.LiveSource``), which imports this module."""

    concurrency: int
    flight: Flight | None

    @property
    def folders(self) -> Filed: ...

    @property
    def stops(self) -> Stops: ...

    @property
    def model_handle(self) -> Kinded: ...

    def execute(self, key: Key) -> Outcome: ...


def take_off(source: Flown, conversations: Iterable[tuple[str, str]], repeats: int, workers: int = 1) -> Flight | None:
    """Start ``source``'s flight over ``conversations`` not yet filed; None if none is needed.

    ``conversations``: the (condition, conversation id) of this process's collected items,
    in order (every xdist worker has the same); each conversation's repeats follow one
    another. ``workers``: how many processes share the concurrency (this run's xdist
    workers, 1 without xdist).
    """
    keys = [(condition, cid, r) for condition, cid in conversations for r in range(1, repeats + 1)]
    keys = [k for k in keys if not source.folders.filed(k)]
    if not keys:
        return None
    keys.sort(key=_turns, reverse=True)  # stable: collection order among equals
    board = Board(source.stops.session_dir() / "flight")
    # A server-backed model: one process drives every conversation (one handler, one tokenizer,
    # one client per run), the others score; anything else (a scripted policy) runs its share here.
    driver = board.drive() if one_driver(source.model_handle.kind, workers) else True
    flight = Flight(
        keys,
        source.concurrency if driver is not True else slots(source.concurrency, workers),
        board,
        source.execute,
        unwritable=source.stops.cannot_file,
        driver=driver,
    )
    source.flight = flight
    flight.start()
    return flight


def one_driver(kind: str, workers: int) -> bool:
    """Whether one process drives the session's conversations: a vLLM model's, under xdist.

    The client's work per request is small (a prompt formatted and counted, an answer
    decoded and executed); the servers' is the run's time. Each process that drives builds
    BFCL's handler, its tokenizer and an HTTP client per server; workers that only score need
    none of it. With several servers the driver spreads the conversations over all of them
    (``backends.vllm.fleet_client``).
    """
    return workers > 1 and backend(kind).single_driver


def _turns(key: Key) -> int:
    """A conversation's user turns: its length in requests, roughly.

    The longest start first (the makespan rule: the run ends when its longest chain of
    requests does, and a long one started last is a tail with the server idle beside
    it). ``bfcl generate`` starts them in the dataset's order.
    """
    try:
        return len(get(key[1]).questions)
    except UnknownConversation:
        return 0


def land(flight: Flight, completed: bool) -> None:
    """The run loop ended: finish what is in flight, or, cut short (Ctrl-C, -x), stop it.

    After a whole run loop the conversations in flight are another worker's items'
    (or paid for): they are finished and filed. Nothing new starts either way: a
    conversation an item still needs is run by that item's process.
    """
    if completed and flight.drives_all:
        flight.finish()  # the conversations other processes' items still wait for
        flight.drain()
    elif completed:
        flight.close()
        flight.drain()
    else:
        flight.stop()
        flight.drain(timeout=STOP_GRACE)
    flight.landed()


#: How long an interrupted run waits for its threads to notice (a request in flight ends with the process).
STOP_GRACE = 2.0


def usable_cpus() -> int:
    """CPUs this process may run on: its affinity, bounded by a cgroup v2 quota where one is set."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        quota, period = Path("/sys/fs/cgroup/cpu.max").read_text().split()[:2]
        if quota != "max":
            cpus = min(cpus, max(1, int(int(quota) // int(period))))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


def cap_workers(option: Any, kind: str, cpus: int | None = None) -> str | None:
    """A live run against a server: no more xdist workers than usable CPUs; what was done, said in a line.

    The conversations run many at a time whatever the workers (``--careful-concurrency``;
    against one vLLM server one process drives them all), so a worker adds client CPU
    (prompting, decoding, scoring), not requests: past the CPUs it only adds memory
    (about 190 MB each) and start-up time. Measured (bench/live_loopback.py,
    2 cores, L = 1 s): ``-n 8`` ran 0.53x as fast as ``-n 2`` with 2.9x the memory.
    A scripted model has no server and is left as asked.
    """
    tx = list(getattr(option, "tx", None) or [])
    cpus = usable_cpus() if cpus is None else cpus
    if not backend(kind).remote or len(tx) <= cpus or any(spec != "popen" for spec in tx):
        return None
    option.tx = ["popen"] * cpus
    option.numprocesses = cpus
    return (
        f"{cpus} xdist workers, not {len(tx)}: this machine has {cpus} usable CPUs, and the conversations "
        f"run many at a time whatever the workers ({CONCURRENCY}); more workers would only hold more memory"
    )


def worker_count(workerinput: Mapping[str, Any] | None) -> int:
    """Processes running items at once: this run's xdist workers, else 1.

    From the controller's ``workerinput`` (a worker's ``config.workerinput``; None outside
    xdist), not ``PYTEST_XDIST_WORKER_COUNT``: that variable is inherited by any pytest
    started from inside a worker (a test suite's own subprocess runs), which has no workers
    of its own.
    """
    try:
        return max(1, int(workerinput["workercount"])) if workerinput else 1
    except (KeyError, TypeError, ValueError):
        return 1
