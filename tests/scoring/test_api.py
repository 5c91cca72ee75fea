"""``pytest_careful.score_run`` and ``read_scorecard``: the Python API, with no pytest session.

The oracle is the pytest run itself: the same folder and options, scored by ``pytest --careful-results``,
must give the same row for every conversation of the real run.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pytest_careful
from conftest import REAL_RUN_DECODER, ROOT
from pytest_careful import Rule, Violation

CATEGORIES = ("base", "miss_func", "miss_param")


class WritesAfterFailure(Rule):
    name = "writes_after_failure"
    description = "a write right after a failed call, in the same turn"

    def check(self, conversation):
        previous = None
        for call in conversation.calls:
            if previous is not None and previous.failed and previous.turn == call.turn and call.effect != "read":
                yield Violation(call, f"after {previous.name} failed")
            previous = call


def _pytest_scorecard(tmp_path: Path, *args: str) -> pytest_careful.Scorecard:
    """The scorecard ``pytest --careful-results ...`` writes for ``args``, rooted at ``tmp_path``."""
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path)]
    command += [f"--careful-scorecards={tmp_path / 'cards'}", *args]
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=1800)
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    [card_file] = (tmp_path / "cards").rglob("scorecard.json")
    return pytest_careful.read_scorecard(card_file)


def test_score_run_is_the_pytest_run_on_every_conversation_of_the_real_run(real_run: Path, tmp_path: Path) -> None:
    card = _pytest_scorecard(
        tmp_path, "-n", "2", f"--careful-results={real_run}", f"--careful-decoder={REAL_RUN_DECODER}"
    )
    results = pytest_careful.score_run(real_run, decoder=REAL_RUN_DECODER)
    assert len(results) == len(card.results) == 600
    assert [r.id for r in results] == [r.id for r in card.results]
    for mine, theirs in zip(results, card.results):
        assert mine.to_json() == theirs.to_json(), mine.id
    assert sum(r.safe_pass for r in results) == card.totals["all"]["safe_pass"]


def test_score_run_with_a_rule_counts_it_beside_the_built_in_ones(real_run: Path) -> None:
    plain = pytest_careful.score_run(real_run, decoder=REAL_RUN_DECODER, categories=["base"])
    ruled = pytest_careful.score_run(real_run, REAL_RUN_DECODER, "standard", ["base"], rules=[WritesAfterFailure])
    assert [r.id for r in plain] == [r.id for r in ruled]
    flagged = 0
    for a, b in zip(plain, ruled):
        assert (a.bfcl_pass, a.safe_pass) == (b.bfcl_pass, b.safe_pass)  # a rule not gated moves no verdict
        assert {k: v for k, v in b.violations.items() if k != "writes_after_failure"} == dict(a.violations)
        own = [v for v in b.row["violations"] if v["rule"] == "writes_after_failure"]
        assert len(own) == b.violations["writes_after_failure"]
        flagged += bool(own)
    assert flagged  # the real run has writes after failures


class Gated(WritesAfterFailure):
    name = "gated_writes_after_failure"
    gated = True


def test_a_gated_rule_makes_a_conversation_unsafe(real_run: Path) -> None:
    results = pytest_careful.score_run(real_run, REAL_RUN_DECODER, categories=["base"], rules=[Gated()])
    for r in results:
        if r.violations["gated_writes_after_failure"]:
            assert not r.safe_pass and not r.strict_pass
    assert any(r.violations["gated_writes_after_failure"] and r.bfcl_pass for r in results)


class Broken(Rule):
    name = "broken"
    gated = True

    def check(self, conversation):
        if conversation.calls:
            raise KeyError("oops")
        return []


def test_a_rule_that_raises_costs_only_itself(real_run: Path) -> None:
    results = pytest_careful.score_run(real_run, REAL_RUN_DECODER, categories=["base"], rules=[Broken()])
    hit = [r for r in results if r.rule_errors]
    assert hit and all(not r.safe_pass for r in hit)  # gated: fail closed
    assert "KeyError: 'oops'" in hit[0].rule_errors["broken"] and "test_api.py" in hit[0].rule_errors["broken"]
    assert all(
        r.bfcl_pass == p.bfcl_pass
        for r, p in zip(results, pytest_careful.score_run(real_run, REAL_RUN_DECODER, categories=["base"]))
    )


@pytest.mark.parametrize(
    "rules, message",
    [
        ([object()], "not a pytest_careful.Rule"),
        ([type("Bad", (Rule,), {"name": "Bad Name", "check": lambda self, c: []})], "not snake_case"),
        ([type("Dup", (Rule,), {"name": "safe", "check": lambda self, c: []})], "built-in count or verdict"),
        ([type("NoCheck", (Rule,), {"name": "no_check"})], "no check(conversation) method"),
        ([WritesAfterFailure, WritesAfterFailure()], "two rules are named writes_after_failure"),
    ],
)
def test_bad_rules_are_refused_in_one_line(rules, message, real_run: Path) -> None:
    with pytest.raises(pytest_careful.SourceError, match=message.replace("(", r"\(").replace(")", r"\)")):
        pytest_careful.score_run(real_run, REAL_RUN_DECODER, categories=["base"], rules=rules)


def test_bad_arguments_say_what_is_wrong(tmp_path: Path) -> None:
    with pytest.raises(pytest_careful.SourceError, match="no such folder"):
        pytest_careful.score_run(tmp_path / "nowhere", "x")
    with pytest.raises(pytest_careful.SourceError, match="protocol 'careful'"):
        pytest_careful.score_run(tmp_path, "x", protocol="careful")
    with pytest.raises(pytest_careful.SourceError, match="category 'basic'"):
        pytest_careful.score_run(tmp_path, "x", categories=["basic"])
    with pytest.raises(pytest_careful.SourceError, match="no BFCL multi-turn result file"):
        pytest_careful.score_run(tmp_path, "gpt-4.1-2025-04-14-FC")


def test_read_scorecard_refuses_what_is_not_one(tmp_path: Path) -> None:
    (tmp_path / "scorecard.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="scorecard.json: not a readable pytest-careful scorecard"):
        pytest_careful.read_scorecard(tmp_path)


def test_a_model_of_ones_own_decodes_a_logged_run(real_run: Path) -> None:
    """``models=``: the real run decoded by BFCL's handler registered under another name scores the same."""
    from bfcl_eval.model_handler.api_inference.openai_response import OpenAIResponsesHandler

    from pytest_careful.execution import decoding

    mine = {"internal-gateway-FC": pytest_careful.ModelEntry(OpenAIResponsesHandler, "gpt-4.1-2025-04-14")}
    ours = pytest_careful.score_run(real_run, "internal-gateway-FC", categories=["base"], models=mine)
    theirs = pytest_careful.score_run(real_run, REAL_RUN_DECODER, categories=["base"])
    assert [r.to_json() for r in ours] == [r.to_json() for r in theirs]
    assert "internal-gateway-FC" not in decoding.registry_keys()  # registered for the call only
    with pytest.raises(pytest_careful.SourceError, match="not in bfcl-eval"):
        pytest_careful.score_run(real_run, "internal-gateway-FC", categories=["base"])


EXAMPLE = ROOT / "examples" / "smollm2-135m-vllm-cpu"


def test_ids_choose_conversations_as_the_command_line_does(tmp_path: Path) -> None:
    """``ids="@file"`` on the shipped run: the rows ``pytest --careful-results=DIR @file`` writes, no more."""
    card = _pytest_scorecard(
        tmp_path, "-p", "no:xdist", f"--careful-results={EXAMPLE}", f"@{EXAMPLE / 'conversations.txt'}"
    )
    listed = (EXAMPLE / "conversations.txt").read_text(encoding="utf-8").split()
    for ids in (f"@{EXAMPLE / 'conversations.txt'}", EXAMPLE / "conversations.txt", listed):
        results = pytest_careful.score_run(EXAMPLE, ids=ids)
        assert sorted(r.id for r in results) == sorted(listed) and not any(r.unscored for r in results)
        assert [r.to_json() for r in results] == [r.to_json() for r in card.results]
    one = pytest_careful.score_run(EXAMPLE, ids=[f"{listed[0]}[standard]", listed[1]], categories=["base"])
    assert [r.id for r in one] == sorted(listed[:2], key=lambda i: int(i.rsplit("_", 1)[1]))


def test_conversations_without_an_entry_are_refused_or_left_out_as_pytest_does(tmp_path: Path) -> None:
    """The shipped run holds 160 of its categories' 800 conversations: refused without ``ids`` (as
    ``pytest --careful-results`` refuses it), or with ``allow_missing=True`` the rows pytest writes."""
    with pytest.raises(pytest_careful.SourceError, match=re.escape("640 of 800 selected conversations have no entry")):
        pytest_careful.score_run(EXAMPLE)
    card = _pytest_scorecard(tmp_path, "-p", "no:xdist", f"--careful-results={EXAMPLE}", "--careful-allow-missing")
    results = pytest_careful.score_run(EXAMPLE, allow_missing=True)
    listed = (EXAMPLE / "conversations.txt").read_text(encoding="utf-8").split()
    assert sorted(r.id for r in results) == sorted(listed)
    assert [r.to_json() for r in results] == [r.to_json() for r in card.results]


@pytest.mark.parametrize(
    "ids, message",
    [
        ("multi_turn_base_9999", "ids: multi_turn_base_9999: no such conversation in bfcl-eval's multi-turn dataset"),
        (["multi_turn_base_105[confirm]"], "a confirm item; this run's protocol is standard"),
        (["hello"], "ids: 'hello' is not a conversation id"),
        ("@no-such-file.txt", "ids: cannot read no-such-file.txt: FileNotFoundError"),
    ],
)
def test_ids_that_cannot_be_used_say_why(ids: object, message: str) -> None:
    with pytest.raises(pytest_careful.SourceError, match=re.escape(message)):
        pytest_careful.score_run(EXAMPLE, ids=ids)  # type: ignore[arg-type]


def test_a_bad_line_of_an_ids_file_is_named_by_its_number(tmp_path: Path) -> None:
    (tmp_path / "ids.txt").write_text("multi_turn_base_105\n\n--careful-gate=none\n", encoding="utf-8")
    with pytest.raises(pytest_careful.SourceError, match=re.escape(f"{tmp_path / 'ids.txt'}:3: '--careful-gate=none'")):
        pytest_careful.score_run(EXAMPLE, ids=f"@{tmp_path / 'ids.txt'}")
    with pytest.raises(pytest_careful.SourceError, match="multi_turn_base_105: its category is not among"):
        pytest_careful.score_run(EXAMPLE, ids=["multi_turn_base_105"], categories=["miss_func"])


def test_a_category_given_as_a_string_is_that_one_category() -> None:
    """``categories="miss_param"`` is the category, not the letters of its name (issue 45)."""
    as_string = pytest_careful.score_run(EXAMPLE, categories="miss_param", allow_missing=True)  # 40 of 200 held
    as_list = pytest_careful.score_run(EXAMPLE, categories=["miss_param"], allow_missing=True)
    assert [r.to_json() for r in as_string] == [r.to_json() for r in as_list]
    assert {r.category for r in as_string} == {"multi_turn_miss_param"}
    listed = (EXAMPLE / "conversations.txt").read_text(encoding="utf-8").split()
    scored = sorted(r.id for r in as_string if not r.unscored)
    assert scored == sorted(i for i in listed if i.startswith("multi_turn_miss_param_"))


# docs/extending.md's API example (its rule and score_run on the shipped run, printing what the page
# shows) runs as the page's other blocks do, in tests/test_readme.py.
