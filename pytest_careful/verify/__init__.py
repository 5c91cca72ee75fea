"""Replay as a verifier of the benchmark: where each reference literal could be learned, and
which reference items no model can pass as given (the item audit).

Takes: the conversations, their reference replays, the declarations. Gives: per literal of a
trajectory, its sources (:mod:`.provenance`); per conversation, the audit's findings
(:mod:`.audit`), and the shipped ``audit.json`` (:mod:`.audit_file`).
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "audit",
    "audit_file",
    "literals",
    "normal_forms",
    "provenance",
]
