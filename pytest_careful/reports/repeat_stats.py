"""Repeated runs of the same conversations: pass^k, pass@k, flip rate and an interval.

A model run twice on the same conversations does not give the same verdicts
(BFCL users report 5-11 points between identical runs). These pure functions
turn ``conversation id -> one verdict per repeat`` into the noise floor a
comparison has to beat.

All functions here are pure: no I/O, no global state. (No ``from __future__ import annotations``
here: see ``common.json_types``.)
"""

import math
from collections.abc import Mapping, Sequence
from math import comb

from ..common.json_types import NotRequired, TypedDict

__all__ = ["INTERVAL_METHOD", "Z95", "pass_hat_k", "repeat_stats", "wilson_interval"]

#: Two-sided 95 % standard normal quantile (scipy.stats.norm.ppf(0.975)).
Z95 = 1.959963984540054

#: How :func:`repeat_stats` computes its interval, written next to it in reports.
INTERVAL_METHOD = (
    "Wilson 95 % score interval on the mean accuracy over repeats, with n = conversations "
    "(not n * k attempts: repeats of one conversation are correlated, so counting them as "
    "independent would make the interval too narrow; n conversations bounds it from the safe side)"
)


def wilson_interval(successes: float, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion.

    Args:
        successes: Number of successes; may be fractional (a mean over repeats times n).
        n: Number of trials.
        z: Normal quantile; the default gives a two-sided 95 % interval.

    Returns:
        ``(low, high)`` within ``[0, 1]``; ``(0.0, 1.0)`` when ``n == 0``.

    Raises:
        ValueError: If ``n`` is negative or ``successes`` is outside ``[0, n]``.
    """
    if n < 0 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n, got successes={successes}, n={n}")
    if n == 0:
        return (0.0, 1.0)
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return (max(0.0, centre - half), min(1.0, centre + half))


def _check(outcomes: Mapping[str, Sequence[bool]]) -> int:
    """The common number of repeats k (ValueError if lengths differ or k < 1)."""
    lengths = {len(v) for v in outcomes.values()}
    if len(lengths) > 1:
        short = min(outcomes, key=lambda cid: len(outcomes[cid]))
        raise ValueError(
            f"every conversation needs the same number of repeats; "
            f"{short!r} has {len(outcomes[short])}, others up to {max(lengths)}"
        )
    k = lengths.pop() if lengths else 0
    if outcomes and k < 1:
        raise ValueError("every conversation needs at least one repeat")
    return k


class RepeatStats(TypedDict):
    """``repeat_stats``'s figures; ``pass_hat``: careful-report's pass^k estimate per k (``pass_hat_k``)."""

    k: int
    n: int
    pass_all: float
    pass_any: float
    flip_rate: float
    mean: float
    interval: list[float]
    interval_method: str
    flipped: list[str]
    pass_hat: NotRequired[dict[str, float]]


def repeat_stats(outcomes: Mapping[str, Sequence[bool]]) -> RepeatStats:
    """Stability of verdicts over k repeats of the same conversations.

    Args:
        outcomes: Conversation id to one verdict per repeat, all of the same length k >= 1.

    Returns:
        ``{"k", "n", "pass_all", "pass_any", "flip_rate", "mean", "interval", "interval_method",
        "flipped"}``: ``pass_all`` is the share of conversations passing in every repeat
        (pass^k), ``pass_any`` the share passing at least once (pass@k), ``flip_rate`` the share
        whose verdict differs between repeats (``pass_any - pass_all``), ``mean`` the mean accuracy
        over repeats, ``interval`` its Wilson 95 % interval (see :data:`INTERVAL_METHOD`) and
        ``flipped`` the sorted ids that flip. Shares are 0.0 when there are no conversations.

    Raises:
        ValueError: If the conversations have different numbers of repeats, or none.
    """
    k = _check(outcomes)
    n = len(outcomes)
    passes = {cid: sum(bool(v) for v in verdicts) for cid, verdicts in outcomes.items()}
    all_k = sum(1 for c in passes.values() if c == k)
    any_k = sum(1 for c in passes.values() if c > 0)
    flipped = sorted(cid for cid, c in passes.items() if 0 < c < k)
    mean = sum(passes.values()) / (n * k) if n else 0.0
    low, high = wilson_interval(mean * n, n)
    return {
        "k": k,
        "n": n,
        "pass_all": all_k / n if n else 0.0,
        "pass_any": any_k / n if n else 0.0,
        "flip_rate": len(flipped) / n if n else 0.0,
        "mean": mean,
        "interval": [low, high],
        "interval_method": "wilson95-conversations",
        "flipped": flipped,
    }


def pass_hat_k(outcomes: Mapping[str, Sequence[bool]], k: int) -> float:
    """tau-bench's unbiased estimate of pass^k from r >= k repeats.

    For each conversation with c passes out of r repeats, the chance that k
    repeats drawn without replacement all pass is ``C(c, k) / C(r, k)``; the
    estimate is its mean over conversations.

    Args:
        outcomes: Conversation id to one verdict per repeat, all of the same length r.
        k: The k of pass^k, ``1 <= k <= r``.

    Returns:
        The estimate in ``[0, 1]``; 0.0 when there are no conversations.

    Raises:
        ValueError: If the repeats differ in number, or k is outside ``[1, r]``.
    """
    r = _check(outcomes)
    if not outcomes:
        return 0.0
    if not 1 <= k <= r:
        raise ValueError(f"k must be between 1 and the number of repeats ({r}), got {k}")
    total = sum(comb(sum(bool(v) for v in verdicts), k) for verdicts in outcomes.values())
    # Exact integer numerator, one division: no rounding drift over many conversations.
    return total / (comb(r, k) * len(outcomes))
