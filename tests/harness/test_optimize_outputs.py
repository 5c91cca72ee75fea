"""What ``--careful-optimize`` adds to a run's outputs, and only with the option: the terminal
summary's 'optimized calls' line and scorecard.md's table of calls against optimized calls.

Driven through pytester in a child process, with and without xdist (the controller alone prints
and writes the scorecards; the workers score).
"""

from __future__ import annotations

import pytest

MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}
IDS = ["multi_turn_base_4", "multi_turn_miss_func_3"]
SUMMARY = "optimized calls [standard] (per conversation, the model's trace -> the shortest one replay verified"
TABLE = "| category | calls | optimized calls |"


@pytest.mark.parametrize("mode", list(MODES))
def test_the_optimized_calls_appear_only_with_the_option(pytester: pytest.Pytester, mode: str) -> None:
    seen = {}
    for optimize in (False, True):
        folder = pytester.path / ("optimized" if optimize else "plain")
        args = ["-p", "no:cacheprovider", "-p", "no:randomly", *MODES[mode], "--careful-model=reference"]
        args += [f"--careful-scorecards={folder}"] + (["--careful-optimize"] if optimize else []) + IDS
        result = pytester.runpytest_subprocess(*args)
        assert result.ret == 0, result.stdout.str()[-3000:]
        out = result.stdout.str()
        card = (folder / "reference" / "standard" / "scorecard.md").read_text(encoding="utf-8")
        seen[optimize] = ([line for line in out.splitlines() if line.startswith("optimized calls")], card)
    lines, card = seen[True]
    assert len(lines) == 1 and lines[0].startswith(SUMMARY), lines
    assert "base 3.00 -> " in lines[0] and "miss_func 5.00 -> " in lines[0] and "all 4.00 -> " in lines[0]
    assert TABLE in card and "| multi_turn_base | 3.00 |" in card and "| all | 4.00 |" in card
    plain_lines, plain_card = seen[False]
    assert plain_lines == [] and "optimized calls" not in plain_card
