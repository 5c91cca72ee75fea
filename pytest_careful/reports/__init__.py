"""Reports: scorecards, statistics, charts, report.html, comparisons of runs.

Takes: the rows of a run (and a baseline's, or several scorecards). Gives: scorecard dicts and
files (:mod:`.scorecard`), paired and repeated-run statistics (:mod:`.stats`, :mod:`.repeat_stats`),
charts (:mod:`.plots`, :mod:`.chart_cache`), report.html (:mod:`.html_report`), baselines read back
(:mod:`.baseline`), ``careful-report`` (:mod:`.compare_runs`, the command line; :mod:`.runs`, its input;
:mod:`.comparison`, its figures; :mod:`.comparison_output`, its files), annotator agreement
(:mod:`.agreement`).
Nothing here imports the pytest side: what a report needs of the session is passed in.
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "agreement",
    "baseline",
    "chart_cache",
    "compare_runs",
    "comparison",
    "comparison_output",
    "html_report",
    "plots",
    "repeat_stats",
    "runs",
    "scorecard",
    "stats",
]
