"""repeats.py: pass^k, pass@k, flip rate and tau-bench's pass^k estimator, against brute force."""

from __future__ import annotations

import itertools
import random
from fractions import Fraction

import pytest
from scipy.stats import binomtest

from pytest_careful.reports.repeat_stats import pass_hat_k, repeat_stats, wilson_interval

T, F = True, False


def test_known_flips_give_exact_shares() -> None:
    # Built so that: a passes 3/3, b and d flip, c never passes, e passes 3/3.
    outcomes = {"e": [T, T, T], "b": [T, F, T], "c": [F, F, F], "d": [F, T, F], "a": [T, T, T]}
    s = repeat_stats(outcomes)
    assert (s["k"], s["n"]) == (3, 5)
    assert s["pass_all"] == 2 / 5 and s["pass_any"] == 4 / 5 and s["flip_rate"] == 2 / 5
    assert s["mean"] == pytest.approx(9 / 15)
    assert s["flipped"] == ["b", "d"]


def test_single_repeat_never_flips_and_interval_is_wilson() -> None:
    outcomes = {f"c{i}": [i % 3 == 0] for i in range(30)}  # 10 of 30 pass
    s = repeat_stats(outcomes)
    assert s["pass_all"] == s["pass_any"] == s["mean"] == pytest.approx(10 / 30)
    assert s["flip_rate"] == 0 and s["flipped"] == []
    ci = binomtest(10, 30).proportion_ci(confidence_level=0.95, method="wilson")
    assert s["interval"] == pytest.approx([ci.low, ci.high], abs=1e-9)


@pytest.mark.parametrize(("successes", "n"), [(0, 5), (5, 5), (17, 40), (1, 1), (399, 800)])
def test_wilson_matches_scipy(successes: int, n: int) -> None:
    ci = binomtest(successes, n).proportion_ci(confidence_level=0.95, method="wilson")
    assert wilson_interval(successes, n) == pytest.approx((ci.low, ci.high), abs=1e-9)


def _brute_pass_hat(outcomes: dict[str, list[bool]], k: int) -> Fraction:
    """Mean over conversations of the share of k-subsets of repeats that all pass."""
    total = Fraction(0)
    for verdicts in outcomes.values():
        subsets = list(itertools.combinations(verdicts, k))
        total += Fraction(sum(all(s) for s in subsets), len(subsets))
    return total / len(outcomes)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pass_hat_k_matches_enumeration_over_subsets(seed: int) -> None:
    rng = random.Random(seed)
    outcomes = {f"c{i}": [rng.random() < 0.6 for _ in range(5)] for i in range(40)}
    for k in range(1, 6):
        assert pass_hat_k(outcomes, k) == pytest.approx(float(_brute_pass_hat(outcomes, k)), abs=1e-12)
    s = repeat_stats(outcomes)
    assert pass_hat_k(outcomes, 5) == pytest.approx(s["pass_all"])  # k = repeats: all must pass
    assert pass_hat_k(outcomes, 1) == pytest.approx(s["mean"])


def test_bad_input_is_refused() -> None:
    with pytest.raises(ValueError, match="same number of repeats"):
        repeat_stats({"a": [T, F], "b": [T]})
    with pytest.raises(ValueError, match="at least one repeat"):
        repeat_stats({"a": []})
    with pytest.raises(ValueError, match="between 1 and"):
        pass_hat_k({"a": [T, F]}, 3)
    assert repeat_stats({})["n"] == 0 and pass_hat_k({}, 1) == 0.0
