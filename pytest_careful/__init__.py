"""pytest-careful: effect-aware scoring of BFCL multi-turn function calling."""

from __future__ import annotations

from .dataset import Conversation, load, load_category
from .executor import Execution, Simulators
from .replay import CallRecord, Replay, reference
from .results import Evaluation, InputProblem, evaluate, read_result_file
from .verdict import Verdict, check

__all__ = [
    "CallRecord",
    "Conversation",
    "Evaluation",
    "Execution",
    "InputProblem",
    "Replay",
    "Simulators",
    "Verdict",
    "check",
    "evaluate",
    "load",
    "load_category",
    "read_result_file",
    "reference",
]
