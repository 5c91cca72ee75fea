"""The test suite's settings reach the test suite only (issue 45).

pytest loads ``tests/conftest.py`` for every session started from the clone's root
(``testpaths = ["tests"]``), a user's run of the plugin included. That run must see the
environment that the same command sees from any other folder: ``BFCL_PROJECT_ROOT``,
``HF_HUB_OFFLINE`` and ``PYTHONPATH`` as the user left them (or as the plugin itself sets them,
as it does anywhere), whether the user set them or not, and no test helpers on ``sys.path``.
The suite itself, from the same root, runs with its settings.

A probe plugin (``-p``, from a folder of its own) writes what the session saw once it ended.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import HELPERS, ROOT

VARIABLES = ("BFCL_PROJECT_ROOT", "HF_HUB_OFFLINE", "PYTHONPATH")


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where a user's own values and cache point: bfcl-eval writes under BFCL_PROJECT_ROOT on import,
    and the plugin's own BFCL_PROJECT_ROOT lies in the cache."""
    return tmp_path_factory.mktemp("user")


def _values(user: Path) -> dict[str, str]:
    """What a user might have set each to."""
    return {"BFCL_PROJECT_ROOT": str(user / "bfcl"), "HF_HUB_OFFLINE": "0", "PYTHONPATH": str(user / "lib")}


PROBE = """
import json, os, sys

def pytest_sessionfinish(session):
    seen = {name: os.environ.get(name) for name in %(variables)r}
    seen["helpers_on_sys_path"] = %(helpers)r in sys.path
    with open(%(out)r, "w") as out:
        json.dump(seen, out)
"""


def _session(tmp_path: Path, env: dict[str, str], cwd: Path, *args: str) -> dict[str, object]:
    """A pytest session started in ``cwd`` with the probe loaded: what it saw."""
    work = Path(tempfile.mkdtemp(dir=tmp_path))
    out = work / "seen.json"
    (work / "careful_env_probe.py").write_text(
        PROBE % {"variables": VARIABLES, "helpers": str(HELPERS), "out": str(out)}
    )
    # The probe's folder goes on sys.path by hand: PYTHONPATH is one of the values under test.
    bootstrap = "import sys; sys.path.insert(0, sys.argv[1]); import pytest; sys.exit(pytest.main(sys.argv[2:]))"
    run = subprocess.run(
        [sys.executable, "-c", bootstrap, str(work), "-p", "careful_env_probe", "-p", "no:cacheprovider", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return json.loads(out.read_text())


def _users_environment(user: Path, given: dict[str, bool]) -> dict[str, str]:
    """This process's environment without the suite's three settings, then those ``given`` set by the user."""
    env = {k: v for k, v in os.environ.items() if k not in VARIABLES and not k.startswith("PYTEST_")}
    env["XDG_CACHE_HOME"] = str(user / "cache")
    return env | {name: _values(user)[name] for name, on in given.items() if on}


#: The plugin run a user starts: rescoring the shipped example, collecting only (it writes nothing).
PLUGIN_RUN = (
    f"--careful-results={ROOT / 'examples' / 'smollm2-135m-vllm-cpu'}",
    "--careful-allow-missing",  # it holds 40 conversations a category
    "--collect-only",
    "-q",
)


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory: pytest.TempPathFactory, user: Path) -> dict[bool, dict[str, object]]:
    """What the same plugin run sees from a folder outside the clone, with all three set or unset."""
    tmp_path = tmp_path_factory.mktemp("elsewhere")
    return {
        given: _session(tmp_path, _users_environment(user, dict.fromkeys(VARIABLES, given)), tmp_path, *PLUGIN_RUN)
        for given in (True, False)
    }


@pytest.mark.parametrize("given", [True, False], ids=["set", "unset"])
@pytest.mark.parametrize("name", VARIABLES)
def test_a_plugin_run_from_the_root_sees_what_it_sees_elsewhere(
    tmp_path: Path, user: Path, elsewhere: dict[bool, dict[str, object]], name: str, given: bool
) -> None:
    env = _users_environment(user, {name: given})
    seen = _session(tmp_path, env, ROOT, *PLUGIN_RUN)
    expected = {v: elsewhere[v == name and given][v] for v in VARIABLES}
    assert {v: seen[v] for v in VARIABLES} == expected
    if given:
        assert seen[name] == _values(user)[name]  # the user's own value, as they set it
    assert seen["helpers_on_sys_path"] is False


def test_the_suite_from_the_root_runs_with_its_settings(tmp_path: Path, user: Path) -> None:
    """The control: the same probe sees the suite's settings when the session is the suite."""
    seen = _session(
        tmp_path, _users_environment(user, {}), ROOT, "--collect-only", "-q", "tests/test_suite_environment.py"
    )
    assert seen["HF_HUB_OFFLINE"] == "1"
    assert seen["BFCL_PROJECT_ROOT"] and Path(str(seen["BFCL_PROJECT_ROOT"])).is_dir()
    assert str(seen["PYTHONPATH"]).split(os.pathsep) == [str(HELPERS), str(HELPERS.parent)]
    assert seen["helpers_on_sys_path"] is True


def test_a_users_own_values_are_kept_by_the_suite(tmp_path: Path, user: Path) -> None:
    env = _users_environment(user, {"HF_HUB_OFFLINE": True, "PYTHONPATH": True, "BFCL_PROJECT_ROOT": True})
    seen = _session(tmp_path, env, ROOT, "--collect-only", "-q", "tests/test_suite_environment.py")
    assert seen["HF_HUB_OFFLINE"] == "0" and seen["BFCL_PROJECT_ROOT"] == _values(user)["BFCL_PROJECT_ROOT"]
    assert str(seen["PYTHONPATH"]).split(os.pathsep) == [str(HELPERS), str(HELPERS.parent), _values(user)["PYTHONPATH"]]
