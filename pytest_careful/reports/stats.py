"""Paired comparison of two runs over the same conversations.

Each run is a mapping from conversation id to pass/fail. Pairing the two runs
by id leaves, per conversation, one of four outcomes; only the discordant ones
(passed in one run and failed in the other) carry information about which run
is better. McNemar's exact test asks whether those discordant pairs split
evenly, i.e. it is a two-sided binomial test with p = 0.5 on them.

All functions here are pure: no I/O, no global state.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypedDict

__all__ = [
    "ALL",
    "VERDICT_NAMES",
    "Comparison",
    "Flip",
    "compare",
    "compare_by_category",
    "compared_verdict",
    "mcnemar_exact",
    "paired_verdict",
    "spearman_p",
    "to_json",
]

#: Key under which :func:`compare_by_category` reports all conversations together.
ALL = "all"

#: How many ids of each side an id-mismatch error names before eliding the rest.
_SHOWN_IDS = 5

Flip = tuple[str, Literal["gained", "lost"]]


#: The verdicts a comparison with a baseline may pair (``--careful-regression-verdict``), and what a
#: line or a chart calls each.
VERDICT_NAMES = {"safe": "safe", "bfcl": "BFCL"}


def paired_verdict(row: Mapping[str, Any], verdict: str) -> bool:
    """A scorecard row's pass/fail as a comparison pairs it: ``safe``, the row's own safe verdict (what
    the scorecard's ``safe_pass`` counts, under the rules of the run that made it), or ``bfcl``, BFCL's."""
    if verdict == "safe":
        return bool(row["safe"])
    if verdict == "bfcl":
        return bool(row["bfcl"]["valid"])
    raise ValueError(f"no verdict {verdict!r} to pair (expected one of {', '.join(VERDICT_NAMES)})")


def compared_verdict(provenance: Mapping[str, object]) -> str:
    """The verdict a scorecard's comparison paired (``provenance.regression_verdict``); one written
    before it was recorded paired BFCL's."""
    verdict = provenance.get("regression_verdict")
    return verdict if isinstance(verdict, str) and verdict in VERDICT_NAMES else "bfcl"


def p_text(p: float) -> str:
    """A p-value as people read it: four decimals, or "< 0.0001" rather than a misleading 0.0000."""
    return "< 0.0001" if p < 0.0001 else f"{p:.4f}"


def mcnemar_exact(gained: int, lost: int) -> float:
    """Exact two-sided McNemar p-value for the discordant pairs of a comparison.

    This is the two-sided binomial test of ``min(gained, lost)`` successes in
    ``n = gained + lost`` trials with success probability 0.5:
    ``p = min(1, 2 * P(X <= min(gained, lost)))`` with ``X ~ Binomial(n, 0.5)``.
    Because the null distribution is symmetric this equals the "sum of all
    outcomes no more likely than the observed one" definition used by
    ``scipy.stats.binomtest``.

    The tail is summed in exact integer arithmetic and divided once, so the
    result is the correctly rounded float of the exact p-value (no
    cancellation or underflow issues for n up to many thousands).

    Args:
        gained: Conversations that pass now but failed in the baseline.
        lost: Conversations that failed now but passed in the baseline.

    Returns:
        The p-value in ``[0, 1]``; ``1.0`` when there are no discordant pairs.

    Raises:
        ValueError: If either count is negative.
        TypeError: If either count is not an integer.
    """
    for name, value in (("gained", gained), ("lost", lost)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"{name} must be an int, got {type(value).__name__}")
        if value < 0:
            raise ValueError(f"{name} must be non-negative, got {value}")
    n = gained + lost
    k = min(gained, lost)
    if n == 0 or 2 * k >= n - 1:
        # k == n/2 (even n) or k == (n-1)/2 (odd n): the tail holds half or more
        # of the mass, so twice it is at least 1.
        return 1.0
    tail = 0
    term = 1  # comb(n, 0)
    for i in range(k + 1):
        tail += term
        term = term * (n - i) // (i + 1)  # comb(n, i + 1), exact
    # int / int true division is correctly rounded in Python, even for huge ints.
    return min(1.0, (2 * tail) / (1 << n))


class ComparisonJson(TypedDict):
    """One category's paired comparison in ``comparison.json``: ``flipped`` as ``[id, "gained" | "lost"]``."""

    gained: int
    lost: int
    p: float
    flipped: list[list[str]]


@dataclass(frozen=True)
class Comparison:
    """Outcome of pairing a current run against a baseline run.

    Attributes:
        gained: Conversations passing now that failed in the baseline.
        lost: Conversations failing now that passed in the baseline.
        p: Exact two-sided McNemar p-value, ``mcnemar_exact(gained, lost)``.
        flipped: ``(conversation_id, "gained" | "lost")`` for every
            discordant conversation, sorted by id.
    """

    gained: int
    lost: int
    p: float
    flipped: tuple[Flip, ...]


def spearman_p(rho: float, n: int) -> float:
    """Two-sided p-value of Spearman's ``rho`` over ``n`` pairs, as ``scipy.stats.spearmanr`` gives it.

    scipy's test: ``t = rho * sqrt((n - 2) / (1 - rho**2))`` against Student's t with ``df = n - 2``
    degrees of freedom. Its two-sided tail is the regularised incomplete beta function
    ``I_x(df / 2, 1 / 2)`` at ``x = df / (df + t**2)``, which is ``1 - rho**2``: no t, so |rho| = 1
    needs no special case (p = 0, where scipy's rounding can leave 1e-24). mpmath evaluates it
    (bfcl-eval's MathAPI needs mpmath anyway), so scipy (140 MB) is only the tests' oracle.

    Returns NaN for fewer than three pairs, as scipy does (no degrees of freedom).
    """
    df = n - 2
    if df <= 0 or rho != rho:
        return float("nan")
    import mpmath  # mpmath: the exact tail probability only, imported when first asked

    x = max(0.0, 1.0 - float(rho) ** 2)
    return float(mpmath.betainc(df / 2, 0.5, 0, x, regularized=True))


def _check_same_ids(current: Mapping[str, object], baseline: Mapping[str, object]) -> None:
    """Raise ValueError naming a few ids on each side if the id sets differ."""
    cur, base = set(current), set(baseline)
    if cur == base:
        return

    def describe(ids: set[str]) -> str:
        shown = sorted(ids)[:_SHOWN_IDS]
        more = len(ids) - len(shown)
        text = ", ".join(repr(i) for i in shown)
        return text + (f" and {more} more" if more else "")

    parts = []
    only_base = base - cur
    only_cur = cur - base
    if only_base:
        parts.append(f"{len(only_base)} id(s) missing from current: {describe(only_base)}")
    if only_cur:
        parts.append(f"{len(only_cur)} id(s) missing from baseline: {describe(only_cur)}")
    raise ValueError("current and baseline must cover the same conversation ids; " + "; ".join(parts))


def _compare_ids(ids: list[str], current: Mapping[str, bool], baseline: Mapping[str, bool]) -> Comparison:
    """Compare the two runs restricted to ``ids`` (assumed sorted, present in both)."""
    flipped: list[Flip] = []
    for cid in ids:
        now, before = bool(current[cid]), bool(baseline[cid])
        if now and not before:
            flipped.append((cid, "gained"))
        elif before and not now:
            flipped.append((cid, "lost"))
    gained = sum(1 for _, kind in flipped if kind == "gained")
    lost = len(flipped) - gained
    return Comparison(gained=gained, lost=lost, p=mcnemar_exact(gained, lost), flipped=tuple(flipped))


def compare(current: Mapping[str, bool], baseline: Mapping[str, bool]) -> Comparison:
    """Pair two runs by conversation id and test the discordant pairs.

    Args:
        current: Conversation id to pass (True) / fail (False) for the new run.
        baseline: The same for the run compared against.

    Returns:
        The counts of gained and lost conversations, the exact McNemar
        p-value, and the flipped conversations sorted by id.

    Raises:
        ValueError: If the two mappings do not have exactly the same ids.
    """
    _check_same_ids(current, baseline)
    return _compare_ids(sorted(current), current, baseline)


def compare_by_category(
    current: Mapping[str, bool],
    baseline: Mapping[str, bool],
    category_of: Callable[[str], str],
) -> dict[str, Comparison]:
    """Like :func:`compare`, separately per category and for all ids together.

    Args:
        current: Conversation id to pass/fail for the new run.
        baseline: The same for the run compared against.
        category_of: Maps a conversation id to its category name.

    Returns:
        One :class:`Comparison` per category (keys in sorted order), followed
        by the key ``"all"`` covering every conversation.

    Raises:
        ValueError: If the id sets differ, or a category is named ``"all"``.
    """
    _check_same_ids(current, baseline)
    ids = sorted(current)
    groups: dict[str, list[str]] = {}
    for cid in ids:
        groups.setdefault(category_of(cid), []).append(cid)
    if ALL in groups:
        raise ValueError(
            f"category name {ALL!r} is reserved for the overall comparison (returned for id {groups[ALL][0]!r})"
        )
    result = {cat: _compare_ids(groups[cat], current, baseline) for cat in sorted(groups)}
    result[ALL] = _compare_ids(ids, current, baseline)
    return result


def to_json(d: Mapping[str, Comparison]) -> dict[str, ComparisonJson]:
    """JSON-ready form of :func:`compare_by_category`'s result.

    Args:
        d: Category name to :class:`Comparison`.

    Returns:
        ``{category: {"gained": n, "lost": n, "p": x, "flipped": [[id, kind], ...]}}``
        in the same key order as ``d``.
    """
    return {
        cat: {
            "gained": c.gained,
            "lost": c.lost,
            "p": c.p,
            "flipped": [[cid, kind] for cid, kind in c.flipped],
        }
        for cat, c in d.items()
    }
