"""How long calls are quoted: common/text.py's shorten_call against a regex that reads literals the same way."""

from __future__ import annotations

import random
import re

import pytest

from pytest_careful.common.text import MAX_SHOWN_LITERAL, shorten_call

# The oracle: one quoted literal on a line, unrolled; the regex engine's leftmost-first search
# decides where each literal starts, including after an unterminated one.
_REGEX = re.compile(r"""'[^'\\\n]*(?:\\.[^'\\\n]*)*'|"[^"\\\n]*(?:\\.[^"\\\n]*)*\"""", re.S)


def _by_regex(call: str) -> str:
    if len(call) <= 500:
        return call

    def cut(match: re.Match[str]) -> str:
        literal = match.group()
        if len(literal) <= MAX_SHOWN_LITERAL + 2:
            return literal
        return f"{literal[: MAX_SHOWN_LITERAL + 1]}…{literal[0]} ({len(literal) - 2:,} chars)"

    shown = _REGEX.sub(cut, call)
    return shown if len(shown) <= 500 else f"{shown[:500]}… ({len(shown):,} chars)"


@pytest.mark.parametrize("seed", range(40))
def test_literals_are_read_as_the_regex_reads_them(seed: int) -> None:
    rng = random.Random(seed)
    # few kinds of character, long runs: escapes, both quotes, newlines, unterminated literals
    alphabet = rng.choice(["'\"\\\nax", "'\\x", "\"'a", "'\\\n" + "a" * 20, "'" + "b" * 60])
    for _ in range(50):
        call = "f(" + "".join(rng.choice(alphabet) for _ in range(rng.randrange(480, 1500))) + ")"
        assert shorten_call(call) == _by_regex(call)


def test_a_long_literal_is_cut_and_the_rest_of_the_call_still_shows() -> None:
    call = f"send(to='bob', body='{'x' * 5000}', cc=\"ann\")"
    shown = shorten_call(call)
    assert shown == f"send(to='bob', body='{'x' * MAX_SHOWN_LITERAL}…' (5,000 chars), cc=\"ann\")"


def test_an_unterminated_run_of_escaped_quotes_is_read_once() -> None:
    # 'x\'x\'... never closes: a regex rescans it from every quote (about 10^10 steps here);
    # read once, it takes a fraction of a second, so this test would not finish if that came back.
    call = "f(a='" + "x\\'" * 100_000
    assert shorten_call(call).endswith(f"… ({len(call):,} chars)")
