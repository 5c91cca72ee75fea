"""Effect declarations: what the inference must reproduce, and the human boundary data."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pytest_careful.cli import declare
from pytest_careful.common.bfcl import SIMULATOR_CLASSES
from pytest_careful.data.dataset import func_docs
from pytest_careful.effects import declarations

DECL = declarations.load()


def test_every_documented_function_is_declared():
    documented = {doc["name"] for c in SIMULATOR_CLASSES for doc in func_docs(c)}
    assert set(DECL.functions) == documented and len(documented) == 128
    sizes = {c: len(fs) for c, fs in DECL.by_class().items()}
    assert list(sizes.values()) == [18, 17, 10, 14, 9, 20, 18, 22]


def test_counts_reported_by_the_seed():
    writes = [d for d in DECL.functions.values() if d.is_write]
    assert (128 - len(writes), len(writes)) == (79, 49)
    assert sum(not d.idempotent for d in writes) == 16
    assert [d.name for d in writes if d.hidden_only] == ["cd"]
    total = declare.class_table(DECL)[-1]
    assert (total["read"], total["write"], total["destructive"], total["hidden_only"]) == (78, 25, 24, 1)


@pytest.mark.parametrize("name", ["rm", "rmdir", "retweet", "cancel_order"])
def test_second_call_fails_harmlessly_so_idempotent(name):
    assert DECL[name].is_write and DECL[name].idempotent


def test_cd_is_not_idempotent_because_of_parent_moves():
    cd = DECL["cd"]
    assert cd.is_write and not cd.idempotent and cd.hidden_only
    assert cd.footprint == ("_current_dir",)


def test_cp_is_not_idempotent_and_always_failing_reads_are_reads():
    assert DECL["cp"].is_write and not DECL["cp"].idempotent
    weather = DECL["get_outside_temperature_from_weather_com"]
    assert not weather.is_write
    assert sum(e["successful"] for e in weather.evidence.values()) == 0
    assert sum(e["calls"] for e in weather.evidence.values()) > 0


def test_cd_into_a_named_child_is_idempotent_cd_parent_is_not():
    from pytest_careful.data import dataset
    from pytest_careful.execution.executor import Simulators
    from pytest_careful.execution.snapshot import Snapshot, diff

    conversation = dataset.get("multi_turn_base_0")
    sim = Simulators(conversation.involved_classes, conversation.initial_config, False)

    def changes(call: str) -> int:
        before = Snapshot.capture(sim.instances)
        sim.execute(call)
        return len(diff(before, Snapshot.capture(sim.instances)))

    assert [changes("cd(folder='document')"), changes("cd(folder='document')")] == [1, 0]
    sim.execute("mkdir(dir_name='inner')")
    sim.execute("cd(folder='inner')")
    assert [changes("cd(folder='..')"), changes("cd(folder='..')")] == [1, 1]


def test_annotator_sets_follow_the_seed():
    annotators = DECL.annotators
    assert {a: len(s) for a, s in annotators.items()} == {"A1": 16, "A2": 16, "A3": 17, "A4": 21}
    assert len(DECL.boundary("majority")) == 17
    union = frozenset().union(*annotators.values())
    assert union == DECL.boundary("final") and len(union) == 24
    assert DECL.boundary("final") - DECL.boundary("majority") == {
        "rmdir",
        "mv",
        "unfollow_user",
        "remove_stock_from_watchlist",
        "pressBrakePedal",
        "releaseBrakePedal",
        "activateParkingBrake",
    }
    # Raw agreement on the 49 inferred writes, as the seed reports it.
    writes = {n for n, d in DECL.functions.items() if d.is_write}
    agree = lambda a, b: sum((f in annotators[a]) == (f in annotators[b]) for f in writes)  # noqa: E731
    assert [agree("A1", "A2"), agree("A1", "A3"), agree("A2", "A3")] == [45, 46, 48]
    assert [agree("A4", "A1"), agree("A4", "A2"), agree("A4", "A3")] == [43, 39, 40]


def test_every_destructive_function_has_a_reason_and_is_declared():
    for name, reason in DECL.boundary_reasons.items():
        assert name in DECL and reason and DECL[name].destructive


def test_consequence_signals_propose_the_seeds_candidates():
    by_signal = lambda s: {n for n, d in DECL.functions.items() if s in d.signals}  # noqa: E731
    assert by_signal("entries_removed") >= {
        "rm",
        "rmdir",
        "mv",
        "delete_message",
        "remove_stock_from_watchlist",
        "cancel_booking",
    }
    assert by_signal("balance_changed") == {
        "fund_account",
        "withdraw_funds",
        "book_flight",
        "purchase_insurance",
        "cancel_booking",
    }
    assert by_signal("entry_added_for_others") == {"send_message", "post_tweet", "comment", "mention", "retweet"}


def test_reference_statistics_for_base():
    base = declare.reference_stats(DECL)[0]
    assert base["category"] == "multi_turn_base"
    assert (base["calls"], base["destructive"], base["write"], base["read"]) == (1142, 342, 268, 532)
    assert (base["turns"], base["turns_destructive"], base["turns_write"], base["turns_no_call"]) == (734, 322, 432, 3)


def test_export_mcp_is_the_documented_contract():
    out = subprocess.run(
        [sys.executable, "-m", "pytest_careful.cli.declare", "--export-mcp"], capture_output=True, text=True, check=True
    ).stdout
    exported = json.loads(out)
    assert len(exported) == 128
    assert all(set(v) == {"readOnlyHint", "destructiveHint", "idempotentHint"} for v in exported.values())
    assert exported["rm"] == {"readOnlyHint": False, "destructiveHint": True, "idempotentHint": True}
    assert exported["ls"] == {"readOnlyHint": True, "destructiveHint": False, "idempotentHint": True}
    assert exported["post_tweet"]["idempotentHint"] is False
    # inferred read, human-labelled destructive: not read-only
    assert exported["contact_customer_support"]["readOnlyHint"] is False


def test_committed_declarations_are_not_stale():
    sources = declare.read_sources(declarations.DECLARATIONS_DIR)
    files = declare.regenerate(declarations.DECLARATIONS_DIR, sources)
    for name, text in files.items():
        committed = (declarations.DECLARATIONS_DIR / name).read_text(encoding="utf-8")
        assert committed == text, f"{name} is stale: run `careful-declare`"


def test_the_fast_yaml_loader_reads_what_the_safe_loader_reads():
    import yaml

    from pytest_careful.effects import declarations

    files = sorted(declarations.DECLARATIONS_DIR.glob("*.yaml"))
    assert len(files) >= 9
    for path in files:
        text = path.read_text(encoding="utf-8")
        assert declarations.safe_load(text) == yaml.safe_load(text), path
