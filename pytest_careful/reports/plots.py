"""The scorecard's charts, drawn with matplotlib: PNG for a PR comment, SVG for report.html.

Every function takes the scorecard dict (``scorecard.scorecard``, or what
``chart_cache.inputs`` cuts of it: a ``ChartCard``) and, for the comparison, the
comparison dict (``stats.to_json``) and returns bytes (PNG) or text (SVG), so that
``careful-report`` can draw the same charts.

Nothing here touches pyplot or leaves rcParams changed: figures are
``matplotlib.figure.Figure`` objects drawn by the Agg/SVG canvases, and the
settings that make the output byte-for-byte repeatable (no date, a fixed
creator, a fixed SVG hash salt, text kept as text) apply only while saving.
"""

from __future__ import annotations

import functools
import io
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Literal

from ..common.text import escape
from ..protocols import registry as protocols
from ..scoring import rules
from . import own_rules
from .stats import VERDICT_NAMES, compared_verdict

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties
    from matplotlib.ticker import MaxNLocator
    from matplotlib.typing import RcKeyType

    from .chart_cache import ChartCard, ChartComparison

BFCL_COLOUR = "#4272c4"
SAFE_COLOUR = "#ed7d31"
GAINED_COLOUR = "#2e8b57"
LOST_COLOUR = "#c0392b"
CATEGORY_COLOURS = ("#4272c4", "#ed7d31", "#7f7f7f", "#9b59b6", "#2e8b57")
#: Written into every file instead of matplotlib's version and the date: the same card, the same bytes.
CREATOR = "pytest-careful"
_SAVE_RC: dict[RcKeyType, object] = {
    "svg.hashsalt": "pytest-careful",  # clip-path ids are hashes: salted the same, they repeat
    "svg.fonttype": "none",  # text stays text (searchable, testable, small); the browser draws it
    "svg.image_inline": True,
    "font.family": "DejaVu Sans",  # bundled with matplotlib: the same metrics everywhere
    "font.size": 9,
}
_PNG_METADATA: dict[str, str | None] = {"Software": CREATOR}
#: Pixels per inch of the PNG files (the SVG's text is measured as the PNG draws it).
_DPI = 100
_SVG_METADATA: dict[str, str | None] = {"Creator": CREATOR, "Date": None}
#: Rules drawn in the violations chart (``unconfirmed_destructive`` only means something under confirm).
_SHORT_RULES = {
    "collateral_destructive": "collateral destructive",
    "beyond_reference_destructive": "beyond ref. destructive",
    "beyond_reference_write": "beyond ref. write",
    "beyond_reference_read": "beyond ref. read",
    "duplicate_writes": "duplicate writes",
    "redundant_reads": "redundant reads",
    "failed_calls": "failed calls",
    "asked": "asked",
    "unconfirmed_destructive": "unconfirmed destructive",
}


def accuracy_png(card: ChartCard) -> bytes:
    """BFCL vs safe accuracy per category, as PNG bytes."""
    return png(accuracy_figure(card))


def accuracy_svg(card: ChartCard) -> str:
    """BFCL vs safe accuracy per category, as SVG text."""
    return svg(accuracy_figure(card))


def violations_png(card: ChartCard) -> bytes:
    """Rule violations per category, as PNG bytes."""
    return png(violations_figure(card))


def violations_svg(card: ChartCard) -> str:
    """Rule violations per category, as SVG text."""
    return svg(violations_figure(card))


def comparison_png(card: ChartCard, comparison: Mapping[str, ChartComparison], baseline: str | None = None) -> bytes:
    """Gained and lost conversations per category against a baseline, with McNemar's p, as PNG."""
    return png(comparison_figure(card, comparison, baseline))


def comparison_svg(card: ChartCard, comparison: Mapping[str, ChartComparison], baseline: str | None = None) -> str:
    """Gained and lost conversations per category against a baseline, with McNemar's p, as SVG."""
    return svg(comparison_figure(card, comparison, baseline))


def charts(
    card: ChartCard, comparison: Mapping[str, ChartComparison] | None = None, baseline: str | None = None
) -> dict[str, Figure]:
    """The charts of a scorecard by file stem: ``accuracy``, ``violations`` and, given one, ``comparison``."""
    figures = {"accuracy": accuracy_figure(card), "violations": violations_figure(card)}
    if comparison:
        figures["comparison"] = comparison_figure(card, comparison, baseline)
    return figures


def chart_files(
    card: ChartCard, comparison: Mapping[str, ChartComparison] | None = None, baseline: str | None = None
) -> dict[str, bytes | str]:
    """Each chart as ``<name>.png`` bytes and ``<name>.svg`` text, as the scorecard folder holds them.

    Drawn under matplotlib's default style, whatever the user's matplotlibrc or rcParams say:
    the files depend on the card and the libraries' versions alone, so that ``chart_cache``
    may reuse them.
    """
    from matplotlib import style  # matplotlib: imported at the first chart, not by every scoring process

    files: dict[str, bytes | str] = {}
    with style.context("default"):
        for name, figure in charts(card, comparison, baseline).items():
            files[f"{name}.png"], files[f"{name}.svg"] = png(figure), svg(figure)
    return files


def warm() -> None:
    """The imports ``chart_files`` makes, and the font it draws with looked up (``scorecard.warm_charts``)."""
    from matplotlib import font_manager, style  # noqa: F401  (matplotlib: imported here to be ready, see above)
    from matplotlib.backends import backend_agg, backend_svg  # noqa: F401
    from matplotlib.figure import Figure  # noqa: F401

    font_manager.findfont(str(_SAVE_RC["font.family"]))


def png(figure: Figure) -> bytes:
    """The figure as PNG bytes (no date, a fixed creator)."""
    return _save(figure, "png", _PNG_METADATA).getvalue()


def svg(figure: Figure) -> str:
    """The figure as SVG text (no date, a fixed creator and hash salt, text as text)."""
    return _save(figure, "svg", _SVG_METADATA).getvalue().decode("utf-8")


def _save(figure: Figure, fmt: str, metadata: dict[str, str | None]) -> io.BytesIO:
    from matplotlib import rc_context  # matplotlib: imported at the first chart, not by every scoring process

    out = io.BytesIO()
    with rc_context(_SAVE_RC), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a glyph DejaVu lacks (a model name in CJK) draws as a box
        figure.savefig(out, format=fmt, dpi=_DPI, metadata=metadata)
    return out


# --- the figures -----------------------------------------------------------------------


def title(card: ChartCard, what: str) -> str:
    """``model [label] · condition · n = N`` over ``what``: who, under which condition, on how many."""
    prov = card["provenance"]
    model, label = str(prov.get("model", "?")), prov.get("label")
    who = model if label in (None, "", model) else f"{model} [{label}]"
    n = card["totals"]["all"].get("conversations", 0) if "all" in card["totals"] else 0
    condition = printable(str(prov.get("protocol", "?")), 20) + repeat_of(prov)
    return f"{printable(who, 60)} · {condition} · n = {n}\n{what}"


def repeat_of(prov: Mapping[str, object]) -> str:
    """`` · repeat 2 of 3`` for one repeat's scorecard (``--careful-repeat``), else empty: its charts and
    page must not pass for the whole run's."""
    repeat, repeats = prov.get("repeat"), prov.get("repeats")
    if not isinstance(repeat, int) or isinstance(repeat, bool):
        return ""
    return f" · repeat {repeat}" + (
        f" of {repeats}" if isinstance(repeats, int) and not isinstance(repeats, bool) else ""
    )


def printable(text: str, limit: int = 90) -> str:
    """Text safe to draw: control and invisible characters escaped, cut to ``limit`` characters."""
    out = escape(text)
    return out if len(out) <= limit else out[: limit - 1] + "…"


def _categories(card: ChartCard) -> list[str]:
    """Categories in the scorecard's order, ``all`` last (a reloaded JSON sorts it first)."""
    return [c for c in card["totals"] if c != "all"] + (["all"] if "all" in card["totals"] else [])


def _short(category: str) -> str:
    return printable(category.removeprefix("multi_turn_"), 30)  # a scorecard read back may hold anything


def _new_figure(width: float, height: float, left: float = 0.75, right: float = 1.0) -> Figure:
    """A figure with fixed margins in inches (``left`` for tick labels, ``right`` for the legend).

    Fixed, not matplotlib's constrained layout: that one costs more than drawing the chart.
    """
    from matplotlib.figure import Figure  # matplotlib: imported at the first chart, not by every scoring process

    figure = Figure(figsize=(width, height))
    figure.subplots_adjust(left=left / width, right=1 - right / width, top=1 - 0.6 / height, bottom=0.55 / height)
    return figure


def accuracy_figure(card: ChartCard) -> Figure:
    """Grouped bars, BFCL beside safe, one group per category; each bar labelled with its %."""
    categories = _categories(card)
    totals = card["totals"]
    figure = _new_figure(max(6.0, 1.25 * len(categories) + 2.0), 4.2)
    ax = figure.add_subplot()
    width = 0.38
    bars_of: tuple[tuple[float, Literal["bfcl_accuracy", "safe_accuracy"], str, str], ...] = (
        (-width / 2, "bfcl_accuracy", "BFCL", BFCL_COLOUR),
        (width / 2, "safe_accuracy", "safe", SAFE_COLOUR),
    )
    for offset, key, name, colour in bars_of:
        values = [100 * totals[c][key] for c in categories]
        bars = ax.bar([i + offset for i in range(len(categories))], values, width, label=name, color=colour)
        ax.bar_label(bars, labels=[f"{v:.1f}" for v in values], padding=2, fontsize=8)
    ax.set_xticks(range(len(categories)), labels=[f"{_short(c)}\nn = {totals[c]['conversations']}" for c in categories])
    ax.set_ylim(0, 112)  # room above 100 for the labels
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("% of conversations")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    _frame(ax)
    set_title(figure, ax, title(card, "BFCL vs safe accuracy"))
    return figure


def violation_rules(card: ChartCard) -> tuple[str, ...]:
    """The rules the violations chart shows: the built-in ones (``unconfirmed_destructive`` only under
    confirm), then the run's own (``pytest_careful_rules``)."""
    confirm = protocols.has_scripted_user(card["provenance"].get("protocol"))
    dropped = own_rules.off(card["provenance"])
    built_in = tuple(r for r in rules.NAMES if (confirm or r != "unconfirmed_destructive") and r not in dropped)
    return built_in + tuple(r for r in own_rules.names(card["provenance"]) if r not in built_in)


def violations_figure(card: ChartCard) -> Figure:
    """Horizontal bars: per rule, one bar per category, labelled with its count."""
    categories = [c for c in _categories(card) if c != "all"] or ["all"]
    shown = violation_rules(card)
    height = 0.8 / len(categories)
    figure = _new_figure(7.5, max(3.0, 1.2 + 0.15 * len(shown) * len(categories)), left=1.9, right=1.45)
    ax = figure.add_subplot()
    largest = 0
    for index, category in enumerate(categories):
        counts = [card["totals"][category]["counts"].get(r, 0) for r in shown]
        largest = max(largest, *counts)
        positions = [r + (index - (len(categories) - 1) / 2) * height for r in range(len(shown))]
        bars = ax.barh(
            positions, counts, height, label=_short(category), color=CATEGORY_COLOURS[index % len(CATEGORY_COLOURS)]
        )
        ax.bar_label(bars, labels=[str(c) for c in counts], padding=2, fontsize=7)
    ax.set_yticks(range(len(shown)), labels=[_SHORT_RULES.get(r, r) for r in shown])
    fit_tick_labels(figure, ax)
    ax.invert_yaxis()  # the rules read top to bottom in their usual order
    ax.set_xlim(0, max(1, largest) * 1.15)  # room after the longest bar for its label
    ax.xaxis.set_major_locator(_integer_ticks())
    ax.set_xlabel("violations (calls; asked: turns)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    _frame(ax)
    set_title(figure, ax, title(card, "rule violations per category"))
    return figure


def comparison_figure(
    card: ChartCard, comparison: Mapping[str, ChartComparison], baseline: str | None = None
) -> Figure:
    """Per category, conversations gained (up) and lost (down) against the baseline, and McNemar's p."""
    categories = [c for c in _categories(card) if c in comparison]
    categories += [c for c in comparison if c not in categories]
    categories.sort(key=lambda c: c == "all")  # stable: "all" last, as in every table
    figure = _new_figure(max(6.0, 1.25 * len(categories) + 2.0), 4.2)
    ax = figure.add_subplot()
    gained = [comparison[c]["gained"] for c in categories]
    lost = [comparison[c]["lost"] for c in categories]
    up = ax.bar(range(len(categories)), gained, 0.6, label="gained", color=GAINED_COLOUR)
    down = ax.bar(range(len(categories)), [-n for n in lost], 0.6, label="lost", color=LOST_COLOUR)
    ax.bar_label(up, labels=[f"+{n}" for n in gained], padding=2, fontsize=8)
    ax.bar_label(down, labels=[f"−{n}" for n in lost], padding=2, fontsize=8)
    reach = max([1, *gained, *lost]) * 1.3  # room beyond the longest bar for its label
    ax.set_ylim(-reach, reach)
    ax.axhline(0, color="#333333", linewidth=0.8)
    ax.set_xticks(range(len(categories)), labels=[f"{_short(c)}\np {_p(comparison[c]['p'])}" for c in categories])
    ax.yaxis.set_major_locator(_integer_ticks())
    ax.yaxis.set_major_formatter(lambda value, _: f"{abs(value):.0f}")  # lost counts drawn downwards
    verdict = VERDICT_NAMES[compared_verdict(card["provenance"])]
    ax.set_ylabel(f"conversations ({verdict} verdict)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    _frame(ax)
    against = f" vs {printable(baseline, 40)}" if baseline else " vs the baseline"
    # no-break spaces: a title too long for one line breaks before the parenthesis, not inside it
    set_title(figure, ax, title(card, f"{verdict} gained/lost{against} (exact\u00a0McNemar\u00a0p)"))
    return figure


#: Room kept between a title and the figure's right edge, in inches (a browser draws the SVG's
#: text in its own copy of the font).
_TITLE_EDGE = 0.1
#: A title line's height, as a multiple of its font size (matplotlib's default line spacing).
_LINE_SPACING = 1.2


def set_title(figure: Figure, ax: Axes, text: str) -> None:
    """``text`` as the axes' title, left-aligned, its lines wrapped to the figure's width: a long model,
    label or baseline name would run off the edge and be cut. Each line added makes the figure taller
    by its height, the axes keeping theirs."""
    heading = ax.set_title(text, parse_math=False, loc="left")
    room = (figure.get_figwidth() * (1 - figure.subplotpars.left) - _TITLE_EDGE) * 72  # points
    prop = heading.get_fontproperties()
    lines = [piece for line in text.split("\n") for piece in _wrapped(line, prop, room)]
    added = len(lines) - (text.count("\n") + 1)
    if added:
        heading.set_text("\n".join(lines))
        _grow_top(figure, added * prop.get_size_in_points() * _LINE_SPACING / 72)


#: What lies between a y tick label and the axes (tick, pad) and before it (the figure's edge), in points.
_TICK_ROOM = 12.0


def fit_tick_labels(figure: Figure, ax: Axes) -> None:
    """The figure wider on the left where a y tick label (a run's name, a rule of the run's own) is
    wider than the margin: the label would be cut at the edge. The axes keep their width."""
    widest = max((_width(t.get_text(), t.get_fontproperties()) for t in ax.get_yticklabels()), default=0.0)
    width, params = figure.get_figwidth(), figure.subplotpars
    left, right = params.left * width, (1 - params.right) * width
    extra = (widest + _TICK_ROOM) / 72 - left
    if extra > 0:
        figure.set_figwidth(width + extra)
        figure.subplots_adjust(left=(left + extra) / (width + extra), right=1 - right / (width + extra))


def _wrapped(line: str, prop: FontProperties, room: float) -> list[str]:
    """``line`` in lines no wider than ``room`` points: broken at blanks, a word too long for one line cut."""
    out: list[str] = []
    current = ""
    for word in line.split(" "):
        joined = f"{current} {word}" if current else word
        if _width(joined, prop) <= room:
            current = joined
            continue
        if current:
            out.append(current)
        pieces = _cut(word, prop, room)
        out.extend(pieces[:-1])
        current = pieces[-1]
    return out + [current]


def _cut(word: str, prop: FontProperties, room: float) -> list[str]:
    """A word in pieces no wider than ``room`` (one character at least each)."""
    pieces = [""]
    for char in word:
        if pieces[-1] and _width(pieces[-1] + char, prop) > room:
            pieces.append("")
        pieces[-1] += char
    return pieces


def _width(text: str, prop: FontProperties) -> float:
    """How wide ``text`` is drawn in ``prop``, in points, as the PNG draws it (hinted at its dpi: a
    little wider than the glyphs' outlines)."""
    width = _renderer().get_text_width_height_descent(text, prop, ismath=False)[0]
    return float(width) * 72 / _DPI


def _integer_ticks() -> MaxNLocator:
    from matplotlib.ticker import MaxNLocator  # matplotlib: imported at the first chart, not by every scoring process

    return MaxNLocator(integer=True)


@functools.cache
def _renderer() -> RendererAgg:
    from matplotlib.backends.backend_agg import RendererAgg  # matplotlib: imported at the first chart

    return RendererAgg(1, 1, _DPI)


def _grow_top(figure: Figure, inches: float) -> None:
    """The figure taller by ``inches`` at the top, the axes' height and bottom margin kept."""
    height = figure.get_figheight()
    top, bottom = (1 - figure.subplotpars.top) * height, figure.subplotpars.bottom * height
    figure.set_figheight(height + inches)
    figure.subplots_adjust(top=1 - (top + inches) / (height + inches), bottom=bottom / (height + inches))


def _p(p: float) -> str:
    """``= 0.035`` (two significant digits below 0.1: the reader compares it with 0.05), ``< 0.001``."""
    if p < 0.001:
        return "< 0.001"
    return "= " + (f"{p:.2g}" if p < 0.1 else f"{p:.2f}")


def _frame(ax: Axes) -> None:
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)


RENDERERS: dict[str, Callable[[Figure], bytes | str]] = {"png": png, "svg": svg}
