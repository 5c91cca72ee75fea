"""The effect-hints condition: declarations appended to descriptions, nothing else."""

from __future__ import annotations

import copy
import json

import pytest

from pytest_careful.data import dataset
from pytest_careful.effects import declarations
from pytest_careful.protocols.hints import HINT_KEYS, hint_text, hinted_entry, with_hints

DECL = declarations.load()
FINAL = DECL.boundary("final")

GFS = (
    "This tool belongs to the Gorilla file system. It is a simple file system that allows users "
    "to perform basic file operations such as navigating directories, creating files and "
    "directories, reading and writing to files, etc. Tool description: "
)
EXPECTED = {
    "rm": GFS + "Remove a file or directory."
    " MCP tool annotations: readOnlyHint=false, destructiveHint=true, idempotentHint=true.",
    "ls": GFS + "List the contents of the current directory."
    " MCP tool annotations: readOnlyHint=true, destructiveHint=false, idempotentHint=true.",
    "post_tweet": "This tool belongs to the TwitterAPI, which provides core functionality for "
    "posting tweets, retweeting, commenting, and following users on Twitter. Tool description: "
    "Post a tweet for the authenticated user."
    " MCP tool annotations: readOnlyHint=false, destructiveHint=true, idempotentHint=false.",
    "contact_customer_support": "This tool belongs to the travel system, which allows users to "
    "book flights, manage credit cards, and view budget information. Tool description: Contact "
    "travel booking customer support, get immediate support on an issue with an online call."
    " MCP tool annotations: readOnlyHint=false, destructiveHint=true, idempotentHint=true.",
}


def _doc(name: str) -> dict:
    for conversation in dataset.load():
        for doc in conversation.all_functions():
            if doc["name"] == name:
                return doc
    raise AssertionError(f"{name} not in the dataset")


def _snapshot() -> str:
    return json.dumps([(c.functions, sorted(c.missed_function.items())) for c in dataset.load()], sort_keys=True)


def _blank(entry: dict) -> dict:
    out = copy.deepcopy(entry)
    for doc in out["function"]:
        doc["description"] = ""
    for docs in out.get("missed_function", {}).values():
        for doc in docs:
            doc["description"] = ""
    return out


def test_hint_text_format():
    assert hint_text({"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}) == (
        " MCP tool annotations: readOnlyHint=false, destructiveHint=true, idempotentHint=true."
    )
    # fixed key order whatever the mapping's order
    assert hint_text({"idempotentHint": False, "destructiveHint": False, "readOnlyHint": True}) == (
        " MCP tool annotations: readOnlyHint=true, destructiveHint=false, idempotentHint=false."
    )
    assert HINT_KEYS == ("readOnlyHint", "destructiveHint", "idempotentHint")


def test_hint_text_rejects_bad_annotations():
    with pytest.raises(ValueError):
        hint_text({"readOnlyHint": True, "destructiveHint": False})
    with pytest.raises(ValueError):
        hint_text({"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True, "x": True})
    with pytest.raises(TypeError):
        hint_text({"readOnlyHint": 1, "destructiveHint": False, "idempotentHint": True})


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_rendered_docs(name):
    doc = _doc(name)
    before = copy.deepcopy(doc)
    hinted = with_hints(doc, DECL, FINAL)
    assert hinted["description"] == EXPECTED[name]
    assert {**hinted, "description": None} == {**doc, "description": None}
    assert list(hinted) == list(doc)  # key order kept
    assert doc == before
    assert with_hints(doc, DECL, "final") == hinted  # a boundary name works too


def test_unknown_function_is_a_key_error():
    doc = {"name": "launch_rocket", "description": "Launch.", "parameters": {}}
    with pytest.raises(KeyError, match="launch_rocket"):
        with_hints(doc, DECL, FINAL)
    entry = dataset.get("multi_turn_base_0").prompt_entry()
    entry["function"].append(doc)
    with pytest.raises(KeyError, match="launch_rocket"):
        hinted_entry(entry, DECL)


def test_boundary_changes_destructive_hint():
    doc = _doc("mv")
    final = with_hints(doc, DECL, "final")["description"]
    majority = with_hints(doc, DECL, "majority")["description"]
    assert final.endswith(" readOnlyHint=false, destructiveHint=true, idempotentHint=true.")
    assert majority.endswith(" readOnlyHint=false, destructiveHint=false, idempotentHint=true.")
    entry = dataset.get("multi_turn_base_0").prompt_entry()
    assert any(d["name"] == "mv" for d in entry["function"])
    by_name = {d["name"]: d for d in hinted_entry(entry, DECL, "majority")["function"]}
    assert by_name["mv"]["description"] == majority
    by_name = {d["name"]: d for d in hinted_entry(entry, DECL)["function"]}
    assert by_name["mv"]["description"] == final


def test_miss_func_holdouts_are_hinted():
    conversation = dataset.get("multi_turn_miss_func_0")
    entry = conversation.prompt_entry()
    hinted = hinted_entry(entry, DECL)
    assert set(hinted["missed_function"]) == set(entry["missed_function"]) == {"3"}
    for turn, docs in entry["missed_function"].items():
        assert docs
        for original, new in zip(docs, hinted["missed_function"][turn]):
            annotations = DECL[original["name"]].mcp_annotations(FINAL)
            assert new["description"] == original["description"] + hint_text(annotations)


def test_every_conversation_differs_only_in_descriptions():
    conversations = dataset.load()
    assert len(conversations) == 800
    before = _snapshot()
    n_holdouts = 0
    for conversation in conversations:
        entry = conversation.prompt_entry()
        pristine = copy.deepcopy(entry)
        hinted = hinted_entry(entry, DECL)
        assert entry == pristine, conversation.id  # input not mutated
        assert _blank(hinted) == _blank(entry), conversation.id
        assert list(hinted) == list(entry)
        pairs = list(zip(entry["function"], hinted["function"]))
        for turn, docs in entry.get("missed_function", {}).items():
            pairs += zip(docs, hinted["missed_function"][turn])
            n_holdouts += len(docs)
        assert len(pairs) == len(conversation.all_functions())
        for original, new in pairs:
            suffix = hint_text(DECL[original["name"]].mcp_annotations(FINAL))
            assert new["description"] == original["description"] + suffix, original["name"]
        # the output shares no objects with the input
        hinted["function"][0]["parameters"]["__probe__"] = 1
        assert "__probe__" not in entry["function"][0]["parameters"]
    assert n_holdouts >= 200  # every miss_func conversation has holdouts, all hinted
    assert _snapshot() == before  # shared dataset docs not mutated
