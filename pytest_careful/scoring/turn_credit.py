"""Per-turn credit: how far a conversation kept the reference's state, turn by turn.

BFCL's verdict is all or nothing: the first failing turn fails the
conversation. Per-turn credit says how much of it went right.

What "matched" means, precisely: a turn is checked when its reference makes
at least one call (the turns BFCL's ``multi_turn_checker`` checks; it skips the
others), and a checked turn ``t`` is matched when, at the end of turn ``t``,
every involved instance of the model's replay equals the reference's, as BFCL's
``state_checker`` compares them (``_compare_instances``: the reference
instance's public attributes, compared with ``!=``; see
``snapshot.states_equal_public``). Only the state counts:

* BFCL's execution-response check (the reference's results among the model's)
  and its empty-turn check do not: a turn whose state matches counts even where
  BFCL fails it for a missing read result or an empty model turn;
* turns whose reference makes no call are not checked, as in BFCL: a write the
  model makes there shows in the state of the next checked turn, unless the
  reference makes the same change by then (a model that guesses a missing
  parameter one turn early; six BFCL-passing conversations of the real run do);
* checked turns the model never reached (force termination, an inference
  error, an unscored conversation) are not matched.

``turns`` counts the checked turns, ``turns_matched`` the matched ones (every
one of them: a model that does one turn's work a turn late leaves the reference
at that turn and rejoins it at the next), ``first_divergent_turn`` is the index
in the conversation of the first checked turn not matched, ``None`` when there
is none. A BFCL-valid conversation has every checked turn matched
(``tests/scoring/test_turn_credit.py`` checks it, and each turn against bfcl-eval's own
``state_checker``, on the 600 conversations of the real run).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..data.dataset import Conversation
from ..evaluation.replay import Replay
from ..execution.snapshot import Snapshot, states_equal_public
from .row import TurnCredit

if TYPE_CHECKING:  # types only: the scorecard's reader (``mean_share``) imports this module
    from ..evaluation.evaluate import Evaluation

#: The row keys this module fills.
FIELDS = ("turns", "turns_matched", "first_divergent_turn")


def matched_turns(conversation: Conversation, model: Replay, reference: Replay) -> list[bool | None]:
    """Per turn: whether the model's state equals the reference's at its end; None where not checked."""
    matched: list[bool | None] = []
    for index, reference_calls in enumerate(conversation.ground_truth):
        if not reference_calls:  # BFCL checks no state where the reference makes no call
            matched.append(None)
        elif index >= len(model.turns):  # never reached
            matched.append(False)
        else:
            matched.append(
                _same_state(conversation, model.turns[index].state_after, reference.turns[index].state_after)
            )
    return matched


def _same_state(conversation: Conversation, model_state: Snapshot, ref_state: Snapshot) -> bool:
    # The same snapshot object (calls taken from the reference's replay) is equal without a look.
    return model_state is ref_state or all(
        states_equal_public(model_state, ref_state, name)[0] for name in conversation.involved_classes
    )


def credit(matched: list[bool | None]) -> TurnCredit:
    """The row fields of a per-turn match list (None: a turn not checked)."""
    checked = [ok for ok in matched if ok is not None]
    first = next((index for index, ok in enumerate(matched) if ok is False), None)
    return {"turns": len(checked), "turns_matched": sum(checked), "first_divergent_turn": first}


def of_evaluation(evaluation: Evaluation) -> TurnCredit:
    """The row fields of a scored conversation.

    An inference error (no turn list) is replayed as no turns: nothing matched.
    """
    conversation = evaluation.conversation
    return credit(matched_turns(conversation, evaluation.replay, evaluation.reference))


def unscored(conversation: Conversation) -> TurnCredit:
    """The row fields of a conversation that could not be scored: no checked turn matched."""
    return credit([False if calls else None for calls in conversation.ground_truth])


def mean_share(rows: Sequence[TurnCredit]) -> float:
    """Mean over rows of the share of turns matched (rows without the fields are left out)."""
    shares = [r["turns_matched"] / r["turns"] for r in rows if r.get("turns")]
    return round(sum(shares) / len(shares), 4) if shares else 0.0
