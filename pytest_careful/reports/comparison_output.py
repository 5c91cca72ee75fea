"""careful-report's files: ``table.md``, ``report.html`` (self-contained, autoescaped) and
``comparison.json``."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from jinja2 import Environment, PackageLoader, select_autoescape

from . import plots
from .comparison import RankAgreement, Report, Table5Row, format_p
from .own_rules import OFF
from .runs import cut_name, printable, visible

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from .chart_cache import ChartCard

DASH = "–"


TABLE5_COLUMNS = (
    "model",
    "condition",
    "b",
    "mf",
    "mp",
    "lc",
    "mean",
    "safe",
    "collateral",
    "asked",
    "yes / no / restate",
    "confirmed %",
    "strict",
    "+ / −",
    "p",
)


LEGEND = (
    "b, mf, mp, lc: BFCL accuracy (%) on base, miss_func, miss_param, long_context; mean: their mean over "
    "the categories present; safe: the same mean of success under effect safety (BFCL pass, no collateral "
    "destructive call, no duplicate write)",
    "collateral: destructive calls beyond the reference, summed over the categories; asked: turns answered "
    "with a question instead of a call",
    "yes / no / restate: the scripted user's answers; confirmed %: destructive calls preceded by a yes in "
    "the same turn; strict: conversations whose reference needs a destructive call that pass with every "
    "destructive call confirmed (of the number in the header) - these three apply to confirm runs only",
    "+ / −: conversations passing BFCL here and failing in the standard run of the same model and "
    "settings (leaving out the settings of one protocol only, as confirm's user script), and the reverse; "
    "p: exact two-sided McNemar; (1): see the note of that number below the table; –: no data for this column",
)


OWN_LEGEND = (
    "columns after p: rules of the runs' own (pytest_careful_rules), violations summed over the conversations "
    "compared; –: a run that did not check that rule",
)


def own_columns(report: Report) -> tuple[str, ...]:
    """The rules of the runs' own (``pytest_careful_rules``), a Table 5 column each, in first-seen order."""
    return tuple(dict.fromkeys(name for row in report["table5"] for name in row.get("custom", {})))


def standard_notes(report: Report) -> list[str]:
    """The notes on Table 5's pairings with a standard run, numbered in the table's order from 1."""
    return [row["standard_note"] for row in report["table5"] if row.get("standard_note")]


def cells(row: Table5Row, own_rules: Sequence[str] = (), note: int | None = None) -> dict[str, str]:
    """Table 5 cells as text; a column without data shows a dash, never 0; ``note``: the number of the
    row's note on its pairing with a standard run, shown beside ``+ / −``."""

    def pct(key: Literal["b", "mf", "mp", "lc", "mean", "safe", "confirmed_pct"]) -> str:
        return DASH if row[key] is None else f"{row[key]:.1f}"

    vs = row["vs_standard"]
    model = (
        cut_name(row["model"])
        if row["label"] in (None, "", row["model"])
        else f"{cut_name(row['model'])} ({cut_name(row['label'])})"
    )
    return {
        "model": visible(model) + _run_suffix(row),
        "condition": visible(cut_name(row["condition"])),
        "b": pct("b"),
        "mf": pct("mf"),
        "mp": pct("mp"),
        "lc": pct("lc"),
        "mean": pct("mean"),
        "safe": pct("safe"),
        "collateral": OFF if row["collateral"] is None else str(row["collateral"]),
        "asked": OFF if row["asked"] is None else str(row["asked"]),
        "yes / no / restate": DASH if row["answers"] is None else " / ".join(map(str, row["answers"])),
        "confirmed %": pct("confirmed_pct"),
        "strict": DASH if row["strict"] is None else str(row["strict"]),
        "+ / −": (DASH if vs is None else f"{vs['gained']} / {vs['lost']}") + (f" ({note})" if note else ""),
        "p": DASH if vs is None else format_p(vs["p"]),
        # a run without one of the rules shows a dash: it was not checked there, which is not 0
        **{name: str(row["custom"][name]) if name in row.get("custom", {}) else DASH for name in own_rules},
    }


def _run_suffix(row: Table5Row) -> str:
    """`` repeat 2`` or `` #2``: what tells apart Table 5 rows of the same model, label and condition."""
    prefix = visible(f"{cut_name(row['label'] or row['model'])} [{cut_name(row['condition'])}]")
    name = str(row.get("run") or "")
    return name[len(prefix) :] if name.startswith(prefix) else ""


def strict_header(report: Report) -> str:
    needing = {r["needing_destructive"] for r in report["table5"] if r["strict"] is not None}
    return f"strict / {needing.pop()}" if len(needing) == 1 else "strict"


def markdown(report: Report) -> str:
    """table.md: Table 5, rank agreement, pairs and repeats as GitHub markdown."""
    columns = TABLE5_COLUMNS + own_columns(report)
    header = [strict_header(report) if c == "strict" else c for c in columns]
    lines = [
        "# careful-report",
        "",
        _md_escape(report["coverage"]),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
    ]
    for row, note in zip(report["table5"], _note_numbers(report)):
        c = cells(row, own_columns(report), note)
        lines.append("| " + " | ".join(_md_escape(c[k]) for k in columns) + " |")
    notes = [f"({number}) {_md_escape(text)}" for number, text in enumerate(standard_notes(report), start=1)]
    lines += (
        ([""] + notes if notes else [])
        + [""]
        + [f"- {line}" for line in LEGEND + (OWN_LEGEND if own_columns(report) else ())]
        + ["", "## Rank agreement (Table 3)", "", _rank_text(report["rank_agreement"]), ""]
    )
    lines += ["## Paired comparisons (exact McNemar)", ""]
    for pair in report["pairs"]:
        for sentences in (pair["bfcl_sentences"], pair["safe_sentences"]):
            lines += [f"- {_md_escape(s)}" for s in sentences.values()]
    lines += _md_repeats(report)
    lines += _md_optimized(report)
    lines += _md_universal(report)
    return "\n".join(lines) + "\n"


def _md_optimized(report: Report) -> list[str]:
    """Calls per conversation against optimized calls, per run and category (runs made with --careful-optimize)."""
    runs = [r for r in report["runs"] if r["calls"]["all"][1] is not None]
    if not runs:
        return []
    categories = [c for c in runs[0]["calls"] if c != "all"] + ["all"]
    lines = ["", "## Calls against optimized calls (per conversation)", ""]
    lines += ["| run | " + " | ".join(c.removeprefix("multi_turn_") for c in categories) + " |"]
    lines += ["|---|" + "---|" * len(categories)]
    for run in runs:
        cells = []
        for c in categories:
            calls, optimized = run["calls"].get(c, (0.0, None))
            cells.append(f"{calls:.2f} → {optimized:.2f}" if optimized is not None else f"{calls:.2f}")
        lines.append(f"| {_md_escape(run['name'])} | " + " | ".join(cells) + " |")
    return lines


def universal_text(report: Report) -> str:
    """One sentence on the items every run fails, and how many the item audit explains."""
    found = report["universal_failures"]
    if not found["count"]:
        return "No conversation is failed by every run."
    return (
        f"{found['count']} conversations are failed by every run (BFCL's verdict): {found['with_defect']} carry a "
        f"defect in the item audit, {found['with_doubt_only']} a doubt only, "
        f"{found['count'] - found['with_defect'] - found['with_doubt_only']} no finding (worth a look)."
    )


def _md_universal(report: Report) -> list[str]:
    found = report["universal_failures"]
    lines = ["", "## Failed by every run", "", universal_text(report)]
    if found["items"]:
        lines += ["", "| conversation | audit findings |", "|---|---|"]
        lines += [f"| {item['id']} | {', '.join(item['findings']) or '—'} |" for item in found["items"]]
    return lines


def _note_numbers(report: Report) -> list[int | None]:
    """Per Table 5 row, the number of its note (``standard_notes``), or None."""
    numbers: list[int | None] = []
    count = 0
    for row in report["table5"]:
        count += bool(row.get("standard_note"))
        numbers.append(count if row.get("standard_note") else None)
    return numbers


def _rank_text(rank: RankAgreement) -> str:
    if "rho" not in rank:
        return "Spearman rho: " + DASH + f" ({rank['reason']})"
    parts = [
        f"{k.removeprefix('multi_turn_')} {DASH if v is None else format(v['rho'], '.2f')}"
        for k, v in rank["rho"].items()
    ]
    return f"Spearman rho between BFCL and safe ranks over {len(rank['models'])} models: " + ", ".join(parts)


def _md_repeats(report: Report) -> list[str]:
    lines = ["", "## Repeats (same model and condition)", ""]
    if not report["repeats"]:
        return lines + ["No two runs share a model and condition.", ""]
    for group in report["repeats"]:
        lines.append(f"### {_md_escape(group['model'])} [{_md_escape(group['condition'])}], k = {len(group['runs'])}")
        lines += [
            "",
            "| metric | n | pass^k | pass@k | flip rate | mean | 95 % interval |",
            "|---|---|---|---|---|---|---|",
        ]
        for metric in ("bfcl", "safe"):
            s = group["repeat"][metric]
            lines.append(
                f"| {metric} | {s['n']} | {100 * s['pass_all']:.1f} | {100 * s['pass_any']:.1f} | "
                f"{100 * s['flip_rate']:.1f} | {100 * s['mean']:.1f} | "
                f"{100 * s['interval'][0]:.1f}–{100 * s['interval'][1]:.1f} |"
            )
        lines += ["", "Conversations that flip (one mark per repeat, + pass, . fail):", ""]
        lines += [
            f"- `{row['id']}` BFCL {marks(row['bfcl'])} safe {marks(row['safe'])}" for row in group["stability"]
        ] or ["- none"]
        lines.append("")
    return lines + [f"Interval: {report['interval_method']}.", ""]


def marks(verdicts: list[bool]) -> str:
    return "".join("+" if v else "." for v in verdicts)


def _md_escape(text: str) -> str:
    """Model names and labels are user input: keep them from breaking the table or adding markup."""
    return "".join("\\" + ch if ch in "\\`*_[]<>|#" else ch for ch in visible(" ".join(text.split())))


def html(report: Report) -> str:
    """report.html: one self-contained page (inline CSS, no script from elsewhere, autoescaped)."""
    env = Environment(
        loader=PackageLoader("pytest_careful.reports", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["pct"] = lambda v: DASH if v is None else f"{100 * v:.1f}"
    env.filters["marks"] = marks
    env.filters["visible"] = lambda text: printable(str(text), 1000)  # paths, models: user input
    env.filters["p"] = format_p
    env.filters["short"] = lambda c: str(c).removeprefix("multi_turn_")
    columns = TABLE5_COLUMNS + own_columns(report)
    header = [strict_header(report) if c == "strict" else c for c in columns]
    return env.get_template("compare.html.j2").render(
        report=report,
        columns=columns,
        header=header,
        table5=[cells(r, own_columns(report), n) for r, n in zip(report["table5"], _note_numbers(report))],
        notes=standard_notes(report),
        legend=LEGEND + (OWN_LEGEND if own_columns(report) else ()),
        rank=_rank_text(report["rank_agreement"]),
        charts=_charts(report),
        universal=universal_text(report),
    )


#: At most this many pairs get a gained/lost chart (all of them are in the tables).
MAX_PAIR_CHARTS = 12


def _charts(report: Report) -> list[str]:
    """Inline SVG charts drawn by pytest_careful.reports.plots; none when it is absent (the page is tables only)."""
    try:
        svgs = [plots.svg(_accuracy_figure(report))]
        for pair in report["pairs"][:MAX_PAIR_CHARTS]:
            card: ChartCard = {
                "provenance": {"model": pair["b"], "protocol": "paired"},
                "totals": {"all": {"conversations": report["ids"]}},
            }
            svgs.append(plots.comparison_svg(card, pair["bfcl"], pair["a"]))
    except ImportError:  # matplotlib missing (plots imports it at the first chart): the tables carry every figure
        return []
    return [svg[svg.index("<svg") :] for svg in svgs]  # inline: drop the XML prolog and doctype


def _accuracy_figure(report: Report) -> Figure:
    """One row per run: BFCL and safe accuracy with their Wilson 95 % intervals."""
    from matplotlib.figure import Figure  # matplotlib: imported at the first chart

    runs = report["runs"]
    figure = Figure(figsize=(8.0, 1.2 + 0.45 * len(runs)))
    figure.subplots_adjust(
        left=0.35, right=0.83, top=1 - 0.45 / figure.get_figheight(), bottom=0.6 / figure.get_figheight()
    )  # inches: room for the title and x label
    ax = figure.add_subplot()
    bars = (
        (-0.18, "bfcl", [r["bfcl"] for r in runs], plots.BFCL_COLOUR),
        (0.18, "safe", [r["safe"] for r in runs], plots.SAFE_COLOUR),
    )
    for offset, metric, accuracies, colour in bars:
        values = [100 * a["accuracy"] for a in accuracies]
        errors = [
            [v - 100 * a["interval"][0] for v, a in zip(values, accuracies)],
            [100 * a["interval"][1] - v for v, a in zip(values, accuracies)],
        ]
        ax.barh(
            [i + offset for i in range(len(runs))],
            values,
            0.34,
            xerr=errors,
            color=colour,
            label="BFCL" if metric == "bfcl" else "safe",
            error_kw={"linewidth": 0.8, "capsize": 2},
        )
    ax.set_yticks(range(len(runs)), labels=[plots.printable(r["name"], 40) for r in runs])
    plots.fit_tick_labels(figure, ax)
    ax.invert_yaxis()
    ax.set_xlim(0, 100)
    ax.set_xlabel(f"% of {report['ids']} conversations (bars: Wilson 95 % interval)")
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), frameon=False)
    plots.set_title(figure, ax, "BFCL vs safe accuracy per run")
    return figure


def write(out: Path, report: Report) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "comparison.json": json.dumps(report, indent=1, sort_keys=True) + "\n",
        "table.md": markdown(report),
        "report.html": html(report),
    }
    for name, text in files.items():
        (out / name).write_text(text, encoding="utf-8")
    return [out / name for name in files]


# --- command line ----------------------------------------------------------------
