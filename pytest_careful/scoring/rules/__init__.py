"""The rules: what a rule is and sees (``rule``), the run's rules gathered and run (``checking``),
and the nine built-in rules, one module each, which are ``Rule`` objects like a user's own.

The plugin gives the built-in rules through its own ``pytest_careful_rules`` implementation
(``harness.session``), and ``pytest_careful.score_run`` through ``built_in``: both under the
run's ``Settings``. Every count is per turn against the reference (the seed's "Effect-aware
scoring by replay"), and every violation carries its evidence.
"""

from __future__ import annotations

from dataclasses import dataclass

from .asked import Asked
from .beyond_reference import BeyondReference
from .collateral_destructive import CollateralDestructive
from .duplicate_writes import VARIANTS as DUPLICATE_WRITES
from .duplicate_writes import DuplicateWrites
from .failed_calls import FailedCalls
from .redundant_reads import RedundantReads
from .rule import Rule, Violation
from .surplus_calls import VerifiedSurplusCalls
from .unconfirmed_destructive import UnconfirmedDestructive


@dataclass(frozen=True)
class Settings:
    """What a score depends on besides the run itself: the boundary and the built-in rules' variants."""

    boundary: str = "final"
    detector: str = "strict"
    duplicate_writes: str = "paper"
    optimize: bool = False  # --careful-optimize: the opt-in verified_surplus_calls rule


def built_in(settings: Settings = Settings()) -> tuple[Rule, ...]:
    """The nine built-in rules under ``settings``, in ``NAMES`` order."""
    return (
        CollateralDestructive(),
        BeyondReference("destructive"),
        BeyondReference("write"),
        BeyondReference("read"),
        DuplicateWrites(settings.duplicate_writes),
        RedundantReads(),
        FailedCalls(),
        Asked(settings.detector),
        UnconfirmedDestructive(),
    )


def opt_in(settings: Settings = Settings()) -> tuple[Rule, ...]:
    """The built-in rules a run has only when asked (``--careful-optimize``), after the nine.

    Reports list them as they list a run's own rules (a column each, their description in the
    scorecard's provenance), so that a run without them shows exactly what it showed before."""
    return (VerifiedSurplusCalls(),) if settings.optimize else ()


# A built-in rule is written once, in ``built_in``: its name, its tallies and its type are read from it.
#: The built-in rules' names, in the order reports list them.
NAMES = tuple(r.name for r in built_in())
#: The built-in rules' tallies: counts beside their violations (``Rule.tallies``), in rule order.
TALLIES = tuple(t for r in built_in() for t in r.tallies)
#: Each tally's rule: a tally is counted only where its rule is.
TALLY_OF = {t: r.name for r in built_in() for t in r.tallies}
_TYPES = frozenset(type(r) for r in built_in())
#: The opt-in rules' names, and their tallies (reports sum them as they sum the built-in ones').
OPT_IN_TALLIES = {r.name: r.tallies for r in opt_in(Settings(optimize=True))}


def is_built_in(rule: Rule) -> bool:
    """One of this package's rules as it ships (a user's subclass of one is the user's own)."""
    return type(rule) in _TYPES


#: Where each built-in rule's violations stand in a row's list, within a turn: the calls beyond
#: the reference (each call's ``beyond_reference_*`` before its ``collateral_destructive``), then
#: duplicate writes, redundant reads, failed calls, and the turn that asked.
_ROW_GROUP = {
    "beyond_reference_destructive": (0, 0),
    "beyond_reference_write": (0, 0),
    "beyond_reference_read": (0, 0),
    "collateral_destructive": (0, 1),
    "duplicate_writes": (1, 0),
    "redundant_reads": (2, 0),
    "failed_calls": (3, 0),
    "asked": (4, 0),
}


def row_order(rule: str, violation: Violation) -> tuple[int, int, int, int, int]:
    """Where a built-in rule's violation stands in a row's list (sort by it): turn by turn (``_ROW_GROUP``)."""
    group, sub = _ROW_GROUP.get(rule, (len(_ROW_GROUP), 0))
    call = violation.call
    if call is None:
        return (violation.turn if violation.turn is not None else -1, group, -1, -1, sub)
    return (call.turn, group, call.step, call.position, sub)


__all__ = [
    "DUPLICATE_WRITES",
    "NAMES",
    "OPT_IN_TALLIES",
    "TALLIES",
    "TALLY_OF",
    "Rule",
    "Settings",
    "built_in",
    "opt_in",
    "row_order",
    "is_built_in",
]
