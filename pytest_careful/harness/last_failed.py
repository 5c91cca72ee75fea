"""``--lf`` and ``--ff`` per run: pytest's last-failed record, kept apart for each model and run.

pytest keys its record (``cache/lastfailed``) by node id alone, and every model's
conversations have the same node ids: after a Qwen3-8B run, ``--lf`` on gpt-oss
would rerun Qwen's failures. So the careful entries of the record are kept per run
identity (the model; a logged run's folder and decoder; a live run's output folder,
``scorecard_files.run_identity``) under ``careful/lastfailed/<digest>`` in pytest's cache.
At configure, in every process (xdist's workers deselect too), the record pytest
read is given this run's entries instead of the last run's; at the end the
controller files this run's entries under its key. A project's own tests in the
record are left as they are.
"""

from __future__ import annotations

import hashlib
import json

import pytest

try:  # pytest >= 9.1 keys LFPlugin's record with NodeId objects
    from _pytest.nodeid import NodeId
except ImportError:  # pragma: no cover - pytest 9.0 keys it with strings
    NodeId = None  # type: ignore[assignment,misc]

from .scorecard_files import run_identity
from .selection import NODE_ID
from .state import CarefulState

CACHE_PREFIX = "careful/lastfailed/"


def cache_key(state: CarefulState) -> str:
    """Where this run's last failures are kept in pytest's cache."""
    identity = json.dumps(run_identity(state), sort_keys=True)
    return CACHE_PREFIX + hashlib.sha256(identity.encode("utf-8")).hexdigest()[:16]


def _node_id(text: str) -> object:
    """A record key as pytest's LFPlugin keys it (``NodeId`` from pytest 9.1, a string before)."""
    return text if NodeId is None else NodeId.parse(text)


class LastFailed:
    """Swaps this run's careful entries into pytest's last-failed record and files them at the end."""

    def __init__(self, config: pytest.Config, state: CarefulState) -> None:
        self.config = config
        self.key = cache_key(state)
        self.record: dict[object, bool] | None = getattr(
            config.pluginmanager.get_plugin("lfplugin"), "lastfailed", None
        )
        if self.record is not None and config.cache is not None:
            self._swap_in(self.record, config.cache.get(self.key, {}))

    @staticmethod
    def _swap_in(record: dict[object, bool], ours: object) -> None:
        for key in [k for k in record if NODE_ID.match(str(k))]:
            del record[key]
        if isinstance(ours, dict):
            record.update((_node_id(k), True) for k in ours if isinstance(k, str) and NODE_ID.match(k))

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        config = self.config
        if self.record is None or config.cache is None or hasattr(config, "workerinput"):
            return
        if config.getoption("collectonly") or config.getoption("cacheshow", False):
            return
        ours = {str(k): True for k in self.record if NODE_ID.match(str(k))}
        if config.cache.get(self.key, {}) != ours:
            config.cache.set(self.key, ours)
