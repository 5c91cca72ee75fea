"""A decoder that reads (almost) none of a logged run says so, and names decoders that do.

Expectations come from bfcl-eval's own decoding functions and from runs built
here in known formats, never from the code under test.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from conftest import REAL_RUN_DECODER, ROOT
from pytest_careful.data import dataset
from pytest_careful.execution.decoding import decoder
from pytest_careful.sources.format_check import FORMATS
from pytest_careful.sources.reference_logged import open_source
from pytest_careful.sources.run_config import RunConfig

IDS = [f"multi_turn_base_{i}" for i in range(12)]


def _options(results: Path, decoder_key: str, **more: Any) -> RunConfig:
    return RunConfig(
        active=True,
        model="",
        results=results,
        decoder=decoder_key,
        protocols=("standard",),
        categories=("multi_turn_base",),
        boundary="final",
        detector="strict",
        gate="safe",
        scorecards=results / "cards",
        baseline=None,
        min_safe=None,
        min_bfcl=None,
        fail_on_regression=None,
        **more,
    )


def _suggested(warning: str) -> list[str]:
    advice = warning.split("\n", 1)[1]  # the first line names the decoder that was chosen
    return [f.key for f in FORMATS if f"{f.key} decodes" in advice]


def _write_run(folder: Path, step_of_call_list) -> Path:
    """A base-category result file whose turns are the references, one step per turn
    in the given format, followed by a closing text step (as a model ends a turn)."""
    folder.mkdir(parents=True)
    lines = []
    for conversation_id in IDS:
        turns = dataset.get(conversation_id).ground_truth
        result = [
            [step_of_call_list(list(calls)), "I have done what you asked."]
            if calls
            else ["I cannot do that with the functions I have."]
            for calls in turns
        ]
        lines.append(json.dumps({"id": conversation_id, "result": result}))
    (folder / "BFCL_v4_multi_turn_base_result.json").write_text("\n".join(lines) + "\n")
    return folder


def _prompting(calls: list[str]) -> str:
    return "[" + ", ".join(calls) + "]"


def _tool_call_tags(calls: list[str]) -> str:
    """Qwen/Hermes-style FC text: one <tool_call> JSON block per call."""
    blocks = [json.dumps({"name": name, "arguments": arguments}) for name, arguments in map(_parsed, calls)]
    return "\n".join(f"<tool_call>\n{block}\n</tool_call>" for block in blocks)


def _parsed(call: str) -> tuple[str, dict[str, Any]]:
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    return node.func.id, {k.arg: ast.literal_eval(k.value) for k in node.keywords}


def test_the_right_decoder_on_the_real_run_gives_no_warning(real_run):
    source = open_source(_options(real_run, REAL_RUN_DECODER))
    assert source.warnings == []


def test_a_prompting_decoder_on_the_real_fc_run_names_fc_decoders_that_agree(real_run):
    from bfcl_eval.model_handler.utils import convert_to_function_call, default_decode_execute_prompting

    source = open_source(_options(real_run, "Qwen/Qwen3-8B"))
    [warning] = source.warnings
    assert warning.startswith("--careful-decoder=Qwen/Qwen3-8B decodes 0 of ")
    assert str(real_run) in warning and "still scored" in warning
    suggested = _suggested(warning)
    assert suggested and f"Rescore with --careful-decoder={suggested[0]}" in warning
    steps = [
        s for e in source.entries.values() if e and isinstance(e.result, list) for turn in e.result for s in turn if s
    ]
    assert len(steps) > 1000
    for step in steps:  # bfcl-eval's own readings: the run is FC, not prompting
        with pytest.raises(Exception):
            default_decode_execute_prompting(step)
    expected = [_outcome(convert_to_function_call, s) for s in steps]
    assert sum(kind == "calls" for kind, _ in expected) > 0.9 * len(steps)
    for key in suggested:
        assert [_outcome(decoder(key).decode_step, s) for s in steps] == expected, key


def _outcome(decode, step: Any) -> tuple[str, Any]:
    try:
        return "calls", decode(step)
    except Exception:  # a step bfcl-eval cannot decode either (a few real ones are garbled)
        return "fails", None


def test_a_fc_decoder_on_a_prompting_run_suggests_a_prompting_decoder(tmp_path):
    from bfcl_eval.model_handler.utils import default_decode_execute_prompting

    run = _write_run(tmp_path / "prompting", _prompting)
    [warning] = open_source(_options(run, REAL_RUN_DECODER)).warnings
    suggested = _suggested(warning)
    assert suggested == ["Qwen/Qwen3-8B"], warning
    for conversation_id in IDS:
        for calls in dataset.get(conversation_id).ground_truth:
            if calls:
                step = _prompting(list(calls))
                assert decoder("Qwen/Qwen3-8B").decode_step(step) == default_decode_execute_prompting(step)
    assert open_source(_options(run, "Qwen/Qwen3-8B")).warnings == []


def test_tool_call_text_gets_the_tool_call_decoder(tmp_path):
    run = _write_run(tmp_path / "qwen-fc", _tool_call_tags)
    [warning] = open_source(_options(run, "Qwen3-8B")).warnings
    assert _suggested(warning) == ["Qwen/Qwen3-8B-FC"], warning
    assert warning.startswith("--careful-decoder=Qwen3-8B (decoder Qwen/Qwen3-8B) decodes 0 of ")
    for conversation_id in IDS:  # the suggested decoder gives back the reference calls
        for calls in dataset.get(conversation_id).ground_truth:
            if calls:
                decoded = decoder("Qwen/Qwen3-8B-FC").decode_step(_tool_call_tags(list(calls)))
                assert list(map(_parsed, decoded)) == list(map(_parsed, calls))
    assert open_source(_options(run, "Qwen/Qwen3-8B-FC")).warnings == []


def test_a_run_of_prose_says_the_model_answered_in_prose(tmp_path):
    """Every step a sentence: no decoder is at fault, and the one line says what the run is."""
    run = _write_run(tmp_path / "chatty", lambda calls: "Sure! I will take care of that for you.")
    source = open_source(_options(run, REAL_RUN_DECODER))
    [warning] = source.warnings
    # the sample: the first 3 steps with output of every conversation (12 of at most 24), each a sentence
    sampled = sum(min(3, sum(len(turn) for turn in e.result)) for e in source.entries.values())
    assert warning == (
        f"--careful-decoder={REAL_RUN_DECODER}: the model answered in prose, not in function calls: "
        f"{sampled} of {sampled} sampled steps of {run} are sentences that no common format reads as calls "
        "(BFCL fails a turn without a call)"
    )


def test_a_run_of_other_text_gets_a_warning_without_a_suggestion(tmp_path):
    """Calls in a code block, which no decoder reads, and a closing sentence: half prose, said as before."""
    run = _write_run(tmp_path / "code", lambda calls: "```\n" + "\n".join(calls) + "\n```")
    [warning] = open_source(_options(run, REAL_RUN_DECODER)).warnings
    assert _suggested(warning) == [] and "No common format reads it better" in warning
    assert "answered in prose" not in warning


def test_workers_do_not_check(tmp_path):
    run = _write_run(tmp_path / "prompting", _prompting)
    assert open_source(_options(run, REAL_RUN_DECODER, worker=True)).warnings == []


def test_candidates_are_imported_only_when_the_decoder_reads_badly(real_run):
    """The check costs a sample when the decoder works: no candidate handler is imported."""
    modules = sorted(
        {
            "bfcl_eval.model_handler.local_inference.qwen_fc",
            "bfcl_eval.model_handler.local_inference.llama_3_1",
            "bfcl_eval.model_handler.local_inference.salesforce_llama",
            "bfcl_eval.model_handler.local_inference.qwen",
        }
    )
    probe = (
        "import sys, pathlib\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "from test_format_check import _options\n"
        "from pytest_careful.sources.reference_logged import open_source\n"
        "source = open_source(_options(pathlib.Path(sys.argv[2]), sys.argv[3]))\n"
        f"print(len(source.warnings), sorted(m for m in {modules!r} if m in sys.modules))\n"
    )

    def imported(key: str) -> str:
        proc = subprocess.run(
            [sys.executable, "-c", probe, str(ROOT / "tests" / "sources"), str(real_run), key],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout.strip().splitlines()[-1]

    assert imported(REAL_RUN_DECODER) == "0 []"
    diagnosed = imported("Salesforce/Llama-xLAM-2-8b-fc-r")  # reads none of the FC run: diagnosed
    assert diagnosed.startswith("1 [") and diagnosed != "1 []", diagnosed
