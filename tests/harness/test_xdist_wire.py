"""What crosses xdist per item, and that the controller rebuilds the same reports (issue 13)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

# Records, per process, the user_properties of every careful report as that process sees it:
# in a worker before xdist serialises it, on the controller after every other hook.
RECORDER = """
import json
import pytest

ROLE = []

def pytest_configure(config):  # not PYTEST_XDIST_WORKER: an outer xdist run sets it for this one too
    ROLE.append(getattr(config, "workerinput", {}).get("workerid", "controller"))

@pytest.hookimpl(trylast=True)
def pytest_runtest_logreport(report):
    if "[" not in report.nodeid:
        return
    with open(f"props-{ROLE[-1]}.jsonl", "a") as out:
        out.write(json.dumps([report.nodeid, report.when, report.user_properties]) + "\\n")
"""

MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}


def _lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def _junit_properties(path):
    out = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        out[case.get("name")] = [(p.get("name"), p.get("value")) for p in case.iter("property")]
    return out


def _run(pytester, mode, tag):
    for old in pytester.path.glob("props-*.jsonl"):
        old.unlink()
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        *MODES[mode],
        "--careful-model=reference",
        "--careful-category=base",
        "-k",
        "base_3",
        f"--junitxml={tag}.xml",
        f"--careful-scorecards=cards-{tag}",
    )
    result.assert_outcomes(passed=11)
    return result


def test_workers_send_no_junit_properties_and_the_controller_restores_them(pytester):
    pytester.makeconftest(RECORDER)
    _run(pytester, "n2", "n2")
    sent = [line for path in pytester.path.glob("props-gw*.jsonl") for line in _lines(path)]
    assert len(sent) == 33  # setup, call and teardown of 11 items, across both workers
    assert all(props == [] for _, _, props in sent), "a worker sent user_properties across xdist"
    seen = _lines(pytester.path / "props-controller.jsonl")
    by_when = {(nodeid, when): dict(props) for nodeid, when, props in seen}
    rows = json.loads((pytester.path / "cards-n2/reference/standard/scorecard.json").read_text())["rows"]
    assert len(rows) == 11
    for row in rows:
        node = f"{row['id']}[standard]"
        assert by_when[(node, "setup")] == {}
        for when in ("call", "teardown"):
            props = by_when[(node, when)]
            assert props["careful_conversation"] == row["id"] and props["careful_model"] == "reference"
            assert props["careful_safe"] == ("pass" if row["safe"] else "fail")
            assert props["careful_turns"] == row["turns"]


def test_junit_properties_identical_with_and_without_xdist(pytester):
    pytester.makeconftest(RECORDER)
    found = {}
    for mode in MODES:
        _run(pytester, mode, mode)
        found[mode] = _junit_properties(pytester.path / f"{mode}.xml")
    assert found["no-xdist"] == found["n2"]
    assert len(found["n2"]) == 11
    for name, props in found["n2"].items():
        names = [n for n, _ in props]
        assert names[:3] == ["careful_model", "careful_conversation", "careful_condition"]
        assert dict(props)["careful_conversation"] == name.removesuffix("[standard]")


@pytest.mark.parametrize("mode", list(MODES))
def test_properties_recorded_by_the_item_keep_their_place(pytester, mode):
    """A property recorded before the call stays first, one recorded at teardown last, as on the item."""
    pytester.makeconftest(
        RECORDER
        + """
@pytest.fixture(autouse=True)
def _around(request):  # as record_property does, without its xunit2 warning
    request.node.user_properties.append(("before", 1))
    yield
    request.node.user_properties.append(("after", 2))

def pytest_collection_modifyitems(items):
    for item in items:
        item.fixturenames.append("_around")
"""
    )
    _run(pytester, mode, mode)
    props = _junit_properties(pytester.path / f"{mode}.xml")
    assert len(props) == 11
    for listed in props.values():
        names = [n for n, _ in listed]
        assert names[0] == "before" and names[-1] == "after" and names[1] == "careful_model"
