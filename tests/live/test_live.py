"""Live runs through BFCL's own loop: the executor bridge, scripted models, result files.

bfcl-eval's own evaluator (a child process) is the oracle for the result files
the loop writes: they must be readable by it unchanged and get the verdicts we give.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from careful_cli import careful_command

from conftest import run_oracle
from pytest_careful.data import dataset
from pytest_careful.data.result_files import read_result_file
from pytest_careful.data.result_store import ResultStore
from pytest_careful.effects import declarations
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.execution.decoding import decoder
from pytest_careful.live import bridge, runner
from pytest_careful.live.backends import scripted

DECL = declarations.load()
# bfcl-eval registry keys whose decoders read the scripted styles (OpenAI FC / prompting).
ORACLE_DECODER = {False: "gpt-4.1-2025-04-14-FC", True: "gpt-4.1-2025-04-14"}


def _run(handle: str, conversation_id: str, condition: str = "standard") -> runner.LiveRun:
    return runner.run(scripted.make_handler(handle), dataset.get(conversation_id), runner.RunProtocol(condition, DECL))


def test_executor_outside_a_conversation_is_refused() -> None:
    bridge.install()
    from bfcl_eval.model_handler import base_handler

    with pytest.raises(bridge.OutsideConversation):
        base_handler.execute_multi_turn_func_call(["ls()"], {}, ["GorillaFileSystem"], "m", "multi_turn_base_0")


def test_repeated_runs_do_not_share_state() -> None:
    # bfcl-eval's executor keys instances by model and id in module globals: a
    # second run of the same conversation would start from the first one's state.
    handler = scripted.make_handler("scripted:reference")
    conversation = dataset.get("multi_turn_base_0")
    first = runner.run(handler, conversation, runner.RunProtocol("standard", DECL))
    second = runner.run(handler, conversation, runner.RunProtocol("standard", DECL))
    assert first.entry == second.entry
    ok = evaluate(conversation, second.entry["result"], decoder("scripted:reference"))
    assert ok.verdict.valid, ok.verdict


def test_bfcl_stock_executor_would_leak_state_between_runs() -> None:
    """The hazard the bridge removes, shown on bfcl-eval's own function (in a child)."""
    code = (
        "import os, tempfile; os.environ['BFCL_PROJECT_ROOT']=tempfile.mkdtemp()\n"
        "from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import execute_multi_turn_func_call as ex\n"
        "cfg={'GorillaFileSystem': {'root': {'w': {'type': 'directory', 'contents': {}}}}}\n"
        "ex(['mkdir(dir_name=\"x\")'], cfg, ['GorillaFileSystem'], 'm', 'multi_turn_base_0')\n"
        "print(ex(['ls()'], cfg, ['GorillaFileSystem'], 'm', 'multi_turn_base_0')[0][0])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "x" in out  # a "fresh" second run sees the first run's directory


@pytest.mark.parametrize("prompting", [False, True], ids=["fc", "prompting"])
def test_reference_policy_result_file_matches_bfcl_evaluate(tmp_path: Path, prompting: bool) -> None:
    handle = "scripted:reference" + ("-prompting" if prompting else "")
    store = ResultStore(tmp_path, handle.replace(":", "_"))
    ids = [f"multi_turn_base_{i}" for i in range(0, 200, 20)] + ["multi_turn_miss_func_3", "multi_turn_long_context_5"]
    for conversation_id in ids:
        live = _run(handle, conversation_id)
        store.append(dataset.category_of(conversation_id), live.entry)
    ours, oracle_cases = {}, []
    for category in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_long_context"):
        entries, problems = read_result_file(store.path(category), category)
        assert not problems
        for e in entries:
            ours[e.id] = evaluate(dataset.get(e.id), e.result, decoder(handle), entry=e).verdict
            oracle_cases.append(
                {
                    "id": e.id,
                    "result": e.result,
                    "decoder": ORACLE_DECODER[prompting],
                    "model_name": ORACLE_DECODER[prompting],
                }
            )
    oracle = {o["id"]: o for o in run_oracle(oracle_cases)}
    assert set(oracle) == set(ids)
    for conversation_id, verdict in ours.items():
        assert oracle[conversation_id]["valid"] == verdict.valid, conversation_id
        assert verdict.valid, (conversation_id, verdict)


def test_misbehaving_policies_through_the_real_loop() -> None:
    loop = _run("scripted:loop", "multi_turn_base_1")
    # BFCL's loop force-quits after MAXIMUM_STEP_LIMIT steps and logs it.
    from bfcl_eval.constants.default_prompts import MAXIMUM_STEP_LIMIT

    assert len(loop.entry["result"]) < dataset.get("multi_turn_base_1").n_turns
    assert len(loop.entry["result"][0]) == MAXIMUM_STEP_LIMIT + 1
    verdict = evaluate(dataset.get("multi_turn_base_1"), loop.entry["result"], decoder("scripted:loop")).verdict
    assert verdict.error_type == "multi_turn:force_terminated"

    unasked = _run("scripted:destructive", "multi_turn_base_0")
    first_step = unasked.entry["result"][0][0]
    reference_turn0 = dataset.get("multi_turn_base_0").ground_truth[0]
    assert len(first_step) == len(reference_turn0) + 1
    [(name, _)] = first_step[0].items()  # the unasked call comes first
    assert name in DECL.boundary("final")


def test_asking_policy_ends_the_turn_under_standard() -> None:
    live = _run("scripted:ask", "multi_turn_base_0")
    texts = [s for turn in live.entry["result"] for s in turn if isinstance(s, str)]
    assert any("Please confirm" in t for t in texts)
    assert not any(
        r.get("role") == "user"
        for turn in live.entry["inference_log"]
        if isinstance(turn, dict)
        for k, step in turn.items()
        if k.startswith("step_")
        for r in step
    )


def _cli(tmp_path: Path, *args: str) -> list[str]:
    return careful_command(tmp_path, *args)


def test_sigkill_mid_run_then_rerun_loses_and_duplicates_nothing(tmp_path: Path) -> None:
    args = _cli(tmp_path, "--careful-model=scripted:reference", "--careful-category=base", "-p", "no:xdist")
    path = ResultStore(tmp_path / "result" / "standard", "scripted_reference").path("multi_turn_base")
    proc = subprocess.Popen(
        args, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if path.exists() and path.read_bytes().count(b"\n") >= 40:
            break
        time.sleep(0.005)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = path.read_bytes().count(b"\n")
    assert 40 <= before < 200, f"kill landed outside the run ({before} lines)"

    rerun = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stdout[-3000:]
    lines = [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip().startswith("{")]
    ids = [e["id"] for e in lines if isinstance(e.get("result"), list)]
    assert sorted(ids) == sorted(f"multi_turn_base_{i}" for i in range(200))  # nothing lost, nothing twice
    card = json.loads((tmp_path / "cards/scripted_reference/standard/scorecard.json").read_text())
    resumed = sum(r["resumed"] for r in card["rows"])
    assert resumed == len(ids) - (len(ids) - before) >= 40  # completed ones were read back, not rerun


def test_errored_entries_are_retried_not_served(tmp_path: Path) -> None:
    store = ResultStore(tmp_path / "result" / "standard", "scripted_reference")
    store.append(
        "multi_turn_base", {"id": "multi_turn_base_0", "result": "Error during inference: boom", "error": "APIError"}
    )
    proc = subprocess.run(
        _cli(tmp_path, "--careful-model=scripted:reference", "-p", "no:xdist", "multi_turn_base_0[standard]"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "multi_turn_base_0" in store.completed("multi_turn_base")
    card = json.loads((tmp_path / "cards/scripted_reference/standard/scorecard.json").read_text())
    assert card["rows"][0]["resumed"] is False and card["rows"][0]["bfcl"]["valid"]
    # The session compacted the file: one entry per id, as bfcl evaluate wants it.
    lines = [json.loads(x) for x in store.path("multi_turn_base").read_text().splitlines()]
    assert [(e["id"], isinstance(e["result"], list)) for e in lines] == [("multi_turn_base_0", True)]


def test_rescoring_an_uncompacted_log_scores_the_retried_entry(tmp_path: Path) -> None:
    """A run killed before compaction leaves the error line and the retried one: the latter counts."""
    store = ResultStore(tmp_path, "scripted_reference")
    store.append(
        "multi_turn_base", {"id": "multi_turn_base_0", "result": "Error during inference: x", "error": "APIError"}
    )
    store.append("multi_turn_base", _run("scripted:reference", "multi_turn_base_0").entry)
    entries, problems = read_result_file(store.path("multi_turn_base"), "multi_turn_base")
    assert not problems and len(entries) == 1 and isinstance(entries[0].result, list)


def test_resuming_under_other_settings_is_refused(tmp_path: Path) -> None:
    first = subprocess.run(
        _cli(
            tmp_path,
            "--careful-model=scripted:ask-wrong",
            "--careful-protocol=confirm",
            "-p",
            "no:xdist",
            "multi_turn_base_0",
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert first.returncode == 0, first.stdout[-2000:]
    other = subprocess.run(
        _cli(
            tmp_path,
            "--careful-model=scripted:ask-wrong",
            "--careful-protocol=confirm",
            "--careful-user-script=asking_sentences_only",
            "multi_turn_base_0",
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert other.returncode == 4
    assert "user_script='default'" in other.stderr and "user_script='asking_sentences_only'" in other.stderr
    same = subprocess.run(
        _cli(
            tmp_path,
            "--careful-model=scripted:ask-wrong",
            "--careful-protocol=confirm",
            "-p",
            "no:xdist",
            "multi_turn_base_0",
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert same.returncode == 0 and "1 of 1 conversations read back" in same.stdout


def test_backend_options_on_the_wrong_backend_are_usage_errors(tmp_path: Path) -> None:
    for args, message in (
        (["--careful-budget-usd=5"], "covers Claude models only"),
        (["--careful-endpoint=http://127.0.0.1:1/v1"], "for vLLM-served models"),
    ):
        proc = subprocess.run(
            _cli(tmp_path, "--careful-model=scripted:reference", *args, "multi_turn_base_0"),
            cwd=tmp_path,
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 4 and message in proc.stderr


def test_unknown_scripted_model_is_a_usage_error(tmp_path: Path) -> None:
    proc = subprocess.run(_cli(tmp_path, "--careful-model=scripted:nope"), cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode == 4
    assert "unknown scripted model 'scripted:nope'" in proc.stderr


def test_unknown_model_lists_close_matches(tmp_path: Path) -> None:
    proc = subprocess.run(
        _cli(tmp_path, "--careful-model=Qwen3-8", "--collect-only"), cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 4
    assert "close matches" in proc.stderr and "Qwen/Qwen3-8B" in proc.stderr


@pytest.mark.parametrize(
    "name, key",
    [
        ("Qwen3-8B-FC", "Qwen/Qwen3-8B-FC"),
        ("qwen3-8b-prompt", None),
        ("Qwen3-8B-prompt", "Qwen/Qwen3-8B"),
        ("qwen/qwen3-8b-fc", "Qwen/Qwen3-8B-FC"),
        ("Qwen/Qwen3-8B", "Qwen/Qwen3-8B"),
        ("bfcl:qwen3-8b", "qwen3-8b"),
        ("Qwen3-8B", "Qwen/Qwen3-8B"),
        ("Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-8B-Instruct"),
        ("qwen3-8b", None),
        ("claude-haiku-4-5-20251001-FC", "claude-haiku-4-5-20251001-FC"),
    ],
)
def test_model_names_resolve_to_one_key_or_are_refused(name: str, key: str | None) -> None:
    """Suffixes choose the mode; case is ignored among local-model keys only; several matches are
    refused with spellings that each resolve to one key (checked against bfcl-eval's own registry)."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING

    from pytest_careful.live.handles import HandleError, resolve

    if key is not None:
        handle = resolve(name, None)
        assert handle.registry_key == key and key in MODEL_CONFIG_MAPPING
        return
    with pytest.raises(HandleError, match="is ambiguous") as refused:
        resolve(name, None)
    spellings = re.findall(r"(?:^|; |matches )(\S+) \(handler", str(refused.value))
    assert len(spellings) >= 2
    keys = [resolve(s, None).registry_key for s in spellings]  # each spelling offered resolves, alone
    assert len(set(keys)) == len(keys)
    config = MODEL_CONFIG_MAPPING
    assert {config[k].is_fc_model for k in keys} == {True, False} or len(
        {config[k].model_handler.__module__.split(".")[2] for k in keys}
    ) > 1  # mode or backend differ


def test_a_name_without_a_mode_is_bfcls_unsuffixed_key_and_the_fc_key_is_named() -> None:
    """``Qwen3-8B`` (the brief's own command) is ``Qwen/Qwen3-8B``, which BFCL runs in prompting mode;
    the line printed before the run says so and names the FC key beside it; a named mode names none."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING

    from pytest_careful.live.handles import resolution_line, resolve

    line = resolution_line(resolve("Qwen3-8B", None))
    assert (
        not MODEL_CONFIG_MAPPING["Qwen/Qwen3-8B"].is_fc_model and MODEL_CONFIG_MAPPING["Qwen/Qwen3-8B-FC"].is_fc_model
    )
    assert ", prompting, " in line and "--careful-model=Qwen/Qwen3-8B-FC" in line
    assert "FC mode" not in resolution_line(resolve("Qwen3-8B-prompt", None))
    assert "FC mode" not in resolution_line(resolve("Qwen3-8B-FC", None))


def test_leaderboard_names_resolve_as_bfcl_eval_names_them() -> None:
    """A name copied from the leaderboard (BFCL's ``display_name``: ``Claude-Sonnet-4-5-20250929 (FC)``,
    ``Llama-3.1-8B-Instruct (Prompt)``) resolves to the one key it names, or is refused as ambiguous
    when several keys show it (checked against bfcl-eval's imported registry); a stray blank is dropped."""
    import collections

    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING

    from pytest_careful.live.handles import HandleError, registry_key

    shown = collections.Counter(config.display_name for config in MODEL_CONFIG_MAPPING.values())
    for key, config in MODEL_CONFIG_MAPPING.items():
        if shown[config.display_name] == 1:
            assert registry_key(config.display_name) == key
            assert registry_key(config.display_name.upper() + " ") == key
        else:
            with pytest.raises(HandleError, match="is ambiguous"):
                registry_key(config.display_name)
    assert registry_key(" Qwen/Qwen3-8B-FC\n") == "Qwen/Qwen3-8B-FC"
    # Without its mode, a leaderboard name that no key spells (the key is Salesforce/Llama-xLAM-...).
    assert MODEL_CONFIG_MAPPING[registry_key("xLAM-2-8b-fc-r")].display_name.startswith("xLAM-2-8b-fc-r (")


def test_a_handler_is_looked_for_among_local_model_keys(tmp_path: Path) -> None:
    """--careful-handler prompts local weights: API keys are no candidates (``qwen3-8b`` is the
    local FC-or-prompting question, not Alibaba's API), and naming one says why it cannot be used."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING

    from pytest_careful.live.handles import HandleError, resolve

    (tmp_path / "config.json").write_text("{}")
    chosen = [resolve(str(tmp_path), name).registry_key for name in ("qwen3-8b", "qwen3-8b-fc")]
    assert all("local_inference" in MODEL_CONFIG_MAPPING[k].model_handler.__module__ for k in chosen)
    assert [MODEL_CONFIG_MAPPING[k].is_fc_model for k in chosen] == [False, True]
    with pytest.raises(HandleError, match="an API handler, not a local-model"):
        resolve(str(tmp_path), "claude-haiku-4-5-20251001-FC")


@pytest.mark.parametrize(
    "name, local, other",
    [
        ("Qwen3-9B-FC", True, "qwen3-8b-FC"),  # Hugging Face's spelling: vLLM's keys first, Alibaba's API after
        ("qwen3-9b-FC", False, None),  # the API's own id spelled close: the API's keys
        ("Llama-3.1-9B-Instruct", True, None),
        ("claude-sonet-4-5-FC", False, None),
    ],
)
def test_close_matches_of_the_kind_of_model_asked_for_come_first(name: str, local: bool, other: str | None) -> None:
    """A name written as Hugging Face names models asks for local weights, a vendor's lower-case id for
    a hosted API: the suggestions of that kind come first (the kind by bfcl-eval's own handler modules)."""
    from bfcl_eval.constants.model_config import MODEL_CONFIG_MAPPING

    from pytest_careful.live.handles import HandleError, registry_key

    def is_local(key: str) -> bool:
        return "local_inference" in MODEL_CONFIG_MAPPING[key].model_handler.__module__

    with pytest.raises(HandleError) as refused:
        registry_key(name)
    message = str(refused.value)
    suggested = re.search(r"did you mean (\S+)\?", message)
    close = re.search(r"\(close matches: ([^)]*)\)", message)
    assert suggested is not None and close is not None, message
    assert is_local(suggested[1]) == local, message
    kinds = [is_local(k) == local for k in close[1].split(", ") if k in MODEL_CONFIG_MAPPING]
    assert kinds == sorted(kinds, reverse=True), message  # every one of that kind before any other
    if other is not None:
        assert other in close[1].split(", "), message  # the other kind is still offered, after


def test_a_local_model_is_labelled_by_its_folder_name(tmp_path: Path) -> None:
    """``--careful-model=/path/to/DIR``: the scorecard folder is ``DIR``'s name, as its results' folder
    begins with it (it was the path made one component: ``_tmp_..._models_DIR``)."""
    from pytest_careful.common.bfcl import CATEGORIES
    from pytest_careful.live.source import open_live
    from pytest_careful.sources.run_config import RunConfig

    model = tmp_path / "models" / "SmolLM2-135M-Instruct-b179c9523d0e"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    options = RunConfig(
        active=True,
        model=str(model),
        results=None,
        decoder=None,
        protocols=("standard",),
        categories=CATEGORIES,
        boundary="final",
        detector="strict",
        gate="safe",
        scorecards=tmp_path / "cards",
        baseline=None,
        min_safe=None,
        min_bfcl=None,
        fail_on_regression=None,
        handler="Qwen/Qwen3-8B-FC",
        endpoint=("http://127.0.0.1:9/v1",),  # never reached: a worker's source, nothing runs
        output=tmp_path / "result",
        worker=True,
        collect_only=True,
    )
    source = open_live(options)
    assert source.default_label() == "SmolLM2-135M-Instruct-b179c9523d0e"
    assert source.folders.store("standard").model_dir.name.startswith("SmolLM2-135M-Instruct-b179c9523d0e-")
    # A model named by a registry key keeps its name, made one path component.
    named = open_live(dataclasses.replace(options, model="scripted:ask", handler=None, endpoint=()))
    assert named.default_label() == "scripted_ask"


def test_the_resolution_is_printed_before_anything_runs(tmp_path: Path) -> None:
    proc = subprocess.run(
        _cli(tmp_path, "--careful-model=scripted:reference", "-p", "no:xdist", "multi_turn_base_0"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    lines = proc.stdout.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith("careful: model scripted:reference -> ")]
    ran = [i for i, line in enumerate(lines) if "multi_turn_base_0" in line or "passed" in line]
    assert proc.returncode == 0 and said and ran and said[0] < ran[0], proc.stdout[-2000:]


def test_hints_reach_the_loop_including_functions_revealed_later() -> None:
    """Under hints the loop's tools carry the MCP hints, the held-out ones too; nothing else differs."""
    seen: list[list[str]] = []
    base = type(scripted.make_handler("scripted:reference"))

    class Recording(base):  # type: ignore[misc,valid-type]
        def _compile_tools(self, inference_data, test_entry):
            seen.append([d["description"] for d in test_entry["function"]])
            return super()._compile_tools(inference_data, test_entry)

    conversation = dataset.get("multi_turn_miss_func_0")
    hinted = runner.run(Recording("reference", False), conversation, runner.RunProtocol("hints", DECL))
    hinted_tools, seen[:] = list(seen), []
    plain = runner.run(Recording("reference", False), conversation, runner.RunProtocol("standard", DECL))
    assert len(hinted_tools) == len(seen) == 2  # compiled at the start and when functions are revealed
    assert len(hinted_tools[1]) > len(hinted_tools[0])
    for with_hint, without in zip(hinted_tools[-1], seen[-1]):
        assert with_hint.startswith(without) and "destructiveHint=" in with_hint[len(without) :]
    assert hinted.entry["result"] == plain.entry["result"]


@pytest.mark.parametrize(
    "category", ["multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param", "multi_turn_long_context"]
)
def test_live_entries_are_what_bfcl_generate_loads(category: str) -> None:
    """The loop gets the entry ``bfcl generate`` gives it (language hint included), for every conversation."""
    from bfcl_eval.utils import load_dataset_entry

    theirs = {e["id"]: e for e in load_dataset_entry(category)}
    for conversation in dataset.load([category]):
        ours = runner.prompt_entry(conversation, runner.RunProtocol("standard", DECL))
        assert json.dumps(ours, sort_keys=True) == json.dumps(theirs[conversation.id], sort_keys=True)


def test_vllm_model_without_vllm_installed_is_a_usage_error(tmp_path: Path) -> None:
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    proc = subprocess.run(
        _cli(tmp_path, "--careful-model=Qwen3-8B-FC", "multi_turn_base_0"), cwd=tmp_path, capture_output=True, text=True
    )
    assert proc.returncode == 4
    assert "runs on vLLM, but" in proc.stdout + proc.stderr and "--careful-endpoint" in proc.stdout + proc.stderr


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]])
def test_api_model_without_its_key_is_one_usage_error(tmp_path: Path, xdist: list[str]) -> None:
    """Every conversation would fail alike: the controller says so once, before any item runs."""
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    proc = subprocess.run(
        _cli(tmp_path, "--careful-model=gpt-4.1-2025-04-14-FC", *xdist, "multi_turn_base_0", "multi_turn_base_1"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env=env,
    )
    output = proc.stdout + proc.stderr
    assert proc.returncode == 4 and "Traceback" not in output and "INTERNALERROR" not in output
    assert output.count("cannot set up gpt-4.1-2025-04-14-FC's handler") == 1 and "OPENAI_API_KEY" in output
    assert "failed" not in proc.stdout and "passed" not in proc.stdout


@pytest.mark.parametrize(
    "name", ["gpt-4.1-2025-04-14-FC", "Qwen3-8B-FC", "Qwen3-8B", "claude-haiku-4-5-20251001-FC", "scripted:ask"]
)
def test_each_backend_builds_the_handler_bfcl_generate_builds(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``ModelHandle.build`` asks the handle's backend; what it builds is what ``bfcl generate`` builds
    (bfcl-eval's own ``build_handler``, the oracle), Claude's under the plugin's subclass of it."""
    from bfcl_eval._llm_response_generation import build_handler
    from bfcl_eval.model_handler.base_handler import BaseHandler
    from bfcl_eval.model_handler.local_inference.base_oss_handler import OSSHandler

    from pytest_careful.live.backends.registry import backend
    from pytest_careful.live.handles import resolve

    monkeypatch.setenv("OPENAI_API_KEY", "sk-not-used")  # the clients are built, never called
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-not-used")
    handle = resolve(name, None)
    ours, chosen = handle.build(), backend(handle.kind)
    if not chosen.registered:
        assert isinstance(ours, BaseHandler) and type(ours).__module__ == scripted.__name__
        return
    theirs = build_handler(handle.registry_key, handle.temperature)
    assert isinstance(ours, type(theirs)) and (type(ours) is type(theirs)) == (handle.kind != "claude")
    for attribute in ("model_name", "registry_name", "temperature", "is_fc_model", "model_style"):
        assert getattr(ours, attribute) == getattr(theirs, attribute), attribute
    assert chosen.local_weights == isinstance(theirs, OSSHandler)  # --careful-handler's candidates
    for handler in (ours, theirs):  # closed now, not by the SDK's __del__ at interpreter exit
        close = getattr(getattr(handler, "client", None), "close", None)
        if callable(close):
            close()


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_collect_only_writes_nothing(tmp_path: Path, workers: list[str]) -> None:
    """``--collect-only`` lists the items of a live run; it creates no output folder, no session and no
    settings file (it did: ``./result/.careful/sessions/...`` and ``careful_settings.json``)."""
    done = subprocess.run(
        [*_cli(tmp_path, "--careful-model=scripted:ask", "--careful-category=base", "--collect-only"), *workers],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "multi_turn_base_199[standard]" in done.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == []
