"""The confirm protocol through BFCL's real loops, with scripted models on BFCL's simulators."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest
from rows import score_row

from pytest_careful.data import dataset
from pytest_careful.data.result_store import ResultStore
from pytest_careful.effects import declarations
from pytest_careful.evaluation.evaluate import evaluate
from pytest_careful.execution.decoding import decoder
from pytest_careful.live import confirm, runner
from pytest_careful.live.backends import scripted
from pytest_careful.protocols import confirm_log, scripted_user

DECL = declarations.load()
STYLES = ["", "-prompting"]


def _run(handle: str, conversation_id: str, condition: str) -> runner.LiveRun:
    return runner.run(scripted.make_handler(handle), dataset.get(conversation_id), runner.RunProtocol(condition, DECL))


def _score(handle: str, conversation_id: str, live: runner.LiveRun, condition: str) -> dict:
    conversation = dataset.get(conversation_id)
    evaluation = evaluate(conversation, live.entry["result"], decoder(handle))
    found = (
        confirm_log.confirmations(live.entry["inference_log"], evaluation.run.raw_index)
        if condition == "confirm"
        else None
    )
    return score_row(evaluation, DECL, confirmations=found)


def _answers(live: runner.LiveRun) -> list[tuple[int, str, str]]:
    """(turn, kind, message) of every scripted answer in the inference log."""
    turns = [t for t in live.entry["inference_log"] if isinstance(t, dict)]
    return [
        (i, r[confirm_log.ANSWER_LOG_KEY], r["content"])
        for i, t in enumerate(turns)
        for k, step in t.items()
        if k.startswith("step_")
        for r in step
        if isinstance(r, dict) and confirm_log.ANSWER_LOG_KEY in r
    ]


@pytest.mark.parametrize("name", list(confirm.LOOPS))
def test_patch_changes_only_the_two_exit_points(name: str) -> None:
    original = confirm.loop_tree(name)
    patched = confirm.patch_tree(original, confirm.LOOPS[name])
    # Put each hook back to a plain break: what is left must be bfcl-eval's loop.
    restored = confirm.patch_tree(original, confirm.LOOPS[name])
    for body, index in confirm.exit_points(original):
        assert isinstance(body[index], ast.Break)
    hooks = [
        n
        for n in ast.walk(restored)
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "_careful_reply" for t in n.targets)
    ]
    assert len(hooks) == 2
    for parent in ast.walk(restored):
        for field in ("body", "orelse", "handlers", "finalbody"):
            block = getattr(parent, field, None)
            if isinstance(block, list) and any(h in block for h in hooks):
                at = next(i for i, s in enumerate(block) if s in hooks)
                block[at : at + 3] = [ast.Break()]  # assign + if + break -> break
    assert ast.dump(restored) == ast.dump(original)
    assert ast.dump(patched) != ast.dump(original)


@pytest.mark.parametrize("style", STYLES, ids=["fc", "prompting"])
def test_never_asking_model_writes_identical_result_under_both_protocols(style: str, tmp_path: Path) -> None:
    for conversation_id in (
        "multi_turn_base_0",
        "multi_turn_base_77",
        "multi_turn_miss_func_12",
        "multi_turn_miss_param_4",
        "multi_turn_long_context_9",
    ):
        for condition in ("standard", "confirm"):
            entry = _run("scripted:reference" + style, conversation_id, condition).entry
            ResultStore(tmp_path / condition, "model").append(dataset.category_of(conversation_id), entry)
    files = {c: sorted((tmp_path / c).rglob("*_result.json")) for c in ("standard", "confirm")}
    assert len(files["standard"]) == 4  # all four categories
    for standard, confirmed in zip(files["standard"], files["confirm"]):
        assert standard.name == confirmed.name and standard.read_bytes() == confirmed.read_bytes()


@pytest.mark.parametrize("style", STYLES, ids=["fc", "prompting"])
def test_asking_before_a_destructive_call_gains_under_confirm(style: str) -> None:
    handle = "scripted:ask" + style
    standard = _score(handle, "multi_turn_base_0", _run(handle, "multi_turn_base_0", "standard"), "standard")
    live = _run(handle, "multi_turn_base_0", "confirm")
    confirmed = _score(handle, "multi_turn_base_0", live, "confirm")
    assert not standard["bfcl"]["valid"] and standard["counts"]["asked"] > 0
    assert confirmed["bfcl"]["valid"] and confirmed["strict"]
    assert confirmed["counts"]["confirmed_destructive"] == confirmed["counts"]["destructive_calls"] > 0
    kinds = {kind for _, kind, _ in _answers(live)}
    assert kinds == {scripted_user.YES}
    # The answer is an ordinary user message in the chat the model saw next.
    assert all(message == scripted_user.YES_MESSAGE for _, _, message in _answers(live))


def test_asking_about_the_wrong_file_gets_no_and_the_request() -> None:
    live = _run("scripted:ask-wrong", "multi_turn_base_0", "confirm")
    answers = _answers(live)
    assert answers and all(kind == scripted_user.NO for _, kind, _ in answers)
    conversation = dataset.get("multi_turn_base_0")
    for turn, _, message in answers:
        request = confirm_log.request_text(conversation, turn)
        assert message == f"{scripted_user.NO_MESSAGE} {request}"
    assert _score("scripted:ask-wrong", "multi_turn_base_0", live, "confirm")["bfcl"]["valid"]


def test_asking_after_acting_is_a_closing_offer() -> None:
    live = _run("scripted:ask-after", "multi_turn_base_0", "confirm")
    assert _answers(live) == []
    texts = [s for turn in live.entry["result"] for s in turn if isinstance(s, str)]
    assert any("anything else?" in t for t in texts)


def test_asking_three_times_gets_two_answers() -> None:
    live = _run("scripted:ask-thrice", "multi_turn_base_0", "confirm")
    by_turn: dict[int, int] = {}
    for turn, _kind, _ in _answers(live):
        by_turn[turn] = by_turn.get(turn, 0) + 1
    assert by_turn and max(by_turn.values()) == scripted_user.MAX_ANSWERS_PER_TURN


def test_no_answer_where_the_reference_turn_makes_no_call() -> None:
    conversation = next(c for c in dataset.load(["multi_turn_miss_param"]) if any(not t for t in c.ground_truth))
    user = confirm.ConfirmUser(conversation, DECL.boundary("final"))
    silent = next(i for i, t in enumerate(conversation.ground_truth) if not t)
    assert user.reply(silent, "Could you please confirm which file?", {}, []) is None
    acting = next(i for i, t in enumerate(conversation.ground_truth) if t)
    assert user.reply(acting, "Could you please confirm which file?", {}, []) is not None


IDS = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]


def test_confirm_run_rescores_identically_and_baseline_comparison(tmp_path: Path) -> None:
    base = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--rootdir",
        str(tmp_path),
        "--careful-model=scripted:ask",
        "--careful-category=base",
        *IDS,
        f"--careful-output={tmp_path / 'result'}",
    ]
    standard = subprocess.run(
        [*base, "--careful-protocol=standard", f"--careful-scorecards={tmp_path / 's'}"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert standard.returncode == 1, standard.stdout[-2000:]  # asking ends turns: BFCL fails them
    live = subprocess.run(
        [
            *base,
            "--careful-protocol=confirm",
            f"--careful-scorecards={tmp_path / 'c'}",
            f"--careful-baseline={tmp_path / 's/scripted_ask/standard'}",
            "--careful-allow-partial-baseline",
        ],  # three conversations: a selection
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert "scripted user:" in live.stdout and "vs baseline" in live.stdout, live.stdout[-3000:]
    rescored = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            f"--careful-results={tmp_path / 'result/confirm'}",
            "--careful-model=scripted:ask",
            "--careful-protocol=confirm",
            "--careful-category=base",
            *IDS,
            f"--careful-scorecards={tmp_path / 'r'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    cards = [json.loads((tmp_path / d / "scripted_ask/confirm/scorecard.json").read_text()) for d in ("c", "r")]
    strip = ("resumed", "seconds")
    rows = [{r["id"]: {k: v for k, v in r.items() if k not in strip} for r in c["rows"]} for c in cards]
    assert rows[0] == rows[1] and len(rows[0]) == 3, rescored.stdout[-2000:]
    assert cards[0]["totals"]["all"]["answers"]["yes"] > 0


def test_stricter_scripts_reach_the_user_of_a_run() -> None:
    conversation = dataset.get("multi_turn_base_0")
    [mv] = [c for c in conversation.ground_truth[0] if c.startswith("mv(")]
    text = f"Next I would run {mv}. Should I go ahead? Please confirm."
    answers = {}
    for script in scripted_user.SCRIPTS:
        user = confirm.ConfirmUser(conversation, DECL.boundary("final"), script=script)
        reply = user.reply(0, text, {}, [])
        answers[script] = reply[0]["content"] if reply else None
    # The asking sentence itself names no destructive function: only the strictest script withholds.
    assert answers == {
        "default": scripted_user.YES_MESSAGE,
        "no_failure_yes": scripted_user.YES_MESSAGE,
        "asking_sentences_only": None,
    }


def test_user_script_option_reaches_the_source(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            "--careful-model=scripted:ask",
            "--careful-protocol=confirm",
            "--careful-user-script=asking_sentences_only",
            f"--careful-output={tmp_path / 'r'}",
            f"--careful-scorecards={tmp_path / 'c'}",
            "multi_turn_base_0",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:]
    card = json.loads((tmp_path / "c/scripted_ask/confirm/scorecard.json").read_text())
    assert card["rows"][0]["answers"]["yes"] == 2  # "shall I call mv() now?" names it in the question


def test_junit_carries_the_answers_and_resumption(tmp_path: Path) -> None:
    import xml.etree.ElementTree as ET

    args = [
        sys.executable,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "-q",
        "--rootdir",
        str(tmp_path),
        "--careful-model=scripted:ask",
        "--careful-protocol=confirm",
        f"--careful-output={tmp_path / 'r'}",
        f"--careful-scorecards={tmp_path / 'c'}",
        "multi_turn_base_0",
    ]
    for name in ("first.xml", "second.xml"):
        subprocess.run([*args, f"--junitxml={tmp_path / name}"], cwd=tmp_path, check=True, capture_output=True)
    props = [
        {p.get("name"): p.get("value") for p in ET.parse(tmp_path / n).iter("property")}
        for n in ("first.xml", "second.xml")
    ]
    assert props[0]["careful_answers_yes"] == "2" and props[0]["careful_confirmed_destructive"] == "2"
    assert (props[0]["careful_resumed"], props[1]["careful_resumed"]) == ("no", "yes")
