"""Charts reused from the last run's scorecard folder (chart_cache.py): never stale, same bytes as drawn."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import matplotlib
import pytest
from cycler import cycler
from test_plots import COMPARISON, card

from pytest_careful.reports import chart_cache, plots, scorecard
from pytest_careful.reports.card import Page


def full_card(**provenance: Any) -> dict[str, Any]:
    """A card with a real provenance and fields the charts do not show."""
    out = card()
    out["provenance"] = {
        **scorecard.provenance("gpt-oss-20b", "KEY-FC", "standard", "final", "strict", "decl", "sampling"),
        "label": "gpt-oss-20b",
        **provenance,
    }
    out["rows"] = []
    for totals in out["totals"].values():
        totals.update(
            strict_pass=1, steps_per_conversation=2.0, surplus_output_share=0.0, surplus_input_share=0.0, unscored=0
        )
    return out


@pytest.fixture(autouse=True)
def _no_tables(monkeypatch):
    """The data files are not what this module tests (and need real rows)."""
    monkeypatch.setattr(scorecard, "markdown", lambda card: "")
    monkeypatch.setattr(scorecard, "csv_text", lambda rows, custom=(): "")


def _write(directory: Path, the_card: dict[str, Any], comparison: Any = None) -> dict[str, bytes]:
    scorecard.write(directory, the_card, comparison, page=Page(baseline="base" if comparison else None))
    return {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.suffix in (".png", ".svg")}


def test_reused_charts_are_the_bytes_a_fresh_draw_gives(tmp_path, monkeypatch):
    first = _write(tmp_path / "a", full_card())
    assert set(first) == {"accuracy.png", "accuracy.svg", "violations.png", "violations.svg"}
    with monkeypatch.context() as m:
        m.setattr(plots, "chart_files", lambda *a, **k: pytest.fail("charts drawn"))
        again = _write(tmp_path / "a", full_card(date="2026-12-04", git_sha="def"))  # provenance the charts omit
    assert again == first
    fresh = _write(tmp_path / "b", full_card(date="2026-12-04"))
    assert fresh == first
    page = (tmp_path / "a" / "report.html").read_text()
    assert first["accuracy.svg"].decode()[first["accuracy.svg"].decode().find("<svg") :] in page


def test_the_reduced_inputs_draw_what_the_whole_card_draws():
    whole = full_card()
    inputs = chart_cache.inputs(whole, COMPARISON, "base")
    for name, figure in plots.charts(whole, COMPARISON, "base").items():
        assert plots.png(figure) == plots.chart_files(inputs.card, inputs.comparison, "base")[f"{name}.png"]


@pytest.mark.parametrize(
    "change",
    [
        lambda c: c["totals"]["multi_turn_base"].update(bfcl_accuracy=0.5),
        lambda c: c["totals"]["all"]["counts"].update(failed_calls=1),
        lambda c: c["provenance"].update(label="other"),
        lambda c: c["provenance"].update(protocol="confirm"),
        lambda c: c.update(totals=dict(reversed(list(c["totals"].items())))),  # the drawing order
    ],
)
def test_anything_the_charts_show_redraws_them(tmp_path, change):
    _write(tmp_path, full_card())
    changed = full_card()
    change(changed)
    key_before = chart_cache.key(chart_cache.inputs(full_card(), None, None))
    assert chart_cache.key(chart_cache.inputs(changed, None, None)) != key_before
    redrawn = _write(tmp_path, changed)
    assert redrawn == _write(tmp_path / "fresh", copy.deepcopy(changed))


def test_a_comparison_and_its_counts_are_in_the_key():
    plain = chart_cache.key(chart_cache.inputs(full_card(), None, None))
    compared = chart_cache.key(chart_cache.inputs(full_card(), COMPARISON, "base"))
    other = copy.deepcopy(COMPARISON)
    other["all"]["lost"] += 1
    assert (
        len(
            {
                plain,
                compared,
                chart_cache.key(chart_cache.inputs(full_card(), other, "base")),
                chart_cache.key(chart_cache.inputs(full_card(), COMPARISON, "other-base")),
            }
        )
        == 4
    )


def test_the_drawing_code_and_libraries_are_in_the_key(tmp_path, monkeypatch):
    inputs = chart_cache.inputs(full_card(), None, None)
    before = chart_cache.key(inputs)
    edited = tmp_path / "plots.py"
    edited.write_bytes(Path(plots.__file__).read_bytes() + b"\n# a change\n")
    with monkeypatch.context() as m:
        m.setattr(chart_cache, "_PLOTS_SOURCE", edited)
        assert chart_cache.key(inputs) != before
    real_version = chart_cache.importlib.metadata.version
    with monkeypatch.context() as m:
        m.setattr(
            chart_cache.importlib.metadata,
            "version",
            lambda name: "99.0" if name == "matplotlib" else real_version(name),
        )
        assert chart_cache.key(inputs) != before
    with monkeypatch.context() as m:
        m.setattr(chart_cache.rules, "NAMES", chart_cache.rules.NAMES + ("new_rule",))
        assert chart_cache.key(inputs) != before
    assert chart_cache.key(inputs) == before


@pytest.mark.parametrize("damage", ["edit", "remove", "truncate", "key-file", "key-file-gone"])
def test_a_changed_chart_file_or_key_file_is_drawn_again(tmp_path, damage):
    first = _write(tmp_path, full_card())
    target = tmp_path / "violations.svg"
    key_file = tmp_path / chart_cache.KEY_FILE
    if damage == "edit":
        target.write_text(target.read_text().replace("violations", "VIOLATIONS"))
    elif damage == "remove":
        target.unlink()
    elif damage == "truncate":
        target.write_bytes(target.read_bytes()[:100])
    elif damage == "key-file":
        key_file.write_text("{not json")
    else:
        key_file.unlink()
    assert chart_cache.load(tmp_path, chart_cache.key(chart_cache.inputs(full_card(), None, None))) is None
    assert _write(tmp_path, full_card()) == first  # drawn again, as first drawn


def test_charts_ignore_the_users_matplotlib_settings(tmp_path):
    """Drawn under the default style: a matplotlibrc cannot make a reused chart differ from a fresh one."""
    default = plots.chart_files(full_card())
    with matplotlib.rc_context(
        {"axes.facecolor": "#ff0000", "lines.linewidth": 9, "axes.prop_cycle": cycler(color=["#00ff00"])}
    ):
        assert plots.chart_files(full_card()) == default


def test_a_rerun_imports_no_matplotlib(pytester):
    """The reference job run twice: the second session end reuses the charts and never imports matplotlib."""
    pytester.makeconftest(
        "import sys\n"
        "def pytest_unconfigure(config):\n"
        "    if not hasattr(config, 'workerinput'):\n"
        "        open('matplotlib-imported.txt', 'a').write(str('matplotlib' in sys.modules) + '\\n')\n"
    )
    args = ["-p", "no:cacheprovider", "-n", "2", "--careful-model=reference", "--careful-category=base", "-k", "base_1"]
    folder = pytester.path / "scorecards" / "reference" / "standard"
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=111)
    first = {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix in (".png", ".svg")}
    pytester.runpytest_subprocess(*args).assert_outcomes(passed=111)
    again = {p.name: p.read_bytes() for p in folder.iterdir() if p.suffix in (".png", ".svg")}
    assert (pytester.path / "matplotlib-imported.txt").read_text().split() == ["True", "False"]
    assert again == first and len(first) == 4
