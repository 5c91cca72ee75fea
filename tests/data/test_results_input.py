"""Bad input gets a located, clear problem, and every other entry is still scored."""

from __future__ import annotations

import json

from perturb import as_result

from pytest_careful.data import dataset
from pytest_careful.data.result_files import find_result_files, read_result_file
from pytest_careful.evaluation.evaluate import evaluate_file
from pytest_careful.execution.decoding import passthrough_decoder


def _line(conversation_id: str, result=None) -> str:
    if result is None:
        result = as_result(dataset.get(conversation_id).ground_truth)
    return json.dumps({"id": conversation_id, "result": result})


def test_each_problem_is_located_and_the_rest_is_scored(tmp_path):
    path = tmp_path / "BFCL_v4_multi_turn_base_result.json"
    lines = [
        _line("multi_turn_base_0"),
        _line("multi_turn_base_1")[:40],  # truncated
        "not json at all",
        _line("multi_turn_base_999", result=[]),  # unknown id
        _line("multi_turn_miss_func_2"),  # wrong category for this file
        json.dumps({"id": "multi_turn_base_3"}),  # no result
        _line("multi_turn_base_4", result=[[]] * 9),  # more turns than the conversation
        _line("multi_turn_base_5", result={"turns": []}),  # not a list
        _line("multi_turn_base_0"),  # duplicate
        _line("multi_turn_base_6"),
    ]
    path.write_text("\n".join(lines) + "\n")
    evaluations, problems = evaluate_file(path, passthrough_decoder(), "multi_turn_base")
    assert [e.conversation.id for e in evaluations] == ["multi_turn_base_0", "multi_turn_base_6"]
    assert all(e.verdict.valid for e in evaluations)
    located = {(p.line, p.conversation) for p in problems}
    assert located == {
        (2, "multi_turn_base_1"),
        (3, None),
        (4, "multi_turn_base_999"),
        (5, "multi_turn_miss_func_2"),
        (6, "multi_turn_base_3"),
        (7, "multi_turn_base_4"),
        (8, "multi_turn_base_5"),
        (9, "multi_turn_base_0"),
    }
    text = "\n".join(str(p) for p in problems)
    assert f"{path}:2 [multi_turn_base_1]: not valid JSON" in text
    assert "unknown conversation id 'multi_turn_base_999'" in text
    assert "belongs to multi_turn_miss_func" in text
    assert "has 9 turns but multi_turn_base_4 has" in text
    assert f"{path}:9 [multi_turn_base_0]: duplicate entry (an earlier one at line 1)" in text


def test_fewer_turns_is_bfcls_force_termination_not_an_input_problem(tmp_path):
    path = tmp_path / "BFCL_v4_multi_turn_base_result.json"
    conversation = dataset.get("multi_turn_base_7")
    path.write_text(json.dumps({"id": conversation.id, "result": as_result(conversation.ground_truth)[:1]}) + "\n")
    evaluations, problems = evaluate_file(path, passthrough_decoder(), "multi_turn_base")
    assert not problems
    assert evaluations[0].verdict.error_type == "multi_turn:force_terminated"


def test_unreadable_file_is_a_problem_not_a_crash(tmp_path):
    entries, problems = read_result_file(tmp_path / "missing.json")
    assert entries == [] and "cannot read file" in str(problems[0])


def test_result_dir_layouts_and_unknown_categories(tmp_path):
    nested = tmp_path / "result" / "my-model" / "multi_turn"
    nested.mkdir(parents=True)
    (nested / "BFCL_v4_multi_turn_base_result.json").write_text("")
    (nested / "BFCL_v4_multi_turn_composite_result.json").write_text("")
    found, problems = find_result_files(tmp_path)
    assert list(found) == ["multi_turn_base"]
    assert len(problems) == 1 and "unknown category 'multi_turn_composite'" in str(problems[0])


def test_a_line_cut_inside_a_string_says_where_the_string_starts_once(tmp_path):
    """json says 'Unterminated string starting at': the message adds the column, not a second 'at'."""
    path = tmp_path / "BFCL_v4_multi_turn_base_result.json"
    whole = json.dumps({"id": "multi_turn_base_0", "result": [[["abc"]]]})
    cut = whole[: whole.index("abc") + 2]  # inside the string "abc"
    path.write_text(cut + "\n")
    _, [problem] = read_result_file(path, "multi_turn_base")
    column = whole.index('"abc') + 1  # json counts columns from 1, at the string's opening quote
    assert str(problem) == (
        f"{path}:1 [multi_turn_base_0]: not valid JSON (Unterminated string starting at column {column}); "
        "truncated line?"
    )
    assert " at at " not in str(problem)
