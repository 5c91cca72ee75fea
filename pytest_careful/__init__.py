"""pytest-careful: effect-aware scoring of BFCL multi-turn function calling."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported on first use (PEP 562): pytest imports this package in every session where it is
# installed, through the plugin, and ``executor`` captures bfcl-eval's simulator state at import.
# A session that does not ask for a run must not pay for that.
_PUBLIC = {
    "Conversation": "data.dataset",
    "load": "data.dataset",
    "load_category": "data.dataset",
    "Execution": "execution.executor",
    "Simulators": "execution.executor",
    "CallRecord": "evaluation.replay",
    "Replay": "evaluation.replay",
    "reference": "evaluation.replay",
    "Evaluation": "evaluation.evaluate",
    "evaluate": "evaluation.evaluate",
    "InputProblem": "data.result_files",
    "read_result_file": "data.result_files",
    "Verdict": "evaluation.verdict",
    "check": "evaluation.verdict",
    "Rule": "scoring.rules.rule",
    "Violation": "scoring.rules.rule",
    "ModelCall": "scoring.rules.rule",
    "ScoredConversation": "scoring.rules.rule",
    "asking_sentences": "protocols.detector",
    "ConversationResult": "scoring.conversation",
    "Scorecard": "reports.scorecard",
    # The JSON contracts, as TypedDicts: for type hints on what score_run and the hooks hand over.
    "Row": "scoring.row",
    "Card": "reports.card",
    "Provenance": "reports.card",
    "Totals": "reports.card",
    "RunSettings": "data.run_settings",
    "RunConfig": "sources.run_config",
    "SourceError": "sources.run_config",
    "ModelEntry": "execution.decoding",
    "score_run": "api",
    "read_scorecard": "api",
}

if TYPE_CHECKING:  # what a type checker sees: the names __getattr__ gives at run time
    from .api import read_scorecard, score_run
    from .data.dataset import Conversation, load, load_category
    from .data.result_files import InputProblem, read_result_file
    from .data.run_settings import RunSettings
    from .evaluation.evaluate import Evaluation, evaluate
    from .evaluation.replay import CallRecord, Replay, reference
    from .evaluation.verdict import Verdict, check
    from .execution.decoding import ModelEntry
    from .execution.executor import Execution, Simulators
    from .protocols.detector import asking_sentences
    from .reports.card import Card, Provenance, Totals
    from .reports.scorecard import Scorecard
    from .scoring.conversation import ConversationResult
    from .scoring.row import Row
    from .scoring.rules.rule import ModelCall, Rule, ScoredConversation, Violation
    from .sources.run_config import RunConfig, SourceError


def __getattr__(name: str) -> Any:
    if name not in _PUBLIC:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{_PUBLIC[name]}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC))


__all__ = [
    "CallRecord",
    "Conversation",
    "ConversationResult",
    "ModelCall",
    "ModelEntry",
    "Rule",
    "RunConfig",
    "ScoredConversation",
    "Scorecard",
    "Row",
    "Card",
    "Provenance",
    "Totals",
    "RunSettings",
    "SourceError",
    "Violation",
    "asking_sentences",
    "read_scorecard",
    "score_run",
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
