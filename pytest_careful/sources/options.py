"""The sources stage's options: what to score (the model or the logged run, its decoder, protocols
and categories). ``harness/options.py`` registers them and reads them into ``RunConfig``."""

from __future__ import annotations

import argparse

from ..common.bfcl import CATEGORIES
from ..common.options import Option, csv_of, path
from ..protocols.registry import NAMES as PROTOCOLS

SHORT_CATEGORIES = {c.removeprefix("multi_turn_"): c for c in CATEGORIES}


def _model_name(value: str) -> str:
    """A model name, blanks around it dropped (``reference`` and ``scripted:`` names too, not only registry
    names); an empty one (``--careful-model=$MODEL``, unset) would quietly run no conversation."""
    if not value.strip():
        raise argparse.ArgumentTypeError("empty model name (an unset variable?); 'reference' replays the references")
    return value.strip()


RESULTS = Option(
    "--careful-results",
    type=path,
    metavar="DIR",
    help="Rescore a logged BFCL run (bfcl generate's result files) found under DIR",
)
#: ``--careful-handler`` and ``--careful-model`` name each other in their help: one flag is named first.
_HANDLER = "--careful-handler"
MODEL = Option(
    "--careful-model",
    type=_model_name,
    metavar="NAME",
    help="Model to evaluate: 'reference' (BFCL's reference trajectories); a bfcl-eval registry name "
    "(Qwen3-8B-FC, claude-haiku-4-5-20251001-FC): run live on vLLM or the vendor's API, or with "
    f"{RESULTS} the handler that decodes a logged run; a local model folder (with "
    f"{_HANDLER}); or scripted:NAME, a deterministic test model (scripted:ask asks before every call)",
)
#: Listed with the live options (``live_options.OPTIONS``).
HANDLER = Option(
    _HANDLER,
    metavar="KEY",
    help=f"With a local model directory as {MODEL}: the bfcl-eval registry key whose handler prompts and decodes it",
)
DECODER = Option(
    "--careful-decoder",
    metavar="KEY",
    help="bfcl-eval registry key whose handler decodes the logged run",
)
#: The protocols of a run that names none.
DEFAULT_PROTOCOLS = ("standard",)
PROTOCOL = Option(
    "--careful-protocol",
    default=None,  # DEFAULT_PROTOCOLS, resolved by read_options: a message tells the default from a choice
    type=csv_of(PROTOCOLS, "protocol"),
    metavar="LIST",
    help="Protocols to run, comma-separated (each one an item parameter, [standard]): standard (BFCL's own), "
    "hints (MCP effect hints in the function docs), confirm (a scripted user answers the model's questions); "
    "default: standard",
)
CATEGORY = Option(
    "--careful-category",
    type=csv_of(SHORT_CATEGORIES, "category"),
    metavar="LIST",
    help="Categories, comma-separated: base, miss_func, miss_param, long_context, all "
    "(default: all; for a logged run, those it has result files for)",
)

#: What to score, in the order ``--help`` lists them.
OPTIONS = (MODEL, RESULTS, DECODER, PROTOCOL, CATEGORY)
