"""Command-line tools.

``careful-declare`` (:mod:`.declare`): regenerate the effect declarations, check them, print what
they say. (``careful-report`` is :mod:`pytest_careful.reports.compare_runs`.)
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "declare",
]
