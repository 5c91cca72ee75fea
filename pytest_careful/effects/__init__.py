"""Effect declarations: what each of the 128 multi-turn functions does to state.

Takes: replays of the references, logged runs and probes (:mod:`.inference`), and the human
destructive boundary (``declarations/destructive.yaml``). Gives: :class:`~.declarations.Declarations`,
the effect kind of every function under a chosen boundary, and their MCP annotations.
"""

#: The stage's modules (imported when named: importing the stage runs none of them).
__all__ = [
    "declarations",
    "inference",
]
