"""Conversations are isolated: bfcl-eval's process-wide state is pristine for each.

The state is enumerated here independently of ``isolation``'s own walk (with
``gc.get_referents`` from every global, class attribute and default of the
simulator modules), and every piece must be captured; the functions' bytecode
must reach no state the restore does not know about. Then hostile conversations
(generated: defaults used and extended, globals passed through nested calls into
methods that store and mutate their arguments, every captured object polluted
directly) run before victims, and every victim's reference replay (records and
states) and verdict must be those of a fresh process.
"""

from __future__ import annotations

import dis
import gc
import hashlib
import json
import random
import subprocess
import sys
import textwrap
import types
from pathlib import Path
from typing import Any

import pytest

from pytest_careful.common import bfcl as _bfcl
from pytest_careful.data import dataset
from pytest_careful.evaluation.replay import Replay, new_simulators, reference, replay
from pytest_careful.evaluation.verdict import check
from pytest_careful.execution import isolation
from pytest_careful.execution.executor import Simulators

ROOT = Path(__file__).resolve().parents[2]
_LEAVES = isolation.IMMUTABLE_LEAVES


# --- the state, enumerated independently ------------------------------------------


def _roots() -> list[tuple[str, Any]]:
    """Every global, class attribute, default and closure cell of the simulator modules."""
    roots: list[tuple[str, Any]] = []
    for module in isolation.simulator_modules():
        for name, value in vars(module).items():
            if name.startswith("__"):
                continue  # import machinery; no function reads it (test_functions_reach_only_known_state)
            roots.append((f"{module.__name__}.{name}", value))
            if isinstance(value, type) and value.__module__ == module.__name__:
                for attribute, member in vars(value).items():
                    if attribute != "__slotnames__":  # copyreg's cache, set when pickle first sees the class
                        roots.append((f"{value.__name__}.{attribute}", member))
    functions = [f for _, v in roots for f in isolation.functions_in(v)] + [
        v for _, v in roots if isinstance(v, types.FunctionType)
    ]
    for function in functions:
        if function.__module__.startswith(isolation.PACKAGE):
            roots += [
                (f"{function.__qualname__}.__defaults__", function.__defaults__),
                (f"{function.__qualname__}.__kwdefaults__", function.__kwdefaults__),
                (f"{function.__qualname__}.__dict__", function.__dict__),
            ]
            roots += [(f"{function.__qualname__}.<cell>", c.cell_contents) for c in function.__closure__ or ()]
    return roots


def _mutable_objects() -> dict[int, tuple[str, Any]]:
    """Every object reachable from the roots that could change in place."""
    found: dict[int, tuple[str, Any]] = {}
    package = isolation.PACKAGE
    stack, seen = _roots(), set()
    while stack:
        path, obj = stack.pop()
        if id(obj) in seen or isinstance(
            obj,
            (
                types.ModuleType,
                types.FunctionType,
                type,
                property,
                staticmethod,
                classmethod,
                types.BuiltinFunctionType,
                types.GetSetDescriptorType,
                types.MemberDescriptorType,
            ),
        ):
            continue
        seen.add(id(obj))
        if isinstance(obj, _LEAVES) or type(obj).__module__ in ("typing", "datetime", "decimal"):
            continue
        if type(obj) not in (tuple, frozenset):
            found[id(obj)] = (path, obj)
        if type(obj).__module__.startswith(package):
            stack.append((path + ".__dict__", vars(obj)))
        else:
            stack.extend((f"{path}/{i}", child) for i, child in enumerate(gc.get_referents(obj)))
    return found


def test_every_mutable_object_is_captured():
    captured = set(isolation.PRISTINE.containers)
    objects = _mutable_objects()
    missing = sorted(
        path
        for key, (path, obj) in objects.items()
        if key not in captured
        and not (type(obj).__module__.startswith(isolation.PACKAGE) and id(vars(obj)) in captured)
        and not (path.endswith(".__dict__") and not obj)
    )  # functions' empty attribute dicts
    assert not missing, missing[:10]
    assert not isolation.PRISTINE.unknown
    labels = set(isolation.PRISTINE.labels.values())
    assert any(label.endswith("TwitterAPI.post_tweet.__defaults__[1]") for label in labels)
    assert any(label.endswith("long_context.LONG_WEATHER_EXTENSION") for label in labels)
    assert len(objects) > 1000


def _canon(obj: Any, seen: frozenset[int] = frozenset()) -> Any:
    if id(obj) in seen:
        return "<cycle>"
    seen = seen | {id(obj)}
    if type(obj) in (set, frozenset):
        return ["set", sorted((_canon(x, seen) for x in obj), key=repr)]
    if type(obj) in (list, tuple):
        return [type(obj).__name__, [_canon(x, seen) for x in obj]]
    if type(obj) is dict:
        return ["dict", [[_canon(k, seen), _canon(v, seen)] for k, v in obj.items()]]
    if type(obj).__module__.startswith(isolation.PACKAGE):
        return [type(obj).__name__, _canon({k: v for k, v in vars(obj).items() if k != "_last_modified"}, seen)]
    return [type(obj).__name__, repr(obj)]


def state_fingerprint() -> str:
    """The captured objects' contents, canonical across processes."""
    items = sorted(
        (isolation.PRISTINE.labels[key], repr(_canon(obj))) for key, (obj, _) in isolation.PRISTINE.containers.items()
    )
    return hashlib.sha256(repr(items).encode()).hexdigest()


def _functions() -> list[types.FunctionType]:
    found = []
    for module in isolation.simulator_modules():
        for value in vars(module).values():
            if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                found.append(value)
            if isinstance(value, type) and value.__module__ == module.__name__:
                found.extend(f for _, f in isolation.functions_of(value))
    return found


def _attributes_loaded_from(code: types.CodeType, global_name: str) -> set[str]:
    """Attributes read right after loading ``global_name`` (nested code included)."""
    instructions = list(dis.get_instructions(code))
    used = {
        after.argval
        for before, after in zip(instructions, instructions[1:])
        if before.opname == "LOAD_GLOBAL" and before.argval == global_name
    }
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            used |= _attributes_loaded_from(const, global_name)
    return used


#: What the simulators use from other modules, and why it holds no state of a conversation.
FOREIGN = {
    "math": "pure functions",
    "datetime": "immutable values; now() is wall-clock time, left out of snapshots",
    "copy": "deepcopy: pure",
    "typing": "annotations",
    "subprocess": "imported, never called",
    "random": "only random.Random: each instance seeds its own generator, pickled with it",
    "decimal": "MathAPI.square_root sets the precision; executor runs each MathAPI call at a fresh process's",
    "mpmath": "MathAPI.logarithm sets the precision; executor runs each MathAPI call at a fresh process's",
    "builtins": "built-in functions",
}


def test_functions_reach_only_known_state():
    modules = {m.__name__ for m in isolation.simulator_modules()}
    for function in _functions():
        names, ops, _ = isolation.code_names(function.__code__)
        assert not ops & {"STORE_GLOBAL", "DELETE_GLOBAL"}, function.__qualname__
        assert not names & isolation.REBINDING_NAMES, function.__qualname__
        assert not {n for n in names & set(function.__globals__) if n.startswith("__")}, function.__qualname__
        for name in names & set(function.__globals__):
            value = function.__globals__[name]
            origin = value.__name__ if isinstance(value, types.ModuleType) else getattr(value, "__module__", None)
            if origin is None or origin in modules or isinstance(value, (list, dict, set, tuple, str, int, float)):
                continue  # data of the simulator modules: captured
            top = origin.split(".")[0]
            assert top in FOREIGN or top == "bfcl_eval", (function.__qualname__, name, origin)
            if top == "random":  # never the global generator: only random.Random(seed)
                assert _attributes_loaded_from(function.__code__, name) <= {"Random"}, function.__qualname__
            if top in ("decimal", "mpmath"):
                assert function.__qualname__.startswith("MathAPI."), function.__qualname__
    # no class attribute is mutable shared state today, and no function has attributes
    assert all(not f.__dict__ for f in _functions())


def test_pristine_is_a_fresh_process():
    """What was captured at import equals bfcl-eval's modules in a process that ran nothing."""
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "tests" / "execution")!r})
        from test_isolation import state_fingerprint
        print(state_fingerprint())
    """)
    fresh = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    isolation.reset_all()
    assert state_fingerprint() == fresh.stdout.strip()


# --- hostile conversations ------------------------------------------------------------


def _literal(schema: dict[str, Any], rng: random.Random) -> Any:
    kind = schema.get("type")
    if kind == "integer":
        return rng.choice([0, 1, 2, 3, 10, -1, 10**6])
    if kind in ("float", "number"):
        return rng.choice([0.0, 1.5, -3.0, 1e9])
    if kind == "boolean":
        return rng.choice([True, False])
    if kind == "array":
        return [rng.choice(["@evil", "#evil", "x", 0])]
    if kind == "dict":
        return {"evil": "value", "status": "open"}
    if "enum" in schema:
        return rng.choice(schema["enum"])
    return rng.choice(["evil", "@evil", "#evil", "AAPL", "user1", "/", "."])


def hostile_calls(conversation: dataset.Conversation, seed: int, n: int = 60) -> list[str]:
    """Generated calls that use and extend defaults and pass results into methods that keep them.

    They start with the conversation's first ground-truth turn (its logins), use
    optional parameters' defaults, pass nested calls (whose results may be
    module globals) as arguments, and extend whatever lists earlier calls stored.
    """
    rng = random.Random(seed)
    docs = conversation.all_functions()
    calls = list(conversation.ground_truth[0]) + _logins(conversation)
    no_argument = [d["name"] for d in docs if not d["parameters"].get("required")]
    for _ in range(n):
        doc = rng.choice(docs)
        properties = doc["parameters"].get("properties", {})
        required = doc["parameters"].get("required", [])
        arguments = []
        for name, schema in properties.items():
            if name not in required and rng.random() < 0.7:
                continue  # the default is used
            if no_argument and rng.random() < 0.3:
                arguments.append(f"{name}={rng.choice(no_argument)}()")  # a result, maybe a global
            else:
                arguments.append(f"{name}={_literal(schema, rng)!r}")
        calls.append(f"{doc['name']}({','.join(arguments)})")
        if doc["name"] == "post_tweet" or rng.random() < 0.1:
            calls.append(f"mention(tweet_id={rng.randrange(12)},mentioned_usernames=['@evil{seed}'])")
    return calls


def _logins(conversation: dataset.Conversation) -> list[str]:
    """Log in with the scenario's own credentials, so that the writes run."""
    config = {
        k: v
        for scenario in conversation.initial_config.values()
        for k, v in scenario.items()
        if isinstance(v, (str, int))
    }
    calls = []
    for doc in conversation.all_functions():
        if "login" in doc["name"] or "authenticate" in doc["name"]:
            required = doc["parameters"].get("required", [])
            if all(name in config for name in required):
                calls.append(f"{doc['name']}({','.join(f'{n}={config[n]!r}' for n in required)})")
    return calls


def _run_hostile(conversation: dataset.Conversation, calls: list[str]) -> Simulators:
    sim = new_simulators(conversation, "hostile")
    for call in calls:
        sim.execute(call)
    return sim


def _state_bytes(snapshot: Any) -> bytes:
    # the bytes themselves: pickling the objects would depend on which ones are shared
    return b"".join(name.encode() + state.public + state.private for name, state in sorted(snapshot.classes.items()))


def _fingerprint(replayed: Replay) -> str:
    digest = hashlib.sha256(_state_bytes(replayed.initial_state))
    for turn in replayed.turns:
        digest.update(_state_bytes(turn.state_after))
        digest.update(json.dumps([r.to_json() for r in turn.calls], sort_keys=True, default=repr).encode())
    return digest.hexdigest()


def _reference_now(conversation: dataset.Conversation) -> Replay:
    """The reference replayed again, not from the per-process cache."""
    steps = [[[call] for call in turn] for turn in conversation.ground_truth]
    return replay(conversation, steps, model_name="careful_ground_truth")


def _fresh_process_fingerprints(ids: list[str]) -> dict[str, str]:
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {str(ROOT / "tests" / "execution")!r})
        from test_isolation import _fingerprint, _reference_now
        from pytest_careful.data import dataset
        print(json.dumps({{i: _fingerprint(_reference_now(dataset.get(i))) for i in {ids!r}}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _hosts() -> list[dataset.Conversation]:
    """One hostile host per class and context: its scenario has the logins the calls need."""
    hosts: dict[tuple[str, bool], dataset.Conversation] = {}
    for conversation in dataset.load():
        for class_name in conversation.involved_classes:
            hosts.setdefault((class_name, conversation.long_context), conversation)
    return list(hosts.values())


def _sample(k: int, seed: int = 12) -> list[dataset.Conversation]:
    conversations = dataset.load()
    victims = [
        c for c in conversations if any("post_tweet(" in x and "mentions" not in x for t in c.ground_truth for x in t)
    ][:8]
    rest = random.Random(seed).sample(conversations, k)
    return list({c.id: c for c in victims + rest}.values())


def _order_test(victims: list[dataset.Conversation], payloads_per_victim: int, seed: int) -> None:
    alone = _fresh_process_fingerprints([c.id for c in victims])
    hosts = _hosts()
    rng = random.Random(seed)
    polluted = 0
    for victim in victims:
        for _ in range(payloads_per_victim):
            host = rng.choice(hosts)
            _run_hostile(host, hostile_calls(host, rng.randrange(10**6)))
            polluted += bool(isolation.differences())
        replayed = _reference_now(victim)
        assert _fingerprint(replayed) == alone[victim.id], victim.id
        assert check(victim, replayed, reference(victim)).valid, victim.id
    assert polluted, "no hostile payload changed any process-wide state: the test would prove nothing"


def test_hostile_before_each_victim_sample():
    _order_test(_sample(40), payloads_per_victim=3, seed=1)


@pytest.mark.slow
def test_hostile_before_each_of_the_800_references():
    _order_test(dataset.load(), payloads_per_victim=1, seed=2)


def test_without_isolation_the_victims_change(monkeypatch):
    """The payloads are hostile indeed: with the restore switched off, a victim's reference changes."""
    victims = _sample(0)
    alone = _fresh_process_fingerprints([c.id for c in victims])
    twitter = next(h for h in _hosts() if "TwitterAPI" in h.involved_classes and not h.long_context)
    monkeypatch.setattr(isolation, "_put_back", lambda plan: None)
    try:
        _run_hostile(
            twitter,
            list(twitter.ground_truth[0])
            + _logins(twitter)
            + [
                "post_tweet(content='a')",
                "mention(tweet_id=0,mentioned_usernames=['@evil'])",
                *(f"mention(tweet_id={i},mentioned_usernames=['@evil'])" for i in range(12)),
            ],
        )
        changed = [v.id for v in victims if _fingerprint(_reference_now(v)) != alone[v.id]]
    finally:
        isolation.reset_all()
    assert changed


def test_every_captured_object_polluted_directly():
    """Each method's reach, polluted in every way: the next conversation still starts pristine."""
    for class_name in _bfcl.SIMULATOR_CLASSES:
        cls = _bfcl.simulator_class(class_name)
        for method in [n for n, _ in isolation.functions_of(cls)]:
            world = isolation.World()
            isolation.activate(world)
            world.touch(class_name, method)
            containers, bindings = isolation.EXPOSURE.of_method(class_name, method)
            for key in containers:
                obj = isolation.PRISTINE.containers[key][0]
                if type(obj) is dict:
                    obj["__evil__"] = ["evil"]
                elif type(obj) is set:
                    obj.add("evil")
                else:
                    obj.append("evil") if type(obj) is list else obj.extend(b"evil")
            for key in bindings:
                isolation.PRISTINE.bindings[key].put(("evil",))
            del world
            Simulators.around({})  # another conversation starts
            isolation.activate(isolation.World())
            assert not isolation.differences(), (class_name, method)


def test_pollution_of_anything_captured_is_undone_by_reset_all():
    for obj, _ in list(isolation.PRISTINE.containers.values())[::7]:
        obj.clear()
    assert isolation.differences()
    isolation.reset_all()
    assert not isolation.differences()


def test_shuffled_and_paired_orders_give_identical_verdicts():
    conversations = _sample(24, seed=5)
    hosts = _hosts()

    def run(order: list[dataset.Conversation], seed: int) -> dict[str, tuple[str, bool]]:
        rng = random.Random(seed)
        out = {}
        for conversation in order:
            host = rng.choice(hosts)
            _run_hostile(host, hostile_calls(host, rng.randrange(10**6), n=20))
            model = [[[call] for call in turn] for turn in conversation.ground_truth]
            model[0].insert(0, [hostile_calls(conversation, 0, n=1)[-1]])  # goes live at once
            replayed = replay(conversation, model, "model", prefix=reference(conversation))
            verdict = check(conversation, replayed, reference(conversation))
            out[conversation.id] = (_fingerprint(replayed), verdict.valid)
        return out

    first = run(conversations, 1)
    for seed in (2, 3):
        order = list(conversations)
        random.Random(seed).shuffle(order)
        assert run(order, seed) == first
    a, b = conversations[0], conversations[1]
    assert run([a, b], 4) == {**run([b], 5), **run([a], 6)}


def test_interleaved_worlds_stay_apart():
    """A live conversation that polluted the defaults, interrupted by a reference replay."""
    twitter = next(c for c in dataset.load() if "TwitterAPI" in c.involved_classes and not c.long_context)
    calls = (
        list(twitter.ground_truth[0])
        + _logins(twitter)
        + [
            "post_tweet(content='a')",
            "mention(tweet_id=0,mentioned_usernames=['@x'])",
            "post_tweet(content='b')",
            "mention(tweet_id=1,mentioned_usernames=['@y'])",
            "get_tweet(tweet_id=1)",
        ]
    )
    alone = new_simulators(twitter, "live")
    expected = [alone.execute(c).result for c in calls]
    victims = _sample(0)[:3]
    baseline = {v.id: _fingerprint(_reference_now(v)) for v in victims}
    live = new_simulators(twitter, "live")
    results = []
    for call in calls:
        results.append(live.execute(call).result)
        for victim in victims:  # a scripted model asks for a reference mid-conversation
            assert _fingerprint(_reference_now(victim)) == baseline[victim.id]
    assert results == expected


# --- which modules the simulators import: from the compiled code ---------------------


def test_imports_from_bytecode_are_the_sources(monkeypatch):
    """Every bfcl-eval simulator module: the compiled code names what the syntax tree names."""
    modules = [m for n, m in sorted(sys.modules.items()) if n.startswith(isolation.PACKAGE + ".")]
    assert len(modules) >= len(isolation.simulator_modules()) >= 8
    expected = {m.__name__: isolation.source_imports(m) for m in modules}
    assert any(expected.values())

    def no_fallback(module: types.ModuleType) -> set[str]:
        raise AssertionError(f"{module.__name__}: read from the source, not the compiled code")

    monkeypatch.setattr(isolation, "source_imports", no_fallback)
    assert {m.__name__: isolation.imported_module_names(m) for m in modules} == expected


def _fresh_module(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, source: str, write_pyc: bool = True
) -> types.ModuleType:
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", not write_pyc)
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    import importlib

    importlib.invalidate_caches()
    module = importlib.import_module(name)
    monkeypatch.delitem(sys.modules, name)
    return module


_SOURCE = """
    import json, os.path
    from collections import abc
    from . import nothing_relative  # noqa: F401 (never run: relative imports are not counted)

    def f():
        import decimal
        from email import message
        return [lambda: __import__("not_counted")]
"""


def test_imports_cover_nested_code_and_skip_relative(tmp_path, monkeypatch):
    source = _SOURCE.replace("from . import nothing_relative", "pass")
    module = _fresh_module(tmp_path, monkeypatch, "careful_iso_probe", source)
    assert isolation.imported_module_names(module) == {"json", "os.path", "collections", "decimal", "email"}
    relative = "def g():\n    from . import sibling\n    from .pkg import x\n    import zlib\n"
    module = _fresh_module(tmp_path, monkeypatch, "careful_iso_probe2", relative)
    assert isolation.imported_module_names(module) == {"zlib"} == isolation.source_imports(module)


def test_stale_compiled_code_is_not_used(tmp_path, monkeypatch):
    """The source changed after the .pyc was written: the imports are the new source's."""
    module = _fresh_module(tmp_path, monkeypatch, "careful_iso_stale", "import json\n")
    assert list((tmp_path / "__pycache__").glob("careful_iso_stale*.pyc"))  # written by the import
    assert isolation.imported_module_names(module) == {"json"}
    (tmp_path / "careful_iso_stale.py").write_text("import json\nimport zlib, decimal  # longer: size differs\n")
    assert isolation.imported_module_names(module) == {"json", "zlib", "decimal"}


def test_corrupt_compiled_code_falls_back_to_the_source(tmp_path, monkeypatch):
    module = _fresh_module(tmp_path, monkeypatch, "careful_iso_corrupt", "import json\nimport zlib\n")
    assert list((tmp_path / "__pycache__").glob("careful_iso_corrupt*.pyc"))
    for pyc in (tmp_path / "__pycache__").glob("careful_iso_corrupt*.pyc"):
        pyc.write_bytes(b"\x00garbage, not a pyc")
    assert isolation.imported_module_names(module) == {"json", "zlib"}
    for pyc in (tmp_path / "__pycache__").glob("careful_iso_corrupt*.pyc"):
        pyc.write_bytes(pyc.read_bytes()[:20])  # a header and nothing behind it
    assert isolation.imported_module_names(module) == {"json", "zlib"}


def test_unwritable_cache_and_no_loader(tmp_path, monkeypatch):
    """No .pyc can be written (read-only folder): compiled from the source; no loader: the syntax tree."""
    module = _fresh_module(tmp_path, monkeypatch, "careful_iso_readonly", "import json\n", write_pyc=False)
    monkeypatch.setattr(sys, "dont_write_bytecode", False)  # it would write one, but may not
    assert not (tmp_path / "__pycache__").exists()
    tmp_path.chmod(0o555)
    try:
        (tmp_path / "careful_iso_readonly.py").chmod(0o444)
        assert isolation.imported_module_names(module) == {"json"}
    finally:
        tmp_path.chmod(0o755)
    monkeypatch.setattr(module, "__spec__", None)
    assert isolation.imported_module_names(module) == {"json"}


def test_an_unknown_bytecode_shape_falls_back_to_the_source(monkeypatch):
    """An import whose level is loaded some other way (a future compiler): the syntax tree decides."""
    module = next(m for m in isolation.simulator_modules() if isolation.source_imports(m))
    monkeypatch.setattr(isolation, "_LEVEL_LOADS", frozenset({"NO_SUCH_OPCODE"}))
    monkeypatch.setattr(isolation, "source_imports", lambda m: {"read from the source"})
    assert isolation.imported_module_names(module) == {"read from the source"}
