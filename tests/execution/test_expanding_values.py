"""Short lines that expand (issue 23): values built by repetition and arithmetic count against
the conversation's memory budget when they are built, and long values are cut once, where
rows and reports are made from them.

Each class of ``hostile_payloads.EXPANDING_*`` is scored as an item scores it, then through
pytester with and without xdist, with JUnit and report.html on: a line that expands past the
budget stops with a one-line reason naming the step and call, the others' rows are those of
the same command without it, no output holds a long value whole, the result file is unchanged.

The memory count decides each outcome here, never the clock: in process the clock stands still,
and the commands get a time limit no machine reaches (the time limit's promise is tested with
a controlled clock in ``test_limits_clock.py``). No test reads how long anything took.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import hostile_payloads as payloads
import pytest
from rows import score_row

from pytest_careful.data import dataset
from pytest_careful.effects import declarations
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.execution import limits
from pytest_careful.execution.decoding import decoder, passthrough_decoder
from pytest_careful.scoring import evidence

QWEN = "Qwen/Qwen3-8B"  # a prompting decoder: its literal evaluator builds 'a' * N, as BFCL's eval does
LINE = 64_000  # the issue's target: a result line of at most 64 KB
BUDGET = limits.Limits()  # the defaults: what a user gets
BUDGET_CHARS = BUDGET.max_memory_mb * 2**20
#: The commands' time limit: far past what any of them takes, so that the counts alone decide.
NO_TIME_LIMIT = "--careful-max-seconds=86400"


def _still() -> float:
    """A clock that never moves: the time limit never stops the scoring in process."""
    return 0.0


def _prompting(calls: list[str]) -> str:
    return "[" + ", ".join(calls) + "]"


def _prompting_result(conversation: dataset.Conversation, first_step: str | None = None) -> list[list[str]]:
    """The reference's calls as a prompting run logs them, ``first_step`` before turn 0's."""
    turns = [
        [_prompting(list(calls)), "Done."] if calls else ["I cannot do that."] for calls in conversation.ground_truth
    ]
    if first_step is not None:
        turns[0].insert(0, first_step)
    return turns


def _score(conversation: dataset.Conversation, result: Any, dec: Any) -> tuple[str, str, Any]:
    """What ``item._score`` does inside the default budget: outcome, reason, evaluation."""
    with limits.metered(BUDGET, _still):
        try:
            evaluation = evaluate(conversation, result, dec)
            row = score_row(evaluation, declarations.load())
            evidence.transcript(evaluation)
            evidence.format_bfcl_failure(evaluation)
        except limits.ResourceLimit as exceeded:
            return f"resource_limit:{exceeded.limit}", exceeded.reason, None
    return evaluation.verdict.error_type or "pass", "", (evaluation, row)


def _assert_one_line_reason(reason: str, where: str) -> None:
    assert "\n" not in reason and len(reason) < 700, reason
    assert f"at {where}" in reason, reason
    assert "over the memory limit (--careful-max-memory-mb=512)" in reason


@pytest.mark.parametrize("kind", sorted(payloads.EXPANDING_CALLS))
def test_values_the_interpreter_builds_count_when_built(kind: str) -> None:
    """Each call's value has a text far past the budget (or thousands of calls add up past it)."""
    conversation = dataset.get(payloads.FILE_SYSTEM_CONVERSATION)
    calls = payloads.EXPANDING_CALLS[kind]
    outcome, reason, _ = _score(conversation, payloads.as_run(conversation, calls), passthrough_decoder())
    assert outcome == "resource_limit:memory", (outcome, reason)
    position = len(conversation.ground_truth[0])  # the planted calls follow the reference's own
    _assert_one_line_reason(reason, "turn 0, step 0, call ")
    call = re.search(r"at turn 0, step 0, call (\d+): (.*)$", reason)
    assert call is not None and int(call.group(1)) >= position
    assert call.group(2) == calls[int(call.group(1)) - position]  # short calls are named whole


#: Classes whose 64 KB step builds more than the budget: every value is held twice while the
#: step is decoded (the value, and the call string the decoder writes with it), and a chain
#: builds each of its parts. Numbers stay below 10**100 (``interpreter.MAX_NUMBER_MAGNITUDE``).
PAST_THE_BUDGET = {kind for kind in payloads.EXPANDING_STEPS if kind != "number arithmetic"}
#: A line of this size expands to 80 calls x 400,000 characters at most: far under the budget.
SMALL_LINE = 4_000


@pytest.mark.parametrize("size", [LINE, SMALL_LINE], ids=["64KB", "4KB"])
@pytest.mark.parametrize("kind", sorted(payloads.EXPANDING_STEPS))
def test_a_prompting_step_that_expands_counts_as_it_is_decoded(kind: str, size: int) -> None:
    conversation = dataset.get(payloads.FILE_SYSTEM_CONVERSATION)
    step = payloads.EXPANDING_STEPS[kind](size)
    assert size - 200 < len(step) <= size
    outcome, reason, scored = _score(conversation, _prompting_result(conversation, step), decoder(QWEN))
    if kind in PAST_THE_BUDGET and size == LINE:
        assert outcome == "resource_limit:memory", outcome
        _assert_one_line_reason(reason, "turn 0, step 0 (decoding: ")
    else:  # scored: each planted call is a write beyond the reference
        assert not outcome.startswith("resource_limit"), reason
        beyond = sum(n for rule, n in scored[1]["counts"].items() if rule.startswith("beyond_reference_"))
        assert beyond >= step.count("echo(")


def test_the_issue_line_is_scored_and_its_values_cut_once() -> None:
    """300 writes of 199,000 characters: 60 MB of arguments, under the budget, scored; every
    text made from them quotes each value as its first characters and its length."""
    conversation = dataset.get("multi_turn_base_0")
    outcome, reason, scored = _score(conversation, _prompting_result(conversation, payloads.ISSUE_STEP), decoder(QWEN))
    assert not outcome.startswith("resource_limit"), reason
    evaluation, row = scored
    ordinary = _score(conversation, _prompting_result(conversation), decoder(QWEN))[2][1]
    # No file f0..f299 exists: echo fails each.
    assert row["counts"]["failed_calls"] == ordinary["counts"]["failed_calls"] + 300
    texts = [json.dumps(row), evidence.transcript(evaluation), evidence.format_bfcl_failure(evaluation)]
    for text in texts:
        assert "a" * 1000 not in text
    failed = [v for v in row["violations"] if v["rule"] == "failed_calls" and v["call"].startswith("echo(")]
    assert len(failed) == 300
    for n, violation in enumerate(failed):
        assert violation["call"] == "echo(content='" + "a" * 100 + f"…' (199,000 chars), file_name='f{n}')"
        assert violation["arguments"]["content"] == "a" * 500 + "… (199,000 chars)"
        assert violation["arguments"]["file_name"] == f"f{n}"
    # The records keep the values whole: the verdict and the rules see what the model sent.
    assert all(len(c.arguments["content"]) == 199_000 for c in evaluation.replay.turns[0].calls[:300])


def test_ordinary_rows_are_unchanged_by_the_cut() -> None:
    """A call and arguments under the cut are quoted exactly as written."""
    conversation = dataset.get("multi_turn_base_0")
    result = _prompting_result(conversation)
    result[0].insert(0, "[echo(content='" + "x" * 400 + "', file_name='nope.txt')]")
    outcome, _, scored = _score(conversation, result, decoder(QWEN))
    _, row = scored
    [violation] = [v for v in row["violations"] if v["rule"] == "failed_calls" and "nope" in v["call"]]
    assert violation["call"] == "echo(content='" + "x" * 400 + "', file_name='nope.txt')"
    assert violation["arguments"] == {"content": "x" * 400, "file_name": "nope.txt"}


# --- the whole command ----------------------------------------------------------------------

#: Conversation -> the step planted first in its turn 0; the rest of the file is ordinary.
PLANTED = {"multi_turn_base_0": payloads.ISSUE_STEP} | {
    f"multi_turn_base_{n}": payloads.EXPANDING_STEPS[kind](LINE)
    for n, kind in enumerate(sorted(payloads.EXPANDING_STEPS), start=1)
}
SELECTED = [f"multi_turn_base_{n}" for n in range(len(PLANTED) + 2)]
PAST = {
    f"multi_turn_base_{n}"
    for n, kind in enumerate(sorted(payloads.EXPANDING_STEPS), start=1)
    if kind in PAST_THE_BUDGET
}


def _write_run(folder: Path, planted: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    lines = [
        json.dumps({"id": cid, "result": _prompting_result(dataset.get(cid), planted.get(cid))}) for cid in SELECTED
    ]
    path = folder / "BFCL_v4_multi_turn_base_result.json"
    path.write_text("\n".join(lines) + "\n")
    return path


def _run(pytester: pytest.Pytester, name: str, planted: dict[str, str], mode: list[str]) -> dict[str, Any]:
    """The command on a run with ``planted`` steps: its outputs, read back."""
    path = _write_run(pytester.path / name / "qwen", planted)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        *mode,
        f"--careful-results={path.parent}",
        f"--careful-decoder={QWEN}",
        NO_TIME_LIMIT,
        f"--junitxml={name}.xml",
        f"--basetemp={pytester.path / name / 'tmp'}",
        *(f"{c}[standard]" for c in SELECTED),
        timeout=600,
    )
    assert hashlib.sha256(path.read_bytes()).hexdigest() == digest  # the result file is never changed
    out = result.stdout.str() + result.stderr.str()
    assert "Traceback" not in out and "INTERNALERROR" not in out, out[-3000:]
    cards = pytester.path / "scorecards" / "qwen" / "standard"
    outputs = {"terminal": out, "junit": (pytester.path / f"{name}.xml").read_text()}
    outputs |= {p.name: p.read_text() for p in cards.iterdir() if p.suffix in (".json", ".csv", ".md", ".html")}
    rows = {row["id"]: row for row in json.loads(outputs["scorecard.json"])["rows"]}
    cases = {case.get("name"): case for case in ET.parse(pytester.path / f"{name}.xml").iter("testcase")}
    shutil.rmtree(pytester.path / "scorecards")  # the next command writes its own
    return {"rows": rows, "outputs": outputs, "cases": cases}


@pytest.mark.parametrize("mode", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_expanding_lines_stop_alone_and_are_never_copied_whole(pytester: pytest.Pytester, mode: list[str]) -> None:
    ordinary = _run(pytester, "ordinary", {}, mode)
    hostile = _run(pytester, "hostile", PLANTED, mode)
    assert sorted(hostile["rows"]) == SELECTED
    for cid in SELECTED:
        if cid not in PLANTED:  # the other conversations' rows: as on the ordinary line
            assert hostile["rows"][cid] == ordinary["rows"][cid], cid
            continue
        row = hostile["rows"][cid]
        case = hostile["cases"][f"{cid}[standard]"]
        if cid in PAST:
            assert row["bfcl"]["error_type"] == "careful:resource_limit", cid
            _assert_one_line_reason(row["resource_limit"], "turn 0, step 0")
            properties = {p.get("name"): p.get("value") for p in case.iter("property")}
            assert properties["careful_resource_limit"] == row["resource_limit"]
            assert f"[resource_limit] {row['resource_limit']}" in hostile["outputs"]["terminal"]
        else:
            assert "resource_limit" not in row, cid
    issue, before = hostile["rows"]["multi_turn_base_0"], ordinary["rows"]["multi_turn_base_0"]
    assert issue["counts"]["failed_calls"] == before["counts"]["failed_calls"] + 300
    for name, text in hostile["outputs"].items():
        assert len(text) < 5_000_000, name
        for letter in "abcdefgh":  # the letters the planted steps repeat
            assert letter * 1000 not in text, (name, letter)
