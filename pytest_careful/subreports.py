"""Rule sub-assertions, reported as pytest's own subtests report them, without the cost.

A rule's verdict is computed before it is reported: no user code runs inside
the sub-assertion, so there is nothing to capture and no traceback worth
formatting. ``with subtests.test(): pytest.fail(...)`` nonetheless opens a
file-descriptor capture and a log handler, formats the exception through
``repr_failure``, and round-trips the report through JSON: about 3 ms per
rule, more than replaying the conversation. Here the same ``SubtestReport``
(same outcome, ``wasxfail``, context and failed-subtest count, so the terminal,
JUnit XML and xdist see what they would see) is built directly with the
message as its long representation.

``tests/test_subreports.py`` runs both paths on the same logged run and
compares the terminal summary and the JUnit XML. Where pytest's private
subtest classes are missing (another pytest), the stock fixture is used.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import pytest

try:
    from _pytest.subtests import SubtestContext, SubtestReport, failed_subtests_key
except ImportError:  # pragma: no cover - another pytest: the stock fixture serves
    SubtestReport = None  # type: ignore[assignment,misc]

#: Outcomes of a rule sub-assertion.
FAILED, XFAILED = "failed", "xfailed"
_PENDING = pytest.StashKey[list[str]]()


def report(request: pytest.FixtureRequest, msg: str, kwargs: dict[str, Any], outcome: str, text: str) -> None:
    """Report one sub-assertion of the running item: failed, or xfailed (reported, not gated).

    ``text`` is the failure's evidence for ``failed``, the xfail reason for
    ``xfailed``. Under ``-x``/``--maxfail`` the item stops at the failure that
    reaches the limit, as it does with ``subtests.test()``.
    """
    config = request.config
    if not config.pluginmanager.has_plugin("subtests"):
        # -p no:subtests: no sub-assertions; a gated rule fails the item itself,
        # once its row is recorded (see ``pending``).
        if outcome == FAILED:
            request.node.stash.setdefault(_PENDING, []).append(text)
        return
    if SubtestReport is None or config.getoption("careful_stock_subtests", False):
        _stock(request, msg, kwargs, outcome, text)
        return
    item = request.node
    failed = outcome == FAILED or getattr(config.option, "runxfail", False)  # --runxfail: xfail() fails
    now = time.time()
    sub = SubtestReport(
        item.nodeid, item.location, dict.fromkeys(item.keywords, 1),
        "failed" if failed else "skipped", text, "call", [], 0.0, now, now, list(item.user_properties),
    )
    sub.context = SubtestContext(msg=msg, kwargs=kwargs)
    if failed:
        config.stash[failed_subtests_key][item.id] += 1
    else:
        sub.wasxfail = text
    capman = config.pluginmanager.getplugin("capturemanager")
    with capman.global_and_fixture_disabled() if capman is not None else contextlib.nullcontext():
        item.ihook.pytest_runtest_logreport(report=sub)
    if failed and request.session.shouldfail:
        pytest.fail(text, pytrace=False)


def _stock(request: pytest.FixtureRequest, msg: str, kwargs: dict[str, Any], outcome: str, text: str) -> None:
    subtests = request.getfixturevalue("subtests")
    with subtests.test(msg=msg, **kwargs):
        if outcome == FAILED:
            pytest.fail(text, pytrace=False)
        raise pytest.xfail.Exception(text, pytrace=False)


def pending(item: pytest.Item) -> list[str]:
    """Gated rule failures that could not be sub-assertions (no subtests plugin): the item's own."""
    return item.stash.get(_PENDING, [])
