"""The reports stage's options: where scorecards go, and the baseline, accuracy floors and
regression test of the release gate. ``harness/options.py`` registers them and reads them into
``RunConfig``; ``harness/gate.py`` judges them."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..common.options import Option, fraction, path
from .stats import VERDICT_NAMES


def _label(value: str) -> str:
    """A scorecard folder name: one path component, printable, no surprises."""
    name = value.strip()
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or not name.isprintable():
        raise argparse.ArgumentTypeError(f"{value!r} is not usable as a folder name")
    return name


#: ``--careful-scorecards``'s default.
DEFAULT_SCORECARDS = Path("scorecards")

SCORECARDS = Option(
    "--careful-scorecards",
    default=DEFAULT_SCORECARDS,
    type=path,
    metavar="DIR",
    help="Where scorecards are written (default: ./scorecards)",
)
LABEL = Option(
    "--careful-label",
    type=_label,
    metavar="NAME",
    help="Name of this run's scorecard folder (default: the model's name, a local model directory's own "
    "name, or the results folder's)",
)
ALLOW_MISSING = Option(
    "--careful-allow-missing",
    action="store_true",
    help="Score only the conversations a logged run has an entry for, as bfcl evaluate --partial-eval "
    "does (the others are deselected; without it a selection of any is refused), and have release "
    "gates judge only the scored ones: an unscored conversation (an unreadable line, a server error) "
    "is skipped instead of failed",
)
BASELINE = Option(
    "--careful-baseline",
    type=path,
    metavar="PATH",
    help="An earlier scorecard.json (or its folder) to compare with, paired McNemar",
)
ALLOW_PARTIAL_BASELINE = Option(
    "--careful-allow-partial-baseline",
    action="store_true",
    help=f"Accept a {BASELINE} scorecard that scored only a selection of its run",
)
MIN_SAFE = Option(
    "--careful-min-safe",
    type=fraction,
    metavar="X",
    help="Release gate: fail unless success under effect safety is at least X overall",
)
MIN_BFCL = Option(
    "--careful-min-bfcl",
    type=fraction,
    metavar="X",
    help="Release gate: fail unless BFCL accuracy is at least X overall",
)
#: The verdicts a baseline comparison may pair (``stats.paired_verdict``), the default first.
REGRESSION_VERDICTS = tuple(VERDICT_NAMES)
REGRESSION_VERDICT = Option(
    "--careful-regression-verdict",
    choices=REGRESSION_VERDICTS,
    help=f"The verdict paired with the {BASELINE} scorecard's, per category (McNemar) and by the "
    "regression gate: safe, the safe gate's (BFCL pass, no gated rule broken; the default), or bfcl, "
    "BFCL's own",
)
FAIL_ON_REGRESSION = Option(
    "--careful-fail-on-regression",
    type=fraction,
    metavar="ALPHA",
    help="Release gate: fail when a category is significantly worse than the baseline (p < ALPHA) on "
    f"the verdict {REGRESSION_VERDICT} names (safe by default)",
)
#: Where scorecards go, and the baseline and accuracy floors, in the order ``--help`` lists them.
OPTIONS = (SCORECARDS, LABEL, ALLOW_MISSING, ALLOW_PARTIAL_BASELINE, BASELINE, MIN_SAFE, MIN_BFCL)
#: The release gate's regression test against the baseline (listed after the protocol's option).
REGRESSION_OPTIONS = (FAIL_ON_REGRESSION, REGRESSION_VERDICT)
