"""pytest entry point. Installed, the plugin is inert unless asked."""

from __future__ import annotations

import pytest


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("careful", "effect-aware BFCL multi-turn scoring")
    group.addoption(
        "--careful-results", dest="careful_results", default=None, metavar="DIR",
        help="Rescore a logged BFCL run found under DIR",
    )
