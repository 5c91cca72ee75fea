"""A row made by the run's rules from an evaluation, as the items make it (``score_replay``)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pytest_careful.effects.declarations import Declarations
from pytest_careful.evaluation.evaluate import Evaluation
from pytest_careful.scoring.conversation import ScoringConfig, score_replay
from pytest_careful.scoring.row import Row
from pytest_careful.scoring.rules import Settings


def score_row(
    evaluation: Evaluation,
    decl: Declarations,
    settings: Settings = Settings(),
    confirmations: Mapping[int, Sequence[int]] | None = None,
) -> Row:
    """The built-in rules' row of one evaluation under ``settings``."""
    return score_replay(evaluation, ScoringConfig("test", "careful", decl, settings), confirmations=confirmations)
