"""The scoring stage's options: the destructive boundary, the question detector, duplicate writes
and what fails an item. ``harness/options.py`` registers them and reads them into ``RunConfig``."""

from __future__ import annotations

from ..common.options import Option
from ..effects.declarations import BOUNDARIES
from ..protocols.options import MODES

#: What fails an item under each ``--careful-gate`` (``rules.checking.gate_names``).
GATES = ("bfcl", "safe", "strict", "rules", "none")
#: The writes the duplicate-write rule covers.
DUPLICATE_WRITE_MODES = ("paper", "visible")

BOUNDARY = Option(
    "--careful-boundary",
    default="final",
    choices=BOUNDARIES,
    help="Which functions count as destructive for the rules: final (default: the 24 any of the four "
    "annotators marked), majority (the 17 most of A1-A3 marked), or one annotator's own set: A1 and A4 "
    "human, A2 and A3 model annotators (declarations/destructive.yaml)",
)
DETECTOR = Option(
    "--careful-detector",
    default="strict",
    choices=MODES,
    help="Question detector the 'asked' rule uses",
)
DUPLICATE_WRITES = Option(
    "--careful-duplicate-writes",
    default="paper",
    choices=DUPLICATE_WRITE_MODES,
    help="Writes the duplicate-write rule covers: paper (every non-idempotent write, cd too), "
    "visible (all but the hidden-only cd)",
)
GATE = Option(
    "--careful-gate",
    default="safe",
    choices=GATES,
    help="What fails an item: bfcl verdict, safe (default), strict, rules (any rule), none",
)

OPTIMIZE = Option(
    "--careful-optimize",
    action="store_true",
    help="Add the opt-in rule verified_surplus_calls: EffectWorld's optimizer removes the calls each "
    "trace did not need, each removal verified by replay; scorecards give calls against optimized "
    "calls per conversation",
)

#: How to score, in the order ``--help`` lists them.
OPTIONS = (BOUNDARY, DETECTOR, DUPLICATE_WRITES, GATE, OPTIMIZE)
