"""Rule sub-assertions reported directly agree with pytest's own ``subtests.test()`` path.

The same logged conversations are run twice, once with the direct reports
(default) and once with ``--careful-stock-subtests`` (pytest's subtests
fixture with ``pytest.fail``/``pytest.xfail.Exception``, the oracle here), and
the outcomes, the JUnit XML and the terminal report are compared. The one
intended difference: pytest prefixes a ``pytest.fail`` message with
``Failed: `` in the JUnit failure's message attribute and in the short
summary; the direct report gives the message as it is.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import pytest

from conftest import REAL_RUN_DECODER

MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}


def _run(pytester, logged_run, *args):
    return pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}", "--careful-category=base", *args)


def _junit(path):
    """Per test case: its properties and its failure/skipped elements (message, text)."""
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        props = tuple((p.get("name"), p.get("value")) for p in case.iter("property"))
        # A failure's message attribute is its text shortened by length, so the
        # ``Failed: `` prefix can shorten it differently: the full text is compared.
        outcomes = tuple(
            (child.tag, child.get("type"), child.text if child.tag == "failure" else child.get("message"))
            for child in case if child.tag in ("failure", "skipped", "error"))
        cases.append((case.get("name"), props, outcomes))
    return sorted(cases)


def _terminal(result):
    """The report without timings, and summary lines cut at ' - ' (the message differs: see above)."""
    lines = []
    for line in result.stdout.lines:
        if re.search(r"\d+\.\d+s\b", line) or line.startswith(("[gw", "- generated xml file")):
            continue
        if line.startswith(("SUBFAILED", "FAILED", "XFAIL", "SUBXFAIL")):
            line = line.split(" - ")[0]
        lines.append(line)
    return lines


@pytest.mark.parametrize(("mode", "gate"), [("no-xdist", "safe"), ("n2", "safe"), ("no-xdist", "rules")])
def test_direct_reports_match_pytest_subtests(pytester, logged_run, mode, gate):
    args = [*MODES[mode], "-k", "base_2", f"--careful-gate={gate}", "-rA"]
    direct = _run(pytester, logged_run, *args, "--junitxml=direct.xml")
    stock = _run(pytester, logged_run, *args, "--junitxml=stock.xml", "--careful-stock-subtests")
    assert direct.ret == stock.ret
    assert direct.parseoutcomes() == stock.parseoutcomes()
    cases = _junit(pytester.path / "direct.xml")
    kinds = {(tag, kind) for _, _, outcomes in cases for tag, kind, _ in outcomes}
    # Gate 'safe' reports some rules (xfail) and gates others; gate 'rules' gates all.
    assert kinds == ({("failure", None), ("skipped", "pytest.xfail")} if gate == "safe" else {("failure", None)})
    assert cases == _junit(pytester.path / "stock.xml")
    if mode == "n2":  # workers finish items in any order: no progress lines, any order
        progress = re.compile(r"\[\s*\d+%\]$")
        assert sorted(l for l in _terminal(direct) if not progress.search(l)) == \
            sorted(l for l in _terminal(stock) if not progress.search(l))
    else:
        assert _terminal(direct) == _terminal(stock)


@pytest.mark.parametrize("flag", ["-x", "--runxfail"])
def test_exitfirst_and_runxfail_as_with_subtests(pytester, logged_run, flag):
    args = ["-p", "no:xdist", "-k", "base_2", flag]
    direct = _run(pytester, logged_run, *args)
    stock = _run(pytester, logged_run, *args, "--careful-stock-subtests")
    assert direct.ret == stock.ret
    assert direct.parseoutcomes() == stock.parseoutcomes()
    assert [l.split(" - ")[0] for l in direct.stdout.lines if l.startswith(("SUBFAILED", "FAILED"))] == \
        [l.split(" - ")[0] for l in stock.stdout.lines if l.startswith(("SUBFAILED", "FAILED"))]



def test_without_the_subtests_plugin_a_gated_rule_fails_the_item(pytester, logged_run):
    result = _run(pytester, logged_run, "-p", "no:xdist", "-p", "no:subtests", "-k", "base_27",
                  "--careful-gate=rules", "--junitxml=out.xml")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert "INTERNALERROR" not in result.stdout.str() and "Traceback" not in result.stdout.str()
    result.stdout.fnmatch_lines(["FAILED multi_turn_base_27*"])
    props = {p.get("name"): p.get("value") for p in ET.parse(pytester.path / "out.xml").getroot().iter("property")}
    assert int(props["careful_collateral_destructive"]) > 0
