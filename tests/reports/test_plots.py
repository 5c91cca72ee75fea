"""The scorecard's charts (plots.py): repeatable bytes, readable labels, who/what/how many in the title."""

from __future__ import annotations

import itertools
import xml.etree.ElementTree as ET
from typing import Any

import matplotlib
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from pytest_careful.reports import plots
from pytest_careful.scoring import rules

SVG = "{http://www.w3.org/2000/svg}"


def totals(n: int, bfcl: float, safe: float, **counts: int) -> dict[str, Any]:
    return {
        "conversations": n,
        "bfcl_accuracy": bfcl,
        "safe_accuracy": safe,
        "counts": {rule: counts.get(rule, 0) for rule in rules.NAMES},
    }


def card(model: str = "gpt-oss-20b", protocol: str = "standard") -> dict[str, Any]:
    """Figures chosen to be hard to draw: 100.0 beside 100.0 (the old chart's ``100.0100.0``)."""
    return {
        "provenance": {"model": model, "protocol": protocol, "label": model},
        "totals": {
            "multi_turn_base": totals(200, 1.0, 1.0, failed_calls=1234, redundant_reads=999),
            "multi_turn_miss_func": totals(200, 0.415, 0.37, collateral_destructive=7),
            "all": totals(400, 0.7075, 0.685, failed_calls=1234, redundant_reads=999, collateral_destructive=7),
        },
    }


COMPARISON = {
    "multi_turn_base": {"gained": 12, "lost": 3, "p": 0.03515625, "flipped": []},
    "multi_turn_miss_func": {"gained": 2, "lost": 2, "p": 1.0, "flipped": []},
    "all": {"gained": 14, "lost": 5, "p": 0.0636, "flipped": []},
}


def svg_texts(svg: str) -> list[str]:
    """Every text drawn in the SVG (text is kept as text: svg.fonttype none)."""
    return [t.text or "" for t in ET.fromstring(svg.encode()).iter(f"{SVG}text")]


@pytest.mark.parametrize("name", ["accuracy", "violations", "comparison"])
def test_same_input_gives_the_same_bytes(name: str) -> None:
    def draw() -> tuple[bytes, str]:
        figure = plots.charts(card(), COMPARISON, "baseline-run")[name]
        return plots.png(figure), plots.svg(figure)

    first, second = draw(), draw()
    assert first[0] == second[0] and first[1] == second[1]
    assert first[0].startswith(b"\x89PNG") and "<svg" in first[1]
    # No date, no matplotlib version: the same card gives the same file on another day.
    assert "<dc:date>" not in first[1] and matplotlib.__version__ not in first[1]
    assert matplotlib.__version__.encode() not in first[0]


def test_saving_leaves_matplotlib_settings_as_they_were() -> None:
    before = {k: matplotlib.rcParams[k] for k in ("svg.hashsalt", "svg.fonttype", "font.size")}
    plots.accuracy_svg(card())
    plots.accuracy_png(card())
    assert {k: matplotlib.rcParams[k] for k in before} == before


def test_accuracy_labels_and_title() -> None:
    texts = svg_texts(plots.accuracy_svg(card()))
    for value in ("100.0", "41.5", "37.0", "70.8", "68.5"):  # 0.7075 rounds half-even in neither direction
        assert value in texts
    assert texts.count("100.0") == 2  # BFCL and safe of base, each a label of its own
    assert "gpt-oss-20b · standard · n = 400" in texts
    assert "BFCL vs safe accuracy" in texts
    assert {"base", "miss_func", "all", "n = 200", "n = 400"} <= set(texts)


def test_violation_labels_and_title() -> None:
    figure_card = card(protocol="confirm")
    texts = svg_texts(plots.violations_svg(figure_card))
    assert {"1234", "999", "7"} <= set(texts)
    assert "gpt-oss-20b · confirm · n = 400" in texts
    # Under confirm, unconfirmed destructive calls mean something, and are drawn.
    assert "unconfirmed destructive" in texts
    assert "unconfirmed destructive" not in svg_texts(plots.violations_svg(card()))


def test_comparison_labels_p_values_and_title() -> None:
    texts = svg_texts(plots.comparison_svg(card(), COMPARISON, "last-release"))
    assert {"+12", "−3", "+2", "−2", "+14", "−5"} <= set(texts)
    assert {"p = 0.035", "p = 1.00", "p = 0.064"} <= set(texts)
    assert any("vs last-release" in t for t in texts)
    assert "gpt-oss-20b · standard · n = 400" in texts


def label_boxes(figure: Any) -> list[Any]:
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    renderer = canvas.get_renderer()
    return [t.get_window_extent(renderer) for ax in figure.axes for t in ax.texts]


@pytest.mark.parametrize(
    "draw", [plots.accuracy_figure, plots.violations_figure, lambda c: plots.comparison_figure(c, COMPARISON)]
)
def test_value_labels_do_not_overlap(draw: Any) -> None:
    boxes = label_boxes(draw(card()))
    assert len(boxes) >= 6
    for a, b in itertools.combinations(boxes, 2):
        assert not a.overlaps(b), (a, b)


def test_value_labels_stay_inside_the_figure() -> None:
    figure = plots.accuracy_figure(card())
    width, height = figure.bbox.width, figure.bbox.height
    for box in label_boxes(figure):
        assert 0 <= box.x0 and box.x1 <= width and 0 <= box.y0 and box.y1 <= height


def test_hostile_model_name_is_drawn_as_text() -> None:
    """A model name is not mathtext, not markup, and its control characters are shown escaped."""
    name = "$\\frac{a}{b}$ <script>alert(1)</script> \x1b[31m"
    svg = plots.accuracy_svg(card(model=name))
    assert "<script>" not in svg
    texts = svg_texts(svg)  # the title's first line, wrapped at blanks to the figure's width
    end = max(i for i, t in enumerate(texts) if t.endswith("n = 400"))  # the title comes after the ticks
    start = next(i for i in range(end, -1, -1) if texts[i].startswith("$"))
    title = " ".join(texts[start : end + 1])
    assert title.endswith("· standard · n = 400")
    assert title.startswith("$\\frac{a}{b}$ <script>alert(1)</script> \\x1b[31m")
    assert plots.accuracy_png(card(model=name)).startswith(b"\x89PNG")


def test_another_process_draws_the_same_bytes() -> None:
    """No hash seed, font cache or id counter of this process leaks into the files."""
    import hashlib
    import subprocess
    import sys

    code = (
        "import hashlib, sys; sys.path.insert(0, 'tests/reports'); from test_plots import card, COMPARISON; "
        "from pytest_careful.reports import plots; "
        "f = plots.charts(card(), COMPARISON, 'b'); "
        "print(*(hashlib.sha256(plots.png(x)).hexdigest() + hashlib.sha256(plots.svg(x).encode()).hexdigest() "
        "for x in f.values()))"
    )
    from conftest import ROOT

    other = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": "/usr/bin:/bin"},
    ).stdout.split()
    here = [
        hashlib.sha256(plots.png(x)).hexdigest() + hashlib.sha256(plots.svg(x).encode()).hexdigest()
        for x in plots.charts(card(), COMPARISON, "b").values()
    ]
    assert other == here


def test_a_tiny_p_reads_p_below_and_all_comes_last() -> None:
    # careful-report's pair charts showed "p = < 0.001", with "all" first (its comparison lists it first)
    comparison = {
        "all": {"gained": 0, "lost": 105, "p": 1e-30, "flipped": []},
        "multi_turn_base": {"gained": 0, "lost": 105, "p": 1e-30, "flipped": []},
    }
    texts = svg_texts(plots.comparison_svg({"provenance": {}, "totals": {}, "rows": []}, comparison))
    assert "p < 0.001" in texts and not any("= <" in t for t in texts)
    ticks = [t for t in texts if t in ("all", "base")]
    assert ticks == ["base", "all"]


@pytest.mark.parametrize("recorded, shown", [(None, "BFCL"), ("bfcl", "BFCL"), ("safe", "safe")])
def test_the_comparison_chart_names_the_verdict_it_paired(recorded: str | None, shown: str) -> None:
    """A scorecard from before ``regression_verdict`` was recorded paired BFCL's verdicts."""
    drawn = card()
    if recorded is not None:
        drawn["provenance"]["regression_verdict"] = recorded
    texts = " ".join(svg_texts(plots.comparison_svg(drawn, COMPARISON, "baseline-run")))
    assert f"{shown} gained/lost vs baseline-run" in texts and f"conversations ({shown} verdict)" in texts
