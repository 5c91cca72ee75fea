"""Where model output comes from: the reference trajectories, or a logged run's result files.

Takes: the run's options. Gives: a :class:`~.reference_logged.Source` (entries per condition and
conversation, the decoder, warnings), and the check that a decoder reads a run's format
(:mod:`.format_check`). Live runs are a Source too: :mod:`pytest_careful.live.source`.
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "format_check",
    "reference_logged",
]
