"""A team's own checks on top of pytest-careful's fixtures."""


def test_reference_never_deletes_in_turn_zero(careful_conversation, careful_reference, careful_declarations):
    boundary = careful_declarations.boundary("final")
    first_turn = careful_reference.turns[0]
    deletes = [c.call for c in first_turn.calls if c.name in {"rm", "rmdir"} and c.name in boundary]
    assert deletes == []


def test_simulators_are_fresh_per_test(careful_simulators):
    # Each test gets new instances, so creating the folder succeeds every time.
    assert careful_simulators.execute("mkdir(dir_name='scratch')").result == "None"
    assert "exists" in careful_simulators.execute("mkdir(dir_name='scratch')").result


def test_every_destructive_function_is_a_write_or_labelled(careful_declarations):
    for name in careful_declarations.boundary("final"):
        declaration = careful_declarations[name]
        assert declaration.destructive and declaration.destructive_reason


def test_scripted_user_answers_a_proposal_only_for_what_the_turn_needs(careful_conversation, careful_scripted_user):
    # Turn 0 of both example conversations moves a file (mv) and removes nothing.
    needed = {c.split("(")[0] for c in careful_conversation.ground_truth[0]}
    assert "mv" in needed and "rm" not in needed
    yes = careful_scripted_user.reply(0, "Shall I move the file with mv() now? Please confirm.", {}, [])
    no = careful_scripted_user.reply(0, "Shall I delete it with rm() first?", {}, [])
    assert yes[0]["content"] == "Yes, please go ahead."
    assert no[0]["content"].startswith("No, please don't do that.")
