"""Hostile model output must never run code in pytest-careful; in stock bfcl-eval much of it does.

``tests/data/hostile_corpus.json`` holds hostile BFCL ``result`` entries for every
handler family (already-decoded call strings, FC ``{name: arguments}`` steps,
prompting ``[f(a=...)]`` text, Llama-3.1 raw text). Each payload tries to leave
evidence: create a marker file, import a module nobody has imported yet, or open
a socket. Placeholders are filled in at test time:

* ``@MARKER@``: a per-entry path inside a fresh temporary directory;
* ``@GFS@``: the global name bfcl-eval gives the GorillaFileSystem instance;
* the keys of an entry's ``expand`` (``{"@HUGE@": ["x", 10000000]}``): the string
  repeated that many times (10 MB strings, deeply nested brackets).

Three runs of the whole corpus:

1. pytest-careful's ``evaluate`` in this process, under an audit hook that
   records (and blocks) process spawning, sockets, imports of the target modules,
   opening anything under the marker directory and ``exec``/``eval`` of code that
   does not come from a file; every entry must leave no evidence, and every
   hostile call must fail (or its step must fail to decode).
2. The same in a throwaway child process (fresh cwd, HOME and BFCL_PROJECT_ROOT
   in a temp dir), so an escape could not hide behind this process's state.
3. bfcl-eval's own decoders and ``execute_multi_turn_func_call``, unpatched, in a
   throwaway child process (fresh temp cwd, network blocked by the audit hook):
   every payload the corpus marks ``bfcl_executes`` must leave its evidence there.
   This proves the detectors work and that the corpus is hostile for real.

Entries with a ``known_bug`` leave no evidence either, but make ``evaluate``
raise instead of failing the call; their "calls fail" test is a strict xfail, so
it turns red once the bug is fixed and the field must go.

The audit hook cannot be removed once installed; outside a monitored window it
returns at once.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS_PATH = ROOT / "tests" / "data" / "hostile_corpus.json"
CORPUS: list[dict[str, Any]] = json.loads(CORPUS_PATH.read_text(encoding="utf-8"))
NAMES = [entry["name"] for entry in CORPUS]

#: Modules the payloads import; none may be imported before the runs.
TARGET_MODULES = ("smtplib", "ftplib", "poplib", "imaplib", "mailbox")
#: Audit events that nothing in a replay may raise.
_SPAWN_EVENTS = frozenset(
    {
        "os.system",
        "os.exec",
        "os.posix_spawn",
        "os.spawn",
        "os.fork",
        "os.forkpty",
        "subprocess.Popen",
        "pty.spawn",
        "ctypes.dlopen",
        "webbrowser.open",
        "os.remove",
        "os.rmdir",
        "os.rename",
        "shutil.rmtree",
        "os.kill",
    }
)
EXPECTATIONS = ("failed", "undecodable", "data")
_OR = "bfcl_eval.model_handler.api_inference.openai_response:OpenAIResponsesHandler"
_LOCAL = "bfcl_eval.model_handler.local_inference."
_TOOL_CALL = '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>'
#: Per decoder: a benign step of its own shape (it must decode to ``["ls()"]``),
#: and the stock handler as bfcl-eval's registry builds it: class, model_name,
#: is_fc_model (checked against the registry, so the stock run needs not import
#: every vendor SDK). Every corpus step has the type of its decoder's benign step,
#: so an entry cannot pass as "undecodable" merely by having the wrong shape.
DECODERS: dict[str, tuple[Any, str | None, str | None, bool | None]] = {
    "passthrough": (["ls()"], None, None, None),
    "gpt-4.1-2025-04-14-FC": ([{"ls": "{}"}], _OR, "gpt-4.1-2025-04-14", True),
    "microsoft/Phi-4-mini-instruct-FC": (
        [{"ls": {}}],
        _LOCAL + "phi_fc:PhiFCHandler",
        "microsoft/Phi-4-mini-instruct",
        True,
    ),
    "ibm-granite/granite-3.2-8b-instruct": (
        [{"ls": {}}],
        _LOCAL + "granite_3:Granite3FCHandler",
        "ibm-granite/granite-3.2-8b-instruct",
        True,
    ),
    "Qwen/Qwen3-8B": ("[ls()]", _LOCAL + "qwen:QwenHandler", "Qwen/Qwen3-8B", False),
    "gpt-4.1-2025-04-14": ("[ls()]", _OR, "gpt-4.1-2025-04-14", False),
    "meta-llama/Llama-3.1-8B-Instruct-FC": (
        '{"name": "ls", "parameters": {}}',
        _LOCAL + "llama_3_1:LlamaHandler_3_1",
        "meta-llama/Llama-3.1-8B-Instruct",
        True,
    ),
    "Qwen/Qwen3-8B-FC": (_TOOL_CALL, _LOCAL + "qwen_fc:QwenFCHandler", "Qwen/Qwen3-8B", True),
    "ibm-granite/granite-4.0-350m": (
        _TOOL_CALL,
        _LOCAL + "granite_4:Granite4FCHandler",
        "ibm-granite/granite-4.0-350m",
        True,
    ),
    "Salesforce/Llama-xLAM-2-8b-fc-r": (
        '{"name": "ls", "arguments": {}}',
        _LOCAL + "salesforce_llama:SalesforceLlamaHandler",
        "Salesforce/Llama-xLAM-2-8b-fc-r",
        True,
    ),
}
FAILED_STATUSES = ("refused", "raised")
WORKER_TIMEOUT_S = 240


# --------------------------------------------------------------------------- #
# Shared by this process and the child processes (stdlib only at import time). #
# --------------------------------------------------------------------------- #


def instance_global(model_name: str, conversation_id: str, class_name: str) -> str:
    """bfcl-eval's global name of an instance in an evaluation run."""
    return re.sub(r"[-./:]", "_", f"{model_name}_eval_{conversation_id}_{class_name}_instance")


def materialise(value: Any, replacements: dict[str, str]) -> Any:
    """``value`` with every placeholder replaced, in strings and dict keys."""
    if isinstance(value, str):
        for placeholder, text in replacements.items():
            value = value.replace(placeholder, text)
        return value
    if isinstance(value, list):
        return [materialise(v, replacements) for v in value]
    if isinstance(value, dict):
        return {materialise(k, replacements): materialise(v, replacements) for k, v in value.items()}
    return value


def replacements_for(entry: dict[str, Any], marker: str, model_name: str) -> dict[str, str]:
    found = {"@MARKER@": marker, "@GFS@": instance_global(model_name, entry["conversation"], "GorillaFileSystem")}
    for placeholder, (unit, times) in entry.get("expand", {}).items():
        found[placeholder] = unit * times
    return found


def marker_for(marker_dir: str, index: int) -> str:
    path = os.path.join(marker_dir, f"m{index:03d}")
    # Payloads paste the path into quoted Python and shell text.
    assert re.fullmatch(r"[\w/.-]+", path), path
    return path


class Monitor:
    """An audit hook that records dangerous events while a window is open."""

    _installed: Monitor | None = None

    def __init__(self) -> None:
        self.active = False
        self.block_all = True
        self.marker_dir = "\0"
        self.events: list[str] = []

    @classmethod
    def get(cls) -> Monitor:
        if cls._installed is None:
            cls._installed = cls()
            sys.addaudithook(cls._installed._hook)
        return cls._installed

    @contextlib.contextmanager
    def watch(self, marker_dir: str, block_all: bool) -> Iterator[list[str]]:
        self.events, self.marker_dir, self.block_all = [], marker_dir, block_all
        self.active = True
        try:
            yield self.events
        finally:
            self.active = False

    def _classify(self, event: str, args: tuple) -> str | None:
        if event in _SPAWN_EVENTS:
            return event
        if event.startswith("socket."):
            return f"{event}{args!r:.100}"
        if event == "import" and args and args[0] in TARGET_MODULES:
            return f"import {args[0]}"
        if event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
            path = os.fsdecode(args[0])
            if path.startswith(self.marker_dir):
                return f"open {path}"
        if event == "exec" and args:
            filename = getattr(args[0], "co_filename", "")
            if not (filename.startswith("<frozen ") or os.path.isfile(filename)):
                return f"exec of code from {filename!r}"
        return None

    def _hook(self, event: str, args: tuple) -> None:
        if not self.active:
            return
        found = self._classify(event, args)
        if found is None:
            return
        self.active = False  # what follows must not re-enter the hook
        try:
            self.events.append(found)
        finally:
            self.active = True
        if self.block_all or event.startswith("socket."):
            raise PermissionError(f"blocked by test_security: {found}")


def new_target_modules(before: set[str]) -> list[str]:
    return [m for m in TARGET_MODULES if m in sys.modules and m not in before]


def replay_ours(corpus: list[dict[str, Any]], marker_dir: str, model_prefix: str) -> list[dict[str, Any]]:
    """pytest-careful's ``evaluate`` on every entry, monitored and blocking."""
    from pytest_careful.data import dataset
    from pytest_careful.evaluation.evaluate import evaluate
    from pytest_careful.execution import limits
    from pytest_careful.execution.decoding import decoder, passthrough_decoder

    decoders = {
        key: passthrough_decoder() if key == "passthrough" else decoder(key)
        for key in sorted({e["decoder"] for e in corpus})
    }
    _warm_up(decoders, sorted({e["conversation"] for e in corpus}))
    monitor = Monitor.get()
    outcomes = []
    for index, entry in enumerate(corpus):
        marker = marker_for(marker_dir, index)
        model_name = f"{model_prefix}{index}"
        result = materialise(entry["result"], replacements_for(entry, marker, model_name))
        outcome: dict[str, Any] = {
            "name": entry["name"],
            "error": None,
            "evaluation": None,
            "marker_path": marker,
            "model_name": model_name,
        }
        before = set(sys.modules)
        conversation = dataset.get(entry["conversation"])
        started = time.perf_counter()
        # Inside the default budget, as an item scores it, the clock standing still: the counts
        # decide, the same on any machine (the seconds are recorded for bench/hostile.py --corpus).
        with monitor.watch(marker_dir, block_all=True) as events, limits.metered(limits.Limits(), _still) as meter:
            try:
                outcome["evaluation"] = evaluate(
                    conversation, result, decoders[entry["decoder"]], model_name=model_name
                )
            except BaseException as exc:  # noqa: BLE001 - recorded, judged by the tests
                outcome["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        outcome["counted"] = {"calls": meter.calls, "steps": meter.steps, "bytes": meter.bytes}
        outcomes.append(_record_outcome(outcome, started, events, marker, before))
    return outcomes


def _still() -> float:
    """A clock that never moves (``limits.metered``): no outcome here depends on the machine's speed."""
    return 0.0


def _record_outcome(outcome: dict[str, Any], started: float, events: Any, marker: str, before: Any) -> dict[str, Any]:
    """What every run of a corpus entry records, ours and stock bfcl-eval's alike."""
    outcome["seconds"] = round(time.perf_counter() - started, 3)
    outcome["events"] = list(events)
    outcome["marker"] = os.path.exists(marker)
    outcome["new_modules"] = new_target_modules(before)
    return outcome


def _warm_up(decoders: dict[str, Any], conversation_ids: list[str]) -> None:
    """Benign input first, so lazy imports happen outside the monitored window."""
    from pytest_careful.data import dataset
    from pytest_careful.evaluation.evaluate import evaluate
    from pytest_careful.execution.decoding import passthrough_decoder

    samples = [
        "[ls()]",
        [{"ls": "{}"}],
        [{"ls": {}}],
        '{"name": "ls", "parameters": {}}',
        '{"name": "ls", "arguments": {}}',
        '<tool_call>\n{"name": "ls", "arguments": {}}\n</tool_call>',
        ["ls()"],
    ]
    for dec in decoders.values():
        for sample in samples:
            try:
                dec.decode_step(sample)
            except Exception:
                pass
    for conversation_id in conversation_ids:
        conversation = dataset.get(conversation_id)
        steps = [[[call] for call in turn] for turn in conversation.ground_truth]
        evaluate(conversation, steps, passthrough_decoder(), model_name="warmup")


def replay_bfcl(
    corpus: list[dict[str, Any]], marker_dir: str, model_prefix: str, conversations: dict[str, Any]
) -> list[dict[str, Any]]:
    """bfcl-eval's own decoders and executor, unpatched; only the network is blocked."""
    import importlib

    os.environ.setdefault("OPENAI_API_KEY", "unused-by-the-test")
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    class Passthrough:
        def decode_execute(self, result, has_tool_call_tag=False):
            if not isinstance(result, list):
                raise ValueError("not a list of calls")
            return result

    handlers: dict[str, Any] = {}
    for key in sorted({e["decoder"] for e in corpus}):
        if key == "passthrough":
            handlers[key] = Passthrough()
            continue
        _, class_path, model_name, is_fc_model = DECODERS[key]
        module, _, class_name = class_path.partition(":")
        handler_class = getattr(importlib.import_module(module), class_name)
        # As bfcl_eval.eval_checker.eval_runner.get_handler builds it.
        handlers[key] = handler_class(model_name=model_name, temperature=0, registry_name=key, is_fc_model=is_fc_model)
    monitor = Monitor.get()
    outcomes = []
    for index, entry in enumerate(corpus):
        marker = marker_for(marker_dir, index)
        model_name = f"{model_prefix}{index}"
        result = materialise(entry["result"], replacements_for(entry, marker, model_name))
        before = set(sys.modules)
        conv = conversations[entry["conversation"]]
        handler = handlers[entry["decoder"]]
        outcome: dict[str, Any] = {"name": entry["name"], "error": None, "calls": 0}
        started = time.perf_counter()
        with monitor.watch(marker_dir, block_all=False) as events:
            try:
                for turn in result:
                    for item in turn:
                        try:
                            decoded = handler.decode_execute(item, has_tool_call_tag=False)
                        except Exception:  # as bfcl's checker does
                            continue
                        if multi_turn_utils.is_empty_execute_response(decoded):
                            continue
                        outcome["calls"] += len(decoded)
                        multi_turn_utils.execute_multi_turn_func_call(
                            decoded,
                            conv["initial_config"],
                            conv["involved_classes"],
                            model_name,
                            entry["conversation"],
                            long_context=conv["long_context"],
                            is_evaL_run=True,
                        )
            except BaseException as exc:  # noqa: BLE001
                outcome["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        outcomes.append(_record_outcome(outcome, started, events, marker, before))
    return outcomes


def worker_main(argv: list[str]) -> None:
    """Entry point of the child processes: ``mode corpus marker_dir out [conversations]``."""
    mode, corpus_path, marker_dir, out_path = argv[:4]
    corpus = json.loads(Path(corpus_path).read_text(encoding="utf-8"))
    missing = [m for m in TARGET_MODULES if m in sys.modules]
    if mode == "ours":
        outcomes = replay_ours(corpus, marker_dir, "careful_child_")
        for outcome in outcomes:
            evaluation = outcome.pop("evaluation")
            outcome["statuses"] = [c.status for c in evaluation.replay.calls] if evaluation else None
    else:
        conversations = json.loads(Path(argv[4]).read_text(encoding="utf-8"))
        outcomes = replay_bfcl(corpus, marker_dir, "stock_bfcl_", conversations)
    Path(out_path).write_text(json.dumps({"preimported": missing, "outcomes": outcomes}), encoding="utf-8")


# --------------------------------------------------------------------------- #
# Fixtures                                                                     #
# --------------------------------------------------------------------------- #


def _sandbox(base: Path, name: str) -> dict[str, str]:
    root = base / name
    for sub in ("cwd", "home", "markers", "bfcl"):
        (root / sub).mkdir(parents=True)
    return {sub: str(root / sub) for sub in ("cwd", "home", "markers", "bfcl")} | {"root": str(root)}


def _start_worker(mode: str, box: dict[str, str], extra: list[str], pythonpath: str | None) -> subprocess.Popen:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": box["home"],
        "TMPDIR": box["root"],
        "BFCL_PROJECT_ROOT": box["bfcl"],
        "PYTHONDONTWRITEBYTECODE": "1",
        "HF_HUB_OFFLINE": "1",
        "NO_PROXY": "*",
        "LANG": "C.UTF-8",
    }
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    out = os.path.join(box["root"], "out.json")
    code = "import sys; sys.path.insert(0, sys.argv[1]); import test_security; test_security.worker_main(sys.argv[2:])"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            code,
            str(ROOT / "tests" / "execution"),
            mode,
            str(CORPUS_PATH),
            box["markers"],
            out,
            *extra,
        ],
        cwd=box["cwd"],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    proc.out_path = out  # type: ignore[attr-defined]
    return proc


def _finish(proc: subprocess.Popen) -> dict[str, Any]:
    try:
        stdout, stderr = proc.communicate(timeout=WORKER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        pytest.fail(f"worker did not finish in {WORKER_TIMEOUT_S} s")
    assert proc.returncode == 0, (stdout[-2000:], stderr[-4000:])
    data = json.loads(Path(proc.out_path).read_text(encoding="utf-8"))  # type: ignore[attr-defined]
    assert not data["preimported"], f"target modules imported before the run: {data['preimported']}"
    assert [o["name"] for o in data["outcomes"]] == NAMES
    return data


@pytest.fixture(scope="module")
def workers(tmp_path_factory):
    """Both child runs, started at once so they overlap with the in-process run."""
    from pytest_careful.data import dataset

    base = tmp_path_factory.mktemp("security")
    conversations = {}
    for cid in sorted({e["conversation"] for e in CORPUS}):
        conv = dataset.get(cid)
        conversations[cid] = {
            "initial_config": json.loads(json.dumps(dict(conv.initial_config))),
            "involved_classes": list(conv.involved_classes),
            "long_context": conv.long_context,
        }
    conv_path = base / "conversations.json"
    conv_path.write_text(json.dumps(conversations), encoding="utf-8")
    ours_box, bfcl_box = _sandbox(base, "ours"), _sandbox(base, "bfcl")
    started = {
        "ours": _start_worker("ours", ours_box, [], str(ROOT)),
        "bfcl": _start_worker("bfcl", bfcl_box, [str(conv_path)], None),
    }
    yield started
    for proc in started.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()


@pytest.fixture(scope="module")
def in_process(workers, tmp_path_factory):
    """pytest-careful's run of the corpus in this process, by entry name."""
    box = _sandbox(tmp_path_factory.mktemp("security-inproc"), "inproc")
    preimported = [m for m in TARGET_MODULES if m in sys.modules]
    assert not preimported, f"target modules already imported here, the module check would prove nothing: {preimported}"
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(box["cwd"])
        outcomes = replay_ours(CORPUS, box["markers"], "careful_sec_")
    by_name = {o["name"]: o for o in outcomes}
    assert len(by_name) == len(CORPUS)
    return by_name


# --------------------------------------------------------------------------- #
# Tests                                                                        #
# --------------------------------------------------------------------------- #


@pytest.mark.usefixtures("workers")  # the child runs start first and overlap with everything
def test_corpus_is_well_formed():
    from pytest_careful.common import bfcl as _bfcl
    from pytest_careful.data import dataset
    from pytest_careful.execution.decoding import decoder, passthrough_decoder, registry_keys

    registry = _bfcl.model_registry()
    for key, (benign, class_path, model_name, is_fc_model) in DECODERS.items():
        dec = passthrough_decoder() if key == "passthrough" else decoder(key)
        assert dec.decode_step(benign) == ["ls()"], key
        if key != "passthrough":
            config = registry[key]
            handler = config.model_handler
            assert (f"{handler.__module__}:{handler.__name__}", config.model_name, config.is_fc_model) == (
                class_path,
                model_name,
                is_fc_model,
            ), key

    assert len(CORPUS) >= 50
    assert len(set(NAMES)) == len(NAMES)
    keys = set(registry_keys()) | {"passthrough"}
    families = {"passthrough": 0, "fc": 0, "prompting": 0, "llama": 0}
    for entry in CORPUS:
        assert entry["decoder"] in keys, entry["name"]
        assert entry["expect"] in EXPECTATIONS, entry["name"]
        dataset.get(entry["conversation"])
        assert isinstance(entry["result"], list) and all(isinstance(t, list) for t in entry["result"])
        step_type = type(DECODERS[entry["decoder"]][0])
        assert all(type(step) is step_type for turn in entry["result"] for step in turn), entry["name"]
        for kind in entry["payload marker"]:
            assert kind in ("marker", "socket") or kind.removeprefix("module:") in TARGET_MODULES, entry["name"]
        if "marker" in entry["payload marker"]:
            assert "@MARKER@" in json.dumps(entry["result"]), entry["name"]
        if entry["payload marker"]:
            assert entry["bfcl_executes"], entry["name"]
        if entry["expect"] == "data":
            assert set(entry["data"]) == {"argument", "value"}, entry["name"]
        prefix = entry["name"].split("_", 1)[0]
        families[{"pt": "passthrough", "fc": "fc", "pr": "prompting", "ll": "llama"}[prefix]] += 1
    assert all(n >= 8 for n in families.values()), families
    # Every payload kind is covered.
    text = json.dumps(CORPUS)
    for needle in ("open(", "__import__", "__subclasses__", "lambda", "@HUGE@", "socket", "1+__import__"):
        assert needle in text, needle


@pytest.mark.parametrize("name", NAMES)
def test_nothing_runs_in_process(in_process, name):
    outcome = in_process[name]
    assert outcome["events"] == [], f"{name}: dangerous operations attempted: {outcome['events']}"
    assert not outcome["marker"], f"{name}: marker file created"
    assert outcome["new_modules"] == [], f"{name}: imported {outcome['new_modules']}"


@pytest.mark.parametrize("name", NAMES)
def test_hostile_calls_fail(in_process, name, request):
    entry = CORPUS[NAMES.index(name)]
    if entry.get("known_bug"):
        request.applymarker(pytest.mark.xfail(strict=True, reason=entry["known_bug"]))
    outcome = in_process[name]
    assert outcome["error"] is None, f"evaluate raised: {outcome['error']}"
    evaluation = outcome["evaluation"]
    calls = evaluation.replay.calls
    assert len(evaluation.decoded) == len(entry["result"])
    if entry["expect"] == "undecodable":
        assert all(turn == [] for turn in evaluation.decoded), evaluation.decoded
        assert calls == []
    elif entry["expect"] == "failed":
        assert calls, "the hostile step did not decode; the corpus expects it to reach the executor"
        for call in calls:
            assert call.status in FAILED_STATUSES, (call.call[:200], call.status, call.result[:200])
            assert call.result.startswith("Error during execution: ")
            assert call.classes == (), f"a simulator method ran: {call.classes}"
            assert not call.changes
    else:  # "data": hostile text passed to a real method as a plain string
        expected = materialise(
            entry["data"]["value"], replacements_for(entry, outcome["marker_path"], outcome["model_name"])
        )
        values = [c.arguments.get(entry["data"]["argument"]) for c in calls if c.classes]
        assert expected in values, (expected, values)


def test_hostile_input_is_scored_within_the_default_budget(in_process):
    """10 MB strings and deep nesting are scored within the calls and memory an item allows, as
    counted (how long each takes: ``bench/hostile.py --corpus``, never a wall-clock bound here)."""
    over = {n: in_process[n]["error"] for n in NAMES if (in_process[n]["error"] or "").startswith("ResourceLimit")}
    assert not over, over
    assert sum(in_process[n]["counted"]["calls"] for n in NAMES) > 0  # the budget did count them


def test_monitor_sees_and_blocks_in_this_process(tmp_path):
    """The in-process detectors work: without this, a clean run would prove nothing."""
    marker = marker_for(str(tmp_path), 0)
    before = set(sys.modules)
    with Monitor.get().watch(str(tmp_path), block_all=True) as events:
        with pytest.raises(PermissionError):
            open(marker, "w")
        with pytest.raises(PermissionError):
            os.system("true")
        with pytest.raises(PermissionError):
            exec("0")  # stands for any eval/exec of text
        with pytest.raises(PermissionError):
            __import__(TARGET_MODULES[0])
    assert events == [f"open {marker}", "os.system", "exec of code from '<string>'", f"import {TARGET_MODULES[0]}"]
    assert not os.path.exists(marker)
    assert new_target_modules(before) == []


def test_nothing_runs_in_a_child_process(workers):
    data = _finish(workers["ours"])
    bad = [
        (o["name"], o["events"], o["marker"], o["new_modules"])
        for o in data["outcomes"]
        if o["events"] or o["marker"] or o["new_modules"]
    ]
    assert not bad, bad
    by_name = {o["name"]: o for o in data["outcomes"]}
    for entry in CORPUS:
        statuses = by_name[entry["name"]]["statuses"]
        if statuses is not None and entry["expect"] == "failed":
            assert all(s in FAILED_STATUSES for s in statuses), (entry["name"], statuses)
        if statuses is not None and entry["expect"] == "undecodable":
            assert statuses == [], (entry["name"], statuses)
    crashed = {o["name"] for o in data["outcomes"] if o["error"]}
    assert crashed == {e["name"] for e in CORPUS if e.get("known_bug")}, crashed


def test_stock_bfcl_runs_the_payloads(workers):
    """The same corpus through bfcl-eval itself: the payloads are live, the detectors see them."""
    data = _finish(workers["bfcl"])
    by_name = {o["name"]: o for o in data["outcomes"]}
    missing = []
    for entry in CORPUS:
        if not entry["bfcl_executes"]:
            continue
        outcome = by_name[entry["name"]]
        for kind in entry["payload marker"]:
            if kind == "marker":
                seen = outcome["marker"]
            elif kind == "socket":
                seen = any(e.startswith("socket.") for e in outcome["events"])
            else:
                seen = kind.removeprefix("module:") in outcome["new_modules"]
            if not seen:
                missing.append((entry["name"], kind, outcome))
        if not entry["payload marker"]:
            # No evidence to look for (private-method call): it must at least have run a call.
            assert outcome["calls"] > 0, entry["name"]
    assert not missing, missing
    executed = [o["name"] for o in data["outcomes"] if o["marker"]]
    assert len(executed) >= 40, executed
