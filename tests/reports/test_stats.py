from __future__ import annotations

import json
import math
import random

import pytest
from scipy.stats import binomtest, spearmanr

from pytest_careful.reports import stats
from pytest_careful.reports.agreement import spearman_rho
from pytest_careful.reports.stats import Comparison, compare, compare_by_category, mcnemar_exact, spearman_p, to_json

# --- mcnemar_exact -----------------------------------------------------------


@pytest.mark.parametrize(
    ("gained", "lost", "digits", "expected"),
    [
        (84, 49, 3, 0.003),
        (38, 23, 3, 0.072),
        (71, 74, 2, 0.87),
        (86, 54, 3, 0.009),
    ],
)
def test_known_answers(gained: int, lost: int, digits: int, expected: float) -> None:
    assert round(mcnemar_exact(gained, lost), digits) == expected


def test_small_exact_values() -> None:
    # n = 1: 2 * P(X <= 0) = 2 * 1/2 = 1.
    assert mcnemar_exact(1, 0) == 1.0
    # n = 3, k = 0: 2 * 1/8.
    assert mcnemar_exact(3, 0) == 0.25
    # n = 4, k = 1: 2 * (1 + 4)/16.
    assert mcnemar_exact(1, 3) == 10 / 16
    # n = 10, k = 1: 2 * (1 + 10)/1024.
    assert mcnemar_exact(9, 1) == 22 / 1024


def test_no_discordant_pairs() -> None:
    assert mcnemar_exact(0, 0) == 1.0


@pytest.mark.parametrize("k", [1, 5, 50, 1000])
def test_equal_counts(k: int) -> None:
    assert mcnemar_exact(k, k) == 1.0


@pytest.mark.parametrize("k", [0, 1, 7, 500])
def test_off_by_one_counts(k: int) -> None:
    # Odd n with the closest possible split: exactly half the mass on each side.
    assert mcnemar_exact(k, k + 1) == 1.0


def test_symmetry() -> None:
    for a in range(40):
        for b in range(40):
            assert mcnemar_exact(a, b) == mcnemar_exact(b, a)


def test_range() -> None:
    for a in range(40):
        for b in range(40):
            assert 0.0 <= mcnemar_exact(a, b) <= 1.0


def test_monotone() -> None:
    # With the total fixed, a more lopsided split never gives a larger p.
    for n in range(60):
        ps = [mcnemar_exact(n - k, k) for k in range(n // 2 + 1)]
        assert ps == sorted(ps), n
    # With one side fixed at 0..20, adding to the larger side never increases p.
    for small in range(21):
        ps = [mcnemar_exact(small + extra, small) for extra in range(80)]
        assert all(x >= y for x, y in zip(ps, ps[1:])), small


def test_agrees_with_scipy_binomtest() -> None:
    for a in range(0, 61):
        for b in range(0, 61):
            n = a + b
            if n == 0:
                continue
            expected = binomtest(min(a, b), n, 0.5).pvalue
            assert mcnemar_exact(a, b) == pytest.approx(expected, abs=1e-12, rel=1e-9), (a, b)


@pytest.mark.parametrize(("a", "b"), [(120, 80), (300, 260), (700, 640), (1500, 1400), (2000, 1800)])
def test_agrees_with_scipy_binomtest_large(a: int, b: int) -> None:
    expected = binomtest(min(a, b), a + b, 0.5).pvalue
    assert mcnemar_exact(a, b) == pytest.approx(expected, abs=1e-12, rel=1e-9)


def test_tiny_p_does_not_underflow_to_garbage() -> None:
    # 2 / 2**1000: representable, and exact.
    assert mcnemar_exact(1000, 0) == 2.0 / 2.0**1000
    # 2 / 2**3000 underflows a double to 0.0, which is the correctly rounded value.
    assert mcnemar_exact(3000, 0) == 0.0
    assert math.isfinite(mcnemar_exact(2500, 500))


@pytest.mark.parametrize(("a", "b"), [(-1, 3), (3, -1)])
def test_negative_counts_rejected(a: int, b: int) -> None:
    with pytest.raises(ValueError, match="non-negative"):
        mcnemar_exact(a, b)


@pytest.mark.parametrize(("a", "b"), [(1.0, 3), (3, "2"), (True, 1)])
def test_non_int_counts_rejected(a: object, b: object) -> None:
    with pytest.raises(TypeError):
        mcnemar_exact(a, b)  # type: ignore[arg-type]


# --- compare -----------------------------------------------------------------

BASELINE = {
    "base_3": True,
    "base_1": False,
    "base_2": False,
    "long_0": True,
    "long_1": True,
    "miss_0": False,
    "miss_1": True,
}
CURRENT = {
    "base_1": True,  # gained
    "base_2": True,  # gained
    "base_3": True,  # both pass
    "long_0": False,  # lost
    "long_1": True,  # both pass
    "miss_0": False,  # both fail
    "miss_1": False,  # lost
}


def test_compare_by_hand() -> None:
    c = compare(CURRENT, BASELINE)
    # Gained: base_1, base_2. Lost: long_0, miss_1. n = 4, k = 2 -> p = 1.
    assert c == Comparison(
        gained=2,
        lost=2,
        p=1.0,
        flipped=(
            ("base_1", "gained"),
            ("base_2", "gained"),
            ("long_0", "lost"),
            ("miss_1", "lost"),
        ),
    )


def test_compare_lopsided() -> None:
    ids = [f"c{i:02d}" for i in range(12)]
    baseline = {i: False for i in ids}
    current = {i: True for i in ids}
    current["c03"] = False  # still failing: not a flip
    baseline["c07"] = True  # passes in both: not a flip
    c = compare(current, baseline)
    # 10 gained, 0 lost -> p = 2 / 2**10.
    assert (c.gained, c.lost) == (10, 0)
    assert c.p == 2 / 1024
    assert [cid for cid, _ in c.flipped] == [i for i in ids if i not in ("c03", "c07")]
    assert {kind for _, kind in c.flipped} == {"gained"}


def test_compare_identical_runs() -> None:
    c = compare(BASELINE, dict(BASELINE))
    assert c == Comparison(gained=0, lost=0, p=1.0, flipped=())


def test_compare_empty() -> None:
    assert compare({}, {}) == Comparison(gained=0, lost=0, p=1.0, flipped=())


def test_compare_reversed_swaps_gained_and_lost() -> None:
    fwd, back = compare(CURRENT, BASELINE), compare(BASELINE, CURRENT)
    assert (back.gained, back.lost, back.p) == (fwd.lost, fwd.gained, fwd.p)
    swap = {"gained": "lost", "lost": "gained"}
    assert back.flipped == tuple((cid, swap[kind]) for cid, kind in fwd.flipped)


def test_compare_mismatched_ids() -> None:
    current = dict(CURRENT)
    del current["base_1"]
    current["extra_9"] = True
    with pytest.raises(ValueError) as info:
        compare(current, BASELINE)
    msg = str(info.value)
    assert "missing from current" in msg and "'base_1'" in msg
    assert "missing from baseline" in msg and "'extra_9'" in msg


def test_compare_mismatch_message_is_bounded() -> None:
    baseline = {f"id{i:03d}": True for i in range(100)}
    with pytest.raises(ValueError) as info:
        compare({}, baseline)
    msg = str(info.value)
    assert "100 id(s) missing from current" in msg
    assert "'id000'" in msg and "and 95 more" in msg
    assert "'id099'" not in msg
    assert "missing from baseline" not in msg


# --- compare_by_category / to_json -------------------------------------------


def category_of(cid: str) -> str:
    return cid.rsplit("_", 1)[0]


def test_compare_by_category_by_hand() -> None:
    result = compare_by_category(CURRENT, BASELINE, category_of)
    assert list(result) == ["base", "long", "miss", "all"]
    # base: base_1, base_2 gained -> n = 2, k = 0 -> p = 2 * 1/4.
    assert result["base"] == Comparison(gained=2, lost=0, p=0.5, flipped=(("base_1", "gained"), ("base_2", "gained")))
    # long: long_0 lost -> n = 1 -> p = 1.
    assert result["long"] == Comparison(gained=0, lost=1, p=1.0, flipped=(("long_0", "lost"),))
    # miss: miss_1 lost -> n = 1 -> p = 1.
    assert result["miss"] == Comparison(gained=0, lost=1, p=1.0, flipped=(("miss_1", "lost"),))
    assert result["all"] == compare(CURRENT, BASELINE)


def test_compare_by_category_counts_add_up() -> None:
    result = compare_by_category(CURRENT, BASELINE, category_of)
    per_cat = [c for k, c in result.items() if k != "all"]
    assert sum(c.gained for c in per_cat) == result["all"].gained
    assert sum(c.lost for c in per_cat) == result["all"].lost
    assert sorted(f for c in per_cat for f in c.flipped) == list(result["all"].flipped)


def test_compare_by_category_unflipped_category_present() -> None:
    result = compare_by_category({"a_1": True, "b_1": True}, {"a_1": True, "b_1": False}, category_of)
    assert result["a"] == Comparison(gained=0, lost=0, p=1.0, flipped=())
    assert result["b"] == Comparison(gained=1, lost=0, p=1.0, flipped=(("b_1", "gained"),))


def test_compare_by_category_mismatched_ids() -> None:
    with pytest.raises(ValueError, match="missing from baseline"):
        compare_by_category({**CURRENT, "new_0": True}, BASELINE, category_of)


def test_compare_by_category_reserved_name() -> None:
    with pytest.raises(ValueError, match="reserved"):
        compare_by_category(CURRENT, BASELINE, lambda cid: "all")


def test_to_json() -> None:
    result = compare_by_category(CURRENT, BASELINE, category_of)
    out = to_json(result)
    assert out["base"] == {
        "gained": 2,
        "lost": 0,
        "p": 0.5,
        "flipped": [["base_1", "gained"], ["base_2", "gained"]],
    }
    assert out["all"] == {
        "gained": 2,
        "lost": 2,
        "p": 1.0,
        "flipped": [["base_1", "gained"], ["base_2", "gained"], ["long_0", "lost"], ["miss_1", "lost"]],
    }
    assert list(out) == list(result)
    assert json.loads(json.dumps(out)) == out


@pytest.mark.parametrize(
    ("p", "shown"), [(0.0, "< 0.0001"), (0.00009, "< 0.0001"), (0.0001, "0.0001"), (0.0312, "0.0312"), (1.0, "1.0000")]
)
def test_p_text_never_shows_a_tiny_p_as_zero(p: float, shown: str) -> None:
    assert stats.p_text(p) == shown


# --- spearman_p: scipy.stats.spearmanr is the oracle ------------------------------


def test_spearman_p_agrees_with_scipy() -> None:
    """Ranks with and without ties, 3 to 40 pairs, positive, negative, perfect and no correlation."""
    rng = random.Random(20261203)
    compared = 0
    for _ in range(2000):
        n = rng.randint(3, 40)
        x = [rng.randint(0, rng.choice((2, 5, 1000))) for _ in range(n)]
        y = (
            [v + rng.choice((0, 1, -3, 50)) * rng.random() for v in x]
            if rng.random() < 0.5
            else [rng.random() for _ in range(n)]
        )
        rho = spearman_rho(x, y)
        if rho is None:
            continue
        expected = spearmanr(x, y)
        assert rho == pytest.approx(float(expected.statistic), abs=1e-12)
        # |rho| = 1: p is 0; scipy's rounding of rho can leave a p of order 1e-24.
        assert spearman_p(rho, n) == pytest.approx(float(expected.pvalue), rel=1e-9, abs=1e-20), (x, y)
        compared += 1
    assert compared > 1500


def test_spearman_p_without_degrees_of_freedom_is_nan_as_in_scipy() -> None:
    assert math.isnan(float(spearmanr([1, 2], [2, 1]).pvalue))
    assert math.isnan(spearman_p(-1.0, 2)) and math.isnan(spearman_p(float("nan"), 10))
