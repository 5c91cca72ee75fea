"""Replay and BFCL's verdict: what the model's calls did, and whether BFCL would pass it.

Takes: a conversation, its logged result and a decoder. Gives: :class:`~.replay.Replay` (every
call, its result and state diff) for the model and the reference; :class:`~.verdict.Verdict`,
bfcl-eval's multi-turn check; :class:`~.evaluate.Evaluation`, all three for one entry.
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "evaluate",
    "replay",
    "verdict",
]
