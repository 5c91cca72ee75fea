"""The CI contract, tried as a new user would: selection, scorecards, fail-closed gates, JUnit XML.

Every scenario runs the plugin in a child pytest (pytester) from an empty
directory, on the real logged run in ``../shared/real-runs/``, placed outside
the working directory the way a user's result folder is, and named with
space-separated options (``--careful-results DIR``), with and without xdist.
Expectations come from the result file itself, pytest's own outputs
(JUnit XML, its closing line) and the JUnit XSD Jenkins uses, not from the
plugin's code.
"""

from __future__ import annotations

import json
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest

from conftest import REAL_RUN_DECODER, ROOT

junitparser = pytest.importorskip("junitparser")
etree = pytest.importorskip("lxml.etree")

BASE = "BFCL_v4_multi_turn_base_result.json"
MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}
XSD = ROOT / "tests" / "data" / "junit-10.xsd"


@pytest.fixture(params=list(MODES))
def mode(request: pytest.FixtureRequest) -> list[str]:
    return MODES[request.param]


@pytest.fixture
def run_dir(tmp_path_factory: pytest.TempPathFactory, real_run: Path) -> Path:
    """The real run's base file in a result folder beside, not under, the working directory."""
    target = tmp_path_factory.mktemp("elsewhere") / "result" / "gpt-oss-20b"
    target.mkdir(parents=True)
    shutil.copy(real_run / BASE, target)
    return target


def _ids(path: Path) -> list[str]:
    return [json.loads(line)["id"] for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _run(pytester: pytest.Pytester, run: Path, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("--careful-results", str(run), "--careful-decoder", REAL_RUN_DECODER, *args)


def _cases(xml: Path) -> dict[str, object]:
    """Testcases of a JUnit file by name, read with junitparser."""
    suites = junitparser.JUnitXml.fromfile(str(xml))
    return {case.name: case for suite in suites for case in suite}


def _props(case: object) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in case._elem.iter("property")}  # type: ignore[attr-defined]


def _card(folder: Path) -> dict:
    return json.loads((folder / "scorecard.json").read_text(encoding="utf-8"))


# --- selection ------------------------------------------------------------------


def _with(ids: list[str], part: str) -> set[str]:
    return {f"{i}[standard]" for i in ids if part in i}


SPELLINGS = {
    "-k ID": (["-k", "multi_turn_base_17"], lambda ids: _with(ids, "multi_turn_base_17")),
    "-k=ID": (["-k=multi_turn_base_17"], lambda ids: _with(ids, "multi_turn_base_17")),
    "-kID": (["-kmulti_turn_base_17"], lambda ids: _with(ids, "multi_turn_base_17")),
    "node id": (["multi_turn_base_17[standard]"], lambda ids: {"multi_turn_base_17[standard]"}),
    "bare id": (["multi_turn_base_17"], lambda ids: {"multi_turn_base_17[standard]"}),
    "--deselect NODEID": (
        ["-k", "multi_turn_base_17", "--deselect", "multi_turn_base_17[standard]"],
        lambda ids: _with(ids, "multi_turn_base_17") - {"multi_turn_base_17[standard]"},
    ),
    "--deselect=ID": (
        ["--deselect=multi_turn_base_17", "-k", "multi_turn_base_17"],
        lambda ids: _with(ids, "multi_turn_base_17") - {"multi_turn_base_17[standard]"},
    ),
}


# Every spelling without xdist; under xdist (workers parse the command line again) the
# two that take arguments off it.
CASES = [(s, "no-xdist") for s in SPELLINGS] + [("node id", "n2"), ("--deselect NODEID", "n2")]


@pytest.mark.parametrize("spelling, mode_name", CASES)
def test_selection_every_spelling(pytester: pytest.Pytester, run_dir: Path, spelling: str, mode_name: str) -> None:
    args, expected = SPELLINGS[spelling]
    mode = MODES[mode_name]
    result = _run(pytester, run_dir, *mode, *args, "--junitxml=out.xml")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret in (0, 1), out[-3000:]
    assert set(_cases(pytester.path / "out.xml")) == expected(_ids(run_dir / BASE))
    assert f"rootdir: {pytester.path}" in out
    assert "../" not in out
    assert (pytester.path / "scorecards" / "gpt-oss-20b" / "standard" / "scorecard.json").is_file()


def test_a_results_path_with_dot_dot_prints_none(pytester: pytest.Pytester, run_dir: Path) -> None:
    roundabout = run_dir.parent / ".." / run_dir.parent.name / run_dir.name
    result = _run(pytester, roundabout, "-k", "multi_turn_base_17", "-p", "no:randomly")
    out = result.stdout.str()
    assert "pytest 'multi_turn_base_17[standard]' --careful-results=" in out and "../" not in out


def test_last_failed_and_exitfirst(pytester: pytest.Pytester, run_dir: Path) -> None:
    first = _run(pytester, run_dir, "-k", "multi_turn_base_1", "--junitxml=first.xml")
    assert first.ret == 1
    failed = {name for name, case in _cases(pytester.path / "first.xml").items() if not case.is_passed}
    assert failed
    _run(pytester, run_dir, "--lf", "-n", "2", "--junitxml=again.xml")
    assert set(_cases(pytester.path / "again.xml")) == failed
    stopped = _run(pytester, run_dir, "-x", "-p", "no:randomly", "--careful-min-bfcl=0", "-k", "multi_turn_base_1")
    result = stopped.parseoutcomes()
    assert result.get("failed") == 1
    assert "did not run" in stopped.stdout.str() and "release gate: FAILED" in stopped.stdout.str()


# --- scorecards -----------------------------------------------------------------


def test_scorecards_where_the_command_ran_and_the_project_ini_holds(
    pytester: pytest.Pytester, run_dir: Path, mode: list[str]
) -> None:
    # The project's own ini file must be found although the results lie outside it.
    pytester.makeini("[pytest]\naddopts = --careful-gate=bfcl\n")
    result = _run(pytester, run_dir, *mode, "-k", "multi_turn_base_3")
    out = result.stdout.str()
    assert "gate bfcl" in out
    assert f"rootdir: {pytester.path}" in out and "configfile: tox.ini" in out
    assert (pytester.path / "scorecards/gpt-oss-20b/standard/scorecard.json").is_file()
    assert not (run_dir.parent.parent / "scorecards").exists()
    assert not (run_dir.parent.parent / ".pytest_cache").exists()


def test_two_runs_with_one_folder_name_never_overwrite(
    pytester: pytest.Pytester, run_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    other = tmp_path_factory.mktemp("other") / "gpt-oss-20b"
    other.mkdir()
    lines = (run_dir / BASE).read_text(encoding="utf-8").splitlines()
    (other / BASE).write_text("\n".join(lines[:40]) + "\n", encoding="utf-8")  # a different run
    _run(pytester, run_dir, "-k", "multi_turn_base_2")
    first = _card(pytester.path / "scorecards/gpt-oss-20b/standard")
    result = _run(pytester, other, "-k", "multi_turn_base_2")
    assert _card(pytester.path / "scorecards/gpt-oss-20b/standard") == first  # untouched
    moved = [p for p in (pytester.path / "scorecards").iterdir() if p.name.startswith("gpt-oss-20b-")]
    assert len(moved) == 1 and "holds another run's scorecard" in result.stdout.str()
    assert _card(moved[0] / "standard")["provenance"]["source"]["results"] == str(other.resolve())
    # An explicit label is the user's choice: it replaces, and says so.
    labelled = _run(pytester, run_dir, "-k", "multi_turn_base_2", "--careful-label", "mine")
    replaced = _run(pytester, other, "-k", "multi_turn_base_2", "--careful-label=mine")
    assert "replaced" not in labelled.stdout.str() and "replaced" in replaced.stdout.str()


@pytest.mark.parametrize("held", ['{"provenance": [], "rows": []}', '{"provenance": "x", "rows": [1]}', "[]"])
def test_a_folder_holding_something_else_than_a_scorecard_is_written_over(pytester: pytest.Pytester, held: str) -> None:
    """What the scorecard folder holds is read as the previous run's card only when it is one: JSON of
    another shape is treated as unreadable JSON is (written over), never a traceback at the end."""
    folder = pytester.path / "scorecards" / "reference" / "standard"
    folder.mkdir(parents=True)
    (folder / "scorecard.json").write_text(held, encoding="utf-8")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--careful-model=reference", "multi_turn_base_3")
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == 0 and "Traceback" not in out and "INTERNALERROR" not in out, out[-3000:]
    card = _card(folder)
    assert card["provenance"]["model"] == "reference" and [r["id"] for r in card["rows"]] == ["multi_turn_base_3"]


def test_a_selection_never_replaces_the_whole_run(pytester: pytest.Pytester, run_dir: Path) -> None:
    whole = _run(pytester, run_dir, "-n", "2")
    folder = pytester.path / "scorecards/gpt-oss-20b/standard"
    card = _card(folder)
    assert len(card["rows"]) == len(_ids(run_dir / BASE)) and card["provenance"]["selection"]["complete"]
    assert whole.ret == 1
    one = _run(pytester, run_dir, "multi_turn_base_1[standard]")
    assert _card(folder) == card
    partial = _card(folder / "partial")
    assert [r["id"] for r in partial["rows"]] == ["multi_turn_base_1"]
    assert partial["provenance"]["selection"]["complete"] is False
    assert partial["provenance"]["selection"]["node_ids"] == ["multi_turn_base_1[standard]"]
    assert "partial run (1 of 200 conversations)" in one.stdout.str()
    refused = _run(pytester, run_dir, "-k", "multi_turn_base_1", f"--careful-baseline={folder / 'partial'}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "--careful-allow-partial-baseline" in refused.stderr.str()
    allowed = _run(
        pytester,
        run_dir,
        "multi_turn_base_1",
        f"--careful-baseline={folder / 'partial'}",
        "--careful-allow-partial-baseline",
    )
    assert allowed.ret in (0, 1) and "vs baseline" in allowed.stdout.str()


# --- fail closed ----------------------------------------------------------------


def _damaged(run_dir: Path, keep: int = 200) -> tuple[set[str], int]:
    """The first ``keep`` entries, three of them truncated: (ids that cannot be scored, ids kept)."""
    lines = (run_dir / BASE).read_text(encoding="utf-8").splitlines()[:keep]
    for n in (7, 40, 100):
        lines[n] = lines[n][: len(lines[n]) // 2]
    (run_dir / BASE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    ids = [json.loads(line)["id"] for line in (run_dir.parent / "whole" / BASE).read_text().splitlines()[:keep]]
    return {ids[n] for n in (7, 40, 100)}, len(ids)


@pytest.fixture
def whole(run_dir: Path) -> Path:
    """The undamaged file, kept beside (``_damaged`` reads the ids from it)."""
    (run_dir.parent / "whole").mkdir()
    return Path(shutil.copy(run_dir / BASE, run_dir.parent / "whole" / BASE))


def test_unscored_conversations_fail_every_total(
    pytester: pytest.Pytester, run_dir: Path, whole: Path, mode: list[str]
) -> None:
    unscored, total = _damaged(run_dir)
    result = _run(
        pytester, run_dir, *mode, "--careful-category", "base", "--careful-min-safe", "0.0", "--junitxml=out.xml"
    )
    out = result.stdout.str()
    assert result.ret == 1, out[-3000:]
    assert f"{len(unscored)} unscored" in out and "release gate: FAILED" in out
    cases = _cases(pytester.path / "out.xml")
    assert len(cases) == total
    for name in (f"{i}[standard]" for i in unscored):
        props = _props(cases[name])
        assert not cases[name].is_passed and props["careful_bfcl"] == "fail" and props["careful_input_error"]
    card = _card(pytester.path / "scorecards/gpt-oss-20b/standard")
    assert {r["id"] for r in card["rows"] if "unscored" in r} == unscored
    assert card["totals"]["all"]["conversations"] == total
    assert card["provenance"]["selection"]["complete"] is True  # an unreadable line is no missing entry
    # The headline's figures are pytest's own counts.
    counts = result.parseoutcomes()
    assert re.search(rf"{total} conversations: {counts.get('passed', 0)} pass, {counts['failed']} fail", out)

    allowed = _run(
        pytester,
        run_dir,
        *mode,
        "--careful-category=base",
        "--careful-min-safe=0.0",
        "--careful-allow-missing",
        "--junitxml=allowed.xml",
    )
    assert allowed.ret == 0, allowed.stdout.str()[-3000:]
    skipped = {n for n, c in _cases(pytester.path / "allowed.xml").items() if c.is_skipped}
    assert skipped == {f"{i}[standard]" for i in unscored}


def test_conversations_without_an_entry_are_refused_or_left_out(
    pytester: pytest.Pytester, run_dir: Path, whole: Path, mode: list[str]
) -> None:
    """As ``bfcl evaluate`` refuses a result file that lacks entries, and with ``--partial-eval`` scores
    the entries present: refused in one line, or (--careful-allow-missing) the others deselected."""
    unscored, kept = _damaged(run_dir, keep=150)
    total = len(_ids(whole))
    folder = pytester.path / "scorecards/gpt-oss-20b/standard"
    # A selection of conversations it holds needs no option (multi_turn_base_2, 20-29).
    chosen = _run(pytester, run_dir, *mode, "-k", "multi_turn_base_2")
    ran = chosen.parseoutcomes()
    assert chosen.ret in (0, 1) and ran.get("passed", 0) + ran.get("failed", 0) == 11, chosen.stdout.str()[-3000:]
    selected = _card(folder)

    refused = _run(pytester, run_dir, *mode, "--careful-min-safe=0.0")
    err = refused.stderr.str()
    assert refused.ret == pytest.ExitCode.USAGE_ERROR, refused.stdout.str()[-3000:] + err[-3000:]
    said = [line for line in err.splitlines() if line.startswith("ERROR:")]
    assert len(said) == 1 and "Traceback" not in err + refused.stdout.str()
    assert said[0].startswith(
        f"ERROR: --careful-results: {total - kept} of {total} selected conversations have no entry in {run_dir} "
    )
    assert "--careful-allow-missing" in said[0] and "--partial-eval" in said[0]
    assert _card(folder) == selected and not (folder / "partial").exists()  # refused before anything ran

    allowed = _run(pytester, run_dir, *mode, "--careful-min-safe=0.0", "--careful-allow-missing", "--junitxml=a.xml")
    out = allowed.stdout.str()
    assert allowed.ret == 0, out[-3000:]
    cases = _cases(pytester.path / "a.xml")
    assert set(cases) == {f"{i}[standard]" for i in _ids(whole)[:kept]}  # the missing ones are no items
    assert {n for n, c in cases.items() if c.is_skipped} == {f"{i}[standard]" for i in unscored}
    card = _card(folder)  # wider than the 11 it replaced
    selection = card["provenance"]["selection"]
    assert (selection["present"], selection["missing"], selection["rows"]) == (kept, total - kept, kept)
    assert selection["complete"] is False and card["totals"]["all"]["conversations"] == kept
    assert f"; {total - kept} of the {total} conversations have no entry in the result files" in out

    # A narrower selection after it never takes its place, and says so with both counts.
    again = _run(pytester, run_dir, *mode, "-k", "multi_turn_base_2")
    assert _card(folder) == card and len(_card(folder / "partial")["rows"]) == 11
    assert (
        f"partial run (11 of {total} conversations) written to {folder / 'partial'}; the fuller scorecard "
        f"in {folder} ({kept} of {total} conversations) is kept"
    ) in " ".join(again.stdout.str().split())


def test_a_folder_with_two_runs_is_refused(pytester: pytest.Pytester, run_dir: Path) -> None:
    second = run_dir.parent / "another-model"
    second.mkdir()
    shutil.copy(run_dir / BASE, second)
    result = _run(pytester, run_dir.parent)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    err = result.stderr.str()
    assert "several runs" in err and str(second) in err and "Traceback" not in err


# --- JUnit XML and the terminal ----------------------------------------------------


def _schema(with_testcase_properties: bool) -> object:
    tree = etree.parse(str(XSD))
    if with_testcase_properties:
        # The one extension pytest's record_property and Jenkins' JUnit plugin use.
        ns = {"xs": "http://www.w3.org/2001/XMLSchema"}
        choice = tree.find(".//xs:element[@name='testcase']//xs:choice", ns)
        choice.insert(0, etree.Element("{http://www.w3.org/2001/XMLSchema}element", ref="properties"))
    return etree.XMLSchema(tree)


def test_junit_counts_conversations(pytester: pytest.Pytester, run_dir: Path, mode: list[str]) -> None:
    result = _run(pytester, run_dir, *mode, "--junitxml=out.xml")
    counts = result.parseoutcomes()
    total = len(_ids(run_dir / BASE))
    assert counts["failed"] + counts["passed"] == total and set(counts) <= {"failed", "passed"}
    suites = junitparser.JUnitXml.fromfile(str(pytester.path / "out.xml"))
    suite = next(iter(suites))
    assert (suite.tests, suite.failures, suite.skipped, suite.errors) == (total, counts["failed"], 0, 0)
    outcomes = Counter()
    for case in suite:
        elements = [e.tag for e in case._elem if e.tag in ("failure", "error", "skipped")]
        assert len(elements) <= 1
        outcomes[elements[0] if elements else "passed"] += 1
        assert case.classname == "careful.multi_turn_base.standard"
        props = _props(case)
        assert props["careful_model"] == "gpt-oss-20b"
        assert props["careful_conversation"] + "[standard]" == case.name
    assert outcomes == Counter({"failure": counts["failed"], "passed": counts["passed"]})
    document = etree.parse(str(pytester.path / "out.xml"))
    assert _schema(with_testcase_properties=True).validate(document)
    out = result.stdout.str()
    assert "SUB" not in out and "xfailed" not in out
    assert f"{total} conversations: {counts['passed']} pass, {counts['failed']} fail" in out


def test_junit_strict_validates_against_the_unmodified_xsd(pytester: pytest.Pytester, run_dir: Path) -> None:
    _run(pytester, run_dir, "-k", "multi_turn_base_4", "--junitxml=out.xml", "--careful-junit-strict")
    document = etree.parse(str(pytester.path / "out.xml"))
    schema = _schema(with_testcase_properties=False)
    assert schema.validate(document), schema.error_log
    for case in document.iter("testcase"):
        assert "careful_model=gpt-oss-20b" in "".join(case.itertext())
    plain = _run(pytester, run_dir, "-k", "multi_turn_base_4", "--junitxml=plain.xml")
    assert plain.ret in (0, 1)
    assert not _schema(with_testcase_properties=False).validate(etree.parse(str(pytester.path / "plain.xml")))


def test_rule_evidence_in_the_failure_and_system_out(pytester: pytest.Pytester, run_dir: Path) -> None:
    result = _run(pytester, run_dir, "-k", "multi_turn_base_0", "--junitxml=out.xml", "-p", "no:randomly")
    case = _cases(pytester.path / "out.xml")["multi_turn_base_0[standard]"]
    props = _props(case)
    failure = case._elem.find("failure")
    assert failure is not None
    collateral = int(props["careful_collateral_destructive"])
    if collateral:
        assert f"collateral_destructive {collateral}" in failure.get("message")
        assert "[collateral_destructive] failed (gated)" in failure.text
    assert "careful transcript" in case._elem.find("system-out").text
    assert "[safe gate]" in result.stdout.str()


def test_the_release_gate_example_as_shipped(pytester: pytest.Pytester, run_dir: Path) -> None:
    """conftest_examples/release_gate, copied next to nothing, run on a result folder elsewhere."""
    for name in ("pytest.ini", "conftest.py"):
        shutil.copy(ROOT / "conftest_examples" / "release_gate" / name, pytester.path / name)
    result = _run(pytester, run_dir, "-n", "2")
    out = result.stdout.str()
    assert "configfile: pytest.ini" in out  # its thresholds are the ones applied
    suite = next(iter(junitparser.JUnitXml.fromfile(str(pytester.path / "careful.xml"))))
    safe = sum(_props(case)["careful_safe"] == "pass" for case in suite) / suite.tests
    bfcl = sum(_props(case)["careful_bfcl"] == "pass" for case in suite) / suite.tests
    holds = safe >= 0.5 and bfcl >= 0.5
    assert result.ret == (0 if holds else 1)
    assert ("release gate: passed" if holds else "release gate: FAILED") in out


# --- found by trying to break it ------------------------------------------------------


def test_from_a_subdirectory_of_a_project(pytester: pytest.Pytester, run_dir: Path) -> None:
    """Rootdir is the project (its ini file), not the working directory: nothing may be lost."""
    pytester.makeini("[pytest]\n")
    sub = pytester.mkdir("sub")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(sub)
        result = pytester.runpytest_subprocess(
            "--careful-results",
            str(run_dir),
            "--careful-decoder",
            REAL_RUN_DECODER,
            "-k",
            "multi_turn_base_17",
            "-v",
            "--junitxml=out.xml",
            "-n",
            "2",
        )
    out = result.stdout.str()
    assert f"rootdir: {pytester.path}" in out and "../" not in out
    counts = result.parseoutcomes()
    assert f"11 conversations: {counts.get('passed', 0)} pass, {counts['failed']} fail" in out
    assert _card(sub / "scorecards/gpt-oss-20b/standard")["provenance"]["selection"]["rows"] == 11
    assert {c.classname for c in _cases(sub / "out.xml").values()} == {"careful.multi_turn_base.standard"}


@pytest.mark.parametrize(
    "name, says",
    [
        ("multi_turn_base_999", "no such conversation"),
        ("multi_turn_foo_1", "no such conversation"),
        ("multi_turn_base_17[hints]", "this run's protocols are standard"),
        ("multi_turn_miss_func_3", "is not among this run's"),
    ],
)
def test_a_named_conversation_that_is_not_there(pytester: pytest.Pytester, run_dir: Path, name: str, says: str) -> None:
    result = _run(pytester, run_dir, "--careful-category=base", name)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert says in result.stderr.str() and "Traceback" not in result.stderr.str()


BROKEN_BASELINES = {
    "row without id": lambda c: c.update(rows=[{}]),
    "rows null": lambda c: c.update(rows=None),
    "selection a string": lambda c: c["provenance"].update(selection="x"),
    "rows without verdicts": lambda c: [r.pop("bfcl") for r in c["rows"]],
    "legacy, one row": lambda c: (c["provenance"].pop("selection"), c.update(rows=c["rows"][:1])),
}


def test_broken_and_partial_baselines_are_refused(pytester: pytest.Pytester, run_dir: Path) -> None:
    _run(pytester, run_dir, "-n", "2")
    card = _card(pytester.path / "scorecards/gpt-oss-20b/standard")
    for name, breaks in BROKEN_BASELINES.items():
        broken = json.loads(json.dumps(card))
        breaks(broken)
        (pytester.path / "b.json").write_text(json.dumps(broken), encoding="utf-8")
        result = _run(pytester, run_dir, "-k", "multi_turn_base_17", "--careful-baseline=b.json")
        assert result.ret == pytest.ExitCode.USAGE_ERROR, name
        assert "--careful-baseline: b.json" in result.stderr.str() and "INTERNAL" not in result.stdout.str(), name


def test_one_bad_byte_costs_one_conversation(pytester: pytest.Pytester, run_dir: Path) -> None:
    lines = (run_dir / BASE).read_bytes().split(b"\n")
    lines[6] = lines[6].replace(b'"result"', b'"resu\xff\xfelt"', 1)
    (run_dir / BASE).write_bytes(b"\n".join(lines))
    victim = json.loads(lines[6].decode("utf-8", "replace").replace("resu\ufffd\ufffdlt", "result"))["id"]
    result = _run(pytester, run_dir, "-k", "multi_turn_base_", "--junitxml=out.xml", "-n", "2")
    unscored = {n for n, c in _cases(pytester.path / "out.xml").items() if "careful_input_error" in _props(c)}
    assert unscored == {f"{victim}[standard]"}
    assert f"{run_dir / BASE}:7 [{victim}]: not valid UTF-8" in result.stdout.str()
    assert "During handling of the above exception" not in result.stdout.str()


def test_errors_outside_scoring_fail_the_gate_and_stay_labelled(pytester: pytest.Pytester, run_dir: Path) -> None:
    pytester.makeconftest(
        "import os, pytest\n"
        "@pytest.fixture(autouse=True)\n"
        "def trouble(request):\n"
        "    if request.node.name == 'multi_turn_base_17[standard]':\n"
        "        os._exit(3)\n"
        "    yield\n"
        "    if request.node.name == 'multi_turn_base_171[standard]':\n"
        "        raise RuntimeError('teardown trouble')\n"
    )
    result = _run(
        pytester,
        run_dir,
        "-k",
        "multi_turn_base_17",
        "-n",
        "2",
        "--careful-min-safe=0",
        "--junitxml=out.xml",
        "--junit-prefix=nightly",
        "-o",
        "junit_logging=all",
    )
    out = result.stdout.str()
    assert result.ret == 1 and "errored outside scoring" in out and "release gate: FAILED" in out
    tree = etree.parse(str(pytester.path / "out.xml"))
    cases = list(tree.iter("testcase"))
    assert {c.get("classname") for c in cases} == {"nightly.careful.multi_turn_base.standard"}
    crashed = [c for c in cases if c.get("name") == "multi_turn_base_17[standard]"]
    assert crashed and all(_props_of(c)["careful_bfcl"] == "fail" for c in crashed)
    assert all(len(c.findall("system-out")) <= 1 for c in cases)


def _props_of(element: object) -> dict[str, str]:
    return {p.get("name"): p.get("value") for p in element.iter("property")}  # type: ignore[attr-defined]
