"""Where a conversation's model output comes from: the references, or a logged run."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..common.bfcl import CATEGORIES
from ..common.text import counted
from ..data import dataset
from ..data.result_files import (
    InputProblem,
    LoggedEntry,
    LoggedResult,
    find_result_files,
    keep_last,
    read_result_file,
)
from ..data.run_settings import (
    PLAIN_BFCL,
    SETTINGS_FILE,
    RunSettings,
    SettingsError,
    made_under,
    recorded,
    recorded_decoder,
    settings_path,
    shown,
)
from ..effects.declarations import Declarations
from ..execution.decoding import Decoder, UnknownModel, decoder, missing_extra, passthrough_decoder, resolve_model
from ..protocols import answer_log
from ..protocols.options import USER_SCRIPT
from .format_check import decoder_warnings
from .options import CATEGORY, DECODER, MODEL, PROTOCOL, RESULTS
from .run_config import REFERENCE_MODEL, RunConfig, SourceError


class RunRecord(Protocol):
    """One conversation run by a live source in this process (``live.runner.LiveRun``)."""

    @property
    def entry(self) -> Mapping[str, object]:
        """Its result entry, as filed."""
        ...

    @property
    def log(self) -> str:
        """BFCL's printed loop."""
        ...

    @property
    def seconds(self) -> float:
        """Its wall time."""
        ...


@dataclass(frozen=True)
class LiveDetails:
    """What a live source knows of one conversation run (``Source.live_details``)."""

    resumed: bool  # read back from an earlier result file, not rerun
    run: RunRecord | None  # run in this process: its entry, log and wall time


class RunAhead(Protocol):
    """What runs ahead of the items (``Source.run_ahead``): told between items and at the loop's end."""

    def between_items(self) -> None: ...

    def land(self, completed: bool) -> None:
        """The run loop ended (``completed``: not cut short): finish or stop what runs ahead."""
        ...


class ShowProgress(Protocol):
    """Where the controller shows a live run's progress line (``Source.run_ahead``): the harness's
    terminal (``harness.progress_display.TerminalLine``); the source says what the line is and when."""

    @property
    def isatty(self) -> bool:
        """On a terminal: the line gets the screen's last row, redrawn (else a plain line now and then)."""
        ...

    def write_line(self, line: str) -> None:
        """A plain line of its own (CI logs, output piped to a file), never captured."""
        ...


@dataclass
class Source:
    """Model output per (condition, conversation id), and how to decode it.

    What the harness asks of every source is declared here, with the plain answers of a logged
    run and of the references; a live source (``live.source.LiveSource``) gives its run's.
    """

    model: str
    decoder_key: str
    entries: dict[tuple[str, str], LoggedEntry | None] = field(default_factory=dict)
    problems: list[InputProblem] = field(default_factory=list)
    files: dict[tuple[str, str], Path] = field(default_factory=dict)
    #: the categories this run covers (resolved from --careful-category or the run's files)
    categories: tuple[str, ...] = ()
    #: the categories a logged run has result files for (every condition's), whatever was selected
    run_categories: tuple[str, ...] = ()
    #: see ``warnings``; filled by the format check, which may still be running (``check_in_background``)
    found_warnings: list[str] = field(default_factory=list)
    #: per condition, the settings a logged run recorded (``careful_settings.json``)
    recorded: dict[str, RunSettings | None] = field(default_factory=dict)

    _checking: threading.Thread | None = field(default=None, repr=False, compare=False)
    #: per (condition, category): the conversations its result file holds nothing of (``lacks_entry``)
    _lacking: dict[tuple[str, str], frozenset[str]] = field(default_factory=dict, repr=False, compare=False)
    _check_error: BaseException | None = field(default=None, repr=False, compare=False)

    @property
    def warnings(self) -> list[str]:
        """What the user should know before reading the scores (e.g. a decoder that reads
        almost none of the run); the run is scored all the same. Controller only."""
        self._wait_for_check()
        return self.found_warnings

    def _wait_for_check(self) -> None:
        if self._checking is not None:
            self._checking.join()
            failed, self._check_error = self._check_error, None
            if failed is not None:  # as if the check had run in the caller's thread
                raise failed

    def check_in_background(self, check: Callable[[], list[str]]) -> None:
        """Run ``check`` in a thread; ``warnings`` waits for it.

        The format check imports the decoder's handler (the OpenAI SDK alone takes
        ~0.6 s). Under xdist the controller decodes nothing else, and the thread
        lets that import overlap the workers' start instead of delaying it.
        """

        def run() -> None:
            try:
                self.found_warnings.extend(check())
            except BaseException as exc:  # noqa: BLE001 -- re-raised by ``warnings``
                self._check_error = exc

        self._checking = threading.Thread(target=run, name="careful-format-check", daemon=True)
        self._checking.start()

    @property
    def is_reference(self) -> bool:
        return self.model == REFERENCE_MODEL

    # -- what the harness asks of every source; a live source answers with its run's --------

    @property
    def backend_kind(self) -> str | None:
        """The live backend that runs the model (``vllm``, ``claude``, ...); None: no model runs here."""
        return None

    def sampling(self) -> str:
        """How the model's output was made, in words (the scorecard's identity)."""
        return "reference trajectories" if self.is_reference else "rescored from a logged run"

    def live_details(self, key: tuple[str, str, int]) -> LiveDetails | None:
        """A live run's record of (condition, conversation id, repeat); None: not a live source."""
        return None

    def summary_lines(self) -> list[str]:
        """The summary's lines about the run itself (a live run: what differs from BFCL's, what was not run)."""
        return []

    def spend_lines(self) -> list[str]:
        """The summary's lines about what the run spent (a paid API's)."""
        return []

    def default_label(self) -> str:
        """The scorecard folder's name without ``--careful-label``: the model as named (a logged run
        without ``--careful-model``: its folder's name), made one path component."""
        return self.model.replace("/", "_").replace(":", "_") or "model"

    def result_folder(self) -> Path | None:
        """Where the run filed its result files (a live run's ``--careful-output``); None: nowhere."""
        return None

    def worker_env(self) -> dict[str, str]:
        """What each xdist worker is sent of this process's environment (a live run's server URL, run id)."""
        return {}

    def run_ahead(
        self, conversations: list[tuple[str, str]], workerinput: Mapping[str, object] | None, show: ShowProgress | None
    ) -> RunAhead | None:
        """Before the items run: a live run starts its conversations, many at once, ahead of the
        items that score them, and (no ``workerinput``: the controller) its progress display,
        shown through ``show`` (None: a worker's, or nowhere to show it); None: nothing runs ahead
        (a logged run)."""
        return None

    def opening_lines(self, start_lines: list[str]) -> list[str]:
        """Said before anything runs, ``start_lines`` among them (a live run: what runs, how it
        differs from BFCL); a logged run says nothing."""
        return []

    def start_servers(self, say: Callable[[str], None]) -> str | None:
        """The servers the session starts, started (a live vLLM run); the problem, if one did not start."""
        return None

    def cost_lines(self, conversations: list[dataset.Conversation], conditions: int, repeat: int) -> list[str]:
        """``--collect-only`` on a paid API: what the selection would cost, roughly; nothing elsewhere."""
        return []

    def compact_results(self, conditions: Iterable[str], categories: Iterable[str]) -> list[str]:
        """The run's result files rewritten as ``bfcl evaluate`` reads them; the problems met."""
        return []

    def stopped(self) -> bool:
        """Whether the run stopped short (a live run's stop: a dead server, a spend cap)."""
        return False

    def end_session(self) -> None:
        """Controller, at the session's very end: the servers it started stopped, its folder freed."""

    def decoder(self) -> Decoder:
        self._wait_for_check()  # one thread builds the decoder (decoding.decoder is cached, not locked)
        return passthrough_decoder() if self.is_reference else decoder(self.decoder_key)

    def close(self) -> None:
        """At the session's end, in every process: what the source holds open is closed (a live
        run's API clients); a logged run's decoders closed theirs when built."""

    def result(self, condition: str, conversation: dataset.Conversation) -> tuple[LoggedResult, LoggedEntry | None]:
        if self.is_reference:
            return [[list(t)] if t else [] for t in conversation.ground_truth], None
        entry = self.entries.get((condition, conversation.id))
        if entry is None:
            raise LookupError(self.problem_for(condition, conversation.id))
        return entry.result, entry

    def user_script(self, condition: str, default: str = "default") -> str:
        """The script a confirm run's scripted user answered under.

        A logged run's settings say it (``default`` when they do not); a live
        run's is the session's own, ``default`` here.
        """
        if condition not in self.recorded:
            return default
        settings = self.recorded[condition]
        script = settings.user_script if settings is not None else None
        return script if script is not None else "default"

    def reexamined(self, config: RunConfig, decl: Declarations) -> dict[str, tuple[str, frozenset[str], str]]:
        """Per condition, the stricter script its logged answers are re-examined under (``answer_log``)."""
        out = {}
        for condition in config.protocols:
            made_with = self.user_script(condition, config.user_script)
            again = answer_log.reexamination(
                config.user_script, made_with, self.recorded.get(condition), config.boundary, config.detector, decl
            )
            if again is not None:
                out[condition] = again
        return out

    def lacks_entry(self, condition: str, conversation_id: str) -> bool:
        """Whether a logged run's result file for the conversation's category holds nothing of it.

        ``bfcl evaluate`` refuses a result file that lacks entries unless given ``--partial-eval``,
        which scores the entries present. A conversation with a line that could not be read as an
        entry (a located input problem), or in a file that cannot be read at all, is there: it fails,
        unscored, and says why. So is one that may be on a line whose id could not be read: only when
        a file lacks more conversations than it has such lines are they missing. False for the
        references and a live run (their entries are made)."""
        category = dataset.category_of(conversation_id)
        if (condition, category) not in self.files or (condition, conversation_id) in self.entries:
            return False
        if (condition, category) not in self._lacking:  # once: the problems are known when the run is opened
            self._lacking[(condition, category)] = self._lacking_in(condition, category)
        return conversation_id in self._lacking[(condition, category)]

    def _lacking_in(self, condition: str, category: str) -> frozenset[str]:
        name = str(self.files[(condition, category)])
        mine = [p for p in self.problems if p.file == name]
        if any(p.line is None for p in mine):  # the whole file's problem: none of it could be read
            return frozenset()
        located = {p.conversation for p in mine if p.conversation}
        lacking = frozenset(
            c.id for c in dataset.load((category,)) if (condition, c.id) not in self.entries and c.id not in located
        )
        return lacking if len(lacking) > len(self.unlocated(condition, category)) else frozenset()

    def unlocated(self, condition: str, category: str | None = None) -> list[InputProblem]:
        """The problems of a condition's result files (one category's) that name no conversation:
        a line whose id could not be read."""
        files = {str(p) for (c, cat), p in self.files.items() if c == condition and category in (None, cat)}
        return [p for p in self.problems if p.file in files and p.line is not None and p.conversation is None]

    def problem_for(self, condition: str, conversation_id: str) -> str:
        located = [str(p) for p in self.problems if p.conversation == conversation_id]
        if located:
            return "; ".join(located)
        category = dataset.category_of(conversation_id)
        path = self.files.get((condition, category))
        if path is None:
            return f"no result file for {category}"
        # the file's own problem (gzip'd, not a regular file...) says why it has no entry
        whole = [p.message for p in self.problems if p.line is None and p.file == str(path)]
        if whole:
            return f"{path}: no entry for {conversation_id} ({'; '.join(whole)})"
        unread = self.unlocated(condition, category)
        lines = (
            f" (the file has {counted(len(unread), 'line')} naming no conversation: it may be one)" if unread else ""
        )
        return f"{path}: no entry for {conversation_id}{lines}"


def open_source(options: RunConfig) -> Source:
    """The references or a logged run, validated; user mistakes raise ``SourceError``.

    A live run is opened by ``pytest_careful.live.source.open_live`` (``harness.session``).
    """
    if options.results is None:
        return Source(REFERENCE_MODEL, "passthrough")
    # Neither given: read_options made sure the folder's careful_settings.json names one.
    key = options.decoder or options.model or recorded_decoder(options.results) or ""
    try:
        key = resolve_model(key)
        missing = missing_extra(key)  # its vendor SDK an extra not installed: say so before any item
        if missing:
            raise UnknownModel(missing)
    except UnknownModel as exc:
        flag = DECODER.flag if options.decoder else MODEL.flag if options.model else SETTINGS_FILE
        raise SourceError(f"{flag}: {exc}") from None
    # Without --careful-model, the run is named after its folder (BFCL names
    # result folders after the model).
    source = Source(options.model or options.results.resolve().name, key)
    folders = {}
    for condition in options.protocols:
        directory = options.results if len(options.protocols) == 1 else options.results / condition
        folders[condition] = _model_folder(directory, options.model)
    source.categories = options.categories if options.categories_given else _present(folders)
    if options.categories_from_node_ids:  # the denominator of a selection: what -k on the run would see
        source.run_categories = _present(folders, required=False) or source.categories
    for condition, directory in folders.items():
        _read_condition(source, condition, directory, source.categories, options.protocols_given)
    if "confirm" in source.recorded:
        problem = script_problem(source.user_script("confirm"), options.user_script)
        if problem:
            raise SourceError(problem)
    if not options.worker:  # the controller tells; workers would only pay for it
        source.check_in_background(lambda: _decoder_warnings(source, options))
    return source


def _decoder_warnings(source: Source, options: RunConfig) -> list[str]:
    """A warning when the chosen decoder reads (almost) none of the run (``format_check``)."""
    if options.decoder:
        flag = f"{DECODER}={options.decoder}"
    elif options.model:
        flag = f"{MODEL}={options.model}"
    else:
        flag = SETTINGS_FILE
    return decoder_warnings(source.decoder_key, flag, source.entries.values(), str(options.results))


def _present(folders: dict[str, Path], required: bool = True) -> tuple[str, ...]:
    """Without --careful-category: the categories every condition's folder has files for."""
    present = [set(_files_of_one_run(d)) for d in folders.values()]
    found = tuple(c for c in CATEGORIES if all(c in p for p in present))
    if not found and required:
        where = ", ".join(str(d) for d in folders.values())
        raise SourceError(
            f"{RESULTS}: no BFCL multi-turn result file (BFCL_v4_multi_turn_<category>_result.json) under {where}"
        )
    return found


def _files_of_one_run(directory: Path) -> dict[str, Path]:
    """The result files under ``directory``, refusing a folder that holds several runs.

    Scoring one run's base against another's miss_func, or picking one of two
    base files, would give a scorecard of no run at all.
    """
    if not directory.is_dir():
        return {}
    by_category: dict[str, list[Path]] = {}
    for path in sorted(directory.rglob("BFCL_v4_multi_turn_*_result.json")):
        by_category.setdefault(path.name, []).append(path)
    several = sorted({p.parent for paths in by_category.values() if len(paths) > 1 for p in paths})
    if several:
        listed = "\n  ".join(str(p) for p in several)
        raise SourceError(
            f"{RESULTS}: {directory} holds the result files of several runs:\n  {listed}\n"
            f"point {RESULTS} at one of them (or name the model with {MODEL})"
        )
    files, _ = find_result_files(directory)
    return files


def _model_folder(directory: Path, model: str) -> Path:
    """A live run's ``<output>/<protocol>`` holds one folder per model: pick the model's."""
    if model:
        for name in (model.replace("/", "_").replace(":", "_"), _registry_dir(model)):
            if name and (directory / name).is_dir():
                return directory / name
    return directory


def _registry_dir(model: str) -> str:
    try:
        return resolve_model(model).replace("/", "_")
    except UnknownModel:
        return ""


def _read_condition(
    source: Source, condition: str, directory: Path, categories: tuple[str, ...], protocol_given: bool = True
) -> None:
    if not directory.is_dir():
        raise SourceError(
            f"{RESULTS}: no folder {directory} for condition {condition!r} "
            "(with several protocols, the run of each lies in DIR/<protocol>/)"
        )
    _files_of_one_run(directory)  # several runs in one folder: refused
    files, problems = find_result_files(directory)
    source.problems.extend(problems)
    missing = [c for c in categories if c not in files]
    if missing:
        raise SourceError(
            f"{RESULTS}: {directory} has no result file for {', '.join(missing)} "
            f"(expected BFCL_v4_<category>_result.json); choose categories with {CATEGORY}"
        )
    problem = protocol_problem(condition, [files[c] for c in categories], directory, protocol_given)
    if problem:
        raise SourceError(problem)
    source.recorded[condition] = recorded(files[c] for c in categories)
    for category in categories:
        source.files[(condition, category)] = files[category]
        entries, problems = read_result_file(files[category], category)
        source.problems.extend(problems)
        for entry in entries:
            source.entries[(condition, entry.id)] = entry


def run_entries(run_dir: Path, decoder_key: str) -> tuple[Decoder, list[LoggedEntry], list[Path]]:
    """A logged run's decoder, entries (one per id, as rescoring keeps them) and result files."""
    files, _ = find_result_files(run_dir)
    if not files:
        raise SystemExit(f"careful-declare: no BFCL multi-turn result files under {run_dir}")
    entries = []
    for category, path in files.items():
        entries.extend(keep_last(read_result_file(path, category)[0])[0])
    return decoder(decoder_key), entries, list(files.values())


def protocol_problem(condition: str, result_files: Iterable[Path], folder: Path, given: bool = True) -> str | None:
    """Why the run of ``result_files`` may not be scored as ``condition``; None when it may.

    ``given``: the user chose ``condition`` (``--careful-protocol``); else it is the default, and
    the message says so rather than name an option the user never typed.
    """
    files = list(result_files)
    paths = sorted({p for p in map(settings_path, files) if p is not None})
    if not paths:
        if condition == PLAIN_BFCL:
            return None
        return (
            f"{PROTOCOL}={condition}: {folder} has no {SETTINGS_FILE} beside its result "
            f"files, so it is a plain BFCL run, made under the standard protocol; scored as "
            f"{condition} it would give a {condition} scorecard of standard output. Rescore it with "
            f"{PROTOCOL}=standard, or point {RESULTS} at a run made with "
            f"{PROTOCOL}={condition} (its folder holds {SETTINGS_FILE})."
        )
    try:
        made = {path: made_under(path) for path in paths}
    except SettingsError as exc:
        return f"{RESULTS}: {exc}; it is the file a live run writes beside multi_turn/"
    wrong = {path: made_as for path, made_as in made.items() if made_as != condition}
    if not wrong:
        return None
    path, made_as = next(iter(wrong.items()))
    made_as = shown(made_as)
    if not given:
        return (
            f"{RESULTS}: {path} says this run was made under the {made_as} protocol, and without "
            f"{PROTOCOL} a run is scored under the default, {condition}: its scorecard would be "
            f"mislabelled. Rescore it with {PROTOCOL}={made_as}."
        )
    return (
        f"{PROTOCOL}={condition}: {path} says this run was made under the {made_as} "
        f"protocol; scored as {condition} its scorecard would be mislabelled. Rescore it with "
        f"{PROTOCOL}={made_as}, or point {RESULTS} at a run made under {condition}"
        " (with several protocols, each one's run lies in DIR/<protocol>/)."
    )


def script_problem(made_with: str, script: str) -> str | None:
    """Why a confirm run made under ``made_with`` cannot be re-examined under ``script``.

    Re-examining reads the answers the run's user gave; a run made under a
    stricter script lacks the answers it withheld, so only a ``default`` run
    (or the same script, which re-examines nothing) can be read so.
    """
    if script == made_with or made_with == "default":
        return None
    made_with = shown(made_with)
    return (
        f"{USER_SCRIPT}={script}: this confirm run was made under {made_with}; its log lacks "
        f"the yes answers {made_with} withheld, so only a run made under default can be re-examined "
        f"under another script (or rescore it with {USER_SCRIPT}={made_with})"
    )
