# The public API of pytest_careful, written once: type checkers read this stub (``X as X`` is an
# explicit re-export), and __init__.py reads it for ``__all__`` and to import each name when first
# used (PEP 562). What is not here is internal.
# ruff: noqa: I001 -- grouped by what each name is for, not sorted

# The hooks' types: rules (pytest_careful_rules), a result (pytest_careful_conversation_scored),
# a scorecard (pytest_careful_run_finished), a model of one's own (pytest_careful_model_handlers)
from .scoring.rules.rule import Rule as Rule
from .scoring.rules.rule import Violation as Violation
from .scoring.conversation import ConversationResult as ConversationResult
from .reports.scorecard import Scorecard as Scorecard
from .execution.decoding import ModelEntry as ModelEntry

# What a rule sees
from .scoring.rules.rule import ScoredConversation as ScoredConversation
from .scoring.rules.rule import ModelCall as ModelCall
from .protocols.detector import asking_sentences as asking_sentences

# Scoring from a notebook or a script
from .api import score_run as score_run
from .api import read_scorecard as read_scorecard
from .sources.run_config import SourceError as SourceError

# The JSON contracts (TypedDicts) and a run's settings file
from .scoring.row import Row as Row
from .reports.card import Card as Card
from .reports.card import Provenance as Provenance
from .reports.card import Totals as Totals
from .data.run_settings import RunSettings as RunSettings
