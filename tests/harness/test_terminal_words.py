"""What the terminal says: a failing conversation's bounded text, counts and words (issue 28).

Driven through pytester in a child process, with and without xdist, where the controller
alone prints (the workers collect and score).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from conftest import REAL_RUN_DECODER
from pytest_careful.harness.failure_text import SHOWN_LINES

MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest) -> list[str]:
    return MODES[request.param]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def _failure_blocks(out: str) -> dict[str, list[str]]:
    """Each failing conversation's lines in pytest's FAILURES section, by node id."""
    section = out.split("= FAILURES =", 1)[1].split("\n", 1)[1].split("=" * 10, 1)[0]
    blocks: dict[str, list[str]] = {}
    name = None
    for line in section.splitlines():
        header = re.fullmatch(r"_+ (\S+) _+", line)
        if line.startswith("- generated xml file"):
            break
        if header:
            name = header.group(1)
            blocks[name] = []
        elif name is not None and not line.startswith("[gw"):  # xdist's worker line, printed by pytest
            blocks[name].append(line)
    return blocks


def test_a_failure_is_cut_and_says_where_the_rest_is(
    pytester: pytest.Pytester, logged_run: Path, mode: list[str]
) -> None:
    args = [f"--careful-results={logged_run}", f"--careful-decoder={REAL_RUN_DECODER}", "-k", "base_4"]
    result = _run(pytester, *mode, *args, "--junitxml=out.xml")
    blocks = _failure_blocks(result.stdout.str())
    assert len(blocks) > 5, result.stdout.str()[-3000:]
    assert all(len(lines) <= SHOWN_LINES + 1 for lines in blocks.values())
    cut = {n: b for n, b in blocks.items() if re.fullmatch(r"\.\.\. \d+ more lines?", b[-2])}
    assert cut, "base_4's state diff runs past the bound"
    page = (pytester.path / "scorecards/gpt-oss-20b/standard/report.html").read_text(encoding="utf-8")
    junit = (pytester.path / "out.xml").read_text(encoding="utf-8")
    for node, lines in blocks.items():
        assert lines[-1] == (
            f"full text, transcript and reported rules: -v, "
            f"scorecards/gpt-oss-20b/standard/report.html#{node}, out.xml (<system-out>)"
        )
        assert f'id="{node}"' in page  # the anchor opens that conversation
        assert lines[0].startswith("[safe gate] ")
    # The cut is the terminal's only: JUnit keeps the transcript and the whole failure text.
    node, lines = next(iter(cut.items()))
    testcase = junit.split(f'name="{node}"', 1)[1].split("</testcase>", 1)[0]
    assert "--- turn 0:" in testcase and lines[-3].strip()[:40] in testcase.replace("&#10;", "\n")
    assert "Captured careful transcript" not in result.stdout.str()
    # -v: everything, the transcript sections included.
    verbose = _run(pytester, *mode, *args, "-v").stdout.str()
    full = _failure_blocks(verbose)
    assert set(full) == set(blocks) and any(len(full[n]) > len(cut[n]) for n in cut)
    assert "Captured careful transcript" in verbose and "full text, transcript" not in verbose


def test_deselect_counts_as_pytest_says_them(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "--careful-model=reference", "--careful-category=base", "--deselect", "multi_turn_base_0")
    result.stdout.fnmatch_lines(["collected 200 items / 1 deselected / 199 selected"])
    result.assert_outcomes(passed=199, deselected=1)


def test_k_matching_nothing_is_said_as_such(pytester: pytest.Pytester, mode: list[str]) -> None:
    result = _run(pytester, *mode, "--careful-model=reference", "--careful-category=base", "-k", "base_17x")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result.stdout.fnmatch_lines(["-k 'base_17x' matched none of this run's 200 items (node ids look like *"])
    assert "no conversation was scored" not in result.stdout.str()


def test_one_conversation_is_one(pytester: pytest.Pytester, mode: list[str]) -> None:
    result = _run(pytester, *mode, "--careful-model=reference", "multi_turn_base_7")
    result.stdout.fnmatch_lines(["reference [[]standard[]]: 1 conversation: 1 pass, 0 fail under the safe gate*"])


def test_a_selection_has_one_denominator_however_it_is_made(pytester: pytest.Pytester, real_run: Path) -> None:
    """A node id narrows the categories read, not the run: a two-category folder is "x of 400" both ways."""
    folder = pytester.path / "two"
    folder.mkdir()
    for category in ("base", "miss_func"):
        shutil.copy(real_run / f"BFCL_v4_multi_turn_{category}_result.json", folder)
    run = [f"--careful-results={folder}", f"--careful-decoder={REAL_RUN_DECODER}"]
    by_id = _run(pytester, *run, "multi_turn_base_1[standard]").stdout.str()
    by_k = _run(pytester, *run, "-k", "multi_turn_base_1").stdout.str()
    assert "(1 of 400 conversations)" in by_id
    assert "(111 of 400 conversations)" in by_k


@pytest.mark.parametrize("verbosity", ["-q", "-v"])
def test_xdist_says_its_status_once_without_a_terminal(pytester: pytest.Pytester, verbosity: str) -> None:
    """A pipe, as CI's log: under -q xdist's two status lines both read "bringing up nodes..."."""
    result = _run(pytester, "--careful-model=reference", "-n", "2", verbosity, "multi_turn_base_1", "multi_turn_base_2")
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out[-2000:]
    if verbosity == "-q":
        assert out.count("bringing up nodes...") == 1, out[:500]
    else:  # each status once, and the one that says what was collected still said
        assert out.count("created: 2/2 workers") == 1 and "2 workers [2 items]" in out, out[:800]
