"""The protocols a conversation runs under, as objects: what each one changes, in one place.

Every stage asks the protocol (``get(name).scripted_user``) instead of comparing its name, so a
protocol's behaviour is declared here once: the effect hints in the docs (:mod:`.hints`), the
scripted user (:mod:`.scripted_user`), and what of the run's settings its entries depend on.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Protocol:
    """One protocol.

    Attributes:
        name: the item parameter and ``--careful-protocol`` value.
        description: what it is, for markers and messages.
        hinted_docs: the function docs carry MCP effect hints (``readOnlyHint``...).
        scripted_user: a scripted user answers the model's questions, so a destructive call can be
            confirmed (the ``unconfirmed_destructive`` rule means something only here).
        own_settings: the run settings only this protocol has, beside ``SHARED_SETTINGS`` (a
            scorecard's provenance key each): confirm's scripted user follows a script.
    """

    name: str
    description: str
    hinted_docs: bool = False
    scripted_user: bool = False
    own_settings: tuple[str, ...] = ()

    @property
    def uses_boundary(self) -> bool:
        """Whether its entries depend on the destructive boundary (the hints' or the user's)."""
        return self.hinted_docs or self.scripted_user


#: The run settings that shape a scorecard under every protocol (a provenance key each): the destructive
#: boundary, the question detector and how duplicate writes count.
SHARED_SETTINGS = ("boundary", "detector", "duplicate_writes")

STANDARD = Protocol("standard", "BFCL's own")
HINTS = Protocol("hints", "MCP effect hints in the function docs", hinted_docs=True)
CONFIRM = Protocol(
    "confirm", "a scripted user answers the model's questions", scripted_user=True, own_settings=("user_script",)
)
#: Every protocol, in the order options, markers and reports list them.
PROTOCOLS = (STANDARD, HINTS, CONFIRM)
NAMES = tuple(p.name for p in PROTOCOLS)
_BY_NAME = {p.name: p for p in PROTOCOLS}
#: Every run setting a scorecard may record: the shared ones, then each protocol's own.
SETTINGS = SHARED_SETTINGS + tuple(dict.fromkeys(s for p in PROTOCOLS for s in p.own_settings))


def get(name: str) -> Protocol:
    """The protocol named ``name``; a name that is none (a hostile scorecard's) behaves as standard."""
    return _BY_NAME.get(name, STANDARD)


def settings_of(name: str) -> tuple[str, ...]:
    """The run settings that apply under protocol ``name``: the shared ones and its own."""
    return SHARED_SETTINGS + get(name).own_settings


def common_settings(a: str, b: str) -> tuple[str, ...]:
    """The run settings two protocols both have: what runs under them must agree on to be compared."""
    return tuple(s for s in settings_of(a) if s in settings_of(b))


def has_scripted_user(name: object) -> bool:
    """Whether a condition read from a file (any value) is one where a scripted user answers."""
    return isinstance(name, str) and get(name).scripted_user
