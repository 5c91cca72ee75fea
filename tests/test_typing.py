"""The package type-checks (mypy), as the style guide asks of plugins we learn from."""

from __future__ import annotations

import ast
import importlib
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT


def test_mypy_finds_no_errors(tmp_path):
    if (
        shutil.which("mypy") is None
        and subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode != 0
    ):
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path), "--config-file", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


def test_a_users_script_has_the_json_contracts_keys_checked(tmp_path):
    """The rows, totals and provenance a notebook gets are TypedDicts: a misspelt key is a type error
    in the user's own script (mypy following the installed package), a right one is not."""
    if subprocess.run([sys.executable, "-m", "mypy", "--version"], capture_output=True).returncode != 0:
        pytest.skip("mypy is not installed (pip install -e '.[test]')")
    script = tmp_path / "notebook.py"
    script.write_text(
        "from pytest_careful import Row, read_scorecard, score_run\n"
        "for result in score_run('run', decoder='gpt-4.1-2025-04-14-FC'):\n"
        "    row: Row = result.row\n"
        "    fine: int = row['tokens']['output'] + row['counts']['asked'] + int(row['bfcl']['valid'])\n"
        "    wrong = row['token']\n"
        "card = read_scorecard('scorecards/x/standard')\n"
        "share: float = card.totals['all']['safe_accuracy'] + card.totals['all']['turn_credit']\n"
        "model: str = card.provenance['model']\n"
        "misspelt = card.provenance['modle']\n"
    )
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--cache-dir",
            str(tmp_path / "cache"),
            "--follow-imports=silent",
            "--ignore-missing-imports",
            str(script),
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        # The package's source, as an installed wheel (py.typed) puts it on the path; the editable
        # install's import hook is invisible to mypy.
        env={**os.environ, "MYPYPATH": str(ROOT)},
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert [line.split(":")[1] for line in errors] == ["5", "9"], out.stdout[-3000:]
    assert '"token"' in errors[0] and '"modle"' in errors[1], errors


def test_the_public_names_are_the_stubs_and_nothing_internal() -> None:
    """``__init__.pyi`` is the one list: each of its names imports, and an internal one does not."""
    import pytest_careful

    for name in pytest_careful.__all__:
        assert getattr(pytest_careful, name).__name__ == name
    assert {"Rule", "ScoredConversation", "ModelCall", "score_run", "Row", "RunSettings"} <= set(pytest_careful.__all__)
    for internal in ("CallRecord", "Replay", "Evaluation", "evaluate", "RunConfig", "Simulators"):
        with pytest.raises(AttributeError):
            getattr(pytest_careful, internal)


def test_a_key_marked_not_required_is_optional_at_run_time() -> None:
    """TypedDict reads ``NotRequired`` from the evaluated annotation: under ``from __future__ import
    annotations`` (a string) it would list the key as required (``common/json_types.py``). For every
    TypedDict of the package whose source marks a key so, the class at run time must agree."""
    checked = []
    for path in sorted((ROOT / "pytest_careful").rglob("*.py")):
        module_name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if not isinstance(node, ast.ClassDef):
                continue
            keys = {
                statement.target.id: ast.unparse(statement.annotation).startswith("NotRequired[")
                for statement in node.body
                if isinstance(statement, ast.AnnAssign) and isinstance(statement.target, ast.Name)
            }
            if not any(keys.values()):
                continue
            typed_dict = getattr(importlib.import_module(module_name), node.name)
            optional = {key for key, marked in keys.items() if marked}
            assert optional <= typed_dict.__optional_keys__, (module_name, node.name)
            assert not (set(keys) - optional) & typed_dict.__optional_keys__, (module_name, node.name)
            checked.append(f"{module_name}.{node.name}")
    # the public contracts among them (pytest_careful.Row, Card, Provenance, Totals)
    assert {
        "pytest_careful.scoring.row.Row",
        "pytest_careful.reports.card.Card",
        "pytest_careful.reports.card.Provenance",
        "pytest_careful.reports.card.Totals",
    } <= set(checked), checked
