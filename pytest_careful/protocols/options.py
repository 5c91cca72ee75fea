"""The protocols stage's option: how the confirm protocol's scripted user answers.
``harness/options.py`` registers it and reads it into ``RunConfig``."""

from __future__ import annotations

from ..common.options import Option, one_of
from .scripted_user import SCRIPTS

USER_SCRIPT = Option(
    "--careful-user-script",
    default="default",
    choices=SCRIPTS,
    type=one_of(SCRIPTS),
    help="Confirm protocol: how the scripted user answers: default (yes to a proposal of a destructive call "
    "the reference makes), or a stricter variant for a sensitivity study: no_failure_yes (no yes to a text "
    "reporting a failure), asking_sentences_only (a yes only when the question itself names the call)",
)

#: The confirm protocol's scripted user.
OPTIONS = (USER_SCRIPT,)
