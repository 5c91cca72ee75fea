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

Properties (``careful_*``) are the row's (``item.junit_properties``), added by the controller to the
call and teardown reports' ``user_properties`` (the workers do not send them) and written by
pytest itself inside ``<testcase>``, where pytest's ``record_property`` puts
them and Jenkins' JUnit plugin and junitparser read them. junit-10.xsd (what
pytest's default ``xunit2`` family targets, and what Jenkins' xUnit plugin
validates against) has no testcase properties: ``--careful-junit-strict``
moves them into ``<system-out>`` as ``name=value`` lines instead.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest
from _pytest.junitxml import LogXML, _NodeReporter, bin_xml_escape, xml_key

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
    """Classname, <system-out> and properties of careful testcases (a no-op without --junitxml).

    Registered as a plugin on the controller: ``annotate`` sees each report
    before junitxml does; ``pytest_sessionfinish`` (tryfirst: before junitxml
    writes the file) goes over every testcase junitxml made, including those
    pytest makes on its own for a fixture's teardown error or a crashed xdist
    worker, which no careful report describes.
    """

    def __init__(self, config: pytest.Config, model: str, strict: bool = False) -> None:
        self.config = config
        self.model = model
        self.strict = strict
        self._pending: dict[tuple[str, object], str] = {}

    def annotate(self, report: pytest.TestReport) -> None:
        """Called for each careful report on the controller, before junitxml sees it."""
        xml = _log_xml(self.config)
        if xml is None:
            return
        key = (report.nodeid, getattr(report, "node", None))
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
                xml.node_reporter(report).append(_element("system-out", text))

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self) -> None:
        xml = _log_xml(self.config)
        if xml is None:
            return
        for reporter in xml.node_reporters_ordered:
            testcase = reporter.to_xml()
            if NODE_ID.match(testcase.get("name", "")):
                self._finish(reporter, testcase, xml.prefix)

    def _finish(self, reporter: _NodeReporter, testcase: ET.Element, prefix: str | None) -> None:
        name = ".".join(filter(None, [prefix, classname(testcase.get("name", ""))]))
        finalized = "id" not in reporter.__dict__  # finalize() freezes the element it returns
        if finalized:
            testcase.set("classname", name)
        else:
            reporter.attrs["classname"] = name
        if not any(
            p.get("name") == "careful_conversation" for p in testcase.iter("property")
        ) and "careful_conversation=" not in "".join(testcase.itertext()):
            self._add_unscored_properties(reporter, testcase, finalized)
        if finalized:
            _merge_system_out(testcase)

    def _add_unscored_properties(self, reporter: _NodeReporter, testcase: ET.Element, finalized: bool) -> None:
        """A testcase no careful row describes (teardown error, crashed worker): what we know."""
        match = NODE_ID.match(testcase.get("name", ""))
        assert match is not None
        outcome = next((e for e in testcase if e.tag in ("failure", "error")), None)
        reason = (outcome.get("message") if outcome is not None else None) or "not scored"
        props = [
            ("careful_model", self.model),
            ("careful_conversation", match["id"]),
            ("careful_condition", match["condition"] or ""),
            ("careful_category", match["id"].rsplit("_", 1)[0]),
            ("careful_bfcl", "fail"),
            ("careful_input_error", f"not scored: {reason}"[:500]),
        ]
        if self.strict:
            text = "\n".join(f"{k}={v}" for k, v in props)
            (testcase.append if finalized else reporter.nodes.append)(_element("system-out", text))
        elif finalized:
            testcase.insert(0, _properties(props))
        else:
            reporter.properties.extend((k, v) for k, v in props)


def _element(tag: str, text: str) -> ET.Element:
    element = ET.Element(tag)
    element.text = bin_xml_escape(text)
    return element


def _properties(props: list[tuple[str, str]]) -> ET.Element:
    element = ET.Element("properties")
    for name, value in props:
        element.append(ET.Element("property", name=name, value=value))
    return element


def _merge_system_out(testcase: ET.Element) -> None:
    """One <system-out> per testcase (junit_logging adds pytest's own beside ours)."""
    outs = [e for e in testcase if e.tag == "system-out"]
    for extra in outs[1:]:
        outs[0].text = (outs[0].text or "") + "\n" + (extra.text or "")
        testcase.remove(extra)


def _take_properties(report: pytest.TestReport) -> str:
    """The careful_* properties, taken off the report (junitxml writes what is left)."""
    ours = [(k, v) for k, v in report.user_properties if str(k).startswith("careful_")]
    report.user_properties = [(k, v) for k, v in report.user_properties if not str(k).startswith("careful_")]
    return "\n".join(f"{k}={v}" for k, v in ours)


def _log_xml(config: pytest.Config) -> LogXML | None:
    return config.stash.get(xml_key, None)


def system_out(sections: list[tuple[str, str]]) -> str:
    """The careful sections as one text, each under its title."""
    parts = []
    for title, content in sections:
        if title.startswith(SECTION_PREFIX):
            name = title.removeprefix("Captured ").removesuffix(" call")
            parts.append(f"--- {name} ---\n{content}")
    return "\n".join(parts)
