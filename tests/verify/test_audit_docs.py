"""docs/audit.md shows the shipped audit as careful-audit --markdown prints it: the page cannot drift."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import REAL_RUN_DECODER, ROOT
from pytest_careful.cli.audit import markdown
from pytest_careful.data import dataset
from pytest_careful.verify.audit_file import SHIPPED

BEGIN, END = "<!-- careful-audit --markdown: begin -->", "<!-- careful-audit --markdown: end -->"


def test_the_page_holds_the_shipped_audits_tables() -> None:
    page = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    shown = page.split(BEGIN, 1)[1].split(END, 1)[0].strip()
    assert shown == markdown(json.loads(SHIPPED.read_text(encoding="utf-8"))).strip(), (
        "docs/audit.md's tables are not the shipped audit's: paste `careful-audit --markdown` between the markers"
    )


def test_the_pages_figures_are_the_shipped_audits() -> None:
    """The sentence of totals above the tables, read back and compared with audit.json's."""
    page = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    totals = json.loads(SHIPPED.read_text(encoding="utf-8"))["totals"]
    by_source = totals["by_source"]
    sentence = page.split("## The audit of bfcl-eval", 1)[1].split("<!--", 1)[0]
    expected = [
        f"{totals['literals']:,} literals",
        f"{by_source['user']:,} from the user's turns",
        f"{by_source['result']:,} from results",
        f"{by_source['state']:,} from visible state",
        f"{by_source['doc']:,} from docs",
        f"{by_source['read']:,} from a read",
        f"{by_source['derived']:,} derived",
        f"{by_source['flag']:,} booleans",
        f"{by_source['unchecked']:,} that BFCL's checker",
        f"{by_source['finding']:,} findings",
    ]
    calls = sum(len(turn) for c in dataset.load() for turn in c.ground_truth)
    expected.append(f"{calls:,} reference calls")
    flat = " ".join(sentence.split())
    for figure in expected:
        assert " ".join(figure.split()) in flat, figure


def test_the_pages_summary_line_is_what_the_real_run_prints(pytester: pytest.Pytester, real_run: Path) -> None:
    """The `audit [standard]: ...` line the page shows is the rescored real run's own, word for word."""
    page = (ROOT / "docs" / "audit.md").read_text(encoding="utf-8")
    shown = next(line.strip() for line in page.splitlines() if line.strip().startswith("audit [standard]:"))
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "2", "-q",
        f"--careful-results={real_run}", f"--careful-decoder={REAL_RUN_DECODER}",
    )  # fmt: skip
    printed = [line.strip() for line in result.outlines if line.startswith("audit [standard]:")]
    assert printed == [shown], (printed, shown)
