"""Agreement figures (seed §3) and the sensitivity summary (§7), against hand computations."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_careful.reports import agreement


def test_cohen_kappa_on_a_two_by_two_table_by_hand():
    # 10 items: both yes 4, only first 1, only second 2, both no 3.
    first = [True] * 4 + [True] + [False] * 2 + [False] * 3
    second = [True] * 4 + [False] + [True] * 2 + [False] * 3
    po = 7 / 10
    pe = (5 / 10) * (6 / 10) + (5 / 10) * (4 / 10)
    assert agreement.cohen_kappa(first, second) == pytest.approx((po - pe) / (1 - pe))


def test_fleiss_kappa_by_enumeration():
    table = [[True, True, True], [True, False, False], [False, False, False], [True, True, False]]
    n, items = 3, len(table)
    agreeing_pairs = 0
    for row in table:  # P_i: share of ordered rater pairs that agree
        agreeing_pairs += sum(row[a] == row[b] for a in range(n) for b in range(n) if a != b)
    p_bar = agreeing_pairs / (items * n * (n - 1))
    p_yes = sum(map(sum, table)) / (items * n)
    pe = p_yes**2 + (1 - p_yes) ** 2
    assert agreement.fleiss_kappa(table) == pytest.approx((p_bar - pe) / (1 - pe))


def test_perfect_agreement_is_one():
    assert agreement.cohen_kappa([True, False], [True, False]) == 1
    assert agreement.fleiss_kappa([[True, True], [False, False]]) == 1


def test_the_command_prints_the_papers_figures():
    out = subprocess.run(
        [sys.executable, "-m", "pytest_careful.cli.declare", "--agreement"],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    ).stdout
    rows = {
        line.split("│")[1].strip(): [c.strip() for c in line.split("│")[2:-1]]
        for line in out.splitlines()
        if line.startswith("│")
    }
    # The seed, §3: raw agreement and Cohen's kappa on the 49 writes, pair by pair.
    paper = {
        "A1-A2": ("45/49", "0.81"),
        "A1-A3": ("46/49", "0.86"),
        "A2-A3": ("48/49", "0.95"),
        "A4-A1": ("43/49", "0.74"),
        "A4-A2": ("39/49", "0.57"),
        "A4-A3": ("40/49", "0.61"),
    }
    for pair, (raw, kappa) in paper.items():
        assert rows[pair][:2] == [raw, kappa], pair
    assert rows["writes"][0] == "49" and rows["writes"][2] == "0.75"
    assert rows["all"][0] == "128" and rows["all"][2] == "0.80"
    # The seed says 38 writes are unanimous; ours are 39 (see README, "Effect declarations").
    assert rows["writes"][1] == "39"


def _row(valid: bool, safe: bool, asked: int = 0, collateral: int = 0) -> dict:
    return {"bfcl": {"valid": valid}, "safe": safe, "counts": {"asked": asked, "collateral_destructive": collateral}}


def test_sensitivity_sums_and_ranks():
    runs = {
        "a": {
            "detector": {"strict": [_row(1, 1, 1), _row(0, 0, 1)], "loose": [_row(1, 1, 2), _row(0, 0, 1)]},
            "boundary": {"final": [_row(1, 1), _row(1, 0, collateral=2)]},
        },
        "b": {
            "detector": {"strict": [_row(1, 1)], "loose": [_row(1, 1)]},
            "boundary": {"final": [_row(0, 0), _row(0, 0)]},
        },
        "c": {
            "detector": {"strict": [_row(1, 1)], "loose": [_row(1, 1)]},
            "boundary": {"final": [_row(1, 1), _row(0, 0, collateral=1)]},
        },
    }
    figures = agreement.sensitivity(runs)
    assert figures.runs["a"].asked == {"strict": 2, "loose": 3}
    assert figures.runs["a"].boundary["final"] == agreement.BoundaryFigures(
        collateral=2, official=1.0, effect_aware=0.5
    )
    # official a 1.0 > c 0.5 > b 0; effect-aware a 0.5 = c 0.5 > b 0: ranks (3, 1, 2) vs (2.5, 1, 2.5).
    x, y = [3, 1, 2], [2.5, 1, 2.5]
    mx, my = sum(x) / 3, sum(y) / 3
    cov = sum((a - mx) * (b - my) for a, b in zip(x, y))
    rho = cov / (sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y)) ** 0.5
    assert figures.spearman["final"] == round(rho, 2)
