"""Every text of a chart lies inside it: a long title is wrapped, a long tick label given room,
not cut at the figure's edge.

The charts are read back from the files as a user gets them (careful-report's page, a scorecard's
SVG), and each ``<text>`` is measured with matplotlib's Agg renderer at the PNG's resolution, in the
font and size the SVG names, from the position and anchor the SVG gives it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from matplotlib.backends.backend_agg import RendererAgg
from matplotlib.font_manager import FontProperties
from test_compare_browser import minimal_card

from pytest_careful.data import dataset
from pytest_careful.reports import compare_runs, plots

SVG = re.compile(r"<svg\b[^>]*\bviewBox=\"0 0 ([\d.]+) ([\d.]+)\"[^>]*>(.*?)</svg>", re.S)
TEXT = re.compile(r"<text\b([^>]*)>([^<]*)</text>")
#: The charts' PNG resolution: a text must fit as the PNG draws it, and as the SVG's does in a browser.
DPI = 100


def _texts_out_of_bounds(svg_width: float, body: str) -> list[str]:
    """The texts of one SVG that reach past its left or right edge (rotated ones left out)."""
    renderer = RendererAgg(1, 1, DPI)  # measured as the PNG draws it: hinted, a little wider than at 72 dpi
    out = []
    for attributes, raw in TEXT.findall(body):
        if "rotate(-90" in attributes:
            continue
        text = raw.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("&#39;", "'")
        size = float(re.search(r"font-size: ([\d.]+)px", attributes).group(1))  # type: ignore[union-attr]
        at = re.search(r'\bx="([-\d.]+)"', attributes) or re.search(r"translate\(([-\d.]+) ", attributes)
        assert at is not None, attributes
        anchor = re.search(r"text-anchor: (\w+)", attributes)
        prop = FontProperties(family="DejaVu Sans", size=size)
        width = renderer.get_text_width_height_descent(text, prop, False)[0] * 72 / DPI  # in points, the SVG's unit
        left = (
            float(at.group(1)) - {"start": 0, "middle": width / 2, "end": width}[anchor.group(1) if anchor else "start"]
        )
        if left < -0.5 or left + width > svg_width + 0.5:
            out.append(f"{text!r}: {left:.1f}..{left + width:.1f} of {svg_width}")
    return out


@pytest.mark.parametrize("label", ["scripted_ask", "a-label-of-forty-characters-or-so-for-it"])
def test_careful_report_charts_keep_their_titles_inside(tmp_path: Path, label: str) -> None:
    """The README's pair (scripted_ask [standard] vs [confirm]) and a longer label."""
    ids = sorted(c.id for c in dataset.load(("multi_turn_base",)))
    for protocol, passing in (("standard", 22), ("confirm", 200)):
        folder = tmp_path / "cards" / protocol
        folder.mkdir(parents=True)
        card = minimal_card({cid: i < passing for i, cid in enumerate(ids)}, label, "scripted:ask", protocol)
        (folder / "scorecard.json").write_text(json.dumps(card), encoding="utf-8")
    assert compare_runs.main([str(tmp_path / "cards"), "--out", str(tmp_path / "out")]) == 0
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    charts = SVG.findall(page)
    assert len(charts) == 2  # the accuracies and the one pair
    assert "McNemar" in charts[1][2]
    for width, _, body in charts:
        assert _texts_out_of_bounds(float(width), body) == []


def test_scorecard_charts_keep_a_long_model_baseline_and_rule_name_inside() -> None:
    rule = "a_rule_of_the_runs_own_whose_name_is_48_letters"  # the longest name a rule may have
    totals = {"conversations": 200, "bfcl_accuracy": 0.5, "safe_accuracy": 0.4, "counts": {rule: 3}}
    card = {
        "provenance": {
            "model": "org/" + "a-long-model-name-" * 3,
            "label": "nightly-" * 6,
            "protocol": "confirm",
            "custom_rules": [{"name": rule, "description": "", "gated": False}],
        },
        "totals": {"multi_turn_base": totals, "all": totals},
    }
    comparison = {c: {"gained": 3, "lost": 1, "p": 0.625} for c in ("multi_turn_base", "all")}
    for name, text in plots.chart_files(card, comparison, "the-baseline-run-of-last-week-" * 2).items():
        if name.endswith(".svg"):
            [(width, _, body)] = SVG.findall(str(text))
            assert _texts_out_of_bounds(float(width), body) == [], name
