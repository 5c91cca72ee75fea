"""Inferring effect declarations by executing the functions and diffing state.

Observations come from three sources (the seed's "Effect declarations by state
diff"): the 800 reference trajectories, logged runs, and synthetic probes (each
function called from up to 40 sampled states of its class with argument sets
from reference calls, or synthesised from the doc's parameter types, until 20
calls succeed). Every successful call that changed state is probed for
idempotence: the same call is applied again to a copy of the resulting state.

Everything is seeded and sorted, so two runs write byte-identical files.
"""

from __future__ import annotations

import ast
import json
import pickle
import random
import re
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import cast

from ..common import bfcl as _bfcl
from ..common.text import contains_words
from ..data import dataset
from ..data.dataset import Conversation
from ..evaluation.replay import OK, call_status
from ..execution.executor import Simulators
from ..execution.snapshot import Change, ClassState, Snapshot, capture_class, diff, normalise

SOURCES = ("reference", "logged", "synthetic")
MAX_STATES_PER_CLASS = 40
TARGET_SUCCESSES = 20
ARGSETS_PER_STATE = 3
REACHED_PER_FUNCTION = 5
SEED = "careful-declare-v1"

#: Attributes whose added entries reach other people (inbox, timeline, thread).
SOCIAL_ATTRIBUTES = ("inbox", "tweets", "comments", "retweets")
SIGNAL_REMOVED = "entries_removed"
SIGNAL_BALANCE = "balance_changed"
SIGNAL_SOCIAL = "entry_added_for_others"


@dataclass
class Evidence:
    calls: int = 0
    successful: int = 0
    changed: int = 0
    probes: int = 0
    probes_unchanged: int = 0

    def to_json(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class FunctionRecord:
    """Everything observed about one function."""

    class_name: str
    name: str
    evidence: dict[str, Evidence] = field(default_factory=lambda: {s: Evidence() for s in SOURCES})
    footprint: set[str] = field(default_factory=set)
    changed_public: bool = False
    signals: set[str] = field(default_factory=set)
    non_idempotent_examples: set[str] = field(default_factory=set)
    #: Public attributes of its class whose values its successful results showed (``revealed``).
    reveals: set[str] = field(default_factory=set)

    @property
    def is_write(self) -> bool:
        return any(e.changed for e in self.evidence.values())

    @property
    def idempotent(self) -> bool:
        return all(e.probes == e.probes_unchanged for e in self.evidence.values())


class Observer:
    """Collects observations, one executed call at a time."""

    def __init__(self) -> None:
        self.functions: dict[str, FunctionRecord] = {}
        for class_name in _bfcl.SIMULATOR_CLASSES:
            for doc in _docs(class_name):
                self.functions[doc["name"]] = FunctionRecord(class_name, doc["name"])
        self.unknown_calls = 0

    def observe(self, source: str, sim: Simulators, call: str) -> bool:
        """Execute ``call`` on ``sim`` (mutating it) and record what it did."""
        execution_name = call_name(call)
        record = self.functions.get(execution_name or "")
        owner = sim.owner(execution_name or "")
        if record is None or owner is None:
            sim.execute(call)
            self.unknown_calls += record is None
            return False
        before = Snapshot({owner: capture_class(sim.instances[owner])})
        execution = sim.execute(call)
        touched = execution.touched_classes | {owner}
        after = Snapshot({c: capture_class(sim.instances[c]) for c in touched})
        before = Snapshot({c: before.classes.get(c) or capture_class(sim.instances[c]) for c in touched})
        evidence = record.evidence[source]
        evidence.calls += 1
        if call_status(execution) != OK:
            return False
        evidence.successful += 1
        changes = diff(before, after)
        if not changes:
            record.reveals |= revealed(before.classes[owner], execution.result)
            return True
        evidence.changed += 1
        self._record_changes(record, changes)
        self._probe_idempotence(record, evidence, sim, owner, call)
        return True

    def _record_changes(self, record: FunctionRecord, changes: list[Change]) -> None:
        for change in changes:
            record.footprint.add(generalise(change))
            record.changed_public |= not change.hidden
            record.signals |= signals(change)

    def _probe_idempotence(
        self, record: FunctionRecord, evidence: Evidence, sim: Simulators, owner: str, call: str
    ) -> None:
        clone = pickle.loads(pickle.dumps(sim.instances[owner], pickle.HIGHEST_PROTOCOL))
        probe_sim = Simulators.around({owner: clone})
        before = Snapshot({owner: capture_class(clone)})
        probe_sim.execute(call)
        evidence.probes += 1
        if diff(before, Snapshot({owner: capture_class(clone)})):
            record.non_idempotent_examples.add(call)
        else:
            evidence.probes_unchanged += 1


def revealed(state: ClassState, result: str) -> set[str]:
    """The public attributes of ``state`` that a result shows: one of its leaves (a string of
    two characters or more, a number other than 0 and 1, a key) is a leaf of the result's
    JSON, or a string leaf stands in the result's text as whole words."""
    shown = _leaves(_json_or_text(result))
    texts = [leaf for leaf in shown if isinstance(leaf, str)]
    found = set()
    for attribute, value in state.public_values.items():
        if any(_shows(leaf, shown, texts) for leaf in _leaves(normalise(value))):
            found.add(attribute)
    return found


def _json_or_text(result: str) -> object:
    try:
        return json.loads(result)
    except ValueError:
        return result


def _leaves(value: object, limit: int = 20_000) -> set[object]:
    """A value's leaves and keys (strings, numbers), at most ``limit`` of them."""
    found: set[object] = set()
    stack = [value]
    while stack and len(found) < limit:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
            stack.extend(item.keys())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        elif isinstance(item, (str, int, float)) and not isinstance(item, bool):
            found.add(item)
    return found


def _shows(leaf: object, shown: set[object], texts: list[str]) -> bool:
    if isinstance(leaf, str):
        return len(leaf) >= 2 and (leaf in shown or any(contains_words(text, leaf) for text in texts))
    return leaf not in (0, 1) and leaf in shown


def call_name(call: str) -> str | None:
    try:
        node = ast.parse(call, mode="eval").body
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None
    return node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None


def generalise(change: Change) -> str:
    """``tweets.3.content`` → ``tweets.<id>``; file-tree paths → ``root.<path>``."""
    attribute, rest = change.path[1], change.path[2:]
    if attribute == "root":
        return "root.<path>"
    if not rest:
        return attribute
    key = rest[0]
    if key.isdigit() or change.kind != "changed" or len(rest) > 1 and _looks_like_entity(key):
        return f"{attribute}.<id>"
    return f"{attribute}.{key}"


def _looks_like_entity(key: str) -> bool:
    return bool(re.fullmatch(r"[A-Z0-9_\-]+|\d+|[a-z]+_\d+", key))


def signals(change: Change) -> set[str]:
    """The seed's three consequence signals, read off one change."""
    found: set[str] = set()
    before, after = change.before, change.after
    if change.kind == "removed" or (isinstance(before, list) and isinstance(after, list) and len(after) < len(before)):
        found.add(SIGNAL_REMOVED)
    if any("balance" in part for part in change.path[1:]):
        found.add(SIGNAL_BALANCE)
    grew = change.kind == "added" or (isinstance(before, list) and isinstance(after, list) and len(after) > len(before))
    if grew and change.attribute in SOCIAL_ATTRIBUTES:
        found.add(SIGNAL_SOCIAL)
    return found


# --- the three sources ------------------------------------------------------------


def observe_references(
    observer: Observer,
    conversations: Sequence[Conversation],
    keep_states: set[tuple[str, int]],
    progress: Callable[[], None],
) -> dict[tuple[str, int], dict[str, bytes]]:
    """Replay every reference; keep pickled instances at the sampled (id, turn) points."""
    kept: dict[tuple[str, int], dict[str, bytes]] = {}
    for conversation in conversations:
        sim = Simulators(conversation.involved_classes, conversation.initial_config, conversation.long_context)
        _keep(kept, keep_states, conversation.id, -1, sim)
        for turn, calls in enumerate(conversation.ground_truth):
            for call in calls:
                observer.observe("reference", sim, call)
            _keep(kept, keep_states, conversation.id, turn, sim)
        progress()
    return kept


def _keep(kept: dict, wanted: set[tuple[str, int]], conversation_id: str, turn: int, sim: Simulators) -> None:
    if (conversation_id, turn) in wanted:
        kept[(conversation_id, turn)] = {c: pickle.dumps(i, pickle.HIGHEST_PROTOCOL) for c, i in sim.instances.items()}


def observe_logged(observer: Observer, decoded: Iterable[tuple[Conversation, list[list[list[str]]]]]) -> None:
    for conversation, turns in decoded:
        sim = Simulators(conversation.involved_classes, conversation.initial_config, conversation.long_context)
        for steps in turns:
            for step in steps:
                for call in step:
                    observer.observe("logged", sim, call)


def sample_states(conversations: Sequence[Conversation]) -> dict[str, list[tuple[str, int]]]:
    """Up to 40 (conversation, turn) points per class; turn -1 is the initial state."""
    rng = random.Random(SEED + ":states")
    candidates: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for conversation in conversations:
        for class_name in conversation.involved_classes:
            for turn in range(-1, conversation.n_turns):
                candidates[class_name].append((conversation.id, turn))
    sampled: dict[str, list[tuple[str, int]]] = {}
    for class_name in sorted(candidates):
        points = candidates[class_name]
        initial = [p for p in points if p[1] == -1][:1]
        rest = [p for p in points if p not in initial]
        sampled[class_name] = initial + rng.sample(rest, min(len(rest), MAX_STATES_PER_CLASS - len(initial)))
    return sampled


def reference_argsets(conversations: Sequence[Conversation]) -> dict[str, list[str]]:
    """Distinct reference call strings per function, sorted."""
    found: dict[str, set[str]] = defaultdict(set)
    for conversation in conversations:
        for calls in conversation.ground_truth:
            for call in calls:
                name = call_name(call)
                if name:
                    found[name].add(call)
    return {name: sorted(calls) for name, calls in found.items()}


def observe_synthetic(
    observer: Observer,
    states: dict[str, list[tuple[str, int]]],
    kept: dict[tuple[str, int], dict[str, bytes]],
    argsets: dict[str, list[str]],
    progress: Callable[[], None],
) -> None:
    """Probe every function from sampled states, then from states the probes reached.

    The second pass exists because reference states are all "normal" ones: no
    logged-out trading account, for instance, so ``trading_login`` would never
    be seen to change anything.
    """
    for class_name in _bfcl.SIMULATOR_CLASSES:
        points = [kept[p][class_name] for p in states.get(class_name, []) if p in kept]
        reached: dict[str, list[bytes]] = {}
        for doc in _docs(class_name):
            reached[doc["name"]] = []
            _probe_function(observer, class_name, doc, points, argsets.get(doc["name"], []), reached[doc["name"]])
            progress()
        # A few states from every write, so that each kind of state change is represented.
        pool = [blob for blobs in reached.values() for blob in blobs]
        rng = random.Random(f"{SEED}:{class_name}:reached")
        pool = rng.sample(pool, min(len(pool), MAX_STATES_PER_CLASS))
        for doc in _docs(class_name):
            _probe_function(observer, class_name, doc, pool, argsets.get(doc["name"], []), None)


def _probe_function(
    observer: Observer,
    class_name: str,
    doc: dataset.FunctionDoc,
    points: list[bytes],
    known: list[str],
    reached: list[bytes] | None,
) -> None:
    rng = random.Random(f"{SEED}:{class_name}:{doc['name']}:{reached is None}")
    successes = 0
    for index, blob in enumerate(points):
        for attempt in range(ARGSETS_PER_STATE):
            instance = pickle.loads(blob)
            # Reference argument sets first; one synthesised set per state as well,
            # because reference arguments alone never leave the paths the
            # references walk (e.g. cp of a directory, which is not idempotent).
            use_known = known and attempt < ARGSETS_PER_STATE - 1
            call = (
                known[(index * ARGSETS_PER_STATE + attempt) % len(known)]
                if use_known
                else synthesise_call(doc, instance, rng)
            )
            before = pickle.dumps(instance, pickle.HIGHEST_PROTOCOL)
            ok = observer.observe("synthetic", Simulators.around({class_name: instance}), call)
            successes += ok
            if ok and reached is not None and len(reached) < REACHED_PER_FUNCTION:
                after = pickle.dumps(instance, pickle.HIGHEST_PROTOCOL)
                if after != before:
                    reached.append(after)
            if successes >= TARGET_SUCCESSES:
                return


def synthesise_call(doc: dataset.FunctionDoc, instance: object, rng: random.Random) -> str:
    """A call with arguments of the documented types, values drawn from the state."""
    strings, numbers = harvest(instance)
    parameters = doc["parameters"].get("properties", {})
    required = set(doc["parameters"].get("required", []))
    arguments = {}
    for name in sorted(parameters):
        if name in required or rng.random() < 0.3:
            arguments[name] = _value(parameters[name], strings, numbers, rng)
    return f"{doc['name']}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def _value(spec: Mapping[str, object], strings: list[str], numbers: list[int], rng: random.Random) -> object:
    kind = spec.get("type")
    if "enum" in spec:
        return rng.choice(cast("list[object]", spec["enum"]))  # JSON schema: a list of values
    if kind == "integer":
        return rng.choice(numbers or [1, 2, 10])
    if kind == "float":
        return float(rng.choice(numbers or [1, 2, 10]))
    if kind == "boolean":
        return rng.choice([True, False])
    if kind == "array":
        return [rng.choice(strings)] if strings else []
    if kind == "dict":
        return {}
    # Mostly a value already in the state; sometimes a fresh one, so that
    # creating calls (a new name, a new id) are tried too.
    return rng.choice(strings) if strings and rng.random() < 0.8 else "careful_probe"


def harvest(instance: object, limit: int = 40) -> tuple[list[str], list[int]]:
    """Strings and small integers found in an instance's state, sorted."""
    strings: set[str] = set()
    numbers: set[int] = set()
    current = getattr(instance, "_current_dir", None)
    if current is not None:  # a file system's useful names are the current directory's
        strings |= set(current.contents)

    def walk(value: object, depth: int) -> None:
        if depth > 6 or len(strings) > 400:
            return
        if isinstance(value, dict):
            for key, item in value.items():
                walk(key, depth + 1)
                walk(item, depth + 1)
        elif isinstance(value, (list, tuple)):
            for item in value[:50]:
                walk(item, depth + 1)
        elif isinstance(value, str) and 0 < len(value) <= 40:
            strings.add(value)
        elif type(value) is int and abs(value) < 10**7:
            numbers.add(value)

    for attr, value in sorted(vars(instance).items()):
        if attr not in ("root", "_random", "_api_description"):
            walk(value, 0)
    return sorted(strings)[:limit] if current is None else sorted(strings)[:limit], sorted(numbers)[:limit]


def _docs(class_name: str) -> list[dataset.FunctionDoc]:
    return list(dataset.func_docs(class_name))


def run(
    logged: Iterable[tuple[Conversation, list[list[list[str]]]]] = (),
    progress: Callable[[str, int], Callable[[], None]] | None = None,
) -> Observer:
    """All three sources, in a fixed order."""
    conversations = dataset.load()
    tick = progress or (lambda label, total: lambda: None)
    observer = Observer()
    states = sample_states(conversations)
    wanted = {p for points in states.values() for p in points}
    kept = observe_references(observer, conversations, wanted, tick("references", len(conversations)))
    observe_logged(observer, logged)
    observe_synthetic(observer, states, kept, reference_argsets(conversations), tick("probes", len(observer.functions)))
    return observer
