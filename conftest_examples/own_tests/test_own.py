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
