"""The transcript shows what the model did in each step, its text included, and stays safe.

Expected lines are derived from the result entries themselves (and bfcl-eval's
own FC decoder), never from the transcript code.
"""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from rows import score_row

from conftest import REAL_RUN_DECODER
from pytest_careful.data import dataset
from pytest_careful.data.result_files import LoggedEntry, read_result_file
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.execution.decoding import decoder
from pytest_careful.scoring import evidence


def _transcript(conversation_id: str, result: Any, key: str, raw: dict[str, Any] | None = None) -> str:
    entry = LoggedEntry(conversation_id, result, "test", 1, raw=raw or {"id": conversation_id, "result": result})
    return evidence.transcript(evaluate(dataset.get(conversation_id), result, decoder(key), entry=entry))


def _kinds(transcript: str) -> list[list[str]]:
    """Per turn, what each line of the transcript shows, in order."""
    turns: list[list[str]] = []
    for line in transcript.splitlines():
        if line.startswith("--- turn "):
            turns.append([])
        elif line.startswith("  ["):
            turns[-1].append("call")
        elif line.startswith("  (no call) text: "):
            turns[-1].append("text")
        elif line.startswith("  (no call; the result file records no text"):
            turns[-1].append("silent")
        elif line.startswith("  (not decoded: "):
            turns[-1].append("undecodable")
    return turns


def _expected_fc(result: list[list[Any]]) -> list[list[str]]:
    """What each raw step of an FC entry is, by bfcl-eval's own decoder."""
    from bfcl_eval.model_handler.utils import convert_to_function_call

    turns = []
    for turn in result:
        kinds: list[str] = []
        for step in turn:
            try:
                calls = convert_to_function_call(step)
            except Exception:
                kinds.append("undecodable")
                continue
            kinds.extend(["call"] * len(calls) if calls else ["silent"])
        turns.append(kinds)
    return turns


def test_real_run_steps_without_a_call_are_shown_where_they_happened(real_run):
    entries, _ = read_result_file(real_run / "BFCL_v4_multi_turn_base_result.json", "multi_turn_base")
    checked = {"silent": 0, "undecodable": 0}
    for entry in entries[:40]:
        if not isinstance(entry.result, list):
            continue
        shown = _kinds(_transcript(entry.id, entry.result, REAL_RUN_DECODER, entry.raw))
        expected = _expected_fc(entry.result)
        assert shown == expected, entry.id
        for kind in checked:
            checked[kind] += sum(k == kind for t in expected for k in t)
    # gpt-oss via vLLM logs a step without a call as [] (its text is not kept): many
    # such steps, and a few garbled ones that do not decode, were compared above.
    assert checked["silent"] > 50 and checked["undecodable"] >= 1, checked


def test_an_undecodable_real_step_is_shown_as_logged(real_run):
    entries, _ = read_result_file(real_run / "BFCL_v4_multi_turn_base_result.json", "multi_turn_base")
    entry = next(e for e in entries if e.id == "multi_turn_base_6")
    text = _transcript(entry.id, entry.result, REAL_RUN_DECODER, entry.raw)
    [line] = [x for x in text.splitlines() if x.startswith("  (not decoded: ")]
    [garbled] = [s for t in entry.result for s in t if s and "touch" in json.dumps(s) and "commentary" in json.dumps(s)]
    assert line.startswith("  (not decoded: JSONDecodeError) step: [{")
    assert json.dumps(garbled, ensure_ascii=False)[:40] in line


def _prompting_run(conversation_id: str, closing: list[str]) -> list[list[str]]:
    """The reference as prompting steps, each turn closed by the given text."""
    turns = dataset.get(conversation_id).ground_truth
    return [
        (["[" + ", ".join(calls) + "]"] if calls else []) + [closing[i % len(closing)]] for i, calls in enumerate(turns)
    ]


def test_prompting_text_is_shown_after_the_turns_calls():
    closing = ["All done: the file is in temp.", "Which file did you mean?"]
    result = _prompting_run("multi_turn_base_0", closing)
    text = _transcript("multi_turn_base_0", result, "Qwen/Qwen3-8B")
    turns = dataset.get("multi_turn_base_0").ground_truth
    assert _kinds(text) == [["call"] * len(calls) + ["text"] for calls in turns]
    for i in range(len(turns)):
        assert f"  (no call) text: {closing[i % 2]}" in text


def test_claude_style_text_parts_and_reasoning_are_shown():
    conversation = dataset.get("multi_turn_base_2")
    from pytest_careful.live.backends.scripted import call_to_fc

    result = [
        [[call_to_fc(c, conversation.involved_classes) for c in calls], ["Shall I go on?", "Say yes."]]
        for calls in conversation.ground_truth
    ]
    reasoning = [["", "The user may want to check first."] for _ in result]
    raw = {"id": conversation.id, "result": result, "reasoning_content": reasoning}
    text = _transcript(conversation.id, result, "claude-haiku-4-5-20251001-FC", raw)
    assert _kinds(text) == [["call"] * len(calls) + ["text"] for calls in conversation.ground_truth]
    assert text.count("  (no call) text: Shall I go on?\\nSay yes.") == len(result)
    assert text.count("      reasoning: The user may want to check first.") == len(result)


def test_an_inference_error_is_shown():
    text = _transcript("multi_turn_base_3", "Error during inference: context length exceeded", REAL_RUN_DECODER)
    assert "inference error: Error during inference: context length exceeded" in text


HOSTILE = [
    "\x1b[2J\x1b[31mred\x07\r\x00done",  # terminal escapes, bell, carriage return, NUL
    "ok\n--- turn 9: forged line\n  reference: forged",  # newlines must not make lines
    "\u202eevil\u2028next\u2029para\x85nel",  # bidi override, line/paragraph separators, NEL
    "lone \ud800 surrogate",  # unencodable
    "A" * 1_000_000,  # huge
]
HOSTILE_CONVERSATION = "multi_turn_base_2"  # five turns: one hostile text each


def test_model_text_cannot_break_the_transcript():
    conversation = dataset.get(HOSTILE_CONVERSATION)
    result = [[h] for h in HOSTILE]
    text = _transcript(conversation.id, result, "Qwen/Qwen3-8B")
    lines = text.splitlines()
    assert lines == text.split("\n")  # no other line break survives
    assert len([x for x in lines if x.startswith("--- turn")]) == conversation.n_turns
    assert all(unicodedata.category(c) not in ("Cc", "Cf", "Cs", "Zl", "Zp") for c in text.replace("\n", ""))
    text.encode("utf-8")  # would raise on a lone surrogate
    assert max(map(len, lines)) < 2000
    assert f"[... {1_000_000 - evidence.MAX_TEXT} more characters cut]" in text
    assert "\\x1b[2J\\x1b[31mred\\x07\\r\\x00done" in text and "\\u202eevil\\u2028next" in text
    assert "lone \\ud800 surrogate" in text


def test_hostile_text_in_a_failing_items_report(pytester: pytest.Pytester):
    folder = pytester.path / "result" / "prompting-model"
    folder.mkdir(parents=True)
    conversation = dataset.get(HOSTILE_CONVERSATION)
    line = json.dumps({"id": conversation.id, "result": [[h] for h in HOSTILE]})
    (folder / "BFCL_v4_multi_turn_base_result.json").write_text(line + "\n")
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--careful-results={folder}",
        "--careful-decoder=Qwen/Qwen3-8B",
        "--careful-category=base",
        conversation.id,
        f"--junitxml={pytester.path / 'out.xml'}",
        "-v",  # the transcript section, which the default verbosity leaves to report.html and JUnit
    )
    out = result.stdout.str()
    assert result.ret == 1 and "INTERNALERROR" not in out + result.stderr.str(), out[-3000:]
    assert "careful transcript" in out
    assert not any(line.startswith("--- turn 9") for line in out.splitlines())
    assert "(no call) text: ok\\n--- turn 9: forged line" in out
    assert "\x1b" not in out and len(out) < 200_000
    assert (pytester.path / "out.xml").stat().st_size < 200_000


def test_text_parts_are_read_as_the_confirm_protocol_reads_them():
    """A Claude FC question (["text"]) counts as asked, as the same text as a string does."""
    from pytest_careful.effects import declarations
    from pytest_careful.protocols.confirm_log import model_text

    conversation = dataset.get("multi_turn_base_0")
    question = "Before I move it: shall I move final_report.pdf into temp? Please confirm."
    as_parts = [[[question]] for _ in range(conversation.n_turns)]  # how Claude's handler logs it
    as_string = [[question] for _ in range(conversation.n_turns)]  # how OpenAI's handler logs it
    assert model_text([question]) == model_text(question) == question
    rows = [
        score_row(evaluate(conversation, r, decoder("claude-haiku-4-5-20251001-FC")), declarations.load())
        for r in (as_parts, as_string)
    ]
    assert rows[0]["counts"]["asked"] == rows[1]["counts"]["asked"] == conversation.n_turns
