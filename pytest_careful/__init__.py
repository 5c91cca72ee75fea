"""pytest-careful: effect-aware scoring of BFCL multi-turn function calling."""

from __future__ import annotations

import importlib
from typing import Any

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
    "Rule": "scoring.extension",
    "Violation": "scoring.extension",
    "ModelCall": "scoring.extension",
    "ScoredConversation": "scoring.extension",
    "ConversationResult": "scoring.conversation",
    "Scorecard": "reports.scorecard",
    "RunConfig": "sources.run_config",
    "SourceError": "sources.run_config",
    "ModelEntry": "execution.decoding",
    "score_run": "api",
    "read_scorecard": "api",
}


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
    "SourceError",
    "Violation",
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
