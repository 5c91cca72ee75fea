"""The pytest side: options, command line, markers, items, session hooks, JUnit, the summary.

Takes: pytest's config and the stages below. Gives: the plugin's options (:mod:`.options`,
:mod:`.selection`), one item per conversation x condition (:mod:`.item`, :mod:`.markers`), what
running it comes to (:mod:`.outcome`, :mod:`.repeat_runs`), the session's hooks and state
(:mod:`.session`, :mod:`.state`), JUnit properties (:mod:`.junit`), a live run's progress line on
the terminal (:mod:`.progress_display`) and the end of the session:
scorecard folders (:mod:`.scorecard_files`), baseline and release gate (:mod:`.gate`), terminal
summary (:mod:`.summary`). The entry point pytest loads
is :mod:`pytest_careful.plugin`.
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "gate",
    "item",
    "junit",
    "markers",
    "options",
    "outcome",
    "progress_display",
    "repeat_runs",
    "scorecard_files",
    "selection",
    "session",
    "state",
    "summary",
]
