"""A fast slice of the perturbation parity suite for the default run (the full one is -m slow)."""

from __future__ import annotations

from perturb import cases
from test_parity import _compare

from pytest_careful.data import dataset


def test_perturbed_references_match_bfcl_sample():
    conversations = [c for c in dataset.load() if c.index % 10 == 0]  # 80 conversations
    items = list(cases(conversations, per_conversation=4, seed=7))
    mismatches, tally = _compare(items)
    assert not mismatches, mismatches[:5]
    assert len(tally) >= 5, tally
