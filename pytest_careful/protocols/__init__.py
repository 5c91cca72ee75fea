"""The protocols around the model: what the user says, what counts as a question, hints.

Takes: the model's text, the turn's reference and the declarations. Gives: the question detector
(:mod:`.detector`), the scripted user of the confirm protocol (:mod:`.scripted_user`), the effect-hints
condition (:mod:`.hints`), the protocols themselves (:mod:`.registry`), and the user's answers read back from a confirm run's log
(:mod:`.confirm_log`, :mod:`.answer_log`).
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "answer_log",
    "confirm_log",
    "detector",
    "hints",
    "registry",
    "scripted_user",
]
