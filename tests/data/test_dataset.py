"""The conversations we load are bfcl-eval's, field for field."""

from __future__ import annotations

import json

import pytest

from pytest_careful.common.bfcl import CATEGORIES
from pytest_careful.data import dataset


def test_counts():
    conversations = dataset.load()
    assert len(conversations) == 800
    assert {c.category for c in conversations} == set(CATEGORIES)
    assert len({c.id for c in conversations}) == 800


@pytest.mark.parametrize("category", CATEGORIES)
def test_entries_equal_bfcl_loader(category):
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    theirs = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
    answers = load_ground_truth_entry(category)
    ours = dataset.load_category(category)
    assert [c.id for c in ours] == [e["id"] for e in theirs]
    for conversation, entry, answer in zip(ours, theirs, answers):
        mine = conversation.prompt_entry()
        assert json.dumps(mine, sort_keys=True) == json.dumps(entry, sort_keys=True), conversation.id
        assert conversation.ground_truth == answer["ground_truth"]


def test_miss_func_holdouts_are_documented():
    conversation = dataset.get("multi_turn_miss_func_0")
    assert set(conversation.missed_function) == {3}
    held_out = [doc["name"] for doc in conversation.missed_function[3]]
    assert held_out == ["sort"]
    assert "sort" not in [doc["name"] for doc in conversation.functions]
    assert "sort" in [doc["name"] for doc in conversation.all_functions()]


def test_long_context_flag_follows_bfcl():
    assert dataset.get("multi_turn_long_context_0").long_context
    assert not dataset.get("multi_turn_base_0").long_context


def test_unknown_id_is_a_clear_error():
    with pytest.raises(dataset.UnknownConversation, match="multi_turn_base_999"):
        dataset.get("multi_turn_base_999")
