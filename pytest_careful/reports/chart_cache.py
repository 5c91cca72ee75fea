"""The scorecard's charts kept beside them, keyed by everything they are drawn from.

Importing matplotlib (0.35-0.45 s) and drawing the charts as PNG and SVG (0.25 s) were
two thirds of a session end. A rerun whose charts would come out the same (the reference
job, a rescore of the same results) reuses the files already in its scorecard folder
instead, and imports no matplotlib.

A reuse can never be stale, because:

* the charts are drawn from ``inputs`` alone (the part of the card, comparison and
  baseline name they show), under matplotlib's default style (``plots.chart_files``:
  no matplotlibrc or rcParams of the user's), and the key hashes those inputs in their
  order, ``plots.py``'s source, the rules it draws, and the versions of Python,
  matplotlib, Pillow and numpy, and the platform;
* the key file, written after the charts, holds each file's SHA-256: a chart file
  changed, removed or cut short since is drawn again, and so is one whose key file
  is unreadable.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from ..scoring import rules

if TYPE_CHECKING:
    from typing import TypedDict

    from typing_extensions import NotRequired, ReadOnly

    from .card import Card
    from .stats import ComparisonJson

    # What the charts read (``plots``): views for the type checker, with nothing at run time. ReadOnly
    # (PEP 705): a whole card is one, and so is the cut ``inputs`` makes of it.

    class ChartTotals(TypedDict):
        """What the charts read of a category's totals (``card.Totals``); careful-report's pair charts
        (``comparison_output``) give the number of conversations only."""

        conversations: ReadOnly[int]
        bfcl_accuracy: ReadOnly[NotRequired[float]]
        safe_accuracy: ReadOnly[NotRequired[float]]
        counts: ReadOnly[NotRequired[Mapping[str, int]]]

    class ChartCard(TypedDict):
        """What the charts read of a card (``card.Card``): the provenance's title fields and the run's rules
        (read as a file's values are: narrowed where drawn), and the totals by category."""

        provenance: ReadOnly[Mapping[str, object]]
        totals: ReadOnly[Mapping[str, ChartTotals]]

    class ChartComparison(TypedDict):
        """What the comparison chart reads of a category's comparison (``stats.ComparisonJson``)."""

        gained: ReadOnly[int]
        lost: ReadOnly[int]
        p: ReadOnly[float]


#: In the scorecard folder, beside the charts it describes.
KEY_FILE = ".careful-charts.json"
_PLOTS_SOURCE = Path(__file__).with_name("plots.py")
_LIBRARIES = ("matplotlib", "pillow", "numpy")


@dataclass(frozen=True)
class ChartInputs:
    """``inputs``: what the charts are drawn from (``plots.chart_files``), and what the key hashes."""

    card: ChartCard
    comparison: dict[str, ChartComparison] | None
    baseline: str | None


#: The provenance's keys the charts read: the title's, the run's rules (its own, and the built-in
#: ones it had off), and the verdict a comparison paired.
_PROVENANCE = ("model", "label", "protocol", "repeat", "repeats", "custom_rules", "rules_off", "regression_verdict")


def inputs(card: Card, comparison: Mapping[str, ComparisonJson] | None, baseline: str | None) -> ChartInputs:
    """What the charts show: the card's title fields, the run's rules and per-category totals, the
    comparison's counts and p."""
    prov: Mapping[str, object] = card["provenance"]
    return ChartInputs(
        card={
            "provenance": {k: prov[k] for k in _PROVENANCE if k in prov},
            "totals": {
                category: {
                    "conversations": t["conversations"],
                    "bfcl_accuracy": t["bfcl_accuracy"],
                    "safe_accuracy": t["safe_accuracy"],
                    "counts": t["counts"],
                }
                for category, t in card["totals"].items()
            },
        },
        comparison=(
            {category: {"gained": r["gained"], "lost": r["lost"], "p": r["p"]} for category, r in comparison.items()}
            if comparison
            else None
        ),
        baseline=baseline,
    )


def key(chart_inputs: ChartInputs) -> str:
    """SHA-256 of the inputs (in their order: categories are drawn in it) and of what draws them."""
    digest = hashlib.sha256()
    drawn = {"card": chart_inputs.card, "comparison": chart_inputs.comparison, "baseline": chart_inputs.baseline}
    for part in (
        json.dumps(drawn, ensure_ascii=False, allow_nan=True),
        repr(rules.NAMES),
        sys.version,
        platform.machine(),
        sys.platform,
        *map(_version, _LIBRARIES),
    ):
        digest.update(part.encode("utf-8", "surrogatepass") + b"\0")
    digest.update(_PLOTS_SOURCE.read_bytes())
    return digest.hexdigest()


def _version(distribution: str) -> str:
    try:
        return f"{distribution} {importlib.metadata.version(distribution)}"
    except importlib.metadata.PackageNotFoundError:
        return f"{distribution} absent"


def load(directory: Path, chart_key: str) -> dict[str, bytes | str] | None:
    """The chart files in ``directory`` if its key file names ``chart_key`` and they are as written, else None."""
    try:
        recorded = json.loads((directory / KEY_FILE).read_text(encoding="utf-8"))
        if not isinstance(recorded, dict) or recorded.get("key") != chart_key:
            return None
        files: dict[str, bytes | str] = {}
        for name, sha in dict(recorded["files"]).items():
            content = (directory / Path(str(name)).name).read_bytes()
            if hashlib.sha256(content).hexdigest() != sha:
                return None
            files[name] = content.decode("utf-8") if name.endswith(".svg") else content
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return files or None


def remember(directory: Path, chart_key: str, files: Mapping[str, bytes | str]) -> None:
    """Record the key and the files' hashes; call it once the files are written."""
    hashes = {
        name: hashlib.sha256(content if isinstance(content, bytes) else content.encode("utf-8")).hexdigest()
        for name, content in files.items()
    }
    (directory / KEY_FILE).write_text(
        json.dumps({"key": chart_key, "files": hashes}, indent=1) + "\n", encoding="utf-8"
    )
