"""Safe decoding and execution: model output becomes calls, calls run on the conversation's simulators.

Takes: a conversation and a model's raw output. Gives: a :class:`~.decoding.Decoder` (BFCL's own
decoders with ``eval`` replaced by literals); :class:`~.executor.Simulators` running call strings
through an ``ast`` interpreter (:mod:`.interpreter`, never ``eval``); pristine process state per conversation
(:mod:`.isolation`); state snapshots and diffs (:mod:`.snapshot`, :mod:`.dag`); each conversation's
budget of calls, time and memory (:mod:`.limits`).
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "dag",
    "decoding",
    "executor",
    "interpreter",
    "isolation",
    "limits",
    "passthrough",
    "plain_values",
    "snapshot",
]
