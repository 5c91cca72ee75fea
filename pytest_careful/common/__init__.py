"""Shared by every stage; imports nothing of the package.

Takes: nothing. Gives: :mod:`.bfcl`, the one place that imports bfcl-eval (its import-time side
effects contained, the categories and simulator classes); :mod:`.text`, the rule for showing text
from files and models; :mod:`.json_types`, TypedDict with optional keys on every Python;
:mod:`.gc_pause`, scoring with the cyclic garbage collector paused.
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "bfcl",
    "gc_pause",
    "json_types",
    "text",
]
