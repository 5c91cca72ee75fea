"""Generated call strings: pytest-careful's executor gives bfcl-eval's result strings and states.

bfcl-eval's executor rewrites a call string with a regular expression on the
raw text and ``eval``s the result, which normalises identifiers (NFKC), skips
leading blanks and evaluates any expression. pytest-careful parses and
interprets instead; these tests hold the two to the same result string,
error-ness and final state, call for call, on strings from ``call_grammar``
(names and their look-alikes, operators, conditionals, nested calls,
malformed text). bfcl-eval runs in ``call_oracle``'s sandbox, only on strings
``call_oracle.unsafe_reason`` admits; the strings it does not admit (builtins,
bfcl's own names, attribute chains) must be refused here, before any method runs.

The default suite runs a few hundred cases; the slow suite (``-m slow``) 6,000.
"""

from __future__ import annotations

import inspect
import time
from typing import Any

import call_grammar
import call_oracle
import pytest

from pytest_careful.data import dataset
from pytest_careful.execution.executor import Simulators, instance_name
from pytest_careful.execution.interpreter import BFCL_SCOPE_NAMES

MODEL = "oracle"  # bfcl-eval appends "_eval" in an evaluation run
#: One conversation per pair of classes, together all eight simulator classes.
CONVERSATIONS = (
    "multi_turn_base_0",
    "multi_turn_base_15",
    "multi_turn_base_2",
    "multi_turn_base_14",
    "multi_turn_base_50",
    "multi_turn_base_100",
    "multi_turn_base_150",
)
DEFAULT_CASES, SLOW_CASES = 300, 6_000


def _kind(annotation: Any) -> str:
    text = str(annotation).lower()
    for kind in ("bool", "int", "float", "str", "list", "dict"):
        if kind in text:
            return kind
    return "any"


def _public_methods(instance: Any) -> list[str]:
    """As bfcl-eval lists them: ``inspect.getmembers(instance, ismethod)``, no leading underscore."""
    return [n for n, _ in inspect.getmembers(instance, predicate=inspect.ismethod) if not n.startswith("_")]


@pytest.fixture(scope="module")
def setting() -> dict[str, Any]:
    return build_setting()


def build_setting() -> dict[str, Any]:
    """Catalogs for the generator, bfcl-eval's method mapping per conversation, its configs."""
    catalogs, mappings, configs = [], {}, {}
    for cid in CONVERSATIONS:
        conversation = dataset.get(cid)
        sim = Simulators(conversation.involved_classes, conversation.initial_config, False, MODEL + "_eval", cid)
        methods: dict[str, list[tuple[str, str, bool]]] = {}
        mapping: dict[str, str] = {}
        for class_name in conversation.involved_classes:
            instance = sim.instances[class_name]
            for method in _public_methods(instance):
                mapping[method] = instance_name(MODEL + "_eval", cid, class_name)
                methods[method] = [
                    (p.name, _kind(p.annotation), p.default is p.empty)
                    for p in inspect.signature(getattr(instance, method)).parameters.values()
                    if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                ]
        catalogs.append(
            call_grammar.Catalog(cid, methods, sorted(set(mapping.values())), list(conversation.ground_truth[0]))
        )
        mappings[cid] = mapping
        configs[cid] = {
            "initial_config": dict(conversation.initial_config),
            "involved_classes": list(conversation.involved_classes),
        }
    return {"catalogs": catalogs, "mappings": mappings, "configs": configs, "scope": call_oracle.bfcl_scope_names()}


def _ours(case: dict[str, Any]) -> dict[str, Any]:
    conversation = dataset.get(case["conversation"])
    sim = Simulators(
        conversation.involved_classes, conversation.initial_config, False, MODEL + "_eval", conversation.id
    )
    executions = [sim.execute(call) for call in case["calls"]]
    return {
        "results": [e.result for e in executions],
        "errors": [e.refused or e.raised for e in executions],
        "refused": [e.refused for e in executions],
        "invoked": [bool(e.invocations) for e in executions],
        "state": call_oracle.canonical_state(sim.instances),
    }


def _split(setting: dict[str, Any], cases: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Cases whose every string the oracle may evaluate, and the others."""
    safe, unsafe = [], []
    for case in cases:
        mapping = setting["mappings"][case["conversation"]]
        reasons = [call_oracle.unsafe_reason(c, mapping, setting["scope"]) for c in case["calls"]]
        (unsafe if any(reasons) else safe).append(case)
    return safe, unsafe


def _compare(setting: dict[str, Any], cases: list[dict[str, Any]]) -> dict[str, Any]:
    started = time.perf_counter()
    theirs = call_oracle.run_bfcl(setting["configs"], [dict(c, model_name=MODEL) for c in cases])
    oracle_s = time.perf_counter() - started
    started = time.perf_counter()
    ours = [_ours(case) for case in cases]
    ours_s = time.perf_counter() - started
    mismatches = []
    calls = 0
    for case, mine, bfcl in zip(cases, ours, theirs):
        calls += len(case["calls"])
        assert bfcl["crash"] is None, (case, bfcl["crash"])
        their_errors = [r.startswith("Error during execution: ") for r in bfcl["results"]]
        if mine["results"] != bfcl["results"] or mine["errors"] != their_errors or mine["state"] != bfcl["state"]:
            mismatches.append(
                {
                    "calls": case["calls"],
                    "ours": mine["results"],
                    "bfcl": bfcl["results"],
                    "same_state": mine["state"] == bfcl["state"],
                }
            )
    return {
        "cases": len(cases),
        "calls": calls,
        "mismatches": mismatches,
        "agreement": 1 - len(mismatches) / max(1, len(cases)),
        "oracle_s": oracle_s,
        "ours_s": ours_s,
    }


def _check_generated(setting: dict[str, Any], count: int, seed: int) -> dict[str, Any]:
    cases = call_grammar.generate(setting["catalogs"], count, seed)
    safe, unsafe = _split(setting, cases)
    assert len(safe) >= 0.85 * count, (len(safe), count)
    report = _compare(setting, safe)
    print(
        f"\n{count} generated cases, {len(safe)} compared with bfcl-eval ({report['calls']} calls): "
        f"agreement {100 * report['agreement']:.2f}%, bfcl-eval {report['oracle_s']:.1f} s, "
        f"pytest-careful {report['ours_s']:.1f} s; {len(unsafe)} reach outside"
    )
    assert not report["mismatches"], report["mismatches"][:10]
    for case in unsafe:  # failed here (refused, or a compile error), before any method of it ran
        mapping = setting["mappings"][case["conversation"]]
        mine = _ours(case)
        for call, result, failed, invoked in zip(case["calls"], mine["results"], mine["errors"], mine["invoked"]):
            reason = call_oracle.unsafe_reason(call, mapping, setting["scope"])
            if reason and not reason.startswith("cost:"):
                assert failed and not invoked, (call, reason, result)
    return report


def test_generated_call_strings_match_bfcl_executor(setting):
    _check_generated(setting, DEFAULT_CASES, seed=12)


@pytest.mark.slow
def test_generated_call_strings_match_bfcl_executor_at_scale(setting):
    _check_generated(setting, SLOW_CASES, seed=2026)


#: Each class of the issue, written out: bfcl-eval's verdict is the expectation.
NAMED = [
    "ｌｓ()",
    "lｓ()",
    "ﬁnd(path='.')",
    "ſort(file_name='a')",
    "(ls)()",
    "((pwd))()",
    "ls\\\n()",
    "[ls\n()]",
    "[ls # c\n()]",
    "ls ()",
    "ls\t()",
    "lś()",
    "ls\u0301()",
    "lа()",
    "LS()",
    " ls()",
    "\tpwd()",
    "  \t ls(a=True)",
    "ls()  # note",
    "\nls()",
    "(\nls()\n)",
    "ls() or pwd()",
    "cd(folder='temp') and ls()",
    "not ls()",
    "ls() if 1 < 2 else pwd()",
    "ls() == ls()",
    "ls() is None",
    "'%s/%s' % ('a', 'b')",
    "1 + 2 * 3",
    "mkdir(dir_name='%s_%d' % ('dir', 3))",
    "mkdir(dir_name='a' if 2 > 3 else 'b')",
    "touch(file_name='x' * 3)",
    "ls(a=not 0)",
    "ls(a=1 < 2 < 3)",
    "ls()['current_directory_content'][0]",
    "[ls(), cd(folder='nope')]",
    "{[]: 1, 'k': mkdir(dir_name='made')}",
    "1(mkdir(dir_name='ran'))",
    "ls()()",
    "-----1",
    "2 ** -1",
    "7 // 0",
    "'%d' % 'x'",
    "await ls()",
    "(yield)",
    "ls(a=1, a=2)",
    "ls(",
    "",
    "   ",
    "GorillaFileSystem_instance.ls()",
    "GorillaFileSystem_instance.ｌｓ()",
    "GorillaFileSystem.ls()",
    "os.system('true')",
    "ls(a=foo.bar)",
]


def test_named_classes_match_bfcl_executor(setting):
    gfs = instance_name(MODEL + "_eval", "multi_turn_base_0", "GorillaFileSystem")
    calls = [c.replace("GorillaFileSystem_instance", gfs) for c in NAMED]
    cases = [{"conversation": "multi_turn_base_0", "calls": [c], "kind": "named"} for c in calls]
    safe, unsafe = _split(setting, cases)
    assert not unsafe, [c["calls"] for c in unsafe]
    report = _compare(setting, safe)
    assert not report["mismatches"], report["mismatches"]


def test_scope_names_are_bfcl_evals_own(setting):
    """The names eval resolves there (refused here) are exactly bfcl-eval's; no method is one of them."""
    import builtins

    assert BFCL_SCOPE_NAMES | frozenset(dir(builtins)) == setting["scope"]
    for cid, mapping in setting["mappings"].items():
        assert not set(mapping) & setting["scope"], cid
    assert not set(call_oracle.UNDEFINED_NAMES) & setting["scope"]
    assert call_oracle.UNDEFINED_NAMES == call_grammar.UNDEFINED


@pytest.mark.parametrize(
    "call",
    [
        "print(1)",
        "ｐｒｉｎｔ('x')",
        "len([])",
        "ls().keys()",
        "json.dumps({})",
        "[ls(), model_name]",
        "ls(a=func_call)",
        "__import__('os')",
        " exit()",
        "exit()",
        "Ellipsis",
        "ls().__class__",
        "GorillaFileSystem_instance",
        "GorillaFileSystem_instance._load_scenario({})",
        "(lambda: 1)()",
        "[x for x in [1]]",
        "ls(*[True])",
        "ls(**{'a': True})",
        "f'{1}'",
    ],
)
def test_strings_reaching_outside_are_refused_before_anything_runs(setting, call):
    gfs = instance_name(MODEL + "_eval", "multi_turn_base_0", "GorillaFileSystem")
    call = call.replace("GorillaFileSystem_instance", gfs)
    assert call_oracle.unsafe_reason(call, setting["mappings"]["multi_turn_base_0"], setting["scope"])
    mine = _ours({"conversation": "multi_turn_base_0", "calls": [call]})
    assert mine["refused"] == [True] and mine["invoked"] == [False], mine["results"]
