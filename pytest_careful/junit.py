"""JUnit XML as dashboards count it: one testcase per conversation x condition.

pytest's own ``--junitxml`` writes the file; this module only adds what its
defaults cannot know, on the controller, before junitxml opens the testcase:

* ``classname`` ``careful.<category>.<condition>`` (the node id has no module
  part, so pytest would leave it empty and dashboards would group all 800
  conversations under one nameless class);
* ``<system-out>`` with the item's careful sections (rules reported but not
  gated, the transcript of a failing conversation), whatever ``junit_logging``
  says: pytest writes captured output there only when asked, and rule evidence
  is not captured output.

Properties (``careful_*``) are the item's ``user_properties``, written by
pytest itself inside ``<testcase>``, where pytest's ``record_property`` puts
them and Jenkins' JUnit plugin and junitparser read them. junit-10.xsd (what
pytest's default ``xunit2`` family targets, and what Jenkins' xUnit plugin
validates against) has no testcase properties: ``--careful-junit-strict``
moves them into ``<system-out>`` as ``name=value`` lines instead.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from typing import Any

import pytest

from .selection import NODE_ID

#: Report sections that go to <system-out> (see ``item.call_sections``).
SECTION_PREFIX = "Captured careful "


def classname(nodeid: str) -> str:
    """``multi_turn_base_17[standard]`` → ``careful.multi_turn_base.standard``."""
    match = NODE_ID.match(nodeid)
    if match is None:
        return "careful"
    category = match["id"].rsplit("_", 1)[0]
    return f"careful.{category}.{match['condition']}" if match["condition"] else f"careful.{category}"


class Annotator:
    """Adds classname and <system-out> to careful testcases (a no-op without --junitxml)."""

    def __init__(self, config: pytest.Config, strict: bool = False) -> None:
        self.config = config
        self.strict = strict
        self._pending: dict[tuple[str, Any], str] = {}

    def annotate(self, report: pytest.TestReport) -> None:
        """Called for each careful report on the controller, before junitxml sees it."""
        xml = _log_xml(self.config)
        if xml is None:
            return
        key = (report.nodeid, getattr(report, "node", None))
        reporter = xml.node_reporter(report)
        reporter.add_attribute("classname", classname(report.nodeid))
        if report.when == "call":
            text = system_out(report.sections)
            if text:
                self._pending[key] = text
        elif report.when == "teardown":
            # Appended at teardown, before junitxml closes the testcase, so that
            # <system-out> follows the outcome element written at call.
            text = self._pending.pop(key, "")
            if self.strict:
                text = "\n".join(filter(None, [_take_properties(report), text]))
            if text:
                from _pytest.junitxml import bin_xml_escape

                element = ET.Element("system-out")
                element.text = bin_xml_escape(text)
                reporter.append(element)


def _take_properties(report: pytest.TestReport) -> str:
    """The careful_* properties, taken off the report (junitxml writes what is left)."""
    ours = [(k, v) for k, v in report.user_properties if str(k).startswith("careful_")]
    report.user_properties = [(k, v) for k, v in report.user_properties if not str(k).startswith("careful_")]
    return "\n".join(f"{k}={v}" for k, v in ours)


def _log_xml(config: pytest.Config) -> Any:
    try:
        from _pytest.junitxml import xml_key
    except ImportError:  # pragma: no cover - another pytest
        return None
    return config.stash.get(xml_key, None)


def system_out(sections: list[tuple[str, str]]) -> str:
    """The careful sections as one text, each under its title."""
    parts = []
    for title, content in sections:
        if title.startswith(SECTION_PREFIX):
            name = title.removeprefix("Captured ").removesuffix(" call")
            parts.append(f"--- {name} ---\n{content}")
    return "\n".join(parts)
