"""``careful-report DIR [DIR ...] --out OUT``: several scorecards side by side (the command line).

Reads scorecard folders (or parents holding several) with :mod:`.runs`, refuses runs that cannot
be paired (another dataset or other declarations, as ``--careful-baseline`` does), computes the
comparison with :mod:`.comparison` and writes ``report.html``, ``table.md`` and ``comparison.json``
with :mod:`.comparison_output`:

* the paper's Table 5 layout, one row per run, and Table 3's rank agreement
  (Spearman rho between BFCL and safe over models);
* an exact McNemar test for every pair of runs, on BFCL and on safe, per
  category and overall, with the flipped ids and a sentence for the reader;
* runs of the same model and condition as repeats: pass^k, pass@k, flip rate,
  an interval on each accuracy and the conversations that flip.

Coverage policy: runs that cover the same conversations are paired as they
are, whole categories or the same selection. Runs covering different
conversations are refused, unless ``--common-ids`` is given: then every figure
is computed on the conversations all runs share, and the report says so.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ..common import bfcl as _bfcl
from ..data import dataset
from . import scorecard
from .comparison import build
from .comparison_output import write
from .runs import (
    ReportError,
    Run,
    check_pairable,
    find_scorecards,
    load_run,
    name_runs,
    one_line,
    paired_ids,
    printable,
    visible,
)

#: What other code and users import from here, as before the split (``careful-report``'s module).
__all__ = ["ReportError", "Run", "build", "find_scorecards", "load_run", "main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="careful-report",
        description="Compare pytest-careful scorecards: Table 5, paired McNemar tests, "
        "repeats of one model and condition (pass^k, flip rate)",
    )
    parser.add_argument(
        "folders",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="Scorecard folders (holding scorecard.json) or folders above them",
    )
    parser.add_argument("--out", type=Path, required=True, help="Folder for report.html, table.md, comparison.json")
    parser.add_argument(
        "--common-ids",
        action="store_true",
        help="Compare runs covering different conversations on the ones they all share",
    )
    return parser


def run(argv: Sequence[str] | None = None) -> list[str]:
    """The command's work; returns the lines to print. ReportError on unusable input."""
    args = _parser().parse_args(argv)
    if (args.out / "scorecard.json").exists():  # its report.html is the run's own page: never overwrite it
        raise ReportError(
            f"{args.out}: holds a scorecard, whose report.html would be replaced; give --out another folder"
        )
    paths, notes = find_scorecards(args.folders)
    known = frozenset(c.id for c in dataset.load(_bfcl.CATEGORIES))
    runs = [load_run(p, known) for p in paths]
    if len(runs) < 2:
        raise ReportError(f"found {len(runs)} scorecard ({paths[0]}); careful-report needs two or more")
    name_runs(runs)
    check_pairable(runs, scorecard.dataset_digest())
    ids, coverage = paired_ids(runs, args.common_ids)
    report = build(runs, ids, coverage, notes)
    try:
        written = write(args.out, report)
    except OSError as exc:
        raise ReportError(f"{args.out}: cannot write the report ({one_line(exc)})") from None
    lines = [
        *notes,
        f"read {len(runs)} scorecards: " + ", ".join(f"{r.name} ({r.path.parent})" for r in runs),
        coverage,
    ]
    if not report["repeats"]:
        lines.append("no two runs share a model and condition: no repeat statistics")
    return lines + [f"wrote {p}" for p in written]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        lines = run(argv)
    except ReportError as exc:  # it quotes paths and values from the files: escaped and cut
        print(f"careful-report: {printable(str(exc))}", file=sys.stderr)
        return 2
    for line in lines:
        print(visible(line))  # folder names and labels: an ESC sequence in one would act on the terminal
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
