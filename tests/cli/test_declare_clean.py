"""`careful-declare --check` from what a clean clone and an installed package hold.

The logged run behind the declarations ships as an extract in declarations/logged/
(sources.yaml names it with its sha256); nothing outside the repository is read.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REAL_RUN, missing_fixture
from pytest_careful.cli import declare
from pytest_careful.effects import declarations

ROOT = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")  # Python 3.11+


def _tracked_files() -> list[str]:
    # What a clone of this tree holds once committed: tracked files and untracked ones git does not ignore.
    if not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout
    return [p for p in out.decode().split("\0") if p and (ROOT / p).is_file()]


def _env(pythonpath: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(pythonpath)
    return env


def test_check_passes_in_a_clean_clone_with_nothing_beside_it(tmp_path):
    clone = tmp_path / "clone"
    for name in _tracked_files():
        if name.startswith(("declarations/", "pytest_careful/", "pyproject.toml")):
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    assert not (tmp_path / "shared").exists() and not (clone.parent.parent / "shared").exists()
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import pytest_careful.cli.declare as d, sys; print(d.__file__); sys.exit(d.main(['--check']))",
        ],
        cwd=clone,
        env=_env(clone),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.splitlines()[0] == str(clone / "pytest_careful" / "cli" / "declare.py")  # the clone's code ran
    assert "careful-declare: up to date" in out.stdout


def test_sources_name_only_files_inside_the_declarations_folder():
    directory = declarations.DECLARATIONS_DIR
    sources = declare.read_sources(directory)
    assert sources, "the declarations use a logged run"
    for source in sources:
        extract = (directory / source["extract"]).resolve()
        assert extract.is_relative_to(directory.resolve())
        assert hashlib.sha256(extract.read_bytes()).hexdigest() == source["sha256"]
        assert extract.stat().st_size < 400_000


def test_the_package_data_holds_every_file_check_reads():
    """What pyproject's package-data ships from declarations/ covers sources and their extracts."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    package = declarations.DATA_PACKAGE
    assert config["package-dir"][package] == "declarations" and package in config["packages"]
    globs = config["package-data"][package]
    shipped = {p.relative_to(ROOT / "declarations").as_posix() for g in globs for p in (ROOT / "declarations").glob(g)}
    needed = {declare.SOURCES_FILE, declarations.BOUNDARY_FILE}
    needed |= {f"{c}.yaml" for c in declare.SIMULATOR_CLASSES}
    needed |= {s["extract"] for s in declare.read_sources(ROOT / "declarations")}
    assert needed <= shipped


def test_check_passes_from_an_installed_layout(tmp_path):
    """The wheel's layout: declarations/ as pytest_careful/declarations_data/ (package-data only)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    site = tmp_path / "site"
    shutil.copytree(ROOT / "pytest_careful", site / "pytest_careful", ignore=shutil.ignore_patterns("__pycache__"))
    data = site / "pytest_careful" / "declarations_data"
    data.mkdir()
    (data / "__init__.py").write_text("")
    for pattern in config["package-data"][declarations.DATA_PACKAGE]:
        for path in (ROOT / "declarations").glob(pattern):
            target = data / path.relative_to(ROOT / "declarations")
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
    code = (
        "import pytest_careful.effects.declarations as d, pytest_careful.cli.declare as c, sys;"
        "print(d.DECLARATIONS_DIR); sys.exit(c.main(['--check']))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(site), capture_output=True, text=True, timeout=600
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    assert out.stdout.splitlines()[0] == str(data)
    assert "careful-declare: up to date" in out.stdout


def test_check_fails_on_a_changed_extract(tmp_path):
    directory = tmp_path / "declarations"
    shutil.copytree(declarations.DECLARATIONS_DIR, directory, ignore=shutil.ignore_patterns("__pycache__"))
    source = declare.read_sources(directory)[0]
    extract = directory / source["extract"]
    extract.write_text(extract.read_text(encoding="utf-8").replace("ls(", "pwd(", 1), encoding="utf-8")
    with pytest.raises(SystemExit, match="changed since it was recorded"):
        declare.main(["--dir", str(directory), "--check"])


def test_check_fails_on_an_edited_declaration(tmp_path, capsys):
    directory = tmp_path / "declarations"
    shutil.copytree(declarations.DECLARATIONS_DIR, directory, ignore=shutil.ignore_patterns("__pycache__"))
    path = directory / "MathAPI.yaml"
    path.write_text(path.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert declare.main(["--dir", str(directory), "--check"]) == 1
    assert "stale: MathAPI.yaml" in capsys.readouterr().out


def test_the_extract_reproduces_the_logged_run_when_it_is_here():
    sources = declare.read_sources(declarations.DECLARATIONS_DIR)
    for source in sources:
        # The fixture (CAREFUL_REAL_RUN or ../shared) when it is this run; its siblings otherwise.
        run = (
            REAL_RUN
            if source["run"] in (REAL_RUN.name, "gpt-oss-20b-vllm-2025-11-12")
            else REAL_RUN.parent / source["run"]
        )
        if not run.is_dir():
            missing_fixture(f"the logged run {source['run']} is not at {run} (set CAREFUL_REAL_RUN to its folder)")
        text, fingerprint = declare.extract_run(run, source["decoder"])
        assert fingerprint == source["run_sha256"]
        assert text == (declarations.DECLARATIONS_DIR / source["extract"]).read_text(encoding="utf-8")
