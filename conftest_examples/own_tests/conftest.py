"""Using pytest-careful's fixtures from a project's own tests."""

import pytest


@pytest.fixture(params=["multi_turn_base_0", "multi_turn_base_5"])
def careful_conversation(request):
    # Override the plugin's fixture to choose conversations by BFCL id.
    from pytest_careful.data import dataset

    return dataset.get(request.param)
