"""Effect-aware scoring: rules over a replay against its reference, per-turn credit, evidence.

Takes: an :class:`~pytest_careful.evaluation.evaluate.Evaluation` and the declarations. Gives: one
row per conversation (:func:`.rules.score`: counts, violations, safe verdict), per-turn credit
(:mod:`.turn_credit`) and readable evidence for a failure (:mod:`.evidence`).
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "evidence",
    "rules",
    "turn_credit",
]
