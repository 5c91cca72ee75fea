"""Snapshots, diffs and evidence of file trees cost O(distinct nodes), not O(paths) (issue 12).

``cp`` copies a folder's contents shallowly, so ``n`` rounds of ``cp d c; mv c d`` make
``2**n`` paths through ``n + 1`` folders, and ``mkdir`` + ``cd`` nest folders thousands
deep. The work of every walk is counted in ``limits.Meter.steps``; these tests require it
to grow linearly with the number of rounds, and everything to agree with what bfcl-eval's
own ``==`` (which BFCL's checker uses) and the plain recursive walks say where those can run.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import hostile_payloads as payloads
import pytest

from pytest_careful.data import dataset
from pytest_careful.evaluation.replay import new_simulators
from pytest_careful.execution import dag, limits, snapshot
from pytest_careful.execution.snapshot import Snapshot
from pytest_careful.scoring import evidence

UNLIMITED = limits.Limits(max_calls=10**9, max_seconds=10**6, max_memory_mb=10**6)


def _simulators(calls: list[str]) -> Any:
    sim = new_simulators(dataset.get(payloads.FILE_SYSTEM_CONVERSATION), "careful")
    for call in calls:
        sim.execute(call)
    return sim


def _steps(work: Callable[[], Any]) -> int:
    with limits.metered(UNLIMITED) as meter:
        work()
    return meter.steps


def _everything(before: Snapshot, after: Snapshot) -> None:
    """What scoring does with two snapshots: diff, evidence of each change, BFCL's comparison."""
    for change in snapshot.diff(before, after):
        evidence.format_change(change.to_json())
    snapshot.states_equal_public(after, before, "GorillaFileSystem")
    evidence.shorten(evidence.plain_data(after.value("GorillaFileSystem", "root")))


def _dag_snapshots(rounds: int) -> tuple[Snapshot, Snapshot]:
    calls = payloads.exponential(rounds)
    sim = _simulators(calls)
    before = Snapshot.capture(sim.instances)
    sim.execute("cd(folder='d')")
    sim.execute("echo(content='changed below every path', file_name='leaf.txt')")
    return before, Snapshot.capture(sim.instances)


def _state_size(rounds: int) -> int:
    """Distinct folders and files plus their entries: what the state holds in memory."""
    root = _simulators(payloads.exponential(rounds)).instances["GorillaFileSystem"].root
    return len(dag.flatten(root).rows) + sum(len(row[3]) for row in dag.flatten(root).rows if row[0] == "d")


def test_exponential_paths_cost_work_proportional_to_the_state() -> None:
    # Round i adds a folder holding i + 1 entries: the state grows as rounds**2, the paths
    # as 2**rounds (2**80 at 80 rounds). The work follows the state.
    for rounds in (10, 20, 40, 80):
        before, after = _dag_snapshots(rounds)
        work = _steps(lambda: _everything(before, after))
        assert work < 8 * _state_size(rounds) + 500, rounds
    assert _state_size(80) < 4.2 * _state_size(40)


def test_capture_of_a_dag_is_as_large_as_its_state() -> None:
    sizes = {
        n: len(Snapshot.capture(_simulators(payloads.exponential(n)).instances).classes["GorillaFileSystem"].public)
        for n in (20, 40)
    }
    assert sizes[40] < 4.2 * sizes[20] < 40_000


def test_a_change_below_shared_folders_is_reported_once() -> None:
    before, after = _dag_snapshots(30)
    changes = snapshot.diff(before, after)
    contents = [c for c in changes if c.path[-1] == "<file>"]
    # One file object, reachable through 2**30 paths: one change, at the first path.
    assert len(contents) == 1
    assert contents[0].before == "x" and contents[0].after == "changed below every path"


@pytest.mark.parametrize("depth", [400, 3_000])
def test_deep_chains_snapshot_diff_and_render_without_recursion_errors(depth: int) -> None:
    sim = _simulators(payloads.deep_chain(depth))
    before = Snapshot.capture(sim.instances)
    sim.execute("touch(file_name='one_more.txt')")
    after = Snapshot.capture(sim.instances)
    changes = snapshot.diff(before, after)
    assert [c.path[-1] for c in changes] == ["one_more.txt"]
    assert len(changes[0].path) == depth + 3  # class, attribute, d0 ... d<depth-1>, the file
    _everything(before, after)
    root = after.value("GorillaFileSystem", "root")
    clipped = snapshot.clip_value(snapshot.normalise(root))
    assert isinstance(clipped, str) and clipped.endswith(" chars)")


def test_a_folder_inside_itself_becomes_a_cycle_marker() -> None:
    sim = _simulators(payloads.cycle())
    state = Snapshot.capture(sim.instances)
    normalised = snapshot.normalise(state.value("GorillaFileSystem", "root"))
    text = json.dumps(normalised)  # finite: the cycle is cut
    assert dag.CYCLE in text
    # find / du would recurse forever: refused before they run, as a failed call.
    for call in ("cd(folder='q')", "find()", "du()"):
        execution = sim.execute(call)
    assert execution.refused and "walk of more than" in execution.result


def test_find_on_shared_folders_is_refused_beyond_the_walk_bound() -> None:
    sim = _simulators(payloads.exponential(30))
    refused = sim.execute("find(path='d')")
    assert refused.refused and "100,000 entries" in refused.result
    small = _simulators(payloads.exponential(5)).execute("find(path='d')")
    assert not small.refused and len(json.loads(small.result)["matches"]) == 2**6 - 1


# --- the walks agree with the plain recursive ones wherever those can run -----------------


def _random_tree(rng: random.Random, depth: int = 0) -> Any:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice(["a", "", 1, True, 1.0, None, 2.5, float("inf"), [1, "x"], {"s"}, ("t", 1), "é\n\"'"])
    if roll < 0.45:
        return [_random_tree(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {
        rng.choice(["k", "n", "é", "1", 2, None, True, 1.5]): _random_tree(rng, depth + 1)
        for _ in range(rng.randrange(5))
    }


def _shared(rng: random.Random, value: Any) -> Any:
    """The same value with some sub-trees replaced by one shared object."""
    pool: list[Any] = []

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {k: walk(v) for k, v in node.items()}
        elif isinstance(node, list):
            out = [walk(v) for v in node]
        else:
            return node
        for candidate in pool:
            if candidate == out and rng.random() < 0.7:
                return candidate
        pool.append(out)
        return out

    return walk(value)


def _old_diff(path: tuple[str, ...], a: Any, b: Any) -> list[tuple[tuple[str, ...], Any, Any]]:
    if a == b:
        return []
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for key in list(a) + [k for k in b if k not in a]:
            out += _old_diff(path + (str(key),), a.get(key, "<absent>"), b.get(key, "<absent>"))
        return out
    return [(path, a, b)]


@pytest.mark.parametrize("seed", range(40))
def test_walks_agree_with_python_on_random_values(seed: int) -> None:
    rng = random.Random(seed)
    a = _random_tree(rng)
    b = _random_tree(rng) if rng.random() < 0.5 else json.loads(json.dumps(a, default=repr)) if seed % 3 else a
    shared_a = _shared(rng, a)
    assert dag.equal(shared_a, b) == (a == b) == dag.equal(a, b)
    assert dag.changed_leaves(a, b, "<absent>") == _old_diff((), a, b)
    for value in (a, shared_a, b):
        assert dag.text_size(value) == len(repr(value))
        assert dag.text_prefix(value, 37) == repr(value)[:37]
        text = json.dumps(value, default=repr, ensure_ascii=False)
        if not any(isinstance(k, (tuple, frozenset)) for k in _keys(value)):
            assert dag.text_size(value, "json") == len(text)
            assert dag.text_prefix(value, 53, "json") == text[:53]


def _keys(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return list(value) + [k for v in value.values() for k in _keys(v)]
    if isinstance(value, list):
        return [k for v in value for k in _keys(v)]
    return []


@pytest.mark.parametrize("seed", range(20))
def test_bfcl_comparison_and_normalised_equality_agree_on_shared_trees(seed: int) -> None:
    """On generated file-system states with sharing, small enough for bfcl-eval's own ``==``."""
    rng = random.Random(seed)
    extra = [
        "cd(folder='d')",
        "cd(folder='..')",
        "touch(file_name='t')",
        "echo(content='y', file_name='leaf.txt')",
        "mkdir(dir_name='c0')",
        "rm(file_name='c1')",
        "cp(source='leaf.txt', destination='copy.txt')",
    ]
    calls = payloads.exponential(rng.randrange(1, 7)) + [rng.choice(extra) for _ in range(rng.randrange(4))]
    other = list(calls) if seed % 2 else calls[:-1] + [rng.choice(extra)] if seed % 4 else calls[:5] + calls[7:]
    states = [_simulators(c).instances["GorillaFileSystem"].root for c in (calls, other)]
    bfcl_equal = states[0] == states[1]
    captured = [Snapshot.capture({"GorillaFileSystem": _Holder(root)}) for root in states]
    ours, _ = snapshot.states_equal_public(captured[0], captured[1], "GorillaFileSystem")
    assert ours == bfcl_equal
    assert dag.equal(snapshot.normalise(states[0]), snapshot.normalise(states[1])) == bfcl_equal


class _Holder:
    def __init__(self, root: Any) -> None:
        self.root = root


def test_flat_tree_round_trip_keeps_sharing_and_parents() -> None:
    sim = _simulators(payloads.exponential(6) + payloads.deep_chain(50))
    root = sim.instances["GorillaFileSystem"].root
    rebuilt = dag.rebuild(dag.flatten(root).rows)
    assert rebuilt == root
    shared = rebuilt.contents["d"].contents["c5"].contents["c4"]
    assert shared is rebuilt.contents["d"].contents["c4"]
    deepest = rebuilt
    while any(
        type(c) is dag.directory_class() and k.startswith("d") and k[1:].isdigit() for k, c in deepest.contents.items()
    ):
        deepest = next(c for k, c in deepest.contents.items() if k.startswith("d") and k[1:].isdigit())
    assert deepest.parent.contents[deepest.name] is deepest


def test_verdicts_on_shared_folders_match_bfcl() -> None:
    """bfcl-eval's own checker, live, on generated shared-folder states small enough for it."""
    from test_parity import _compare

    rng = random.Random(12)
    conversations = [c for c in dataset.load_category("multi_turn_base") if "GorillaFileSystem" in c.involved_classes][
        :12
    ]
    items = []
    for conversation in conversations:
        for variant in range(3):
            calls = payloads.exponential(rng.randrange(1, 9), rng.choice(["d", "shared"]))
            folder = calls[0].split("'")[1]
            if variant == 1:  # undone: the reference's state again, BFCL may pass it
                calls.append(f"rm(file_name='{folder}')")
            elif variant == 2:  # a write through one path, seen through all
                calls += [
                    f"cd(folder='{folder}')",
                    "echo(content='z', file_name='leaf.txt')",
                    "cd(folder='..')",
                    f"find(path='{folder}')",
                    "du()",
                ]
            items.append((conversation, f"shared-{variant}", payloads.as_run(conversation, calls)))
    mismatches, tally = _compare(items)
    assert not mismatches, mismatches[:5]
    assert tally["valid"] and tally["multi_turn:instance_state_mismatch"], tally
