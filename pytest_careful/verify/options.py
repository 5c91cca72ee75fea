"""The audit's option: whether items the audit flags still count. ``harness/options.py`` registers
it and reads it into ``RunConfig``."""

from __future__ import annotations

from ..common.options import Option

OFF, MARK, EXCLUDE = "off", "mark", "exclude"
#: ``--careful-audit``'s choices.
AUDIT_MODES = (OFF, MARK, EXCLUDE)

AUDIT = Option(
    "--careful-audit",
    default=MARK,
    choices=AUDIT_MODES,
    help="The item audit (audit.json, careful-audit): mark (default) shows an item's defect in its failure "
    "text, JUnit and the scorecards, with the figures on the items without one beside the whole run's, and "
    "changes no verdict; exclude leaves the items with a defect out of every figure and the release gate; off",
)

#: In the order ``--help`` lists them.
OPTIONS = (AUDIT,)
