"""Plugin state on ``config.stash``."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pluggy
import pytest

from ..effects.declarations import Declarations
from ..reports.card import Card
from ..reports.stats import ComparisonJson
from ..scoring.conversation import ScoringConfig
from ..scoring.row import Row
from ..scoring.rules import Settings
from ..sources.reference_logged import Source
from ..sources.run_config import RunConfig


@dataclass
class CarefulState:
    options: RunConfig
    source: Source
    declarations: Declarations
    settings: Settings
    #: what scoring a conversation depends on (``scoring.conversation.score_conversation``)
    scoring: ScoringConfig
    #: the session's hook relay (``config.hook``): the plugin's own hooks are called through it
    hook: pluggy.HookRelay | None = None
    #: rows by node id, filled on the controller from reports
    rows: dict[str, Row] = field(default_factory=dict)
    #: node ids of the items this run selected (after -k, -m, --lf, --deselect, node ids)
    selected: set[str] = field(default_factory=set)
    durations: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    gate_messages: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    cards: dict[str, Card] = field(default_factory=dict)
    comparisons: dict[str, dict[str, ComparisonJson]] = field(default_factory=dict)
    baseline: dict[str, Any] | None = None
    #: notes on where scorecards went (partial runs, label clashes), for the summary
    notes: list[str] = field(default_factory=list)
    #: the sidecar folder of per-conversation details for report.html (``html_report``):
    #: created by the controller, written by whichever process scores an item
    details_dir: Path | None = None
    #: lines said at the session's start, before anything runs (a live run's worker count)
    start_lines: list[str] = field(default_factory=list)
    #: conversation items collected, before -k, -m and --deselect chose among them
    collected: int = 0
    #: why nothing was selected from them (-k or -m matching nothing), for the summary
    empty_selection: str | None = None
    #: the session was refused before any item ran (selected conversations with no entry): it writes
    #: and says nothing at its end
    refused: bool = False


SESSION_KEY = pytest.StashKey[CarefulState]()
