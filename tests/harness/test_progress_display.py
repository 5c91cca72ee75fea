"""The live run's progress line on pytest's terminal (``harness/progress_display.py``).

``live.progress.Display`` decides what the line says and when; the harness writes it. Here the
writing alone, from inside a test, with pytest's output captured and a row of progress dots
unfinished, as a live run's line comes without xdist.
"""

from __future__ import annotations

import pytest

WRITES_A_LINE = """
from pytest_careful.harness.progress_display import terminal_line


def test_one():
    pass


def test_two(request):
    print("captured, not shown")
    show = terminal_line(request.config)
    assert show is not None and not show.isatty
    show.write_line("careful: 1/2 conversations done")


def test_three():
    pass
"""


def test_a_line_written_while_an_item_runs_reaches_the_terminal_on_a_line_of_its_own(
    pytester: pytest.Pytester,
) -> None:
    pytester.makepyfile(test_line=WRITES_A_LINE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist")
    result.assert_outcomes(passed=3)
    lines = result.outlines
    assert "careful: 1/2 conversations done" in lines, lines  # a line of its own, not after the dots
    assert "test_line.py ." in lines[: lines.index("careful: 1/2 conversations done")], lines
    assert "captured, not shown" not in result.stdout.str()  # the capture suspended for the line alone


def test_no_terminal_reporter_no_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        test_none="""
        from pytest_careful.harness.progress_display import terminal_line

        def test_none(request):
            assert terminal_line(request.config) is None
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:terminal")
    assert result.ret == 0, result.outlines
