"""``--lf`` and ``--ff`` remember each run's failures apart: node ids are the same for every model."""

from __future__ import annotations

import re

import pytest

MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}
SELECTION = ["--careful-category=base", "-k", "multi_turn_base_1", "-p", "no:randomly"]


def _failed(result: pytest.RunResult) -> set[str]:
    return set(re.findall(r"^FAILED (multi_turn_\S+\[\w+\])", result.stdout.str(), re.M))


@pytest.mark.parametrize("mode", list(MODES))
def test_last_failed_is_per_model(pytester: pytest.Pytester, mode: str) -> None:
    ask = ["--careful-model=scripted:ask", "--careful-output=ask", *SELECTION, *MODES[mode]]
    reference = ["--careful-model=scripted:reference", "--careful-output=ref", *SELECTION, *MODES[mode]]
    first = pytester.runpytest_subprocess(*ask)
    failed = _failed(first)
    assert failed and len(failed) < 111, first.stdout.str()[-2000:]  # some pass: the ones with no call to ask about
    assert pytester.runpytest_subprocess(*reference).ret == 0  # the last run now: all pass
    # The reference has no failures of its own: --lf runs its whole selection, not the other model's failures.
    again = pytester.runpytest_subprocess(*reference, "--lf")
    again.assert_outcomes(passed=111)
    if mode == "no-xdist":  # pytest says it where it collects; under xdist the workers collect, silently
        assert "no previously failed tests" in again.stdout.str()
    # The first model's record was kept: --lf reruns exactly its failures, --ff puts them first.
    rerun = pytester.runpytest_subprocess(*ask, "--lf")
    assert _failed(rerun) == failed
    outcomes = rerun.parseoutcomes()  # (under xdist pytest does not count the workers' deselections)
    assert outcomes.get("failed") == len(failed) and "passed" not in outcomes
    in_order = ["--careful-model=scripted:ask", "--careful-output=ask", *SELECTION, "-p", "no:xdist", "-v"]
    first_failures = pytester.runpytest_subprocess(*in_order, "--ff")  # one process: the order is the run's
    order = re.findall(r"^(multi_turn_\S+\[\w+\]) (?:PASSED|FAILED)", first_failures.stdout.str(), re.M)
    assert set(order[: len(failed)]) == failed and len(order) == 111


def test_a_projects_own_failure_stays_in_the_record(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_own="def test_own():\n    assert False\n")
    both = ["--careful-category=base", "-k", "multi_turn_base_1 or test_own", "-p", "no:randomly", "test_own.py"]
    pytester.runpytest_subprocess("--careful-model=scripted:ask", "--careful-output=ask", *both)
    rerun = pytester.runpytest_subprocess("--careful-model=scripted:reference", *both, "--lf")
    assert "FAILED test_own.py::test_own" in rerun.stdout.str()
    rerun.assert_outcomes(failed=1, deselected=200)  # the project's failure; none of the other model's
