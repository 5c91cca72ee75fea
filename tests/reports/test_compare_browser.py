"""careful-report's page in a real browser: opens with no console errors and no network requests.

Driven by playwright with Debian's chromium (/usr/bin/chromium); skipped with a reason
where either is missing.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from pytest_careful.data import dataset
from pytest_careful.reports import compare_runs, scorecard

CHROMIUM = Path("/usr/bin/chromium")
T, F = True, False


def minimal_card(
    verdicts: dict[str, bool], label: str, model: str = "<b>m</b>", protocol: str = "standard"
) -> dict[str, Any]:
    """A minimal scorecard in the shape report.py writes (the fields careful-report reads)."""
    rows = [
        {
            "id": cid,
            "category": "multi_turn_base",
            "bfcl": {"valid": ok},
            "safe": ok,
            "strict": ok,
            "reference_destructive": 0,
            "counts": {"collateral_destructive": 0, "asked": 0},
        }
        for cid, ok in verdicts.items()
    ]
    prov = {
        "model": model,
        "label": label,
        "protocol": protocol,
        "dataset": scorecard.dataset_digest(),
        "declarations": "d",
        "boundary": "final",
        "detector": "strict",
    }
    return {"provenance": prov, "rows": rows, "totals": {}}


@pytest.fixture
def page_path(tmp_path: Path) -> Path:
    ids = sorted(c.id for c in dataset.load(("multi_turn_base",)))
    runs = [{cid: i % 2 == 0 for i, cid in enumerate(ids)} for _ in range(3)]
    runs[1][ids[0]] = F  # ids[0] and ids[1] flip between repeats; the rest are stable
    runs[2][ids[1]] = T
    for number, verdicts in enumerate(runs):
        folder = tmp_path / f"r{number}"
        folder.mkdir()
        (folder / "scorecard.json").write_text(json.dumps(minimal_card(verdicts, f"r{number}")), encoding="utf-8")
    assert compare_runs.main([str(tmp_path), "--out", str(tmp_path / "out")]) == 0
    return tmp_path / "out" / "report.html"


def test_page_opens_offline_without_errors_and_shows_the_flips(page_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        pytest.skip(f"no browser: {CHROMIUM} is missing (apt-get install chromium; .ci/run does)")
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page()
        errors: list[str] = []
        requests: list[str] = []
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: requests.append(r.url))
        page.goto(page_path.as_uri())
        rows = page.locator("table.stability tr").all_inner_texts()
        title = page.title()
        browser.close()
    assert errors == []
    assert requests == [page_path.as_uri()]  # the page itself, nothing else
    assert "3 runs" in title
    flipped = [r for r in rows[1:] if "multi_turn_base" in r]
    assert [r.split()[0] for r in flipped] == ["multi_turn_base_0", "multi_turn_base_1"]
    assert flipped[0].split()[1:] == ["pass", "fail", "pass", "pass", "fail", "pass"]
