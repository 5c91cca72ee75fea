"""report.html in a real browser (Debian's chromium, driven by playwright).

Opened over file:// as a reader opens it: no console error, no request beyond the file
itself, the filters show the rows the scorecard says they should, and opening a
conversation shows its turns and its state diff. Without chromium or playwright the
tests skip and say why (.ci/run installs chromium).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conftest import REAL_RUN_DECODER
from pytest_careful.scoring import rules

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        pytest.skip(f"no browser: {CHROMIUM} is missing (apt-get install chromium; .ci/run does)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (pip install -e '.[test]')"
    )
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        yield launched
        launched.close()


class Page:
    """A page opened over file://, with what it logged and asked for."""

    def __init__(self, browser: Any, path: Path) -> None:
        self.page = browser.new_page(viewport={"width": 1300, "height": 900})
        self.url = path.resolve().as_uri()
        self.problems: list[str] = []
        self.requests: list[str] = []
        self.dialogs: list[str] = []
        self.page.on(
            "console", lambda m: self.problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None
        )
        self.page.on("pageerror", lambda e: self.problems.append(f"page error: {e}"))
        self.page.on("request", lambda r: self.requests.append(r.url))
        self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
        self.page.goto(self.url)

    def visible_rows(self) -> list[str]:
        return self.page.eval_on_selector_all("details.conv", "rows => rows.filter(r => !r.hidden).map(r => r.id)")

    def choose(self, name: str, value: str) -> None:
        self.page.select_option(f"#filters select[name={name}]", value)

    def clean(self) -> None:
        """Nothing went wrong and nothing left the file."""
        assert self.problems == [] and self.dialogs == []
        assert set(self.requests) == {self.url}


@pytest.fixture(scope="module")
def reference_page(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The reference run over two categories (scorecard and page kept for every test of the module)."""
    return _module_run(tmp_path_factory, "reference", "--careful-model=reference", "--careful-category=base,miss_func")


@pytest.fixture(scope="module")
def real_page(tmp_path_factory: pytest.TempPathFactory, real_run: Path) -> tuple[Path, dict[str, Any]]:
    """The real gpt-oss-20b run, rescored (its three categories, 600 conversations)."""
    return _module_run(
        tmp_path_factory, "real", f"--careful-results={real_run}", f"--careful-decoder={REAL_RUN_DECODER}"
    )


def _module_run(factory: pytest.TempPathFactory, name: str, *args: str) -> tuple[Path, dict[str, Any]]:
    import subprocess
    import sys

    folder = factory.mktemp(name)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-n",
            "2",
            "-q",
            "--careful-gate=none",
            *args,
        ],
        cwd=folder,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    [card_file] = folder.glob("scorecards/*/standard/scorecard.json")
    return card_file.parent / "report.html", json.loads(card_file.read_text())


def _node(row: dict[str, Any]) -> str:
    return f"{row['id']}[{row['condition']}]"


@pytest.mark.parametrize("which", ["reference_page", "real_page"])
def test_opens_clean_and_filters_as_the_scorecard_says(
    browser: Any, request: pytest.FixtureRequest, which: str
) -> None:
    path, card = request.getfixturevalue(which)
    page = Page(browser, path)
    rows = card["rows"]
    assert page.visible_rows() == [_node(r) for r in rows]
    assert page.page.locator("#charts svg").count() >= 2
    for category in sorted({r["category"] for r in rows}):
        page.choose("category", category.removeprefix("multi_turn_"))
        assert page.visible_rows() == [_node(r) for r in rows if r["category"] == category]
    page.choose("category", "")
    for outcome, keep in (
        ("bfcl:fail", lambda r: not r["bfcl"]["valid"]),
        ("safe:pass", lambda r: r["safe"]),
        ("strict:fail", lambda r: not r["strict"]),
    ):
        page.choose("outcome", outcome)
        expected = [_node(r) for r in rows if keep(r)]
        assert page.visible_rows() == expected
        assert page.page.inner_text("#shown") == str(len(expected))
    page.choose("outcome", "")
    # The rules of the standard protocol (unconfirmed_destructive is a rule under confirm only).
    broken = [
        rule for rule in rules.NAMES if rule != "unconfirmed_destructive" and any(r["counts"].get(rule) for r in rows)
    ]
    options = page.page.eval_on_selector_all("select[name=rule] option", "o => o.map(x => x.value)")
    assert options == ["", "none", *broken]
    for rule in broken:
        page.choose("rule", rule)
        assert page.visible_rows() == [_node(r) for r in rows if r["counts"].get(rule)], rule
    page.choose("rule", "none")
    page.page.fill("#filters input[name=text]", "_1")
    assert page.visible_rows() == [
        _node(r) for r in rows if "_1" in _node(r) and not any(r["counts"].get(rule) for rule in broken)
    ]
    page.clean()


def test_a_real_failure_opens_on_its_state_diff(browser: Any, real_page: tuple[Path, dict[str, Any]]) -> None:
    path, card = real_page
    row = next(r for r in card["rows"] if r["bfcl"]["error_type"] == "multi_turn:instance_state_mismatch")
    page = Page(browser, path)
    row_locator = page.page.locator(f"details.conv[id='{_node(row)}']")
    diff = row_locator.locator("section.turn").nth(row["bfcl"]["turn"]).locator("div.state-diff")
    assert not diff.is_visible()
    row_locator.locator("> summary").click()
    assert diff.is_visible()
    assert diff.locator("tbody tr").count() >= 1
    assert f"pytest '{_node(row)}' --careful-results=" in row_locator.locator("p.rerun").inner_text()
    page.clean()


def test_a_reference_conversation_opens_on_its_turns(browser: Any, reference_page: tuple[Path, dict[str, Any]]) -> None:
    from pytest_careful.data import dataset

    path, card = reference_page
    row = card["rows"][1]
    conversation = dataset.get(row["id"])
    page = Page(browser, path)
    page.page.goto(f"{page.url}#{_node(row)}")  # a link to a conversation opens it
    row_locator = page.page.locator(f"details.conv[id='{_node(row)}']")
    turns = row_locator.locator("section.turn")
    assert turns.count() == len(conversation.ground_truth)
    assert turns.first.locator("pre.request").is_visible()
    assert turns.first.locator(".state-same").inner_text() == "state after the turn: same as the reference's"
    assert row_locator.locator(".reference .step code").first.inner_text() == conversation.ground_truth[0][0]
    page.clean()


def _hostile_page(tmp_path: Path, hostile: bool) -> Path:
    """report.html of one real conversation whose result was made hostile (test_html_report's)."""
    from test_html_report import CONVERSATION, HOSTILE, hostile_result, page_of

    from pytest_careful.data import dataset
    from pytest_careful.data.result_files import LoggedEntry
    from pytest_careful.evaluation.evaluate import evaluate
    from pytest_careful.execution.decoding import decoder

    conversation = dataset.get(CONVERSATION)
    result = hostile_result(conversation)
    evaluation = evaluate(
        conversation,
        result,
        decoder(REAL_RUN_DECODER),
        entry=LoggedEntry(conversation.id, result, "test", 1, raw={"result": result}),
    )
    html, _ = page_of(HOSTILE if hostile else "plain", evaluation, hostile=hostile)
    path = tmp_path / "report.html"
    path.write_text(html, encoding="utf-8")
    return path


def test_hostile_text_runs_nothing(browser: Any, tmp_path: Path) -> None:
    page = Page(browser, _hostile_page(tmp_path, hostile=True))
    page.page.click("#expand")
    assert page.page.evaluate("window.__pwned") is None
    assert page.page.locator("body").is_visible()  # an injected style would have hidden it
    assert "{{ 7*7 }}" in page.page.locator("details.conv").inner_text()
    page.clean()


def test_a_long_unbroken_call_wraps_and_keeps_the_reference_column_in_view(browser: Any, tmp_path: Path) -> None:
    # The model's 1 MB echo (clipped) is one word: unwrapped, it widened the model's column and
    # pushed the reference's off the page.
    path = _hostile_page(tmp_path, hostile=False)
    page = Page(browser, path)
    page.page.click("#expand")
    width = page.page.evaluate("window.innerWidth")
    assert page.page.evaluate("document.documentElement.scrollWidth") <= width
    right_edges = page.page.eval_on_selector_all(
        ".side > div", "divs => divs.map(d => d.getBoundingClientRect().right)"
    )
    assert right_edges and max(right_edges) <= width
    page.clean()
