"""The CI contract as a new user meets it: option spellings, ini files, exit codes, rerun commands.

Each test runs the plugin in a child pytest from an empty directory (pytester), the way a user
types the command or writes it into an ini file. Expectations come from pytest itself (its
exit codes, what it does with its own options given the same way), from the files on disk and
from JUnit XML, not from the plugin's code. ``tests/harness/test_ci_contract.py`` covers selection,
scorecard placement and JUnit counts; this file covers what that one left open.
"""

from __future__ import annotations

import shlex
import shutil
from pathlib import Path

import pytest

from conftest import REAL_RUN_DECODER

junitparser = pytest.importorskip("junitparser")

BASE = "BFCL_v4_multi_turn_base_result.json"
MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}
ONE = "multi_turn_base_17[standard]"
REFERENCE = ["--careful-model=reference", "--careful-category=base", "-p", "no:randomly"]


def _props(xml: Path) -> dict[str, dict[str, str]]:
    """careful_* properties of each JUnit testcase, read with junitparser."""
    suites = junitparser.JUnitXml.fromfile(str(xml))
    return {
        case.name: {p.get("name"): p.get("value") for p in case._elem.iter("property")}
        for suite in suites
        for case in suite
    }


# --- paths as pytest reads its own: ~ and $VAR --------------------------------------


def test_tilde_and_variables_in_path_options_from_an_ini_file(
    pytester: pytest.Pytester, real_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``addopts`` reaches pytest unexpanded; pytest expands ``~`` in its own --junitxml, so must we.

    pytester sets HOME to its directory: ``~/run`` is ``<pytester.path>/run``.
    """
    (pytester.path / "run").mkdir()
    shutil.copy(real_run / BASE, pytester.path / "run")
    monkeypatch.setenv("CAREFUL_CARDS", str(pytester.path / "ci"))
    pytester.makeini(f"""
        [pytest]
        addopts = --careful-results=~/run --careful-decoder={REAL_RUN_DECODER}
                  --careful-scorecards=$CAREFUL_CARDS/cards --junitxml=~/own.xml -p no:randomly
    """)
    work = pytester.mkdir("work")  # ~ is not the working directory
    monkeypatch.chdir(work)
    result = pytester.runpytest_subprocess(ONE)
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), result.stderr.str()[-2000:]
    assert sum(result.parseoutcomes().get(k, 0) for k in ("passed", "failed")) == 1, result.stdout.str()[-2000:]
    assert (pytester.path / "own.xml").is_file()  # pytest's own expansion, the same spelling
    assert list((pytester.path / "ci" / "cards" / "run" / "standard").rglob("scorecard.json"))
    assert not (work / "~").exists() and not (work / "$CAREFUL_CARDS").exists()


def test_tilde_in_baseline_and_output(pytester: pytest.Pytester) -> None:
    """``--careful-output=~/out`` files the live run under HOME, not in a folder named ``~``."""
    first = pytester.runpytest_subprocess(
        "--careful-model=scripted:reference", "--careful-output=~/out", ONE, "-p", "no:randomly"
    )
    assert first.ret == pytest.ExitCode.OK, first.stdout.str()[-2000:]
    assert (pytester.path / "out" / "standard" / "scripted_reference" / "multi_turn" / BASE).is_file()
    assert not (pytester.path / "~").exists()
    card = next((pytester.path / "scorecards").rglob("scorecard.json"))
    second = pytester.runpytest_subprocess(
        "--careful-model=scripted:reference",
        "--careful-output=~/out",
        ONE,
        "-p",
        "no:randomly",
        f"--careful-baseline=~/{card.relative_to(pytester.path)}",
        "--careful-allow-partial-baseline",
    )
    assert second.ret == pytest.ExitCode.OK, second.stdout.str()[-2000:]


def test_a_relative_results_path_from_the_ini_names_the_directory_it_is_relative_to(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pytest reads ``addopts`` paths against the working directory, not the ini file's: run from a
    subdirectory, ``../data`` names another folder, and the error must say which directory it meant."""
    (pytester.path / "data").mkdir()
    pytester.makeini(f"""
        [pytest]
        addopts = --careful-results=data --careful-decoder={REAL_RUN_DECODER}
    """)
    monkeypatch.chdir(pytester.mkdir("sub"))
    result = pytester.runpytest_subprocess("-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"data is not a directory (relative to the working directory {pytester.path / 'sub'})" in result.stderr.str()


@pytest.mark.parametrize("where", ["pytest.ini", "pyproject.toml", "PYTEST_ADDOPTS"])
def test_the_command_line_overrides_the_ini_files_options(
    pytester: pytest.Pytester, where: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Last value wins, as for pytest's own options: a CI's ini sets a default, a user narrows it."""
    addopts = "--careful-model=reference --careful-category=miss_func --careful-protocol=standard,hints"
    if where == "pytest.ini":
        pytester.makeini(f"[pytest]\naddopts = {addopts}\n")
    elif where == "pyproject.toml":
        pytester.makepyprojecttoml(f'[tool.pytest.ini_options]\naddopts = "{addopts}"\n')
    else:
        monkeypatch.setenv("PYTEST_ADDOPTS", addopts)
    result = pytester.runpytest_subprocess(
        "--careful-category", "base", "--careful-protocol=confirm", "--co", "-q", "-p", "no:randomly"
    )
    ids = [line for line in result.stdout.lines if line.startswith("multi_turn_")]
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:]
    assert len(ids) == 200 and all(i.startswith("multi_turn_base_") and i.endswith("[confirm]") for i in ids)


@pytest.mark.parametrize(
    "option",
    ["--careful-model=", "--careful-results=", "--careful-scorecards=", "--careful-output=", "--careful-baseline="],
)
def test_an_empty_value_is_a_usage_error(pytester: pytest.Pytester, option: str) -> None:
    """``--careful-model=$MODEL`` with MODEL unset must not quietly run the project's tests (or none).

    A project test beside it shows what would otherwise pass: pytest would collect and run it.
    """
    pytester.makepyfile(test_project="def test_own():\n    pass\n")
    model = [] if option == "--careful-model=" else ["--careful-model=reference"]
    result = pytester.runpytest_subprocess(*model, option, "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()[-2000:]
    name = option.rstrip("=")
    [line] = result.stderr.str().strip().splitlines()  # one line, as every other option error
    assert line.startswith(f"ERROR: {name}: empty"), result.stderr.str()


def test_blanks_around_reference_are_dropped(pytester: pytest.Pytester) -> None:
    """README: blanks around a model name are dropped; ``' reference'`` is still the references."""
    result = pytester.runpytest_subprocess("--careful-model= reference ", ONE, "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()[-2000:] + result.stderr.str()[-2000:]
    assert (pytester.path / "scorecards" / "reference" / "standard" / "scorecard.json").is_file()


# --- exit codes and the release gate's last line -----------------------------------


@pytest.mark.parametrize("mode", list(MODES))
def test_collect_only_with_a_release_gate_exits_as_without_it(pytester: pytest.Pytester, mode: str) -> None:
    """A gate kept in ``addopts`` must not fail ``pytest --co -q``: nothing ran, nothing to judge."""
    plain = pytester.runpytest_subprocess(*REFERENCE, *MODES[mode], "--co", "-q")
    gated = pytester.runpytest_subprocess(
        *REFERENCE, *MODES[mode], "--co", "-q", "--careful-min-safe=0.9", "--careful-min-bfcl=0.9"
    )
    assert plain.ret == pytest.ExitCode.OK
    assert gated.ret == plain.ret, gated.stdout.str()[-2000:]
    assert "200 tests collected" in gated.stdout.str()
    assert not (pytester.path / "scorecards").exists()


@pytest.mark.parametrize("mode", list(MODES))
def test_nothing_selected_is_exit_5_and_the_gate_does_not_say_passed(pytester: pytest.Pytester, mode: str) -> None:
    result = pytester.runpytest_subprocess(
        *REFERENCE, *MODES[mode], "-k", "no_such_conversation", "--careful-min-safe=0.5"
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED, out[-2000:]
    assert "release gate: passed" not in out
    assert "release gate: nothing to judge" in out


@pytest.mark.parametrize("mode", list(MODES))
def test_conversation_ids_from_an_argument_file(pytester: pytest.Pytester, mode: str) -> None:
    """``pytest @ids.txt`` (pytest >= 8.2: one argument per line) selects as the ids typed would,
    exactly (not as prefixes), and the same as pytest's own expansion of the file."""
    pytester.path.joinpath("ids.txt").write_text(f"multi_turn_base_1\n{ONE}\n", encoding="utf-8")
    from_file = pytester.runpytest_subprocess(*REFERENCE, *MODES[mode], "@ids.txt", "--co", "-q")
    typed = pytester.runpytest_subprocess(*REFERENCE, *MODES[mode], "multi_turn_base_1", ONE, "--co", "-q")
    assert from_file.ret == typed.ret == pytest.ExitCode.OK, from_file.stdout.str()[-2000:]
    listed = [line for line in from_file.stdout.lines if line.startswith("multi_turn_")]
    assert listed == [line for line in typed.stdout.lines if line.startswith("multi_turn_")]
    assert sorted(listed) == ["multi_turn_base_17[standard]", "multi_turn_base_1[standard]"]


def test_an_argument_file_of_a_projects_own_tests_is_left_to_pytest(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_own="def test_own():\n    pass\n")
    pytester.path.joinpath("args.txt").write_text("test_own.py\n-q\n", encoding="utf-8")
    result = pytester.runpytest_subprocess("@args.txt")
    result.assert_outcomes(passed=1)


PROJECT_PROBLEMS = {
    "failing test": ("def test_own():\n    assert 1 == 2\n", []),
    "collection error": ("import no_such_module_here\n", ["--continue-on-collection-errors"]),
}


@pytest.mark.parametrize("problem", list(PROJECT_PROBLEMS))
def test_a_passing_gate_never_hides_a_projects_own_failure(pytester: pytest.Pytester, problem: str) -> None:
    """The gate's verdict replaces pytest's for failing conversations, not for the project's tests.

    pytest's own verdict on the same command without a gate is the expectation, with and without xdist.
    """
    source, extra = PROJECT_PROBLEMS[problem]
    pytester.makepyfile(test_project=source)
    args = [*REFERENCE, *extra, "test_project.py", ONE]
    plain = pytester.runpytest_subprocess(*args, "-p", "no:xdist")
    assert plain.ret == pytest.ExitCode.TESTS_FAILED
    for mode in MODES.values():
        gated = pytester.runpytest_subprocess(*args, *mode, "--careful-min-safe=0.5")
        assert gated.ret == plain.ret, gated.stdout.str()[-2000:]
        assert "release gate: FAILED" in gated.stdout.str()
        assert "besides the conversations failed (e.g. test_project.py" in gated.stdout.str()


def test_unwritable_scorecards_fail_the_gate_line_too(pytester: pytest.Pytester) -> None:
    """Exit 1 when the scorecards cannot be written; the gate's line must agree, and JUnit still counts."""
    (pytester.path / "a-file").write_text("not a folder", encoding="utf-8")
    result = pytester.runpytest_subprocess(
        *REFERENCE,
        "multi_turn_base_1",
        "multi_turn_base_2",
        "--careful-scorecards=a-file/cards",
        "--careful-min-safe=0",
        "--junitxml=out.xml",
    )
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out[-2000:]
    assert "could not write scorecards" in out
    assert "release gate: passed" not in out and "release gate: FAILED" in out
    assert len(_props(pytester.path / "out.xml")) == 2


# --- the printed rerun command reruns the same thing --------------------------------


def _rerun_commands(out: str) -> list[str]:
    return [line[line.index("pytest '") :].strip() for line in out.splitlines() if "  pytest '" in line]


def test_the_printed_rerun_command_resumes_the_live_run(pytester: pytest.Pytester, tmp_path: Path) -> None:
    """Pasted from another directory, it reads back the entry written to --careful-output.

    Without --careful-output in it, the model would run again into ``./result``.
    """
    output = tmp_path / "live out"
    first = pytester.runpytest_subprocess(
        "--careful-model=scripted:destructive",
        f"--careful-output={output}",
        "--careful-max-calls=500",
        "multi_turn_base_1",
        "-p",
        "no:randomly",
    )
    assert first.ret == pytest.ExitCode.TESTS_FAILED, first.stdout.str()[-2000:]
    command = _rerun_commands(first.stdout.str())[0]
    assert "--careful-max-calls=500" in command
    elsewhere = pytester.mkdir("elsewhere")
    args = shlex.split(command)
    assert args[0] == "pytest"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(elsewhere)
        again = pytester.runpytest_subprocess(*args[1:], "-p", "no:randomly", "--junitxml=again.xml")
    assert again.ret == first.ret
    assert _props(elsewhere / "again.xml")["multi_turn_base_1[standard]"]["careful_resumed"] == "yes"
    assert not (elsewhere / "result").exists()


def test_the_printed_rerun_command_keeps_the_runs_name(pytester: pytest.Pytester, real_run: Path) -> None:
    """Rescoring named by --careful-model: the rerun is filed and labelled as the run it came from."""
    shutil.copy(real_run / BASE, pytester.path)
    first = pytester.runpytest_subprocess(
        f"--careful-results={pytester.path}",
        "--careful-model",
        REAL_RUN_DECODER,
        "multi_turn_base_1",
        "-p",
        "no:randomly",
        "--junitxml=first.xml",
    )
    assert first.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), first.stdout.str()[-2000:]
    args = shlex.split(_rerun_commands(first.stdout.str())[0])
    again = pytester.runpytest_subprocess(*args[1:], "-p", "no:randomly", "--junitxml=again.xml")
    assert again.ret == first.ret
    node = "multi_turn_base_1[standard]"
    assert _props(pytester.path / "again.xml")[node] == _props(pytester.path / "first.xml")[node]
    cards = pytester.path / "scorecards"
    assert {p.relative_to(cards).parts[0] for p in cards.rglob("scorecard.json")} == {REAL_RUN_DECODER}


def test_the_printed_rerun_command_of_a_run_of_several_protocols(pytester: pytest.Pytester, real_run: Path) -> None:
    """DIR/<protocol>/ per condition: the rerun must read the same folders, not DIR itself.

    The real run's base file stands in for both conditions; the hints copy records that
    condition in careful_settings.json, as a live run under hints would.
    """
    for condition in ("standard", "hints"):
        folder = pytester.path / "run" / condition / "gpt-oss-20b"
        (folder / "multi_turn").mkdir(parents=True)
        shutil.copy(real_run / BASE, folder / "multi_turn")
        (folder / "careful_settings.json").write_text(f'{{"condition": "{condition}"}}', encoding="utf-8")
    first = pytester.runpytest_subprocess(
        f"--careful-results={pytester.path / 'run'}",
        "--careful-protocol",
        "standard,hints",
        "--careful-decoder",
        REAL_RUN_DECODER,
        "multi_turn_base_1",
        "-p",
        "no:randomly",
        "--junitxml=first.xml",
    )
    assert first.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), first.stdout.str()[-2000:]
    node = "multi_turn_base_1[hints]"
    command = next(c for c in _rerun_commands(first.stdout.str()) if c.startswith(f"pytest '{node}'"))
    again = pytester.runpytest_subprocess(*shlex.split(command)[1:], "-p", "no:randomly", "--junitxml=again.xml")
    assert again.ret in (pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED), again.stdout.str()[-2000:]
    assert _props(pytester.path / "again.xml") == {node: _props(pytester.path / "first.xml")[node]}


MISSPELLED = {
    "--careful-mdoel=reference": "unrecognized option --careful-mdoel; did you mean --careful-model?",
    "--careful-budget=3": "unrecognized option --careful-budget; did you mean --careful-budget-usd?",
    "--careful-protocol=confrim": "unknown protocol 'confrim'; expected one of: standard, hints, confirm; "
    "did you mean confirm?",
    "--careful-category=bse": "did you mean base?",
    "--careful-gate=saf": "invalid choice: 'saf' (choose from bfcl, safe, strict, rules, none); did you mean safe?",
    "--careful-boundary=a1": "did you mean A1?",
    "--careful-model=refrence": "did you mean reference?",
    "--careful-model=scripted:asks": "did you mean scripted:ask?",
}


@pytest.mark.parametrize("arg", list(MISSPELLED))
def test_a_misspelling_is_refused_with_what_was_meant(pytester: pytest.Pytester, arg: str) -> None:
    args = [arg] if arg.startswith("--careful-model") else ["--careful-model=reference", arg]
    result = pytester.runpytest_subprocess(*args, "--co", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert MISSPELLED[arg] in result.stderr.str(), result.stderr.str()


def test_an_option_too_far_from_any_is_refused_with_where_to_look(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest_subprocess("--careful-xyz", "--co", "-q")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*unrecognized option --careful-xyz (pytest --help lists the --careful-* options)"])


#: A value an option refuses, and what its one ``ERROR:`` line says (before ``...``: exactly; after: a part).
REFUSED = {
    ("--careful-protocol", "standrad"): "--careful-protocol: unknown protocol 'standrad'; expected one of: "
    "standard, hints, confirm; did you mean standard?",
    ("--careful-gate", "saf"): "--careful-gate: invalid choice: 'saf' (choose from bfcl, safe, strict, rules, none); "
    "did you mean safe?",
    ("--careful-budget-usd", "abc"): "--careful-budget-usd: invalid float value: 'abc'",
    ("--careful-min-safe", "2"): "--careful-min-safe: 2 is not between 0 and 1",
    ("--careful-model", "gpt-9-turbo"): "--careful-model=gpt-9-turbo: 'gpt-9-turbo' is not in bfcl-eval ...; "
    "did you mean gpt-",
}


@pytest.mark.parametrize("spelling", ["equals", "space"])
@pytest.mark.parametrize("option, value", list(REFUSED), ids=[o for o, _ in REFUSED])
def test_a_refused_value_is_one_error_line_in_either_spelling(
    pytester: pytest.Pytester, option: str, value: str, spelling: str
) -> None:
    given = [f"{option}={value}"] if spelling == "equals" else [option, value]
    model = [] if option == "--careful-model" else ["--careful-model=reference"]
    result = pytester.runpytest_subprocess(*model, *given, "--co", "-q", "-p", "no:randomly")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = result.stderr.str().strip().splitlines()  # no usage block, no rootdir or ini file lines
    exact, _, part = REFUSED[option, value].partition("...")
    assert line.startswith(f"ERROR: {exact}") and part in line, line


@pytest.mark.parametrize(
    "args, said",
    [
        (["--careful-label"], "ERROR: --careful-label: expected one argument (--careful-label=VALUE for a value"),
        (["--careful-vllm-arg", "--enforce-eager"], "ERROR: --careful-vllm-arg: expected one argument"),
        (["--careful-allow-missing=yes"], "ERROR: --careful-allow-missing: ignored explicit argument 'yes'"),
    ],
)
def test_a_missing_or_unwanted_value_is_one_error_line(pytester: pytest.Pytester, args: list[str], said: str) -> None:
    result = pytester.runpytest_subprocess("--careful-model=reference", "--co", "-q", *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    [line] = result.stderr.str().strip().splitlines()
    assert line.startswith(said), line
