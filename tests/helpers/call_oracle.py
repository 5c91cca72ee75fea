"""bfcl-eval's own executor as an oracle for generated call strings, in a sandbox.

bfcl-eval's ``execute_multi_turn_func_call`` rewrites a call string and
``eval``s it. The parity tests compare pytest-careful's executor with it on
thousands of generated strings, so the oracle runs apart, on strings that
cannot harm it:

* :func:`unsafe_reason` admits a string only if bfcl-eval's rewrite of it
  either does not compile or is an expression of literals, operators,
  ``instance.method(...)`` calls (the rewrite's own output) and names that
  ``eval`` cannot resolve there (methods not prefixed, undefined names): no
  other attribute, no dunder, no builtin, no global or local of bfcl's module,
  bounded arithmetic, a bounded number of calls.
* :func:`run_bfcl` runs the admitted cases in a child process (``python -I``,
  a fresh temporary cwd, HOME and ``BFCL_PROJECT_ROOT``, a minimal
  environment, ``setrlimit`` on memory, CPU time, file size and core dumps, a
  wall-clock timeout). The child forks once per case, so every case starts
  from fresh instances in a pristine process (bfcl-eval's mutable defaults and
  module globals untouched, fresh ``decimal``/``mpmath`` precision); the forked
  process also lowers its own limits and installs an audit hook that blocks
  sockets, process creation, file removal and writing files.

This module is also the child's program (``python -I tests/helpers/call_oracle.py``):
only the standard library is imported at the top.
"""

from __future__ import annotations

import ast
import builtins
import datetime
import decimal
import hashlib
import json
import os
import random
import re
import resource
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

#: Names the generator uses that nothing defines: ``eval`` raises NameError on them.
UNDEFINED_NAMES = ("foo", "true", "false", "null", "none", "undefined", "document", "x", "temp", "Ls")
MAX_CALLS_PER_STRING = 12
MAX_NODES = 3_000
CASE_TIMEOUT_S = 20
_DENIED_EVENTS = (
    "socket.",
    "subprocess.",
    "os.system",
    "os.exec",
    "os.posix_spawn",
    "os.spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.remove",
    "os.rmdir",
    "os.rename",
    "os.unlink",
    "os.truncate",
    "os.chmod",
    "os.chown",
    "shutil.",
    "ctypes.",
    "pty.",
    "webbrowser.",
    "sqlite3.",
    "urllib.",
    "http.",
    "ftplib.",
    "smtplib.",
)


# --------------------------------------------------------------------------- #
# What may reach the oracle                                                    #
# --------------------------------------------------------------------------- #


def bfcl_scope_names() -> frozenset[str]:
    """Every name ``eval`` resolves inside bfcl-eval's executor (besides instances)."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    code = multi_turn_utils.execute_multi_turn_func_call.__code__
    return frozenset(dir(builtins)) | frozenset(vars(multi_turn_utils)) | frozenset(code.co_varnames)


def bfcl_rewrite(call: str, mapping: dict[str, str]) -> str:
    """bfcl-eval's own ``_process_method_calls`` (a regular expression; nothing is evaluated)."""
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    return multi_turn_utils._process_method_calls(call, mapping)


_ALLOWED_NODES = (
    ast.Expression,
    ast.Constant,
    ast.Name,
    ast.Call,
    ast.keyword,
    ast.List,
    ast.Tuple,
    ast.Set,
    ast.Dict,
    ast.BinOp,
    ast.UnaryOp,
    ast.BoolOp,
    ast.Compare,
    ast.IfExp,
    ast.Subscript,
    ast.Slice,
    ast.Load,
    ast.operator,
    ast.unaryop,
    ast.boolop,
    ast.cmpop,
    ast.Attribute,
    ast.Await,
    ast.Yield,
    ast.YieldFrom,  # outside a function these fail to compile
)


def unsafe_reason(call: str, mapping: dict[str, str], scope: frozenset[str]) -> str | None:
    """Why ``call`` must not reach the oracle, or None when evaluating it is harmless.

    Args:
        call: the raw call string.
        mapping: method name -> instance name, as bfcl-eval builds it for the oracle's run.
        scope: :func:`bfcl_scope_names`.
    """
    rewritten = bfcl_rewrite(call, mapping)
    try:  # what eval compiles: leading blanks skipped
        tree = ast.parse(rewritten.lstrip(" \t"), mode="eval")
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None  # eval fails to compile it too: nothing runs
    nodes = list(ast.walk(tree))
    if len(nodes) > MAX_NODES:
        return "cost: too large"
    if sum(isinstance(n, ast.Call) for n in nodes) > MAX_CALLS_PER_STRING:
        return "cost: too many calls"
    if sum(isinstance(n, ast.BinOp) and isinstance(n.op, (ast.Mult, ast.Pow, ast.LShift)) for n in nodes) > 3:
        return "cost: too many products"
    instances = frozenset(mapping.values())
    bases = {id(n.value) for n in nodes if isinstance(n, ast.Attribute)}
    called = {id(n.func) for n in nodes if isinstance(n, ast.Call)} | bases
    for node in nodes:
        if not isinstance(node, _ALLOWED_NODES):
            return f"{type(node).__name__} node"
        if isinstance(node, ast.keyword) and node.arg is None:
            return "** unpacking"
        if isinstance(node, ast.Dict) and None in node.keys:
            return "** unpacking"
        if isinstance(node, ast.Attribute):
            # Read off a name only: an undefined one fails first; off an instance, a
            # method or a name it lacks (bfcl's rewrite of ``instance.method(``).
            if not isinstance(node.value, (ast.Name, ast.Attribute)) or node.attr.startswith("_"):
                return "attribute of a computed value, or a dunder"
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if id(node) not in called and isinstance(base, ast.Name) and base.id in instances:
                return "an attribute of an instance as a value (a bound method)"
            if (
                isinstance(node.value, ast.Name)
                and node.value.id in instances
                and node.attr not in mapping
                and node.attr not in instances
            ):
                return "attribute of an instance other than a method"
        if isinstance(node, ast.Name):
            if node.id.startswith("_") or node.id in scope:
                return f"name {node.id!r} resolves in bfcl's eval"
            if node.id in instances and id(node) not in bases:
                return "an instance as a value"
        if isinstance(node, ast.BinOp):
            reason = _costly(node)
            if reason:
                return reason
    return None


def _int_constant(node: ast.AST, kinds: tuple[type, ...] = (int, bool)) -> float | None:
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_constant(node.operand, kinds)
        return None if inner is None else -inner
    if isinstance(node, ast.Constant) and type(node.value) in kinds:
        return node.value
    return None


def _costly(node: ast.BinOp) -> str | None:
    if isinstance(node.op, (ast.Pow, ast.LShift)):
        right = _int_constant(node.right, (int, bool, float))
        if right is None or abs(right) > 16 or not isinstance(node.left, (ast.Constant, ast.UnaryOp)):
            return "cost: unbounded power or shift"
    if isinstance(node.op, ast.Mult):
        for side in (node.left, node.right):
            value = _int_constant(side)
            if value is not None and value > 1000:
                return "cost: long repetition"
    if (
        isinstance(node.op, ast.Mod)
        and isinstance(node.left, ast.Constant)
        and isinstance(node.left.value, (str, bytes))
    ):
        text = node.left.value if isinstance(node.left.value, str) else node.left.value.decode("latin-1")
        if re.search(r"%[^a-zA-Z%]*(\d{4,}|\*)", text):
            return "cost: wide %-format"
    return None


# --------------------------------------------------------------------------- #
# Comparable states                                                            #
# --------------------------------------------------------------------------- #

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def canonical(value: Any, path: frozenset[int] = frozenset(), depth: int = 0) -> Any:
    """A JSON value that two processes holding equal states render equally."""
    kind = type(value)
    if value is None or kind in (bool, int, str):
        return value
    if depth > 80:
        return "<too deep>"
    if kind is float:
        return ["float", repr(value)]
    if kind in (complex, bytes, decimal.Decimal):
        return [kind.__name__, repr(value)]
    if id(value) in path:
        return "<cycle>"
    inner = path | {id(value)}
    if kind in (list, tuple):
        return [kind.__name__, [canonical(v, inner, depth + 1) for v in value]]
    if kind is dict:
        return ["dict", [[canonical(k, inner, depth + 1), canonical(v, inner, depth + 1)] for k, v in value.items()]]
    if kind in (set, frozenset):
        return [kind.__name__, sorted(json.dumps(canonical(v, inner, depth + 1)) for v in value)]
    if isinstance(value, (datetime.date, datetime.time)):
        return kind.__name__  # wall-clock times (files' modification times): never equal
    if isinstance(value, random.Random):
        return ["Random", hashlib.sha256(repr(value.getstate()).encode()).hexdigest()]
    if hasattr(value, "__dict__") and not callable(value):
        return [kind.__qualname__, canonical(dict(vars(value)), inner, depth + 1)]
    return [kind.__qualname__, _ADDRESS.sub("", repr(value))[:200]]


def canonical_state(instances: dict[str, Any]) -> Any:
    return {name: canonical(dict(vars(instance))) for name, instance in sorted(instances.items())}


# --------------------------------------------------------------------------- #
# The parent side                                                              #
# --------------------------------------------------------------------------- #


def _limit_child() -> None:
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
    resource.setrlimit(resource.RLIMIT_CPU, (900, 900))
    resource.setrlimit(resource.RLIMIT_FSIZE, (16 << 20, 16 << 20))


def run_bfcl(
    conversations: dict[str, dict[str, Any]], cases: list[dict[str, Any]], timeout_s: float = 900
) -> list[dict[str, Any]]:
    """bfcl-eval's results and final state for each case, in a sandboxed child process.

    Args:
        conversations: id -> ``{"initial_config", "involved_classes"}``.
        cases: ``{"conversation", "calls", "model_name"}`` each; every call string
            must have passed :func:`unsafe_reason`.
    Returns:
        Per case ``{"results": [...], "state": canonical_state, "crash": str | None}``.
    """
    with tempfile.TemporaryDirectory(prefix="call-oracle-") as box:
        for sub in ("cwd", "home", "bfcl"):
            os.mkdir(os.path.join(box, sub))
        env = {
            "PATH": "/usr/bin:/bin",
            "HOME": os.path.join(box, "home"),
            "TMPDIR": box,
            "BFCL_PROJECT_ROOT": os.path.join(box, "bfcl"),
            "LANG": "C.UTF-8",
            "NO_PROXY": "*",
            "HF_HUB_OFFLINE": "1",
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        payload = json.dumps({"conversations": conversations, "cases": cases})
        proc = subprocess.run(
            [sys.executable, "-I", str(Path(__file__).resolve())],
            input=payload,
            capture_output=True,
            text=True,
            cwd=os.path.join(box, "cwd"),
            env=env,
            timeout=timeout_s,
            preexec_fn=_limit_child,
            check=False,
        )
    assert proc.returncode == 0, proc.stderr[-4000:]
    answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert len(answers) == len(cases), (len(answers), len(cases), proc.stderr[-4000:])
    return answers


# --------------------------------------------------------------------------- #
# The child side                                                               #
# --------------------------------------------------------------------------- #


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event.startswith(_DENIED_EVENTS):
        raise PermissionError(f"blocked in the oracle: {event}")
    if event == "open" and len(args) > 1 and isinstance(args[1], str) and any(c in args[1] for c in "wax+"):
        raise PermissionError(f"blocked in the oracle: writing {args[0]!r}")


def _run_case(
    multi_turn_utils: Any, conversation_id: str, conversation: dict[str, Any], case: dict[str, Any]
) -> dict[str, Any]:
    results: list[str] = []
    instances: dict[str, Any] = {}
    for call in case["calls"]:
        out, instances = multi_turn_utils.execute_multi_turn_func_call(
            [call],
            conversation["initial_config"],
            conversation["involved_classes"],
            case["model_name"],
            conversation_id,
            long_context=False,
            is_evaL_run=True,
        )
        results.extend(out)
    return {"results": results, "state": canonical_state(instances), "crash": None}


def _in_fork(multi_turn_utils: Any, spec: dict[str, Any], case: dict[str, Any]) -> dict[str, Any]:
    """Run one case in a forked process (pristine state, its own limits); its answer as JSON."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the case's own process: it never returns
        os.close(read_end)
        try:
            resource.setrlimit(resource.RLIMIT_CPU, (CASE_TIMEOUT_S, CASE_TIMEOUT_S))
            resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))
            sys.addaudithook(_audit)
            cid = case["conversation"]
            answer = _run_case(multi_turn_utils, cid, spec["conversations"][cid], case)
        except BaseException as exc:  # noqa: BLE001 - the oracle itself crashed on this case
            answer = {"results": [], "state": None, "crash": f"{type(exc).__name__}: {exc}"[:500]}
        data = json.dumps(answer).encode()
        view = memoryview(data)
        while view:
            view = view[os.write(write_end, view) :]
        os._exit(0)
    os.close(write_end)
    chunks, deadline = [], time.monotonic() + CASE_TIMEOUT_S * 2
    while True:
        ready, _, _ = select.select([read_end], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            os.kill(pid, 9)
            break
        chunk = os.read(read_end, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(read_end)
    os.waitpid(pid, 0)
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"results": [], "state": None, "crash": "the case's process died or timed out"}


def main() -> None:
    spec = json.loads(sys.stdin.read())
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    for cid, conversation in spec["conversations"].items():  # import every simulator module now
        multi_turn_utils.execute_multi_turn_func_call(
            [], conversation["initial_config"], conversation["involved_classes"], "warmup", cid, is_evaL_run=True
        )
    for name in [g for g in vars(multi_turn_utils) if g.startswith("warmup")]:
        delattr(multi_turn_utils, name)
    for case in spec["cases"]:
        print(json.dumps(_in_fork(multi_turn_utils, spec, case)), flush=True)


if __name__ == "__main__":
    main()
