"""Reading BFCL's data: the conversations and the result files, as bfcl-eval writes them.

Takes: the installed bfcl-eval package, a folder of ``bfcl generate`` output. Gives:
:class:`~.dataset.Conversation` (the 800 multi-turn conversations); :class:`~.result_files.LoggedEntry`
per conversation and :class:`~.result_files.InputProblem` per bad line (file, line, conversation);
crash-safe result files for live runs (:mod:`.result_store`); how a run was made (:mod:`.run_settings`).
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "dataset",
    "result_files",
    "result_store",
    "run_settings",
]
