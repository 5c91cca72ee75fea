"""report.html: hostile text stays text, the detail is bounded, and it reaches the page beside every scorecard.

The page is parsed with lxml as a browser would; the expected structure comes from the
scorecard and the dataset, and what is allowed in the page from the same page rendered
with harmless text (hostile text must not add a single element or attribute).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import lxml.html
import pytest
from rows import score_row

from conftest import REAL_RUN_DECODER
from pytest_careful.data import dataset
from pytest_careful.data.result_files import LoggedEntry, read_result_file
from pytest_careful.effects import declarations
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.evaluation.verdict import STATE_MISMATCH
from pytest_careful.execution.decoding import decoder
from pytest_careful.reports import html_report, plots, scorecard

CONVERSATION = "multi_turn_base_1"  # GorillaFileSystem only: mkdir/echo change visible state
#: Script and markup, quotes, a textarea's end, template syntax, unicode, controls, bidi, a lone surrogate.
HOSTILE = (
    '<script>window.__pwned=1</script>"\'></textarea><img src=x onerror="window.__pwned=2">'
    "{{ 7*7 }}{% if true %}jinja{% endif %} ünïcødé 🚀 中文 \x00\x07\x1b[31m\u202e\u2028\ud800 "
    "</script><!-- <style>body{display:none}</style>"
)
#: What of HOSTILE must show as text (its controls shown escaped).
VISIBLE = (
    "<script>window.__pwned=1</script>",
    "</textarea><img src=x onerror=",
    "{{ 7*7 }}",
    "{% if true %}jinja{% endif %}",
    "ünïcødé 🚀 中文",
    "\\x1b[31m",
    "\\u202e",
    "<!-- <style>",
)
BIG = 1_000_000


def fc_step(calls: list[tuple[str, dict[str, Any]]]) -> list[dict[str, str]]:
    """One step in the FC format the real run's decoder reads."""
    return [{name: json.dumps(arguments)} for name, arguments in calls]


def hostile_result(conversation: dataset.Conversation) -> list[list[Any]]:
    """The reference's turns (as FC calls), the first one preceded by hostile text and a 1 MB write."""
    import ast

    turns = []
    for index, calls in enumerate(conversation.ground_truth):
        steps: list[Any] = []
        if index == 0:
            steps.append(HOSTILE)  # a step without a call: the model's text
            steps.append(
                fc_step(
                    [
                        ("touch", {"file_name": "x.txt"}),
                        ("echo", {"content": HOSTILE + "A" * BIG, "file_name": "x.txt"}),
                    ]
                )
            )
        parsed = [ast.parse(c, mode="eval").body for c in calls]
        steps.append(
            fc_step(
                [
                    (p.func.id, {k.arg: ast.literal_eval(k.value) for k in p.keywords})
                    for p in parsed
                    if isinstance(p, ast.Call) and isinstance(p.func, ast.Name)
                ]
            )
        )
        turns.append(steps)
    return turns


@pytest.fixture(scope="module")
def hostile_evaluation() -> Any:
    conversation = dataset.get(CONVERSATION)
    result = hostile_result(conversation)
    entry = LoggedEntry(conversation.id, result, "test", 1, raw={"id": conversation.id, "result": result})
    return evaluate(conversation, result, decoder(REAL_RUN_DECODER), entry=entry)


def hostile_strings(value: Any, keep: frozenset[str] = frozenset({"kind"})) -> Any:
    """``value`` with every string (and every key of a dict of categories) replaced by HOSTILE."""
    if isinstance(value, str):
        return HOSTILE
    if isinstance(value, list):
        return [hostile_strings(v) for v in value]
    if isinstance(value, dict):
        return {k: v if k in keep else hostile_strings(v) for k, v in value.items()}
    return value


def page_of(text: Any, evaluation: Any, hostile: bool) -> tuple[str, dict[str, Any]]:
    """The page of a one-row card, every text field set to ``text`` when ``hostile``."""
    row = score_row(evaluation, declarations.load())
    row.update(condition="standard", model="m")
    node = f"{row['id']}[standard]"
    prov = {"model": "m", "protocol": "standard", "label": "m", "sampling": "s", "git_sha": "0123456789abc"}
    card = scorecard.scorecard([row], prov)
    detail = html_report.conversation_detail(evaluation)
    comparison = {
        "multi_turn_base": {"gained": 1, "lost": 0, "p": 1.0, "flipped": [[row["id"], "gained"]]},
        "all": {"gained": 1, "lost": 0, "p": 1.0, "flipped": [[row["id"], "gained"]]},
    }
    if hostile:
        card = {
            "provenance": hostile_strings(card["provenance"]),
            "totals": {**card["totals"], HOSTILE: card["totals"]["all"]},
            "rows": [hostile_strings(r) | {"id": row["id"], "condition": "standard"} for r in card["rows"]],
        }
        card["rows"][0]["category"] = HOSTILE
        detail = hostile_strings(detail)
        comparison = {HOSTILE: {"gained": 1, "lost": 0, "p": 1.0, "flipped": [[HOSTILE, HOSTILE]]}}
    charts = {name: plots.svg(figure) for name, figure in plots.charts(card, comparison, text).items()}
    html = html_report.render(card, comparison, {node: detail}, {node: text if hostile else "pytest x"}, charts)
    return html, card


def structure(html: str) -> tuple[set[str], set[str]]:
    """The element tags and attribute names of a page."""
    doc = lxml.html.document_fromstring(html)
    tags = {el.tag for el in doc.iter() if isinstance(el.tag, str)}
    attributes = {name for el in doc.iter() if isinstance(el.tag, str) for name in el.attrib}
    return tags, attributes


def test_hostile_text_in_every_field_stays_text(hostile_evaluation: Any) -> None:
    benign, _ = page_of("x", hostile_evaluation, hostile=False)
    html, card = page_of(HOSTILE, hostile_evaluation, hostile=True)
    html.encode("utf-8")  # no lone surrogate reached the page
    doc = lxml.html.document_fromstring(html)
    # Hostile text adds no element and no attribute that harmless text does not have.
    benign_tags, benign_attributes = structure(benign)
    tags, attributes = structure(html)
    assert tags <= benign_tags and attributes <= benign_attributes
    assert not [a for a in attributes if a.lower().startswith("on")]
    scripts = doc.xpath("//script")
    assert len(scripts) == 1 and scripts[0].text == html_report.script_text()
    assert len(doc.xpath("//details[contains(@class, 'conv')]")) == len(card["rows"]) == 1
    text = doc.text_content()
    for visible in VISIBLE:
        assert visible in text, visible
    assert "\x1b" not in html and "\u202e" not in html and "\x00" not in html
    # Nothing reaches out: no source or link but the page's own fragments (SVG's <use>).
    for link in doc.xpath("//@src | //@href | //@*[local-name()='href']"):
        assert link.startswith("#"), link


def test_the_page_forbids_what_it_does_not_use(hostile_evaluation: Any) -> None:
    """Content-Security-Policy: no network at all, and only the page's own script runs."""
    import base64
    import hashlib

    html, _ = page_of("x", hostile_evaluation, hostile=False)
    doc = lxml.html.document_fromstring(html)
    policy = doc.xpath("//meta[@http-equiv='Content-Security-Policy']/@content")[0]
    assert "default-src 'none'" in policy
    digest = base64.b64encode(hashlib.sha256(doc.xpath("//script")[0].text.encode()).digest()).decode()
    assert f"script-src 'sha256-{digest}'" in policy


def test_a_hostile_megabyte_is_cut_where_it_is_made(hostile_evaluation: Any) -> None:
    detail = html_report.conversation_detail(hostile_evaluation)
    assert len(json.dumps(detail)) < 50_000
    echo = next(s for s in detail["turns"][0]["model"] if s.get("call", "").startswith("echo("))
    full = next(c.call for c in hostile_evaluation.replay.turns[0].calls if c.call.startswith("echo("))
    kept = echo["call"].split("… (")[0]
    assert full.startswith(kept) and len(kept) == html_report.MAX_CALL
    cut = len(full[html_report.MAX_CALL :].encode("utf-8", "surrogatepass"))
    assert echo["call"].endswith(f"… ({cut} more bytes)")
    text = next(s for s in detail["turns"][0]["model"] if s["kind"] == "text")
    assert text["text"] == HOSTILE  # short enough to be kept whole (the page escapes it)
    # The state diff against the reference shows the new file, its content cut too.
    diff = detail["turns"][0]["state_diff"]
    assert any(change["path"].endswith("x.txt") and change["reference"] is None for change in diff)
    assert all(len(change["model"] or "") < 2 * html_report.MAX_VALUE for change in diff)


def test_detail_of_a_real_state_mismatch_shows_the_attributes_bfcl_compared(real_run: Path) -> None:
    entries, _ = read_result_file(real_run / "BFCL_v4_multi_turn_base_result.json", "multi_turn_base")
    checked = 0
    for entry in entries[:60]:
        evaluation = evaluate(dataset.get(entry.id), entry.result, decoder(REAL_RUN_DECODER), entry=entry)
        verdict = evaluation.verdict
        if verdict.error_type != STATE_MISMATCH:
            continue
        class_name = verdict.error_message.split(" for ", 1)[1].split(" does not", 1)[0]
        paths = [c["path"] for c in html_report.conversation_detail(evaluation)["turns"][verdict.turn]["state_diff"]]
        for attribute in verdict.details.differences:
            assert any(p.startswith(f"{class_name}.{attribute}") for p in paths), (entry.id, attribute, paths)
        checked += 1
    assert checked >= 3


def test_sidecar_round_trip_keeps_the_last_line_of_a_node_and_skips_a_torn_one(tmp_path: Path) -> None:
    sink = html_report.DetailSink(tmp_path, "gw0")
    sink.write("multi_turn_base_0[standard]", {"turns": [], "note": "first"})
    sink.write("multi_turn_base_0[standard]", {"turns": [], "note": "\ud800 second"})
    sink.write("multi_turn_base_1[standard]", {"turns": []})
    with open(sink.path, "a", encoding="utf-8") as torn:  # a worker killed mid-line
        torn.write('{"node": "multi_turn_base_2[standard]", "detail": {"tu')
    found = html_report.read_details(tmp_path, ["multi_turn_base_0[standard]", "multi_turn_base_2[standard]"])
    assert list(found) == ["multi_turn_base_0[standard]"]
    assert found["multi_turn_base_0[standard]"]["note"] == "\ud800 second"
    assert html_report.read_details(tmp_path / "absent") == {}


def bounded_row(index: int, safe: bool) -> dict[str, Any]:
    conversation_id = f"multi_turn_base_{index}"
    big = "é" * 20_000  # not ASCII: measured in bytes the slow way
    violation = {
        "rule": "failed_calls",
        "turn": 0,
        "step": 0,
        "call": big,
        "note": big,
        "reference_calls": [big] * 50,
        "changes": [{"path": ["A", "b"], "before": big, "after": big}] * 50,
    }
    return {
        "id": conversation_id,
        "category": "multi_turn_base",
        "condition": "standard",
        "bfcl": {"valid": safe, "error_type": "" if safe else "multi_turn:x", "error_message": "", "turn": None},
        "safe": safe,
        "strict": safe,
        "counts": {"failed_calls": 50},
        "violations": [violation] * 50,
    }


def widest_detail() -> dict[str, Any]:
    """A turn as large as the per-field limits let one be (every field full)."""

    def call() -> dict[str, Any]:
        return {
            "kind": "call",
            "step": 0,
            "status": "ok",
            "call": "c" * html_report.MAX_CALL,
            "result": "r" * html_report.MAX_RESULT,
        }

    change = {"path": "p" * 100, "reference": "a" * html_report.MAX_VALUE, "model": "b" * html_report.MAX_VALUE}
    turn = {
        "index": 0,
        "request": "q" * html_report.MAX_TEXT,
        "model_ran": True,
        "model": [call() for _ in range(html_report.MAX_CALLS)],
        "reference": [call()] * 5,
        "state_diff": [change] * html_report.MAX_CHANGES,
    }
    return {"classes": ["GorillaFileSystem"], "inference_error": None, "turns": [turn]}


def test_800_widest_conversations_make_a_page_under_10_mb(tmp_path: Path) -> None:
    rows = [bounded_row(i, safe=i % 2 == 0) for i in range(800)]
    card = {
        "provenance": {"model": "m", "protocol": "standard"},
        "rows": rows,
        "totals": {"all": scorecard.totals([]) | {"conversations": 800}},
    }
    sink = html_report.DetailSink(tmp_path, "main")
    for row in rows:
        sink.write(f"{row['id']}[standard]", widest_detail())
    details = html_report.read_details(tmp_path)
    assert sum(p.stat().st_size for p in tmp_path.glob("*.jsonl")) > 30_000_000  # far over what a page may hold
    html = html_report.render(card, None, details, {}, {})
    assert len(html.encode("utf-8")) < 10_000_000
    doc = lxml.html.document_fromstring(html)
    assert len(doc.xpath("//details[contains(@class, 'conv')]")) == 800  # every row keeps its line
    kept = {d.get("id") for d in doc.xpath("//details[contains(@class, 'conv')][.//section[@class='turn']]")}
    # Failing conversations keep their turns before any passing one does.
    failing = {f"{r['id']}[standard]" for r in rows if not r["safe"]}
    assert kept and (kept <= failing or failing <= kept)
    assert "left out to keep the page under 10 MB" in doc.text_content()


def test_summary_table_has_a_legend_for_every_column(hostile_evaluation: Any) -> None:
    html, card = page_of("x", hostile_evaluation, hostile=False)
    doc = lxml.html.document_fromstring(html)
    headers = [th.text_content() for th in doc.xpath("//table[@class='summary']/thead//th")]
    legend = [dt.text_content() for dt in doc.xpath("//dl[@class='legend']/dt")]
    assert headers == legend
    assert all(dd.text_content().strip() for dd in doc.xpath("//dl[@class='legend']/dd"))
    titled = doc.xpath("//table[@class='summary']/thead//th[@title]")
    assert len(titled) == len(headers) - 1  # every column but the category names itself in a tooltip
    first = [td.text_content() for td in doc.xpath("//table[@class='summary']/tbody/tr[1]/td")]
    assert first[:2] == ["base", "1"]


# --- beside every scorecard -------------------------------------------------------------

MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}


def _pages(pytester: pytest.Pytester, *args: str) -> tuple[Any, dict[str, Any], Any]:
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *args)
    folder = pytester.path / "scorecards" / "reference" / "standard"
    card = json.loads((folder / "scorecard.json").read_text())
    return result, card, lxml.html.parse(str(folder / "report.html")).getroot()


@pytest.mark.parametrize("mode", list(MODES))
def test_report_beside_the_scorecard_has_every_conversation_turn_by_turn(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    scratch = pytester.path / "tmp"
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))  # where the run makes (and must remove) its sidecar folder
    pytester.makeconftest("""
        import json
        WORKER = []
        def pytest_configure(config):
            WORKER.append(hasattr(config, "workerinput"))
        def pytest_runtest_logreport(report):  # on the controller: the reports as they crossed xdist
            if report.when == "call" and not WORKER[0]:
                with open("reports.jsonl", "a") as out:
                    out.write(json.dumps(vars(report), default=str) + "\\n")
        """)
    result, card, doc = _pages(
        pytester,
        *MODES[mode],
        "--careful-model=reference",
        "--careful-category=base",
        "-k",
        "base_1 and not base_1[0-9]",
    )
    assert result.ret == 0
    rows = doc.xpath("//details[contains(@class, 'conv')]")
    assert [r.get("id") for r in rows] == [f"{r['id']}[standard]" for r in card["rows"]]
    conversation = dataset.get(CONVERSATION)
    for row in rows:  # every conversation has its turns, as many as the dataset has
        turns = row.xpath(".//section[@class='turn']")
        assert len(turns) == len(dataset.get(row.get("id").split("[")[0]).ground_truth), row.get("id")
    first = doc.get_element_by_id(f"{CONVERSATION}[standard]")
    request = conversation.questions[0][0]["content"]
    assert request in first.xpath(".//pre[@class='request']")[0].text_content()
    assert f"pytest '{CONVERSATION}[standard]' --careful-model=reference" in first.text_content()
    # The detail went through the sidecar, not through the test reports.
    reports = (pytester.path / "reports.jsonl").read_text()
    assert reports.count("\n") == len(card["rows"]) and request not in reports
    assert not [p for p in scratch.iterdir() if p.name.startswith("careful-details-")]  # the sidecar is gone
    assert (pytester.path / "scorecards/reference/standard/accuracy.svg").is_file()
    assert "report.html" in (pytester.path / "scorecards/reference/standard/scorecard.md").read_text()


def test_report_of_a_partial_run_says_so(pytester: pytest.Pytester) -> None:
    _, card, doc = _pages(
        pytester, "-n", "2", "--careful-model=reference", "--careful-category=miss_param", "-k", "miss_param_7"
    )
    assert card["provenance"]["selection"]["complete"] is False
    assert f"A selection: {len(card['rows'])} of 200 conversations." in doc.text_content()
    assert len(doc.xpath("//details[contains(@class, 'conv')]//section[@class='turn']")) > 0


def test_the_real_runs_failures_open_on_their_state_diff(pytester: pytest.Pytester, logged_run: Path) -> None:
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        "-k",
        "base_2",
        "--careful-gate=none",
    )
    assert result.ret == 0
    folder = pytester.path / "scorecards" / "gpt-oss-20b" / "standard"
    card = json.loads((folder / "scorecard.json").read_text())
    doc = lxml.html.parse(str(folder / "report.html")).getroot()
    mismatched = [r for r in card["rows"] if r["bfcl"]["error_type"] == STATE_MISMATCH]
    assert mismatched
    for row in mismatched:
        page_row = doc.get_element_by_id(f"{row['id']}[standard]")
        turn = page_row.xpath(".//section[@class='turn']")[row["bfcl"]["turn"]]
        assert turn.xpath(".//div[@class='state-diff']//tbody/tr"), row["id"]
    for row in card["rows"]:
        evidence = doc.get_element_by_id(f"{row['id']}[standard]").xpath(".//div[@class='violation']")
        assert len(evidence) == min(len(row["violations"]), html_report.MAX_EVIDENCE)


def test_clip_and_page_text() -> None:
    assert html_report.clip("abc", 3) == "abc"
    assert html_report.clip("abcdé", 3) == "abc… (3 more bytes)"
    assert html_report.page_text("a\x1b[0m\tb\nc\u2028") == "a\\x1b[0m\tb\nc\\u2028"
    assert re.fullmatch(r"x{10}… \(\d+ more bytes\)", html_report.page_text("x" * 50, 10))


def test_a_comparison_with_a_baseline_has_its_table_and_chart(pytester: pytest.Pytester) -> None:
    common = (
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-n",
        "2",
        "--careful-model=reference",
        "--careful-category=miss_func",
    )
    assert pytester.runpytest_subprocess(*common, "--careful-label=before").ret == 0
    result = pytester.runpytest_subprocess(
        *common, "--careful-label=after", "--careful-baseline=scorecards/before/standard"
    )
    assert result.ret == 0
    folder = pytester.path / "scorecards" / "after" / "standard"
    comparison = json.loads((folder / "comparison.json").read_text())
    doc = lxml.html.parse(str(folder / "report.html")).getroot()
    rows = [[td.text_content() for td in tr.xpath("./td")] for tr in doc.xpath("//section[@id='comparison']//tbody/tr")]
    expected = [
        [c.removeprefix("multi_turn_"), str(v["gained"]), str(v["lost"]), f"{v['p']:.4f}"]
        for c, v in comparison.items()
    ]
    assert sorted(r[:4] for r in rows) == sorted(expected)
    assert rows[-1][0] == "all"
    assert doc.xpath("//figure[@id='chart-comparison']//*[local-name()='svg']")
    assert (folder / "comparison.png").read_bytes().startswith(b"\x89PNG")
    texts = [t.text for t in doc.xpath("//figure[@id='chart-comparison']//*[local-name()='text']")]
    assert any("vs before" in (t or "") for t in texts)


def test_a_broken_detail_costs_the_page_a_line_not_the_conversation(pytester: pytest.Pytester) -> None:
    # In a child process: an in-process run shares this worker's modules with the tests before it.
    pytester.makeconftest(
        "from pytest_careful.reports import html_report\n"
        "def broken(evaluation):\n"
        "    raise ValueError('no detail today')\n"
        "html_report.conversation_detail = broken\n"
    )
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        "-p",
        "no:xdist",
        "--careful-model=reference",
        "-k",
        "multi_turn_base_1[",
    )
    result.assert_outcomes(passed=1)
    doc = lxml.html.parse(str(pytester.path / "scorecards/reference/standard/report.html")).getroot()
    assert "the turn-by-turn detail could not be made: ValueError: no detail today" in doc.text_content()


def test_a_turn_of_many_calls_shows_the_first_ones_and_says_how_many_more() -> None:
    from hostile_payloads import FILE_SYSTEM_CONVERSATION, as_fc_entry, many_calls

    conversation = dataset.get(FILE_SYSTEM_CONVERSATION)
    entry = as_fc_entry(conversation, many_calls(100))
    evaluation = evaluate(conversation, entry["result"], decoder(REAL_RUN_DECODER))
    made = len(evaluation.replay.turns[0].calls)
    assert made > html_report.MAX_CALLS
    steps = html_report.conversation_detail(evaluation)["turns"][0]["model"]
    assert [s["kind"] for s in steps] == ["call"] * html_report.MAX_CALLS + ["more"]
    assert steps[-1]["text"] == f"… {made - html_report.MAX_CALLS} more calls"


def test_the_baseline_section_names_the_baseline_and_reads_like_a_p_value(hostile_evaluation: Any) -> None:
    # It showed "Against the baseline" without saying which, p = 0.0000, and base_10 before base_2.
    _, card = page_of("x", hostile_evaluation, hostile=False)
    flipped = [["multi_turn_base_10", "lost"], ["multi_turn_base_2", "gained"], ["multi_turn_base_1", "lost"]]
    comparison = {
        "multi_turn_base": {"gained": 1, "lost": 2, "p": 3e-9, "flipped": flipped},
        "all": {"gained": 1, "lost": 2, "p": 0.625, "flipped": flipped},
    }
    html = html_report.render(card, comparison, baseline="release-1 <b>")
    section = lxml.html.document_fromstring(html).xpath("//section[@id='comparison']")[0]
    # a scorecard from before --careful-regression-verdict compared BFCL's verdicts
    assert section.xpath("./h2")[0].text_content() == "Against the baseline (release-1 <b>), on the BFCL verdict"
    safe = {**card, "provenance": {**card["provenance"], "regression_verdict": "safe"}}
    heading = lxml.html.document_fromstring(html_report.render(safe, comparison)).xpath("//section/h2")
    assert [h.text_content() for h in heading if "baseline" in h.text_content()] == [
        "Against the baseline, on the safe verdict"
    ]
    rows = [[td.text_content() for td in tr.xpath("./td")] for tr in section.xpath(".//tbody/tr")]
    assert [r[3] for r in rows] == ["< 0.0001", "0.6250"]
    assert rows[0][4] == "multi_turn_base_1 (lost), multi_turn_base_2 (gained), multi_turn_base_10 (lost)"


def test_a_repeats_page_and_charts_say_which_repeat(hostile_evaluation: Any) -> None:
    # repeat-1/report.html and repeat-2/report.html had the same title, heading and chart titles
    _, card = page_of("x", hostile_evaluation, hostile=False)
    card = {**card, "provenance": {**card["provenance"], "repeat": 2, "repeats": 3}}
    html = html_report.render(card, charts={"accuracy": plots.svg(plots.accuracy_figure(card))})
    assert html.startswith("<!DOCTYPE html>")
    doc = lxml.html.document_fromstring(html)
    assert doc.xpath("//title")[0].text_content() == "m · standard · repeat 2 of 3 · pytest-careful"
    assert doc.xpath("//h1")[0].text_content() == "m · standard · repeat 2 of 3"
    assert any("m · standard · repeat 2 of 3 · n = 1" in (t.text or "") for t in doc.iter("{*}text", "text"))
    plain = html_report.render({**card, "provenance": {**card["provenance"], "repeat": True}})
    assert "repeat" not in lxml.html.document_fromstring(plain).xpath("//h1")[0].text_content()
