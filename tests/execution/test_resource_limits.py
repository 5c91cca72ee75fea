"""Each conversation's scoring budget: calls, wall time, memory (issue 12, class 2).

Generated payloads of every costly class are scored as an item scores them: each ends
either in an ordinary verdict or in ``ResourceLimit`` naming the limit and its option,
never in another exception. Through pytester, with and without xdist, such a conversation
fails with ``resource_limit`` and the others are scored.

No test here reads how long scoring took: where an outcome must not depend on the machine's
speed, the clock stands still (``STILL``) and the counts alone decide; where the clock is the
limit meant to stop a payload, any limit is accepted. The clock's own promise is tested with a
controlled clock in ``test_limits_clock.py``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path
from typing import Any

import hostile_payloads as payloads
import pytest
from rows import score_row

from conftest import REAL_RUN_DECODER
from pytest_careful.common import options
from pytest_careful.data import dataset
from pytest_careful.data.result_files import read_result_file
from pytest_careful.effects import declarations
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.evaluation.replay import reference
from pytest_careful.execution import limits
from pytest_careful.execution.decoding import decoder, passthrough_decoder
from pytest_careful.scoring import evidence

CLASSES = ("exponential", "deep_chain", "cycle", "many_calls", "many_writes", "many_powers")
#: A smaller budget than the default, so that the suite stays fast; same code paths.
TEST_LIMITS = limits.Limits(max_calls=10_000, max_seconds=1.5, max_memory_mb=256)


def STILL() -> float:
    """A clock that never moves: the time limit never stops scoring, the counts decide."""
    return 0.0


def _score(
    conversation: dataset.Conversation,
    result: Any,
    budget: limits.Limits,
    dec: Any = None,
    now: Callable[[], float] = STILL,
) -> tuple[str, limits.Meter]:
    """What ``outcome.score`` does, inside a budget: BFCL's error type, or the limit hit."""
    with limits.metered(budget, now) as meter:
        try:
            evaluation = evaluate(conversation, result, dec or passthrough_decoder())
            score_row(evaluation, declarations.load())
            evidence.transcript(evaluation)
            evidence.format_bfcl_failure(evaluation)
        except limits.ResourceLimit as exceeded:
            assert limits.OPTION_OF[exceeded.limit].flag in exceeded.reason
            return f"resource_limit:{exceeded.limit}", meter
    return evaluation.verdict.error_type or "pass", meter


#: Classes that the clock is meant to stop (costly calls, long walks): scored on the real clock.
CLOCKED = ("deep_chain", "many_writes", "many_powers")


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("kind", CLASSES)
def test_generated_payloads_end_in_a_verdict_or_a_named_limit(kind: str, seed: int) -> None:
    conversation = payloads.conversation_for(kind)
    calls = payloads.generated(kind, seed)
    now = time.monotonic if kind in CLOCKED else STILL
    outcome, meter = _score(conversation, payloads.as_run(conversation, calls), TEST_LIMITS, now=now)
    if kind == "exponential":  # shared folders: scored, and cheaply (a walk of every copy: 2**doublings)
        doublings = sum(call.startswith("mv(source='c") for call in calls)
        assert outcome == "multi_turn:instance_state_mismatch" and meter.steps < 2**doublings
    elif kind == "cycle":  # a cyclic folder: scored (walked around forever, only a limit would end it)
        assert outcome == "multi_turn:instance_state_mismatch"
    elif kind == "many_calls":  # hundreds of thousands of cheap reads: stopped at the call limit
        assert outcome == "resource_limit:calls" and meter.calls == TEST_LIMITS.max_calls + 1
    elif kind in ("many_writes", "many_powers"):
        assert outcome.startswith("resource_limit:")
    else:  # deep chains are scored, or stopped by the clock (or, on a fast machine, the memory count)
        assert outcome in ("multi_turn:instance_state_mismatch", "resource_limit:seconds", "resource_limit:memory")


def test_a_few_hundred_nested_folders_are_scored() -> None:
    conversation = payloads.conversation_for("deep_chain")
    outcome, _ = _score(conversation, payloads.as_run(conversation, payloads.deep_chain(500)), limits.Limits())
    assert outcome == "multi_turn:instance_state_mismatch"


def test_each_limit_names_itself_and_its_option() -> None:
    conversation = payloads.conversation_for("many_writes")
    run = payloads.as_run(conversation, payloads.many_writes(200))
    outcome, meter = _score(conversation, run, limits.Limits(max_calls=50))
    assert outcome == "resource_limit:calls" and meter.calls == 51
    outcome, meter = _score(conversation, run, limits.Limits(max_memory_mb=1))
    assert outcome == "resource_limit:memory" and meter.bytes > 2**20
    ticking = itertools.count().__next__  # a clock one second on at each reading
    outcome, _ = _score(conversation, run, limits.Limits(max_seconds=2), now=ticking)
    assert outcome == "resource_limit:seconds"
    assert _score(conversation, run, limits.Limits())[0] == "multi_turn:instance_state_mismatch"


def test_reasons_read_as_one_line() -> None:
    meter = limits.Meter(limits.Limits(max_calls=2))
    meter.call(10)
    meter.call(10)
    with pytest.raises(limits.ResourceLimit) as raised:
        meter.call(10)
    assert raised.value.reason == "more than 2 calls: over the call limit (--careful-max-calls=2)"
    assert isinstance(raised.value, BaseException) and not isinstance(raised.value, Exception)


def test_nothing_is_counted_outside_a_budget_nor_for_references() -> None:
    limits.call(10**12)  # no meter: no effect
    limits.charge(10**12)
    conversation = dataset.get("multi_turn_long_context_38")  # 35 reference calls
    reference.cache_clear()
    steps = [[[call] for call in turn] for turn in conversation.ground_truth]
    model_calls = sum(len(turn) for turn in conversation.ground_truth)
    outcome, meter = _score(conversation, steps, limits.Limits(max_calls=model_calls))
    assert outcome == "pass" and meter.calls == model_calls


def test_defaults_leave_real_runs_a_wide_margin(real_run: Path) -> None:
    """The 800 references and the real run score within a twentieth of the default calls and memory."""
    twentieth = limits.Limits(
        max_calls=limits.DEFAULT_MAX_CALLS // 20, max_seconds=10**6, max_memory_mb=limits.DEFAULT_MAX_MEMORY_MB / 20
    )
    for conversation in dataset.load():
        ground_truth = [[list(t)] if t else [] for t in conversation.ground_truth]
        assert _score(conversation, ground_truth, twentieth)[0] == "pass", conversation.id
    fc = decoder(REAL_RUN_DECODER)
    for path in sorted(real_run.glob("BFCL_v4_multi_turn_*_result.json")):
        category = path.name.removeprefix("BFCL_v4_").removesuffix("_result.json")
        for entry in read_result_file(path, category)[0]:
            outcome, _ = _score(dataset.get(entry.id), entry.result, twentieth, fc)
            assert not outcome.startswith("resource_limit"), entry.id


@pytest.mark.parametrize(
    "parse, value",
    [
        (options.positive_int, "0"),
        (options.positive_int, "1.5"),
        (options.positive_int, "-3"),
        (options.positive_number, "0"),
        (options.positive_number, "nan"),
        (options.positive_number, "inf"),
        (options.positive_number, "ten"),
    ],
)
def test_budget_options_refuse_what_is_not_a_positive_number(parse: Any, value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse(value)


# --- end to end --------------------------------------------------------------------------

#: Conversation -> hostile calls planted in its first turn.
PLANTED = {
    "multi_turn_base_1": payloads.many_calls(50_000),  # the call limit
    "multi_turn_base_3": payloads.deep_chain(3_000),  # the clock (RecursionError before)
    "multi_turn_base_6": payloads.exponential(40),  # scored: 2**40 paths cost nothing now
}
SELECTED = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_3", "multi_turn_base_6", "multi_turn_base_9"]
#: The child's clock moves one millisecond at each reading: a conversation's scoring time is its
#: count of checkpoints, the same on any machine. 50,000 reads stop at the 1,001st call with
#: 1.000 s on that clock; the deep chain's walks read it more often than its calls (past 1.05 s
#: before its 1,000th call); the other conversations take tens of readings.
CHECKPOINT_CLOCK = """
import contextlib, itertools
from pytest_careful.execution import limits

_readings = itertools.count()
_metered = limits.metered


def _now():
    return next(_readings) / 1000


@contextlib.contextmanager
def metered(budget, now=None):
    with open({log!r}, "a") as log:
        log.write("metered\\n")
    with _metered(budget, _now) as meter:
        yield meter


limits.metered = metered
"""


@pytest.fixture
def hostile_run(pytester: pytest.Pytester, real_run: Path) -> Path:
    target = pytester.path / "result" / "gpt-oss-20b"
    target.mkdir(parents=True)
    name = "BFCL_v4_multi_turn_base_result.json"
    lines = []
    for line in (real_run / name).read_text().splitlines():
        entry = json.loads(line)
        if entry["id"] in PLANTED:
            entry["result"] = payloads.as_fc_entry(dataset.get(entry["id"]), PLANTED[entry["id"]])["result"]
        lines.append(json.dumps(entry))
    (target / name).write_text("\n".join(lines) + "\n")
    return target


@pytest.mark.parametrize("mode", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_over_budget_conversations_fail_alone(pytester: pytest.Pytester, hostile_run: Path, mode: list[str]) -> None:
    log = pytester.path / "metered.log"
    pytester.makeconftest(CHECKPOINT_CLOCK.format(log=str(log)))
    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        *mode,
        f"--careful-results={hostile_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        "--careful-max-seconds=1.05",
        "--careful-max-calls=1000",
        "--junitxml=out.xml",
        *(f"{c}[standard]" for c in SELECTED),
    )
    out = result.stdout.str() + result.stderr.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, out[-3000:]
    assert len(log.read_text().splitlines()) >= len(SELECTED)  # each scored on the checkpoint clock
    assert "Traceback" not in out and "INTERNALERROR" not in out and "RecursionError" not in out
    assert "more than 1,000 calls: over the call limit (--careful-max-calls=1000)" in out
    assert "over the time limit (--careful-max-seconds=1.05)" in out
    assert "2 over a resource limit" in out
    card = json.loads((pytester.path / "scorecards" / "gpt-oss-20b" / "standard" / "scorecard.json").read_text())
    rows = {row["id"]: row for row in card["rows"]}
    assert sorted(rows) == SELECTED
    for over in ("multi_turn_base_1", "multi_turn_base_3"):
        assert rows[over]["bfcl"]["error_type"] == "careful:resource_limit" and "unscored" not in rows[over]
    assert "resource_limit" not in rows["multi_turn_base_6"]
    assert rows["multi_turn_base_6"]["bfcl"]["error_type"] == "multi_turn:instance_state_mismatch"
    properties = {
        (case.get("name"), p.get("name")): p.get("value")
        for case in ET.parse(pytester.path / "out.xml").iter("testcase")
        for p in case.iter("property")
    }
    assert properties[("multi_turn_base_1[standard]", "careful_bfcl_error")] == "careful:resource_limit"
    assert "call limit" in properties[("multi_turn_base_1[standard]", "careful_resource_limit")]
    assert ("multi_turn_base_0[standard]", "careful_resource_limit") not in properties
