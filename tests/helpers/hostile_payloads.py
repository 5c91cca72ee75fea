"""Generated payloads whose cost grows far faster than their size (issue 12, class 2).

Each builder returns the calls of one hostile turn, as decoded call strings; ``as_run``
puts them into a conversation's first turn (the rest is the reference), in BFCL's result
shape, and ``as_fc_entry`` in the FC format ``gpt-4.1-2025-04-14-FC`` decodes.

* ``exponential(n)``: ``2n + 1`` calls. ``cp`` of a folder copies its contents dict
  shallowly, so after ``cp d c; mv c d`` the folder's old children are reachable twice;
  ``n`` rounds give ``2**n`` paths through ``n + 1`` distinct folders.
* ``deep_chain(n)``: ``n`` nested folders (``mkdir`` + ``cd``, ``2n`` calls).
* ``many_calls(n)``: ``n`` cheap reads in one step.
* ``many_writes(n)``: ``n`` new files in one folder (every snapshot re-pickles the folder).
* ``many_powers(n)``: ``n`` MathAPI ``power`` calls each just under the per-call guard.
* ``cycle()``: a folder inside itself (``mv d d`` while another folder still shares ``d``).

``generated(kind, seed)`` draws a variant of each class (sizes, names, interleaved calls).
"""

from __future__ import annotations

import ast
import json
import random
from collections.abc import Callable
from typing import Any

from pytest_careful.data import dataset

#: A GorillaFileSystem-only conversation and a MathAPI one (both in every bfcl-eval release).
FILE_SYSTEM_CONVERSATION = "multi_turn_base_1"


def exponential(n: int, folder: str = "d") -> list[str]:
    calls = [
        f"mkdir(dir_name='{folder}')",
        f"cd(folder='{folder}')",
        "touch(file_name='leaf.txt')",
        "echo(content='x', file_name='leaf.txt')",
        "cd(folder='..')",
    ]
    for i in range(n):
        calls += [f"cp(source='{folder}', destination='c{i}')", f"mv(source='c{i}', destination='{folder}')"]
    return calls


def deep_chain(n: int) -> list[str]:
    calls = []
    for i in range(n):
        calls += [f"mkdir(dir_name='d{i}')", f"cd(folder='d{i}')"]
    return calls + ["touch(file_name='bottom.txt')"]


def many_calls(n: int) -> list[str]:
    return ["pwd()"] * n


def many_writes(n: int) -> list[str]:
    return [f"touch(file_name='f{i}.txt')" for i in range(n)]


def many_powers(n: int) -> list[str]:
    # 3 ** 630_000 has ~998,500 bits: just under MAX_RESULT_BITS, so every call runs.
    return ["power(base=3, exponent=630000)"] * n


def cycle(n: int = 0) -> list[str]:
    return [
        "mkdir(dir_name='p')",
        "cd(folder='p')",
        "mkdir(dir_name='d')",
        "cd(folder='..')",
        "cp(source='p', destination='q')",
        "cd(folder='p')",
        "mv(source='d', destination='d')",
        "cd(folder='..')",
    ] + ["find(path='q')", "du()"] * n


KINDS: dict[str, Callable[[int], list[str]]] = {
    "exponential": exponential,
    "deep_chain": deep_chain,
    "many_calls": many_calls,
    "many_writes": many_writes,
    "many_powers": many_powers,
    "cycle": cycle,
}


def generated(kind: str, seed: int) -> list[str]:
    """A random variant of one class: sizes, names and the reads and writes mixed in."""
    rng = random.Random(f"{kind}-{seed}")
    if kind == "exponential":
        folder = rng.choice(["d", "data", "x_1", "shared"])
        calls = exponential(rng.randrange(16, 48), folder)
        extra = [
            f"cd(folder='{folder}')",
            "echo(content='changed', file_name='leaf.txt')",
            f"find(path='{folder}')",
            "du(human_readable=True)",
            "ls(a=True)",
            f"cp(source='{folder}', destination='{folder}')",
        ]
        for _ in range(rng.randrange(1, 5)):
            calls.insert(rng.randrange(5, len(calls) + 1), rng.choice(extra))
        return calls
    if kind == "deep_chain":
        calls = deep_chain(rng.randrange(300, 1500))
        return calls + rng.choice([["pwd()"], ["find()"], ["du()"], ["cd(folder='..')"] * 50, ["ls()"] * 20])
    if kind == "cycle":
        return cycle(rng.randrange(0, 4))
    if kind == "many_calls":
        read = rng.choice(["pwd()", "ls()", "ls(a=True)", "cd(folder='.')"])
        return [read] * rng.randrange(20_000, 300_000)
    if kind == "many_writes":
        return many_writes(rng.randrange(3_000, 8_000))
    if kind == "many_powers":
        return [f"power(base={rng.choice([3, 5, 7])}, exponent={rng.randrange(300_000, 350_000)})"] * rng.randrange(
            2_000, 6_000
        )
    raise ValueError(kind)


def math_conversation() -> dataset.Conversation:
    """The first base conversation with MathAPI among its classes."""
    for conversation in dataset.load_category("multi_turn_base"):
        if "MathAPI" in conversation.involved_classes:
            return conversation
    raise LookupError("no MathAPI conversation")


def conversation_for(kind: str) -> dataset.Conversation:
    return math_conversation() if kind == "many_powers" else dataset.get(FILE_SYSTEM_CONVERSATION)


def as_fc_step(calls: list[str]) -> list[dict[str, str]]:
    """Calls as one FC step (``{name: arguments}`` each)."""
    cache: dict[str, dict[str, str]] = {}
    return [cache.setdefault(c, _fc_call(c)) for c in calls]


def as_run(conversation: dataset.Conversation, hostile: list[str]) -> list[list[list[str]]]:
    """The reference's turns, the first one with the hostile calls after its own, in one step."""
    turns: list[list[list[str]]] = []
    for index, calls in enumerate(conversation.ground_truth):
        step = list(calls) + (hostile if index == 0 else [])
        turns.append([step] if step else [])
    return turns


def _fc_call(call: str) -> dict[str, str]:
    node = ast.parse(call, mode="eval").body
    assert isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    return {node.func.id: json.dumps({k.arg: ast.literal_eval(k.value) for k in node.keywords})}


def as_fc_entry(conversation: dataset.Conversation, hostile: list[str]) -> dict[str, Any]:
    """One result-file line in BFCL's FC format (each step a list of ``{name: arguments}``)."""
    result = [[as_fc_step(step) for step in turn] for turn in as_run(conversation, hostile)]
    return {"id": conversation.id, "result": result}


# --- short lines that expand (issue 23) ------------------------------------------------
# A prompting step (``[f(a=1), ...]``, as Qwen/Qwen3-8B logs it) whose arguments the
# decoder builds by repetition and concatenation, as BFCL's own ``eval`` would; and call
# strings whose values only the call interpreter builds (list repetition, nested
# repetition, big integers: no prompting decoder passes them on), for the passthrough decoder.

#: Longest string the evaluators build in one operation (``plain_values.MAX_SEQUENCE_LENGTH`` - 1).
LONG = 199_999
#: The issue's line: 300 writes of 199,000 characters each (13 KB of text, 60 MB of arguments).
ISSUE_STEP = "[" + ", ".join(f"echo(content='a'*199000, file_name='f{n}')" for n in range(300)) + "]"


def _filled(unit: Callable[[int], str], size: int) -> str:
    """A prompting step of calls ``unit(0), unit(1), ...``, ``size`` characters at most."""
    calls: list[str] = []
    length = 2
    while length + len(unit(len(calls))) + 2 <= size:
        calls.append(unit(len(calls)))
        length += len(calls[-1]) + 2
    return "[" + ", ".join(calls) + "]"


#: Class -> a prompting step of about ``size`` characters, and the characters its arguments expand to.
EXPANDING_STEPS: dict[str, Callable[[int], str]] = {
    "string repetition": lambda size: _filled(lambda n: f"echo(content='a'*{LONG}, file_name='f{n}')", size),
    "results that echo": lambda size: _filled(lambda n: f"echo(content='b'*{LONG})", size),
    "nested containers": lambda size: _filled(lambda n: f"echo(content=['c'*{LONG}, {{'k': ('d'*{LONG},)}}])", size),
    "concatenation chains": lambda size: _filled(
        lambda n: "echo(content='e'*50000+'f'*50000+'g'*50000+'h'*49999)", size
    ),
    "number arithmetic": lambda size: _filled(
        lambda n: "echo(content=123456789*987654321*123456789*987654321-7)", size
    ),
}


def expanded_chars(step: str) -> int:
    """Characters the step's repetitions make (``'x'*N`` counts N), read off the step's text."""
    import re

    return sum(int(count) for count in re.findall(r"'\w'\*(\d+)", step))


#: Class -> calls for the passthrough decoder: values only the call interpreter builds.
EXPANDING_CALLS: dict[str, list[str]] = {
    "list repetition": [f"echo(content=['a'*{LONG}]*{LONG})"],
    "nested repetition": ["echo(content=[[0]*100000]*100000)"],
    "big integers": ["echo(content=[3**50000]*100000)"],  # 3**50000: 79,249 bits, 23,857 digits
    "results that echo": [f"echo(content='a'*{LONG})"] * 3000,
    "concatenation chains": ["echo(content='a'*50000+'b'*50000+'c'*50000+'d'*49999)"] * 3000,
}
