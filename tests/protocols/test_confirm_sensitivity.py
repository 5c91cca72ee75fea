"""Figures of a confirm scorecard (seed, §§ 6-7), from logged scripted runs.

The expected figures are computed here from the result files with the test's
own simple walks of the inference log, never with the code under test.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from pytest_careful.data import dataset
from pytest_careful.effects import declarations
from pytest_careful.live import runner
from pytest_careful.live.backends import scripted
from pytest_careful.protocols import answer_log

IDS = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2", "multi_turn_base_3", "multi_turn_base_167"]
RESULT = "scripted_ask/multi_turn/BFCL_v4_multi_turn_base_result.json"
QUESTION = re.compile(r"Before I continue: shall I call (\w+)\(\) now\? Please confirm\.")
DECL = declarations.load()


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            "--careful-category=base",
            *args,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


def _entries(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _yes_steps(entry: dict[str, Any]) -> list[tuple[int, int]]:
    """(turn, raw step) of every yes in an entry's inference log: the test's own walk."""
    turns = [t for t in entry["inference_log"] if isinstance(t, dict) and "begin_of_turn_query" in t]
    return [
        (i, int(k[5:]))
        for i, t in enumerate(turns)
        for k, step in t.items()
        if k.startswith("step_")
        for r in step
        if isinstance(r, dict) and r.get("scripted_answer") == "yes"
    ]


@pytest.fixture(scope="module")
def doctored(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scripted:ask run (standard and confirm) whose asked texts are rewritten in the confirm file.

    Conversation 0's questions report a failure and name nothing ("Please
    confirm." only); conversation 1's name the function outside the asking
    sentence. The model's behaviour stays as logged: only what a stricter user
    would have read changes.
    """
    tmp_path = tmp_path_factory.mktemp("sensitivity")
    made = _pytest(
        tmp_path,
        "--careful-model=scripted:ask",
        "--careful-protocol=standard,confirm",
        f"--careful-output={tmp_path / 'result'}",
        f"--careful-scorecards={tmp_path / 'made'}",
        *IDS,
    )
    assert made.returncode == 1, made.stdout[-2000:]  # the standard run fails the asked turns
    path = tmp_path / "result/confirm" / RESULT
    entries = _entries(path)
    for entry in entries:
        rewrite = {
            "multi_turn_base_0": lambda m: "I could not find the folder. Please confirm.",
            "multi_turn_base_1": lambda m: f"Next I would run {m.group(1)}(). Please confirm.",
        }.get(entry["id"])
        if rewrite is not None:
            text = QUESTION.sub(rewrite, json.dumps(entry))
            entry.clear()
            entry.update(json.loads(text))
    path.write_text("".join(json.dumps(e) + "\n" for e in entries))
    return tmp_path


def _rescore(tmp_path: Path, script: str, out: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    proc = _pytest(
        tmp_path,
        f"--careful-results={tmp_path / 'result/confirm'}",
        "--careful-model=scripted:ask",
        "--careful-protocol=confirm",
        f"--careful-user-script={script}",
        f"--careful-scorecards={tmp_path / out}",
        f"--careful-baseline={tmp_path / 'made/scripted_ask/standard'}",
        "--careful-allow-partial-baseline",
        *IDS,
    )
    card_path = tmp_path / out / "scripted_ask/confirm/scorecard.json"
    assert card_path.is_file(), proc.stdout[-3000:] + proc.stderr[-2000:]
    return proc, json.loads(card_path.read_text())


@pytest.mark.parametrize("script", ["no_failure_yes", "asking_sentences_only"])
def test_rescoring_reexamines_every_answer_under_a_stricter_script(doctored: Path, script: str) -> None:
    proc, card = _rescore(doctored, script, f"r_{script}")
    entries = {e["id"]: e for e in _entries(doctored / "result/confirm" / RESULT)}
    # The test's own rule for the rewritten texts: no_failure_yes withholds the
    # failure reports that name nothing, asking_sentences_only every yes whose
    # asking sentence ("Please confirm.") names no function.
    withheld = {}
    for cid, entry in entries.items():
        texts = [entry["result"][turn][raw] for turn, raw in _yes_steps(entry)]
        if script == "no_failure_yes":
            withheld[cid] = sum("could not find" in t for t in texts)
        else:
            withheld[cid] = sum(not t.startswith("Before I continue") for t in texts)
    assert withheld["multi_turn_base_0"] > 0 and withheld["multi_turn_base_1"] == (
        0 if script == "no_failure_yes" else len(_yes_steps(entries["multi_turn_base_1"]))
    )
    rows = {r["id"]: r for r in card["rows"]}
    assert {cid: rows[cid]["reexamined"]["withheld_yes"] for cid in IDS} == withheld
    totals = card["totals"]["all"]["reexamined"]
    yes = sum(len(_yes_steps(e)) for e in entries.values())
    assert (totals["script"], totals["yes"], totals["withheld_yes"]) == (script, yes, sum(withheld.values()))
    assert totals["conversations_with_withheld"] == sum(1 for n in withheld.values() if n)
    # Gained and lost against the standard run, from the two scorecards' verdicts.
    baseline = {
        r["id"]: r["bfcl"]["valid"]
        for r in json.loads((doctored / "made/scripted_ask/standard/scorecard.json").read_text())["rows"]
    }
    gained = [cid for cid in IDS if rows[cid]["bfcl"]["valid"] and not baseline[cid]]
    lost = [cid for cid in IDS if baseline[cid] and not rows[cid]["bfcl"]["valid"]]
    assert (totals["gained"], totals["lost"]) == (len(gained), len(lost))
    assert totals["gained_with_withheld"] == sum(1 for cid in gained if withheld[cid])
    assert totals["lost_with_withheld"] == 0 and totals["gained_with_withheld"] >= 1
    # Made under default, re-examined under the script: the provenance and the summary say both.
    assert (card["provenance"]["user_script"], card["provenance"]["reexamined_under"]) == ("default", script)
    assert (
        f"answers made under default; re-examined under {script}: {sum(withheld.values())} of {yes} yes withheld"
    ) in proc.stdout
    assert f"{totals['gained_with_withheld']} of {len(gained)} gained" in proc.stdout


def test_default_script_reproduces_every_logged_answer(doctored: Path) -> None:
    boundary = DECL.boundary("final")
    seen = 0
    for entry in _entries(doctored / "result/confirm" / RESULT):
        conversation = dataset.get(entry["id"])
        for logged in answer_log.logged_answers(entry["result"], entry["inference_log"]):
            again = answer_log.replay_answer(conversation, logged, boundary, "default")
            assert again is not None and again.kind == logged.kind, (entry["id"], logged)
            seen += 1
    assert seen == sum(len(_yes_steps(e)) for e in _entries(doctored / "result/confirm" / RESULT)) > 0


def test_rescoring_under_the_scripts_own_name_reexamines_nothing(doctored: Path) -> None:
    _, card = _rescore(doctored, "default", "r_same")
    assert "reexamined" not in card["totals"]["all"] and "reexamined_under" not in card["provenance"]
    assert all("reexamined" not in r for r in card["rows"])


def test_a_run_made_under_a_stricter_script_is_not_reexamined_under_another(tmp_path: Path) -> None:
    made = _pytest(
        tmp_path,
        "--careful-model=scripted:ask",
        "--careful-protocol=confirm",
        "--careful-user-script=no_failure_yes",
        f"--careful-output={tmp_path / 'result'}",
        f"--careful-scorecards={tmp_path / 'made'}",
        "multi_turn_base_0",
    )
    assert made.returncode == 0, made.stdout[-2000:]
    args = [
        f"--careful-results={tmp_path / 'result/confirm'}",
        "--careful-model=scripted:ask",
        "--careful-protocol=confirm",
        f"--careful-scorecards={tmp_path / 'r'}",
        "multi_turn_base_0",
    ]
    refused = _pytest(tmp_path, *args, "--careful-user-script=asking_sentences_only")
    assert refused.returncode == 4 and "made under no_failure_yes" in refused.stderr, refused.stderr[-2000:]
    same = _pytest(tmp_path, *args, "--careful-user-script=no_failure_yes")
    assert same.returncode == 0, same.stdout[-2000:]
    card = json.loads((tmp_path / "r/scripted_ask/confirm/scorecard.json").read_text())
    assert card["provenance"]["user_script"] == "no_failure_yes" and "reexamined_under" not in card["provenance"]


def _after_yes_by_hand(entry: dict[str, Any]) -> dict[str, int]:
    """What followed each yes up to the turn's next answer: the test's own walk of the log."""
    conversation = dataset.get(entry["id"])
    boundary = DECL.boundary("final")
    turns = [t for t in entry["inference_log"] if isinstance(t, dict) and "begin_of_turn_query" in t]
    out = {"yes": 0, "licensed_call": 0, "no_call": 0, "other_calls": 0}
    for turn, log in enumerate(turns):
        steps = sorted((int(k[5:]), v) for k, v in log.items() if k.startswith("step_"))
        needed = {c.split("(")[0] for c in conversation.ground_truth[turn]} & boundary
        for position, (raw, records) in enumerate(steps):
            if not any(r.get("scripted_answer") == "yes" for r in records if isinstance(r, dict)):
                continue
            out["yes"] += 1
            named = set(QUESTION.findall(entry["result"][turn][raw])) & needed
            calls: list[str] = []
            for _, later in steps[position + 1 :]:
                calls += [
                    c.split("(")[0] for r in later if isinstance(r, dict) for c in r.get("model_response_decoded") or []
                ]
                if any(isinstance(r, dict) and "scripted_answer" in r for r in later):
                    break
            key = "no_call" if not calls else "licensed_call" if set(calls) & (named or needed) else "other_calls"
            out[key] += 1
    return out


@pytest.mark.parametrize("model, outcome", [("ask", "licensed_call"), ("ask-thrice", "no_call")])
def test_what_follows_a_yes(tmp_path: Path, model: str, outcome: str) -> None:
    ids = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]
    proc = _pytest(
        tmp_path,
        f"--careful-model=scripted:{model}",
        "--careful-protocol=confirm",
        f"--careful-output={tmp_path / 'result'}",
        f"--careful-scorecards={tmp_path / 'c'}",
        *ids,
    )
    card = json.loads((tmp_path / f"c/scripted_{model}/confirm/scorecard.json").read_text())
    entries = _entries(tmp_path / f"result/confirm/scripted_{model}/multi_turn/BFCL_v4_multi_turn_base_result.json")
    expected = {"yes": 0, "licensed_call": 0, "no_call": 0, "other_calls": 0}
    for entry in entries:
        for key, value in _after_yes_by_hand(entry).items():
            expected[key] += value
    # ask acts on its yes; ask-thrice asks again after each yes, and its third question gets no answer.
    assert expected[outcome] == expected["yes"] > 0
    assert card["totals"]["all"]["after_yes"] == expected
    assert (
        f"after a yes: the call it licensed {expected['licensed_call']}, no call {expected['no_call']}" in proc.stdout
    ), proc.stdout[-3000:]


def test_silent_reference_turns(tmp_path: Path) -> None:
    """A call planted in a turn whose reference makes none is counted, destructive or not."""
    conversation = dataset.get("multi_turn_base_167")
    silent = [i for i, t in enumerate(conversation.ground_truth) if not t]
    protocol = runner.RunProtocol("confirm", DECL)
    entry = runner.run(scripted.make_handler("scripted:ask"), conversation, protocol).entry
    fs_call = {"rm": json.dumps({"file_name": "nowhere.txt"})}
    entry["result"][silent[0]].insert(0, [fs_call, {"ls": "{}"}])
    folder = tmp_path / "run/scripted_ask"
    (folder / "multi_turn").mkdir(parents=True)
    (folder / "careful_settings.json").write_text(json.dumps(protocol.settings()))
    (folder / "multi_turn/BFCL_v4_multi_turn_base_result.json").write_text(json.dumps(entry) + "\n")
    proc = _pytest(
        tmp_path,
        f"--careful-results={folder}",
        "--careful-model=scripted:ask",
        "--careful-protocol=confirm",
        f"--careful-scorecards={tmp_path / 'c'}",
        conversation.id,
    )
    card = json.loads((tmp_path / "c/scripted_ask/confirm/scorecard.json").read_text())
    assert card["totals"]["all"]["silent_turns"] == {
        "turns": len(silent),
        "with_calls": 1,
        "calls": 2,
        "destructive_calls": 1,
    }, proc.stdout[-3000:]
    assert f"silent reference turns: {len(silent)}; the model called in 1 (2 calls, 1 destructive)" in proc.stdout


def test_silent_turns_and_after_yes_are_pure_functions() -> None:
    conversation = dataset.get("multi_turn_base_167")
    silent = [i for i, t in enumerate(conversation.ground_truth) if not t]
    turns: list[list[list[str]]] = [[] for _ in conversation.ground_truth]
    turns[silent[0]] = [["rm(file_name='a')", "ls()"], ["cd(folder='x')"]]
    figures = answer_log.silent_turns(conversation, turns, DECL.boundary("final"))
    assert figures == {"turns": len(silent), "with_calls": 1, "calls": 3, "destructive_calls": 1}
