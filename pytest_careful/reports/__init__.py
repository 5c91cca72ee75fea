"""Scorecards, statistics, charts, report.html, comparisons of runs (careful-report)."""
