"""A run's rules as every report lists them: the built-in ones it had, and its own beside them.

The one reader of a scorecard's ``provenance.custom_rules`` and ``provenance.rules_off``: the
scorecard's files, report.html (its summary table, violations chart and rule filter), careful-report
and the terminal summary take a run's rules from here, so that a rule shows wherever the built-in
rules do, without any report knowing where it came from, and a built-in rule the run did not have
(turned off, or replaced by one of its own) shows as ``off``, never as a count of 0. A scorecard is
input (it may have been edited): an entry without a name is left out, an odd description or flag
read as none.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ..scoring.options import OPTIMIZE
from ..scoring.rules import NAMES, OPT_IN_TALLIES, TALLIES, TALLY_OF

#: What a table shows for a built-in rule, or one of its tallies, that the run did not count.
OFF = "off"


@dataclass(frozen=True)
class OwnRule:
    """One rule of the run's own: its ``counts`` key, what it checks, and whether it fails ``safe``."""

    name: str
    description: str = ""
    gated: bool = False

    @property
    def header(self) -> str:
        """Its name as a column head: ``*`` marks a gated rule, as the terminal's table marks it."""
        return self.name + ("*" if self.gated else "")

    @property
    def legend(self) -> str:
        """What its column counts, for a table's legend."""
        if self.name in OPT_IN_TALLIES:
            return f"opt-in built-in rule ({OPTIMIZE}): {self.description}"
        gated = ", gated: a violation fails safe" if self.gated else ""
        return f"rule of the run's own (pytest_careful_rules{gated}): {self.description or 'no description'}"


def read(prov: Mapping[str, object]) -> tuple[OwnRule, ...]:
    """The run's own rules, in the order the session had them, as its provenance lists them."""
    listed = prov.get("custom_rules")
    if not isinstance(listed, list):
        return ()
    return tuple(
        OwnRule(
            entry["name"],
            entry["description"] if isinstance(entry.get("description"), str) else "",
            entry.get("gated") is True,
        )
        for entry in listed
        if isinstance(entry, dict) and isinstance(entry.get("name"), str)
    )


def names(prov: Mapping[str, object]) -> tuple[str, ...]:
    """The names of the run's own rules: the ``counts`` keys they add to every row and total."""
    return tuple(rule.name for rule in read(prov))


def off(prov: Mapping[str, object]) -> frozenset[str]:
    """The built-in rules the run did not have (``provenance.rules_off``), and their tallies."""
    listed = prov.get("rules_off")
    names = {n for n in listed if n in NAMES} if isinstance(listed, list) else set()
    return frozenset(names | {t for t, rule in TALLY_OF.items() if rule in names})


def count_columns(prov: Mapping[str, object]) -> tuple[str, ...]:
    """Every ``counts`` key the run counted: the built-in rules' and tallies it had, then its own
    (an opt-in rule's tallies after it)."""
    dropped = off(prov)
    ours = tuple(c for c in NAMES + TALLIES if c not in dropped)
    own = tuple(n for n in names(prov) if n not in ours)
    return ours + own + tuple(t for n in own for t in OPT_IN_TALLIES.get(n, ()))


def optimized(totals: Mapping[str, object]) -> tuple[float, float] | None:
    """Calls per conversation and optimized calls per conversation (``verified_surplus_calls``), or None."""
    counts, n, calls = totals.get("counts"), totals.get("conversations"), totals.get("calls")
    if not isinstance(counts, dict) or "optimized_calls" not in counts or not isinstance(n, int) or not n:
        return None
    return float(calls) / n if isinstance(calls, int) else 0.0, counts["optimized_calls"] / n


def shown(counts: Mapping[str, int], name: str, dropped: frozenset[str]) -> str:
    """A built-in count as a table cell: ``off`` where the run did not count it."""
    return OFF if name in dropped else str(counts.get(name, 0))
