"""The item audit's classes, each on a minimal conversation and its clean twin.

A twin differs from its defective conversation only in the point at issue (the user's words, the
turn a function arrives, the order of a text's words), so that a class cannot pass by matching
something else: the twin has no finding at all, and the defective one exactly the class asked for,
with the evidence a reader checks it by.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pytest

from pytest_careful.data import dataset
from pytest_careful.data.dataset import Conversation
from pytest_careful.evaluation.replay import FALSE_STATUS, OK, reference
from pytest_careful.verify.audit import CLASSES, DEFECT, DOUBT, Finding, audit_conversation

TICKETS = {"TicketAPI": {"ticket_queue": [], "ticket_counter": 1, "current_user": "alice"}}
TWITTER = {
    "TwitterAPI": {
        "username": "john",
        "password": "pw",
        "authenticated": True,
        "tweets": {},
        "comments": {},
        "retweets": {},
        "following_list": [],
        "tweet_counter": 0,
    }
}
FILES = {
    "GorillaFileSystem": {
        "root": {
            "workspace": {
                "type": "directory",
                "contents": {"notes.txt": {"type": "file", "content": "alpha beta\ngamma delta epsilon\nzeta"}},
            }
        }
    }
}

_made = iter(range(90_000, 100_000))  # ids no real conversation has (the reference replay is cached per object)


def conversation(
    classes: Sequence[str],
    config: Mapping[str, object],
    questions: Sequence[str],
    ground_truth: list[list[str]],
    held_out: Mapping[int, Sequence[str]] | None = None,
) -> Conversation:
    """A conversation of BFCL's shape: its functions the classes' docs, ``held_out`` offered only from a turn."""
    docs = [doc for class_name in classes for doc in dataset.func_docs(class_name)]
    missed = {turn: [d for d in docs if d["name"] in names] for turn, names in (held_out or {}).items()}
    offered = [d for d in docs if not any(d in held for held in missed.values())]
    category = "multi_turn_miss_func" if held_out else "multi_turn_base"
    return Conversation(
        id=f"{category}_{next(_made)}",
        category=category,
        questions=[[{"role": "user", "content": q}] if q else [] for q in questions],
        initial_config=config,
        involved_classes=tuple(classes),
        functions=offered,
        missed_function=missed,
        excluded_function=None,
        ground_truth=ground_truth,
    )


def findings(c: Conversation) -> list[Finding]:
    return audit_conversation(c).findings


def only(c: Conversation, kind: str) -> Finding:
    found = findings(c)
    assert [f.finding for f in found] == [kind], [(f.finding, f.argument, f.evidence.near_miss) for f in found]
    assert found[0].severity == CLASSES[kind][0]
    return found[0]


def test_every_class_has_a_severity_and_a_rule() -> None:
    assert {severity for severity, _ in CLASSES.values()} == {DEFECT, DOUBT}
    assert all(rule for _, rule in CLASSES.values())


@pytest.mark.parametrize("said", ["priority 5", "priority 4"], ids=["defect", "twin"])
def test_contradicts_user(said: str) -> None:
    c = conversation(
        ["TicketAPI"],
        TICKETS,
        [f"Open a ticket titled 'Broken login' with {said}."],
        [["create_ticket(title='Broken login', priority=4)"]],
    )
    if said.endswith("4"):
        assert findings(c) == []
        return
    found = only(c, "contradicts_user")
    assert (found.turn, found.call, found.argument, found.evidence.literal) == (0, 0, "priority", 4)
    assert "'5'" in (found.evidence.near_miss or "") and "priority=5" in (found.evidence.near_miss or "")
    assert "TicketAPI" in found.evidence.checked_by


def test_a_number_far_from_the_literal_contradicts_nothing() -> None:
    """The user's 10 ("10 tickets from now") says something else than a priority of 4: a doubt, not a defect."""
    c = conversation(
        ["TicketAPI"],
        TICKETS,
        ["Open a ticket titled 'Broken login'; I will file 10 more later."],
        [["create_ticket(title='Broken login', priority=4)"]],
    )
    found = only(c, "no_source")
    assert found.evidence.literal == 4
    assert (found.evidence.near_miss, found.evidence.detail) == (
        None,
        "no source and no near miss",
    )  # 10 is no near miss


@pytest.mark.parametrize(
    ("said", "kind"),
    [
        ("Post 'Launching our big product today'.", "one_word_changed"),
        ("Post 'product Launching our new today'.", "reordered"),
        ("Post 'Launching our new product today!'", "punctuation"),
        ("Post 'Launching our new product today'.", None),
    ],
    ids=["one_word_changed", "reordered", "punctuation", "twin"],
)
def test_texts_that_match_only_after_a_change(said: str, kind: str | None) -> None:
    c = conversation(["TwitterAPI"], TWITTER, [said], [["post_tweet(content='Launching our new product today.')"]])
    if kind is None:  # the same words and punctuation but the final stop: quoting and spacing are normal forms
        c = conversation(["TwitterAPI"], TWITTER, [said], [["post_tweet(content='Launching our new product today')"]])
        assert findings(c) == []
        return
    found = only(c, kind)
    assert found.argument == "content" and found.evidence.near_miss.startswith("user turn 0: ")  # type: ignore[union-attr]
    if kind == "one_word_changed":
        assert "[big → new]" in found.evidence.near_miss  # type: ignore[operator]


def test_a_placeholder_the_user_leaves_is_filled_not_changed() -> None:
    """'... has N files' with N a result's value: a template filled, not a word changed."""
    c = conversation(
        ["GorillaFileSystem", "TwitterAPI"],
        {**FILES, **TWITTER},
        ["Count the lines of notes.txt and post 'notes.txt has N lines'."],
        [["wc(file_name='notes.txt', mode='l')", "post_tweet(content='notes.txt has 3 lines')"]],
    )
    assert findings(c) == []
    twin = conversation(  # the count no result gives: the word changed has no source
        ["GorillaFileSystem", "TwitterAPI"],
        {**FILES, **TWITTER},
        ["Count the lines of notes.txt and post 'notes.txt has N lines'."],
        [["wc(file_name='notes.txt', mode='l')", "post_tweet(content='notes.txt has 7 lines')"]],
    )
    assert only(twin, "one_word_changed").evidence.literal == "notes.txt has 7 lines"


@pytest.mark.parametrize("given_in", [1, 0], ids=["defect", "twin"])
def test_arrives_late(given_in: int) -> None:
    """The reference uses a priority in turn 0 that the user gives only in turn 1."""
    questions = ["Open a ticket titled 'Broken login'.", "Oh, and it is priority 3."]
    if given_in == 0:
        questions = ["Open a ticket titled 'Broken login' with priority 3.", "Thanks."]
    c = conversation(["TicketAPI"], TICKETS, questions, [["create_ticket(title='Broken login', priority=3)"], []])
    if given_in == 0:
        assert findings(c) == []
        return
    found = only(c, "arrives_late")
    assert found.turn == 0 and "user turn 1" in (found.evidence.near_miss or "")


@pytest.mark.parametrize("arrives", [1, 0], ids=["defect", "twin"])
def test_function_arrives_late(arrives: int) -> None:
    """miss_func: the reference calls create_ticket in turn 0, held out until turn ``arrives``."""
    held = {arrives: ["create_ticket"]} if arrives else {}
    c = conversation(
        ["TicketAPI"],
        TICKETS,
        ["Open a ticket titled 'Broken login' with priority 3.", ""],
        [["create_ticket(title='Broken login', priority=3)"], []],
        held_out=held,
    )
    if not arrives:
        assert findings(c) == []
        return
    found = only(c, "function_arrives_late")
    assert (found.argument, found.evidence.literal, found.turn) == (None, "create_ticket", 0)
    assert "only from turn 1" in found.evidence.detail


def test_contradicts_result() -> None:
    """The reference averages wc's line and word counts with a character count wc never gave."""
    calls = [
        "wc(file_name='notes.txt', mode='l')",
        "wc(file_name='notes.txt', mode='w')",
        "wc(file_name='notes.txt', mode='c')",
    ]
    questions = ["Count the lines, words and characters of notes.txt.", "Average the three counts."]
    right = conversation(["GorillaFileSystem", "MathAPI"], FILES, questions, [calls, ["mean(numbers=[3, 6, 35])"]])
    assert findings(right) == []
    wrong = conversation(["GorillaFileSystem", "MathAPI"], FILES, questions, [calls, ["mean(numbers=[3, 6, 37])"]])
    found = only(wrong, "contradicts_result")
    assert (found.argument, found.evidence.literal) == ("numbers[2]", 37)
    near = found.evidence.near_miss or ""
    assert "gives 35" in near and "mode='c'" in near and "mean(numbers=[3, 6, 35])" in near


@pytest.mark.parametrize("priority", [3, 1], ids=["doubt", "twin-the-default"])
def test_no_source(priority: int) -> None:
    """A priority the user never gives: a guess; the doc's default is a source."""
    c = conversation(
        ["TicketAPI"],
        TICKETS,
        ["Open a ticket titled 'Broken login'."],
        [[f"create_ticket(title='Broken login', priority={priority})"]],
    )
    if priority == 1:
        assert findings(c) == []
        return
    found = only(c, "no_source")
    assert found.evidence.literal == 3 and any(s.startswith("user:") for s in found.evidence.searched)


@pytest.mark.parametrize(("tag", "near"), [("urgency", True), ("token_ABC123", False)], ids=["near", "unrelated"])
def test_a_no_source_near_miss_shares_something_with_the_literal(tag: str, near: bool) -> None:
    """The nearest quoted word the user gave is shown beside a guessed description only when the two share
    three letters in a row: 'urgency' beside 'urgent' helps a reader, 'token_ABC123' is noise."""
    c = conversation(
        ["TicketAPI"],
        TICKETS,
        [f"Open a ticket titled 'Login' and tag it '{tag}'."],
        [["create_ticket(title='Login', description='urgent')"]],
    )
    found = only(c, "no_source")
    if near:
        assert found.evidence.near_miss == "user turn 0: 'urgency'"
        assert found.evidence.detail == "no source; the nearest value of its kind the user gave is shown"
    else:
        assert (found.evidence.near_miss, found.evidence.detail) == (None, "no source and no near miss")


def test_a_literal_the_checker_never_reads_is_no_finding() -> None:
    """ls's hidden-files flag changes no compared state when no file is hidden; and a no-op write is legitimate."""
    c = conversation(
        ["GorillaFileSystem"],
        FILES,
        ["Make sure there is a file named notes.txt."],
        [["touch(file_name='notes.txt')"]],  # it exists already: the call changes nothing, and rightly
    )
    assert findings(c) == []


@pytest.mark.parametrize("passport", ["FR4567890", "US4567890"], ids=["fails", "twin-succeeds"])
def test_a_read_that_fails_answers_the_question_and_is_no_finding(passport: str) -> None:
    """'Verify my passport': with a French passport the reference's verification rightly fails (TravelAPI
    accepts US passports only), and that failure is the answer. The twin differs only in the passport and
    succeeds; neither is a finding: a failing call is not flagged for failing."""
    c = conversation(
        ["TravelAPI"],
        {"TravelAPI": {"user_first_name": "Alice", "user_last_name": "Smith"}},
        [f"Verify my traveler information: Alice Smith, born 1990-04-12, passport {passport}."],
        [
            [
                "verify_traveler_information(first_name='Alice', last_name='Smith', "
                f"date_of_birth='1990-04-12', passport_number='{passport}')"
            ]
        ],
    )
    (call,) = reference(c).calls
    assert call.status == (OK if passport.startswith("US") else FALSE_STATUS), call.result
    assert findings(c) == []


def test_a_value_from_an_earlier_result_is_sourced() -> None:
    """A reader of the JSON does not see results: an id a write returns is no defect (gorilla#1267's kind)."""
    c = conversation(
        ["TicketAPI"],
        TICKETS,
        ["Open a ticket titled 'Broken login'.", "Now close that ticket."],
        [["create_ticket(title='Broken login')"], ["close_ticket(ticket_id=1)"]],
    )
    assert findings(c) == []
