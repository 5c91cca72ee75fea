"""The item audit on real references: clean items made defective in each class's way are flagged, with
the evidence that names the change; the clean originals have no finding."""

from __future__ import annotations

import dataclasses

import pytest

from pytest_careful.data import dataset
from pytest_careful.data.dataset import Conversation
from pytest_careful.verify.audit import Finding, audit_conversation


def perturbed(conversation_id: str, turn: int, call: int, old: str, new: str) -> Conversation:
    """The conversation with one reference call's text changed (``old`` to ``new``), as a new object."""
    original = dataset.get(conversation_id)
    truth = [list(t) for t in original.ground_truth]
    assert old in truth[turn][call], truth[turn][call]
    truth[turn][call] = truth[turn][call].replace(old, new)
    return dataclasses.replace(original, ground_truth=truth)


def findings(c: Conversation) -> list[Finding]:
    return audit_conversation(c).findings


def only(c: Conversation) -> Finding:
    found = findings(c)
    assert len(found) == 1, [(f.finding, f.turn, f.call, f.argument, f.evidence.near_miss) for f in found]
    return found[0]


@pytest.mark.parametrize("conversation_id", ["multi_turn_base_17", "multi_turn_base_174", "multi_turn_base_15"])
def test_the_originals_are_clean(conversation_id: str) -> None:
    assert findings(dataset.get(conversation_id)) == []


@pytest.mark.parametrize(
    ("new", "kind", "marked"),
    [
        ("Kelly Final Score: 96", "one_word_changed", "[Total → Final]"),
        ("Score Kelly Total: 96", "reordered", "[∅ → Score] Kelly Total [Score → ∅] 96"),
        ("Kelly Total Score - 96", "punctuation", "'Kelly Total Score: 96'"),  # the source as written
        ("Kelly Total Score: 97", "one_word_changed", "→ 97]"),  # the user's template, or the file's line
    ],
)
def test_a_message_changed_from_the_file_it_quotes(new: str, kind: str, marked: str) -> None:
    """base_17 sends the report's line 'Kelly Total Score: 96' (a cat result), as the user's template asks."""
    c = perturbed("multi_turn_base_17", 2, 1, "Kelly Total Score: 96", new)
    found = only(c)
    assert (found.finding, found.turn, found.call, found.argument, found.evidence.literal) == (
        kind,
        2,
        1,
        "message",
        new,
    )
    assert marked in (found.evidence.near_miss or ""), found.evidence.near_miss
    assert "MessageAPI" in found.evidence.checked_by


def test_a_date_the_user_dictates_changed() -> None:
    """base_174: 'October 10th 2026', booked as 2026-10-11."""
    c = perturbed("multi_turn_base_174", 0, 2, "travel_date='2026-10-10'", "travel_date='2026-10-11'")
    found = only(c)
    assert (found.finding, found.severity, found.argument) == ("contradicts_user", "defect", "travel_date")
    assert "October 10th 2026" in (found.evidence.near_miss or "")
    assert "travel_date='2026-10-10'" in (found.evidence.near_miss or "")  # the call with the user's date


def test_a_count_changed_from_the_results_it_averages() -> None:
    """base_15 averages wc's three counts (3, 16, 60); miss_func_15 ships 62 in the third's place."""
    c = perturbed("multi_turn_base_15", 4, 0, "numbers=[3,16,60]", "numbers=[3,16,62]")
    found = only(c)
    assert (found.finding, found.argument, found.evidence.literal) == ("contradicts_result", "numbers[2]", 62)
    assert "gives 60" in (found.evidence.near_miss or "")


def test_a_wording_the_user_never_gave() -> None:
    """base_174 comments the user's own words; a comment in other words is a guess, a no_source doubt."""
    c = perturbed("multi_turn_base_174", 4, 0, "Safe travels and enjoy every moment!", "Safe travels and have fun!")
    found = only(c)
    assert (found.finding, found.severity, found.turn, found.call, found.argument, found.evidence.literal) == (
        "no_source",
        "doubt",
        4,
        0,
        "comment_content",
        "Safe travels and have fun!",
    )
    assert found.evidence.near_miss == "user turn 4: 'Safe travels and enjoy every moment!'"
    assert found.evidence.checked_by == "state of TwitterAPI (comments) after turn 4"
    assert found.evidence.searched[0].startswith("user: the user's messages of turns 0-4")


def test_a_value_used_before_the_user_gives_it() -> None:
    """miss_param_2 holds the file name back to turn 1; a reference that creates it in turn 0 cannot be met."""
    original = dataset.get("multi_turn_miss_param_2")
    assert original.ground_truth[0] == [] and "TeamNotes.txt" in original.questions[1][0]["content"]
    assert findings(original) == []
    truth = [list(t) for t in original.ground_truth]
    truth[0], truth[1] = truth[1], []
    found = [
        f for f in findings(dataclasses.replace(original, ground_truth=truth)) if f.evidence.literal == "TeamNotes.txt"
    ]
    assert found and all(f.finding == "arrives_late" and "user turn 1" in (f.evidence.near_miss or "") for f in found)


def test_a_function_held_out_past_the_turn_that_needs_it() -> None:
    """miss_func_3 offers find (and ls) from turn 1, where the reference calls find; offered from turn 2, too late."""
    original = dataset.get("multi_turn_miss_func_3")
    assert [d["name"] for d in original.missed_function[1]] == ["find", "ls"] and findings(original) == []
    late = dataclasses.replace(original, missed_function={2: original.missed_function[1]})
    found = only(late)
    assert (found.finding, found.turn, found.argument, found.evidence.literal) == (
        "function_arrives_late",
        1,
        None,
        "find",
    )
