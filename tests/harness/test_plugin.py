"""The plugin, driven through pytester in a child process: with no xdist, -n0 and -n2."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from conftest import REAL_RUN_DECODER, ROOT
from pytest_careful.data import dataset
from pytest_careful.reports import stats

MODES = {"no-xdist": ["-p", "no:xdist"], "n0": ["-n", "0"], "n2": ["-n", "2"]}


@pytest.fixture(params=list(MODES))
def mode(request):
    return MODES[request.param]


def _run(pytester, *args):
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args)


def _card(pytester, model="reference", condition="standard"):
    path = pytester.path / "scorecards" / model / condition / "scorecard.json"
    return json.loads(path.read_text())


def test_inert_unless_asked(pytester):
    pytester.makepyfile("def test_one():\n    assert True\n")
    result = _run(pytester)
    result.assert_outcomes(passed=1)
    assert "careful" not in result.stdout.str().split("passed")[-1]
    assert not (pytester.path / "scorecards").exists()


def test_reference_run_from_an_empty_directory(pytester, mode):
    result = _run(
        pytester, *mode, "--careful-model=reference", "--careful-category=miss_param", "-k", "miss_param_1"
    )  # 1, 10-19, 100-199: 111 conversations
    result.assert_outcomes(passed=111)
    assert result.ret == 0
    card = _card(pytester)
    assert card["totals"]["all"]["conversations"] == 111
    assert card["totals"]["all"]["bfcl_accuracy"] == 1.0 and card["totals"]["all"]["safe_accuracy"] == 1.0
    for name in ("rows.csv", "scorecard.md", "accuracy.png"):
        assert (pytester.path / "scorecards/reference/standard" / name).stat().st_size > 0
    out = result.stdout.str()
    assert "rule violations" in out and "accuracy" in out


def test_scorecards_identical_with_and_without_xdist(pytester):
    cards = {}
    for name, flags in MODES.items():
        _run(
            pytester,
            *flags,
            "--careful-model=reference",
            "--careful-category=base",
            "-k",
            "base_3",
            f"--careful-scorecards=cards_{name}",
        )
        card = json.loads((pytester.path / f"cards_{name}/reference/standard/scorecard.json").read_text())
        card["provenance"].pop("date")
        cards[name] = card
        for other in ("rows.csv", "scorecard.md"):
            cards[name + other] = (pytester.path / f"cards_{name}/reference/standard/{other}").read_text()
    assert cards["no-xdist"] == cards["n0"] == cards["n2"]
    assert cards["no-xdistrows.csv"] == cards["n0rows.csv"] == cards["n2rows.csv"]
    assert len(cards["n2"]["rows"]) == 11


def test_all_protocols_collect_2400_items(pytester):
    result = _run(
        pytester, "--careful-model=reference", "--careful-protocol=standard,hints,confirm", "--collect-only", "-q"
    )
    assert "2400 tests collected" in result.stdout.str()
    assert "multi_turn_long_context_199[confirm]" in result.stdout.str()


def test_copied_node_id_and_markers(pytester):
    result = _run(pytester, "multi_turn_base_17[standard]", "--careful-model=reference", "-v")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*multi_turn_base_17?standard? PASSED*"])
    expected = sum(
        "TradingBot" in c.involved_classes for c in dataset.load() if c.category != "multi_turn_long_context"
    )
    result = _run(
        pytester, "--careful-model=reference", "-m", "trading_bot and not long_context", "--collect-only", "-q"
    )
    assert f"{expected}/800 tests collected" in result.stdout.str()


@pytest.mark.parametrize(
    "args, message",
    [
        (["--careful-model=reference", "--careful-category=bogus"], "unknown category 'bogus'"),
        (["--careful-model=reference", "--careful-protocol=polite"], "unknown protocol 'polite'"),
        (["--careful-model=scripted:nope"], "unknown scripted model 'scripted:nope'"),
        (["--careful-model=Qwen3-8"], "did you mean Qwen/Qwen3-8B? (close matches: Qwen/Qwen3-8B, "),
        (["--careful-model=/no/such/dir", "--careful-handler=Qwen/Qwen2.5-7B-Instruct"], "is not a directory"),
        (["--careful-min-safe=0.5"], "need --careful-model or --careful-results"),
        (["--careful-model=reference", "--careful-fail-on-regression=0.05"], "needs --careful-baseline"),
        (["--careful-model=reference", "--careful-min-safe=2"], "is not between 0 and 1"),
        (["--careful-results=nowhere", "--careful-decoder=x"], "is not a directory"),
        (["--careful-model=reference", "--careful-user-script=no_failure_yes"], "add --careful-protocol=confirm"),
        (["--careful-model=reference", "--careful-allow-partial-baseline"], "none was given"),
        (
            ["--careful-model=reference", "--careful-regression-verdict=bfcl"],
            "--careful-regression-verdict applies to a --careful-baseline comparison; none was given",
        ),
        (["--careful-model=reference", "--careful-regression-verdict=strict"], "invalid choice: 'strict'"),
        (["--careful-model=reference", "--careful-label=a/b"], "is not usable as a folder name"),
    ],
)
def test_usage_errors_are_clear(pytester, args, message):
    result = _run(pytester, *args)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert message in result.stderr.str()
    assert "Traceback" not in result.stderr.str()


def test_results_dir_missing_a_category_and_unknown_decoder(pytester, logged_run):
    # Without --careful-category a logged run is scored on the categories it has files for...
    result = _run(
        pytester, f"--careful-results={logged_run}", f"--careful-decoder={REAL_RUN_DECODER}", "--collect-only", "-q"
    )
    assert result.ret == 0 and "200 tests collected" in result.stdout.str()
    # ...and asking for one it lacks is a usage error.
    result = _run(
        pytester,
        f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        "--careful-category=base,miss_func",
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "has no result file for multi_turn_miss_func" in result.stderr.str()
    result = _run(
        pytester, f"--careful-results={logged_run}", "--careful-decoder=gpt-4.2-turbo-FC", "--careful-category=base"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "not in bfcl-eval 2026.3.23's model registry; did you mean gpt-4.1-2025-04-14-FC? (close matches: " in (
        result.stderr.str()
    )


def test_rescoring_a_logged_run_junit_and_rule_blocks(pytester, logged_run, mode):
    args = [
        f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        "--careful-category=base",
        "-k",
        "base_2",
        "--junitxml=out.xml",
        "-rA",
    ]
    result = _run(pytester, *mode, *args)
    card = _card(pytester, model="gpt-oss-20b")
    rows = {r["id"]: r for r in card["rows"]}
    assert len(rows) == 11  # base_2, base_20..29
    suite = ET.parse(pytester.path / "out.xml").getroot()
    seen = {}
    for case in suite.iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        if "careful_conversation" in props:
            seen[props["careful_conversation"]] = props
    assert set(seen) == set(rows)
    for conversation_id, props in seen.items():
        row = rows[conversation_id]
        assert props["careful_bfcl"] == ("pass" if row["bfcl"]["valid"] else "fail")
        assert props["careful_bfcl_error"] == row["bfcl"]["error_type"]
        assert props["careful_safe"] == ("pass" if row["safe"] else "fail")
        assert int(props["careful_collateral_destructive"]) == row["counts"]["collateral_destructive"]
        assert int(props["careful_collateral_changed_state"]) == row["counts"]["collateral_changed_state"]
        assert props["careful_condition"] == "standard"
    # Gate 'safe': an item fails exactly when BFCL fails or it is unsafe.
    failing = sorted(i for i, r in rows.items() if not r["safe"])
    for conversation_id in failing:
        assert f"FAILED {conversation_id}[standard]" in result.stdout.str()
    collateral = [i for i, r in rows.items() if r["counts"]["collateral_destructive"]]
    assert collateral  # the real run has some in this selection
    result.stdout.fnmatch_lines(["*[[]collateral_destructive[]] failed (gated)*"])
    assert "SUBFAIL" not in result.stdout.str()


def test_release_gate_sets_the_exit_status(pytester, logged_run):
    base = [
        f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        "--careful-category=base",
        "-k",
        "base_1",
    ]
    low = _run(pytester, *base, "--careful-min-safe=0.0", "--careful-min-bfcl=0.0")
    assert "failed" in low.stdout.str()  # single conversations failed...
    assert low.ret == 0  # ...but the gate holds
    high = _run(pytester, *base, "--careful-min-safe=0.99")
    assert high.ret == 1
    assert "release gate: FAILED" in high.stdout.str()


def test_baseline_mcnemar_and_refusal(pytester, logged_run):
    _run(pytester, "--careful-model=reference", "--careful-category=base", "-k", "base_4")
    baseline = pytester.path / "scorecards/reference/standard/scorecard.json"
    args = [
        f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        "--careful-category=base",
        "-k",
        "base_4",
        f"--careful-baseline={baseline}",
        "--careful-allow-partial-baseline",
    ]
    result = _run(pytester, *args, "--careful-fail-on-regression=0.05")
    card = _card(pytester, model="gpt-oss-20b")
    comparison = json.loads((pytester.path / "scorecards/gpt-oss-20b/standard/comparison.json").read_text())
    lost = sum(not r["safe"] for r in card["rows"])  # the reference passes every one (the safe verdict, by default)
    assert comparison["all"]["gained"] == 0 and comparison["all"]["lost"] == lost
    assert comparison["all"]["p"] == pytest.approx(stats.mcnemar_exact(0, lost))
    assert len(comparison["all"]["flipped"]) == lost
    assert result.ret == (1 if stats.mcnemar_exact(0, lost) < 0.05 else 0)
    # A scorecard made under other declarations cannot be paired.
    other = json.loads(baseline.read_text())
    other["provenance"]["declarations"] = "0000000000000000"
    (pytester.path / "other.json").write_text(json.dumps(other))
    refused = _run(pytester, *args[:-2], f"--careful-baseline={pytester.path / 'other.json'}")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    assert "scored under other declarations" in refused.stderr.str()


def test_bad_lines_are_located_and_the_rest_is_scored(pytester, logged_run):
    path = logged_run / "BFCL_v4_multi_turn_base_result.json"
    lines = path.read_text().splitlines()
    lines[5] = lines[5][: len(lines[5]) // 2]  # truncate multi_turn_base_5
    path.write_text("\n".join(lines) + "\n")
    result = _run(
        pytester,
        f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        "--careful-category=base",
        "-k",
        "base_5",
    )
    out = result.stdout.str()
    assert f"{path}:6 [multi_turn_base_5]: not valid JSON" in out
    rows = _card(pytester, model="gpt-oss-20b")["rows"]
    assert len(rows) == 11  # base_50..59 still scored; base_5 fails closed
    assert [r["id"] for r in rows if "unscored" in r] == ["multi_turn_base_5"]


def test_a_crashed_worker_loses_only_its_item(pytester):
    pytester.makeconftest(
        "import os\n"
        "def pytest_runtest_call(item):\n"
        "    if item.nodeid == 'multi_turn_base_33[standard]':\n"
        "        os._exit(1)\n"
    )
    result = _run(pytester, "-n", "2", "--careful-model=reference", "--careful-category=base", "-k", "base_3")
    out = result.stdout.str()
    assert "multi_turn_base_33[standard]" in out and "crashed" in out
    ids = {r["id"] for r in _card(pytester)["rows"]}
    assert len(ids) == 10 and "multi_turn_base_33" not in ids


@pytest.mark.slow
def test_all_800_references_under_xdist(pytester):
    result = _run(pytester, "-n", "2", "--careful-model=reference", "-q")
    result.assert_outcomes(passed=800)
    totals = _card(pytester)["totals"]
    assert totals["all"]["conversations"] == 800 and totals["all"]["safe_pass"] == 800
    assert totals["all"]["strict_pass"] == 88  # the conversations that need no destructive call


def test_conftest_example_runs(pytester):
    shutil.copytree(ROOT / "conftest_examples" / "own_tests", pytester.path / "own_tests")
    result = _run(pytester, "own_tests")
    result.assert_outcomes(passed=7)


def test_installed_but_not_asked_for_imports_no_scoring_module(tmp_path):
    """pytest in a project that does not use the plugin: only options and markers, no bfcl-eval simulators.

    ``executor`` captures bfcl-eval's simulator state at import, and the scoring modules around it
    cost a quarter of a second: a session that runs no conversations must not pay it.
    """
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    (tmp_path / "conftest.py").write_text(
        "import sys\n"
        "def pytest_unconfigure(config):\n"
        "    loaded = sorted(n for n in sys.modules if n.startswith(('pytest_careful', 'bfcl_eval')))\n"
        "    (config.rootpath / 'loaded.txt').write_text('\\n'.join(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    loaded = set((tmp_path / "loaded.txt").read_text().split())
    assert "pytest_careful.plugin" in loaded and "pytest_careful.harness.markers" in loaded  # it did load, inactive
    heavy = {
        "pytest_careful.execution.executor",
        "pytest_careful.execution.interpreter",
        "pytest_careful.execution.isolation",
        "pytest_careful.harness.state",
        "pytest_careful.harness.item",
        "pytest_careful.data.result_files",
        "pytest_careful.evaluation.replay",
        "bfcl_eval.eval_checker",
    }
    assert not loaded & heavy, sorted(loaded & heavy)
    assert not any(n.startswith("bfcl_eval.eval_checker") for n in loaded)


@pytest.fixture
def run_modules_loaded() -> None:
    """What a run imports, loaded before ``pytester`` snapshots sys.modules (it unloads what a run
    in this process imported, and numpy warns when it is imported a second time; matplotlib, unloaded
    and imported again, mixes two copies of its classes in later tests of this process)."""
    import numpy  # noqa: F401
    from matplotlib import figure, font_manager, style, ticker  # noqa: F401  # the run draws the charts
    from matplotlib.backends import backend_agg  # noqa: F401  # (plots imports these at its first chart)

    from pytest_careful.harness import scorecard_files, summary  # noqa: F401


def test_objects_frozen_during_a_run_and_thawed_after_an_in_process_one(run_modules_loaded, pytester):
    """``_gc.freeze`` keeps a run's long-lived objects out of full collections; a run inside this
    process (pytester's in-process mode) must give them back, or each such run would leak its items."""
    import gc

    pytester.makeconftest(
        "import gc\n"
        "def pytest_sessionfinish(session):\n"
        "    (session.config.rootpath / 'frozen.txt').write_text(str(gc.get_freeze_count()))\n"
    )
    assert gc.get_freeze_count() == 0
    result = pytester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-p", "no:randomly", "--careful-model=reference", "-k", "multi_turn_base_0"
    )
    assert result.ret == 0, result.stdout.str()[-2000:]
    assert int((pytester.path / "frozen.txt").read_text()) > 10_000  # frozen while it ran
    assert gc.get_freeze_count() == 0  # and thawed when it ended
