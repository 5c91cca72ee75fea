"""The documentation's options reference is the option table pytest actually registers.

``docs/hooks/options_reference.py`` builds the reference at ``mkdocs build`` time from the
plugin's ``pytest_addoption``; here it is held against what a real pytest prints for
``--help`` (flags, what each takes, help text) and the defaults a parsed config holds.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from types import ModuleType

import pytest

from conftest import ROOT

HOOK = ROOT / "docs" / "hooks" / "options_reference.py"


@pytest.fixture(scope="module")
def reference() -> ModuleType:
    spec = importlib.util.spec_from_file_location("careful_docs_options_reference", HOOK)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


def _help_section(out: str) -> dict[str, tuple[str, str]]:
    """``pytest --help``'s careful group: flag -> (what it takes, help text without blanks)."""
    lines = out.split("effect-aware BFCL multi-turn scoring (pytest-careful):\n", 1)[1].split("\n\n", 1)[0]
    options: dict[str, tuple[str, str]] = {}
    flag = ""
    for line in lines.splitlines():
        match = re.match(r"  (--careful-[a-z-]+)(?:=(\S+))?(?:\s{2,}(.*))?$", line)
        if match:
            flag = match[1]
            options[flag] = (match[2] or "", match[3] or "")
        else:
            takes, text = options[flag]
            options[flag] = (takes, text + " " + line.strip())
    return {flag: (takes, re.sub(r"\s+", "", text)) for flag, (takes, text) in options.items()}


def test_the_reference_lists_what_pytest_help_shows(pytester: pytest.Pytester, reference: ModuleType) -> None:
    result = pytester.runpytest_subprocess("--help", "-p", "no:randomly")
    assert result.ret == 0
    shown = _help_section(result.stdout.str())
    rows = reference.options()
    assert [row.flag for row in rows] == list(shown)  # same options, same order
    assert len(rows) >= 30
    for row in rows:
        assert (row.takes, re.sub(r"\s+", "", row.help)) == shown[row.flag], row.flag


def test_the_defaults_are_those_of_a_parsed_config(pytester: pytest.Pytester, reference: ModuleType) -> None:
    config = pytester.parseconfig()
    for row in reference.options():
        value = config.getoption(row.dest)
        if row.default:
            assert row.default == reference._default(value), row.flag
        else:
            assert value in (None, False, [], ()), row.flag


def test_the_page_gets_one_row_per_option(reference: ModuleType) -> None:
    page = (ROOT / "docs" / reference.PAGE).read_text(encoding="utf-8")
    assert page.count(reference.MARKER) == 1
    table = reference.render()
    for row in reference.options():
        assert len(re.findall(rf"^\| `{row.flag}` \|", table, re.M)) == 1, row.flag
