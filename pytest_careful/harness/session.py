"""The plugin's stateful hooks, registered in ``pytest_configure`` when asked for."""

from __future__ import annotations

import dataclasses
import json
import shutil
import tempfile
import threading
from collections.abc import Callable, Generator, Sequence
from pathlib import Path
from typing import Any

import pytest

from ..common import gc_pause as _gc
from ..common.text import counted
from ..data import dataset
from ..data.result_files import printable
from ..effects import declarations
from ..live.backends import scripted
from ..reports import scorecard
from ..reports.options import ALLOW_MISSING
from ..scoring import rules
from ..scoring.conversation import ScoringConfig
from ..scoring.rules import Rule, Settings, checking
from ..sources.options import MODEL, RESULTS
from ..sources.reference_logged import RunAhead, Source, open_source
from ..sources.run_config import RunConfig, SourceError
from ..verify import audit_file
from ..verify.audit_file import Audit, AuditFileError
from ..verify.options import AUDIT
from . import gate, junit, scorecard_files, selection, summary
from .filed import score_filed
from .item import CarefulCollector, CarefulItem, make_items
from .outcome import ROW_KEY, call_sections, junit_properties
from .progress_display import terminal_line
from .state import SESSION_KEY, CarefulState
from .worker_status import say_status_once


def start(
    config: pytest.Config, options: RunConfig, open_live: Callable[[RunConfig], Source] | None = None
) -> CarefulState:
    """The run's state, its source opened: ``open_live`` (``live.source.open_live``, which the plugin
    imports only for a run that calls a model) for a live run, else the logged run or the reference."""
    source: Source
    scripted.register()  # a scripted model's results folder decodes with its handler
    if options.live:
        assert open_live is not None, "a live run needs live.source.open_live"
        try:
            source = open_live(options)
        except SourceError as problem:
            raise pytest.UsageError(str(problem)) from None
    else:
        try:
            source = open_source(options)
        except SourceError as problem:
            raise pytest.UsageError(str(problem)) from None
    if source.categories:  # a logged run without --careful-category: the categories it has
        options = dataclasses.replace(options, categories=source.categories)
    decl = declarations.load()
    settings = Settings(
        boundary=options.boundary,
        detector=options.detector,
        duplicate_writes=options.duplicate_writes,
        optimize=options.optimize,
    )
    scoring = ScoringConfig(
        model=source.model,
        decoder_key=source.decoder_key,
        declarations=decl,
        settings=settings,
        rules=run_rules(config, settings),
        reexamined=source.reexamined(options, decl),
        audit=run_audit(options.audit),
    )
    state = CarefulState(options, source, decl, settings, scoring, hook=config.hook)
    if options.baseline is not None:
        gate.load_baseline(options.baseline, state)  # refuses incompatible runs up front
    config.stash[SESSION_KEY] = state
    return state


def run_audit(mode: str) -> Audit | None:
    """The shipped item audit the rows carry, under ``--careful-audit`` (None: off)."""
    try:
        return audit_file.for_mode(mode)
    except AuditFileError as problem:
        raise pytest.UsageError(f"{AUDIT}: {problem}") from None


class BuiltInRules:
    """The plugin's own ``pytest_careful_rules``: the built-in rules, under the run's settings.

    Registered as ``careful-rules``: ``-p no:careful-rules`` runs without any of them.
    """

    def __init__(self, settings: Settings) -> None:
        self.rules = rules.built_in(settings) + rules.opt_in(settings)

    # tryfirst: the built-in rules come first in every list of the run's rules
    @pytest.hookimpl(tryfirst=True)
    def pytest_careful_rules(self, config: pytest.Config) -> tuple[Rule, ...]:
        return self.rules


def run_rules(config: pytest.Config, settings: Settings) -> tuple[Rule, ...]:
    """The run's rules: every ``pytest_careful_rules`` implementation's (the plugin's own first),
    then as ``pytest_careful_modify_rules`` leaves them; checked, or one line saying what is wrong."""
    ours = BuiltInRules(settings)
    built_in = ours.rules if config.pluginmanager.register(ours, "careful-rules") else ()  # None: blocked
    try:
        found = list(checking.collect(config.hook.pytest_careful_rules(config=config), built_in=built_in))
        config.hook.pytest_careful_modify_rules(config=config, rules=found)
        return checking.collect([found], "pytest_careful_modify_rules", built_in)
    except checking.RuleError as problem:
        raise pytest.UsageError(str(problem)) from None


class CarefulPlugin:
    """Collection, per-item rows, summary, scorecards and the release gate."""

    def __init__(self, config: pytest.Config, state: CarefulState) -> None:
        self.config = config
        self.state = state
        self.is_worker = hasattr(config, "workerinput")
        self.junit = junit.Annotator(config, state.source.model, strict=state.options.junit_strict)
        #: node id -> (where in the call report's user_properties its JUnit properties went, them)
        self._junit_pending: dict[str, tuple[int, list[tuple[str, str | int]]]] = {}
        #: node ids of failed tests that are not conversations (paths given beside a run)
        self._other_failures: list[str] = []
        self._page_prepared = False  # xdist controller: report.html's templates compiled on a thread
        self._ahead: RunAhead | None = None  # a live run's conversations, running ahead of their items
        self._charts_warming: threading.Thread | None = None  # a live run's controller: matplotlib imported early
        self._entries_checked = False  # xdist controller: the workers' selection checked for missing entries
        state.details_dir = self._details_dir(config)
        if not self.is_worker:
            config.pluginmanager.register(self.junit, "careful-junit")

    def _details_dir(self, config: pytest.Config) -> Path | None:
        """The sidecar folder of report.html's per-conversation details (``html_report``).

        The controller makes it before any worker starts and sends it in ``workerinput``
        (not an environment variable: those leak into nested pytest runs).
        """
        if self.is_worker:
            shared = config.workerinput.get("careful_details")  # type: ignore[attr-defined]
            return Path(shared) if shared else None
        return Path(tempfile.mkdtemp(prefix="careful-details-"))

    # tryfirst: before xdist starts its workers, which must inherit the server's URL.
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """Controller: fetch the model's files and start the vLLM server, before any worker or item.

        A failure is a ``UsageError``: pytest prints it once and exits 4 (``pytest.exit``
        here would print it twice, and every item would fail the same way).
        """
        if self.is_worker:
            return
        say_status_once(self.config)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:  # what runs, said before anything runs
            for line in self.state.source.opening_lines(self.state.start_lines):
                reporter.write_line(f"careful: {line}")
        if self.config.getoption("collectonly"):
            return
        problem = self.state.source.start_servers(
            lambda line: reporter.write_line(f"careful: {line}") if reporter else None
        )
        if problem:
            raise pytest.UsageError(f"{MODEL}={self.state.options.model}: {problem}")

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        """xdist controller: what the workers selected (the controller collects nothing).

        The controller never reaches ``pytest_collection_finish``: here, once, while the
        workers score, it prepares report.html's templates for the session end.
        """
        if not self._page_prepared and not self.config.getoption("collectonly"):
            self._page_prepared = True
            threading.Thread(target=scorecard.prepare_page, name="careful-prepare-page", daemon=True).start()
        self.state.selected.update(i for i in ids if selection.NODE_ID.match(i))
        if not self._entries_checked:  # every worker collects the same items: the first says it
            self._entries_checked = True
            self._refuse_missing_entries([i for i in ids if selection.NODE_ID.match(i)])
        if not self.state.selected and not ids and not self.state.empty_selection:
            self.state.empty_selection = selection.why_none_selected(self.config, self._items_of_the_run())

    def _items_of_the_run(self) -> int:
        """How many conversation items the workers collected (the controller collects none)."""
        return len(self._conversations()) * len(self.state.options.protocols)

    def _conversations(self) -> list[dataset.Conversation]:
        """The run's conversations: its categories', narrowed to those named as node ids."""
        chosen = self.config.stash.get(selection.SELECTION_KEY, selection.Selection())
        conversations = dataset.load(self.state.options.categories)
        if chosen.node_ids:
            named = chosen.conversation_ids()
            conversations = [c for c in conversations if c.id in named]
        return conversations

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist controller: send each worker what this session set up (server URL, run id)."""
        node.workerinput["careful_env"] = self.state.source.worker_env()
        if self.state.details_dir is not None:
            node.workerinput["careful_details"] = str(self.state.details_dir)

    def _compact_results(self) -> None:
        """Live runs: rewrite each result file as ``bfcl evaluate`` wants it (one entry per id)."""
        problems = self.state.source.compact_results(self.state.options.protocols, self.state.options.categories)
        self.state.source.warnings.extend(problems)
        if self.state.options.release_gate:
            self.state.gate_messages.extend(problems)

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self.state.source.close()  # left open, a client's __del__ at exit prints a traceback
        if self.state.details_dir is not None and not self.is_worker:
            shutil.rmtree(self.state.details_dir, ignore_errors=True)
        if not self.is_worker:
            self.state.source.end_session()  # its servers stopped, the output folder free for the next run

    # tryfirst: the items must exist before -k and -m deselect among them.
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        collector = CarefulCollector.from_parent(session, name="careful", nodeid="careful")
        chosen = config.stash.get(selection.SELECTION_KEY, selection.Selection())
        conversations = self._conversations()
        new = [
            i
            for i in make_items(collector, conversations, self.state.options.protocols)
            if chosen.selects(i.conversation_id, i.condition)
        ]
        # Report them as collected, so that counts ("N tests collected") include them; --deselect's
        # then count as deselected among them, as pytest's own do ("200 / 1 deselected / 199 selected").
        session.ihook.pytest_collectreport(report=pytest.CollectReport(collector.nodeid, "passed", None, list(new)))
        self.state.collected = len(new)
        # --careful-allow-missing: a conversation the result files hold nothing of is no item of the
        # run, as bfcl evaluate --partial-eval scores only the entries present (deselected, so counted).
        left_out = self.state.options.allow_missing
        dropped = [
            i
            for i in new
            if chosen.deselects(i.conversation_id, i.condition)
            or (left_out and self.state.source.lacks_entry(i.condition, i.conversation_id))
        ]
        if dropped:
            gone = set(dropped)
            new = [i for i in new if i not in gone]
            config.hook.pytest_deselected(items=dropped)
        items.extend(new)

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        self.state.selected.update(i.nodeid for i in session.items if isinstance(i, CarefulItem))
        if not self.is_worker:  # under xdist the controller checks what the workers selected
            self._refuse_missing_entries([i.nodeid for i in session.items if isinstance(i, CarefulItem)])
        if self.state.collected and not self.state.selected:
            self.state.empty_selection = selection.why_none_selected(self.config, self.state.collected)
        if self.config.getoption("collectonly") and not self.is_worker:
            self._print_estimate(session)
        # Import the decoding handler before the first item, where it would be
        # timed as that conversation's duration (the xdist controller runs no item).
        runs_items = self.is_worker or self.config.getoption("dist", "no") == "no"
        if runs_items and session.items and not self.config.getoption("collectonly"):
            self.state.source.decoder()
        _gc.freeze()  # imports, dataset, items: kept to the end, never garbage

    def _refuse_missing_entries(self, nodes: list[str]) -> None:
        """A selection that holds conversations the logged run has no entry for is refused before any
        runs, as ``bfcl evaluate`` refuses such a result file (``--careful-allow-missing`` left them
        out of the selection instead). ``UsageError``: one ``ERROR:`` line, exit 4."""
        problem = missing_entries(self.state.source, self.state.options, nodes)
        if problem:
            self.state.refused = True
            raise pytest.UsageError(problem)

    def _print_estimate(self, session: pytest.Session) -> None:
        """``--collect-only`` on a paid API: what the selection would cost, roughly."""
        items = [i for i in session.items if isinstance(i, CarefulItem)]
        conversations = [dataset.get(c) for c in dict.fromkeys(i.conversation_id for i in items)]
        conditions = len({i.condition for i in items}) or 1
        lines = self.state.source.cost_lines(conversations, conditions, self.state.options.repeat)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        for line in lines:
            reporter.write_line(f"careful: {line}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtestloop(self, session: pytest.Session) -> Generator[None, Any, Any]:
        """Live runs: the conversations run ahead of their items, many at once (``live.inflight``)."""
        if not self.config.getoption("collectonly"):
            careful = [(i.condition, i.conversation_id) for i in session.items if isinstance(i, CarefulItem)]
            show = None if self.is_worker else terminal_line(self.config)
            self._ahead = self.state.source.run_ahead(careful, getattr(self.config, "workerinput", None), show)
        completed = False
        try:
            result = yield
            completed = not (session.shouldfail or session.shouldstop)
            return result
        finally:
            if self._ahead is not None:
                self._ahead.land(completed)

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        rep = yield
        # The row crosses xdist on the report (config.stash is not sent back).
        if isinstance(item, CarefulItem) and rep.when == "call":
            rep.__dict__["careful_row"] = item.stash.get(ROW_KEY, None)  # an extra attribute: xdist sends it
            rep.sections.extend(call_sections(item))
        return rep

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        """A project file that failed to collect (``--continue-on-collection-errors``): the gate never hides it."""
        if not self.is_worker and report.failed:
            self._other_failures.append(report.nodeid or "collection")

    # tryfirst: the JUnit testcase's classname is set before junitxml opens it.
    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker:
            return
        if not selection.NODE_ID.match(report.nodeid):
            if report.failed:  # a project's own test: the release gate judges conversations, never it
                self._other_failures.append(report.nodeid)
            return
        row = getattr(report, "careful_row", None)
        if self._charts_warming is None and self.state.options.live:  # the first report: the flight is under way
            self._charts_warming = threading.Thread(
                target=scorecard.warm_charts, name="careful-warm-charts", daemon=True
            )
            self._charts_warming.start()
        if report.when == "call" and row:
            self.state.rows[report.nodeid] = json.loads(row)
            self.state.durations[report.nodeid] = report.duration
        elif report.failed and (report.when != "call" or report.nodeid not in self.state.rows):
            self.state.errors[report.nodeid] = (
                str(report.longrepr).splitlines()[-1][:300] if report.longrepr else report.outcome
            )
        self._add_junit_properties(report, bool(row))
        self.junit.annotate(report)
        if self._ahead is not None:
            self._ahead.between_items()

    def _add_junit_properties(self, report: pytest.TestReport, has_row: bool) -> None:
        """The row's JUnit properties on its call and teardown reports, where the item used to put them.

        They are a function of the row, so the workers do not send them: the item's
        ``user_properties`` crossed xdist on both reports, two thirds of what a passing item
        serialised. Placed where ``item.user_properties`` had them (after what the item
        recorded before its call, before what it records at teardown), for pytest's
        junitxml (which reads the teardown report) and any other report reader.
        """
        if report.when == "call" and has_row:
            row = self.state.rows[report.nodeid]
            audit = self.state.scoring.audit is not None
            props = list(junit_properties(row, self.state.source.model, self.state.scoring.rules, audit).items())
            self._junit_pending[report.nodeid] = (len(report.user_properties), props)
            report.user_properties = [*report.user_properties, *props]
        elif report.when == "teardown" and report.nodeid in self._junit_pending:
            at, props = self._junit_pending.pop(report.nodeid)
            report.user_properties = [*report.user_properties[:at], *props, *report.user_properties[at:]]

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker or self.config.getoption("collectonly") or self.state.refused:
            return  # --collect-only scored nothing: no scorecard to write, no gate to judge (exit stays 0)
        self._compact_results()  # the workers are done: no append can race the rewrite
        if self.state.options.live:
            score_filed(session, self.state)  # filed, but their items never reported (a crash, an interrupt)
        _gc.freeze()  # rows and reports, kept to the end: the scorecards' allocations need not rescan them
        if self.state.source.stopped() and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED  # a run that stopped short never passes
        if self._charts_warming is not None:
            self._charts_warming.join()  # one thread imports matplotlib at a time
        try:
            scorecard_files.finish(self.state, self.config.invocation_params.dir, selection.describe(self.config))
        except OSError as exc:
            # The run's record is lost: that fails the command, gate or not.
            self.state.notes.append(f"could not write scorecards: {exc}")
            if self.state.options.release_gate:  # the gate's line must not say "passed" over exit 1
                self.state.gate_messages.append(f"the scorecards could not be written: {exc}")
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED
            return
        except Exception as exc:  # never turn a summary problem into a pytest crash
            self.state.gate_messages.append(f"internal error while writing scorecards: {exc!r}")
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            return
        if self.state.options.release_gate and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            if self._other_failures:  # exit 0 would hide them: the gate overrides conversations' failures only
                self.state.gate_messages.append(
                    f"{len(dict.fromkeys(self._other_failures))} test(s) or file(s) besides the conversations failed "
                    f"(e.g. {self._other_failures[0]}): a release gate overrides the failures of conversations only"
                )
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if self.state.gate_messages else pytest.ExitCode.OK

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        if self.is_worker:
            return []
        source, options = self.state.source, self.state.options
        lines = [
            f"careful: {source.model} (decoded by {source.decoder_key}), "
            f"{', '.join(c.removeprefix('multi_turn_') for c in options.categories)}; "
            f"{', '.join(options.protocols)}; gate {options.gate}"
        ]
        return lines + [f"careful: warning: {w}" for w in source.warnings]

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if self.is_worker or self.config.getoption("collectonly") or self.state.refused:
            return
        terminalreporter.section("careful")
        terminalreporter.write(summary.summary_text(self.state, terminalreporter._tw.fullwidth))


def missing_entries(source: Source, options: RunConfig, nodes: Sequence[str]) -> str | None:
    """Why a selection of a logged run cannot be scored as asked: some of its conversations have no
    entry in the run's result files (``Source.lacks_entry``); None when every one has, or when
    ``--careful-allow-missing`` left those out. ``bfcl evaluate`` refuses such a file, and with
    ``--partial-eval`` scores the entries present, which is what the option does."""
    if options.allow_missing or options.results is None:
        return None
    lacking = []
    for node in nodes:
        match = selection.NODE_ID.match(node)
        if match and match["condition"] and source.lacks_entry(match["condition"], match["id"]):
            lacking.append((match["condition"], match["id"]))
    if not lacking:
        return None
    condition, first = lacking[0]
    what = "conversations" if len(options.protocols) == 1 else "items (conversation x protocol)"
    file = source.files[(condition, dataset.category_of(first))]
    line = (
        f"{RESULTS}: {len(lacking)} of {len(nodes)} selected {what} have no entry in {options.results} "
        f"(e.g. {first}, in {file}); pass {ALLOW_MISSING} to score only the entries present (as "
        "bfcl evaluate --partial-eval does), or select the conversations it holds"
    )
    unread = source.unlocated(condition)
    if unread:
        line += (
            f"; its result files also hold {counted(len(unread), 'line')} naming no conversation (first: {unread[0]})"
        )
    return printable(line)
