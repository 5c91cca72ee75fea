"""Importing and decoding never writes into site-packages (bfcl-eval's default root)."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

from pytest_careful.common import bfcl as _bfcl
from pytest_careful.execution import decoding


def test_no_writes_under_site_packages(tmp_path):
    site = Path(sysconfig.get_paths()["purelib"])
    before = {p.name for p in site.iterdir()}
    env = {k: v for k, v in os.environ.items() if k not in ("BFCL_PROJECT_ROOT", "OPENAI_API_KEY")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    code = (
        "from pytest_careful.execution import decoding; from pytest_careful.data import dataset;"
        "d = decoding.decoder('gpt-4.1-2025-04-14-FC');"  # imports the handler (and bfcl eval_config)
        "print(d.decode_step([{'ls': '{\"a\": true}'}]));"
        "import os; print(os.environ['BFCL_PROJECT_ROOT'])"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    decoded, root = out.stdout.splitlines()[-2:]
    assert decoded == "['ls(a=True)']"  # and no API key was needed to decode
    assert root.startswith(str(tmp_path / "cache"))
    assert {p.name for p in site.iterdir()} - before == set()
    assert (Path(root) / "result").is_dir()  # bfcl's side effect landed in our root instead


# --- lean install: the registry and the vendor SDKs that are extras stay unimported ----------------

#: Modules no default path may import: the handler registry, and what pyproject.toml makes extras.
EXTRAS_ONLY = (
    "bfcl_eval.constants.model_config",
    "cohere",
    "mistralai",
    "google.genai",
    "qwen_agent",
    "soundfile",
    "writerai",
    "boto3",
    "botocore",
    "datamodel_code_generator",
    "typer",
    "tabulate",
    "scipy",
)  # scipy: the tests' statistics oracle only

BLOCKER = '''
import importlib.abc, os, sys

BLOCKED = tuple(os.environ["CAREFUL_TEST_BLOCK"].split(","))
LOG = os.environ["CAREFUL_TEST_BLOCK_LOG"]


class Blocker(importlib.abc.MetaPathFinder):
    """As if the distributions were not installed; every attempt is logged (even a swallowed one)."""

    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            with open(LOG, "a") as log:
                log.write(f"{os.getpid()} {name}\\n")
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, Blocker())
'''


def _fc_step(call: str) -> list[dict[str, str]]:
    node = ast.parse(call, mode="eval").body
    return [{node.func.id: json.dumps({k.arg: ast.literal_eval(k.value) for k in node.keywords})}]


def _fc_run(root: Path, ids: tuple[str, ...]) -> Path:
    """A logged run in the OpenAI FC format: the references of ``ids`` as the model's calls."""
    from pytest_careful.data import dataset

    run = root / "result" / "fc-model"
    run.mkdir(parents=True)
    lines = [
        json.dumps({"id": i, "result": [[_fc_step(c) for c in turn] for turn in dataset.get(i).ground_truth]})
        for i in ids
    ]
    (run / "BFCL_v4_multi_turn_base_result.json").write_text("\n".join(lines) + "\n")
    return run


def _blocked_env(tmp_path: Path, blocked: tuple[str, ...]) -> tuple[dict[str, str], Path]:
    """An environment whose Python processes (xdist workers too) cannot import ``blocked``."""
    (tmp_path / "blocker").mkdir()
    (tmp_path / "blocker" / "sitecustomize.py").write_text(BLOCKER)
    log = tmp_path / "blocked.log"
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env.update(
        PYTHONPATH=str(tmp_path / "blocker"),
        CAREFUL_TEST_BLOCK=",".join(blocked),
        CAREFUL_TEST_BLOCK_LOG=str(log),
        BFCL_PROJECT_ROOT=str(tmp_path / "bfcl-root"),
    )
    return env, log


def _pytest(env: dict[str, str], cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "--tb=line", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.parametrize("xdist", [[], ["-n", "1"]], ids=["no-xdist", "n1"])
def test_default_paths_import_neither_the_registry_nor_an_extra(tmp_path: Path, xdist: list[str]) -> None:
    env, log = _blocked_env(tmp_path, EXTRAS_ONLY)
    run = _fc_run(tmp_path, ("multi_turn_base_0", "multi_turn_base_1"))
    rescored = _pytest(
        env,
        tmp_path,
        f"--careful-results={run}",
        "--careful-decoder=gpt-4.1-2025-04-14-FC",
        "multi_turn_base_0",
        "multi_turn_base_1",
        *xdist,
    )
    reference = _pytest(env, tmp_path, "--careful-model=reference", "multi_turn_base_2", *xdist)
    for out in (rescored, reference):
        assert out.returncode in (0, 1), out.stdout[-3000:] + out.stderr[-3000:]
        assert "2 passed" in out.stdout or "1 passed" in out.stdout, out.stdout[-3000:]
    # The blocker itself works (a control: it is not a list of names nobody imports).
    control = subprocess.run([sys.executable, "-c", "import tabulate"], env=env, capture_output=True, text=True)
    assert "No module named 'tabulate'" in control.stderr
    attempts = [line for line in log.read_text().splitlines() if not line.endswith(" tabulate")]
    assert attempts == []


def test_a_missing_extra_is_named_in_one_line(tmp_path: Path) -> None:
    env, log = _blocked_env(tmp_path, ("google.genai",))
    key = next(k for k, e in decoding.registry_source().items() if e and e.handler_module.endswith(".gemini"))
    # Building the decoder imports the handler module: the ImportError names the extra.
    code = textwrap.dedent(f"""
        from pytest_careful.execution import decoding
        try:
            decoding.decoder({key!r})
        except decoding.MissingExtra as exc:
            print("MISSING", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    missing = [line for line in out.stdout.splitlines() if line.startswith("MISSING")]
    assert missing and missing[0].endswith("pip install 'pytest-careful[google]'"), out.stdout + out.stderr
    # A run is refused up front, before any item, as one usage error (found without importing).
    run = _fc_run(tmp_path, ("multi_turn_base_0",))
    for args in ([f"--careful-results={run}", f"--careful-decoder={key}"], [f"--careful-model={key}"]):
        refused = _pytest(env, tmp_path, *args, "multi_turn_base_0")
        assert refused.returncode == 4, refused.stdout[-2000:] + refused.stderr[-2000:]
        lines = [line for line in refused.stderr.splitlines() if "pytest-careful[google]" in line]
        assert len(lines) == 1 and "google.genai" in lines[0], refused.stderr[-2000:]


def test_every_registry_key_resolves_lazily_to_the_registry_handler() -> None:
    """For every key: the class found from model_config.py's source is the registry's own."""
    registry = _bfcl.model_registry()
    assert decoding.registry_keys() == tuple(registry)
    for key, config in registry.items():
        entry = decoding.registry_source()[key]
        assert entry is not None, key  # today every entry parses; None would fall back to the registry
        assert decoding.import_handler_class(entry) is config.model_handler, key
        assert (entry.model_name, entry.is_fc_model) == (config.model_name, config.is_fc_model), key
        live = decoding.registry_entry(key)  # the live path (--careful-model KEY, live.handles)
        assert decoding.import_handler_class(live) is config.model_handler, key
        assert (live.model_name, live.is_fc_model) == (config.model_name, config.is_fc_model), key
        assert decoding.missing_extra(key) is None, key  # this venv has every extra


@pytest.mark.parametrize(
    "x, y",
    [
        ([1.0, 0.5, 0.0], [0.5, 0.0, 0.5]),
        ([0.1, 0.4, 0.4, 0.9, 0.2], [0.3, 0.3, 0.8, 0.1, 0.1]),
        ([3, 1, 2, 5, 4, 4, 0], [1, 2, 3, 4, 5, 6, 7]),
    ],
)
def test_spearman_without_scipy_equals_scipy(x: list[float], y: list[float]) -> None:
    """agreement.py's ρ replaced scipy (a test dependency only now): scipy is the oracle."""
    from scipy.stats import spearmanr

    from pytest_careful.reports.agreement import spearman_rho

    assert spearman_rho(x, y) == pytest.approx(float(spearmanr(x, y).statistic))
    assert spearman_rho([1, 1, 1], y[:3]) is None  # scipy: NaN (constant input)


def test_ci_runs_exactly_the_readme_setup_and_test_commands() -> None:
    """`.ci/run` is the contract: README's setup and test commands, verbatim, in that order."""
    root = Path(__file__).resolve().parents[1]
    readme = (root / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```bash\n(.*?)```", readme.split("## Setup, test, run", 1)[1], re.S)
    setup, test = blocks[0].strip(), blocks[1].strip()
    ci_lines = [line.strip() for line in (root / ".ci" / "run").read_text(encoding="utf-8").splitlines()]
    assert setup in ci_lines and test in ci_lines
    assert ci_lines.index(setup) < ci_lines.index(test)


def test_the_wheel_lists_every_package_of_the_source_tree() -> None:
    # pyproject names its packages one by one (declarations/ is mapped in under another name), so a
    # new sub-package that is not listed imports from a checkout and is missing from the wheel.
    tomllib = pytest.importorskip("tomllib")
    root = Path(__file__).resolve().parents[1]
    listed = set(tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    on_disk = {".".join(init.parent.relative_to(root).parts) for init in (root / "pytest_careful").rglob("__init__.py")}
    assert on_disk - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
