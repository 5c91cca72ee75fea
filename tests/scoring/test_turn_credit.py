"""Per-turn credit (turn_credit.py) against bfcl-eval's own simulators and state checker.

The oracle (``python tests/scoring/test_turn_credit.py``, a child process: bfcl-eval's
executor ``eval``s the calls) decodes each result with bfcl-eval's handler,
executes every turn's calls with ``execute_multi_turn_func_call`` as BFCL's
checker does, model and ground truth alike, and after every turn calls
bfcl-eval's ``state_checker`` on the instances: the state at the end of each
turn prefix. It also gives BFCL's own verdict, for the consistency check.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).resolve().parent


# --- the oracle (child process) -------------------------------------------------


def _oracle_main() -> None:
    """Reads ``{"id", "result", "decoder"}`` lines; writes ``{"id", "matched", "valid"}`` lines."""
    os.environ.setdefault("OPENAI_API_KEY", "unused-by-the-oracle")
    sys.path.insert(0, str(HERE))
    from bfcl_eval.eval_checker import eval_runner
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry
    from oracle_worker import Passthrough

    prompts: dict[str, Any] = {}
    answers: dict[str, Any] = {}
    handlers: dict[str, Any] = {}
    for n, line in enumerate(sys.stdin):
        case = json.loads(line)
        category = case["id"].rsplit("_", 1)[0]
        if category not in prompts:
            entries = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
            prompts[category] = {e["id"]: e for e in entries}
            answers[category] = {e["id"]: a["ground_truth"] for e, a in zip(entries, load_ground_truth_entry(category))}
        key = case["decoder"]
        if key not in handlers:
            handlers[key] = Passthrough() if key == "passthrough" else eval_runner.get_handler(key)
        entry, truth = prompts[category][case["id"]], answers[category][case["id"]]
        name = f"turnoracle_{n}"
        matched = _oracle_matches(
            handlers[key], case["result"], truth, entry, name, multi_turn_utils, multi_turn_checker
        )
        verdict = eval_runner._evaluate_single_multi_turn_entry(
            handlers[key], case["id"], case["result"], truth, json.loads(json.dumps(entry)), name + "_verdict", category
        )
        for global_name in [g for g in vars(multi_turn_utils) if g.startswith(name)]:
            delattr(multi_turn_utils, global_name)
        print(json.dumps({"id": case["id"], "matched": matched, "valid": verdict["valid"]}), flush=True)


def _oracle_matches(
    handler: Any, result: Any, truth: list[list[str]], entry: dict[str, Any], name: str, utils: Any, checker: Any
) -> list[bool]:
    """Per turn: bfcl-eval's state_checker on the model's and the ground truth's instances after it."""
    common = {
        "initial_config": entry["initial_config"],
        "involved_classes": entry["involved_classes"],
        "test_entry_id": entry["id"],
        "long_context": "long_context" in entry["id"],
        "is_evaL_run": True,
    }
    turns = result if isinstance(result, list) else []
    matched = []
    for index, truth_calls in enumerate(truth):
        _, ground = utils.execute_multi_turn_func_call(truth_calls, model_name=name + "_gt", **common)
        _, model = utils.execute_multi_turn_func_call([], model_name=name, **common)  # the instances
        for item in turns[index] if index < len(turns) else []:
            try:
                step = handler.decode_execute(item, has_tool_call_tag=False)
            except Exception:  # BFCL skips a step that does not decode
                continue
            if not utils.is_empty_execute_response(step):
                _, model = utils.execute_multi_turn_func_call(step, model_name=name, **common)
        if not truth_calls:  # BFCL's checker checks no state here
            matched.append(None)
        elif index >= len(turns):  # a turn the model never reached
            matched.append(False)
        else:
            matched.append(bool(checker.state_checker(model, ground)["valid"]))
    return matched


def run_turn_oracle(cases: list[dict[str, Any]]) -> list[dict[str, Any]]:
    payload = "".join(json.dumps(c) + "\n" for c in cases)
    proc = subprocess.run(
        [sys.executable, __file__],
        input=payload,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "BFCL_PROJECT_ROOT": tempfile.mkdtemp(prefix="turn-oracle-")},
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]


# --- the tests ------------------------------------------------------------------


def _ours(conversation: Any, result: Any, dec: Any) -> tuple[list[bool], Any]:
    from pytest_careful.evaluation.evaluate import evaluate
    from pytest_careful.scoring import turn_credit

    evaluation = evaluate(conversation, result, dec, model_name="turns")
    return turn_credit.matched_turns(conversation, evaluation.replay, evaluation.reference), evaluation


def test_credit_fields_of_a_match_list() -> None:
    from pytest_careful.scoring.turn_credit import credit

    assert credit([True, True, True]) == {"turns": 3, "turns_matched": 3, "first_divergent_turn": None}
    assert credit([True, False, True, False]) == {"turns": 4, "turns_matched": 2, "first_divergent_turn": 1}
    # Turns the reference makes no call in are not checked (None), as in BFCL.
    assert credit([None, True, None, False]) == {"turns": 2, "turns_matched": 1, "first_divergent_turn": 3}
    assert credit([]) == {"turns": 0, "turns_matched": 0, "first_divergent_turn": None}


def test_perturbed_references_match_the_oracle_turn_by_turn() -> None:
    """Drops, alterations, empty turns, truncation, not-a-list: every kind of divergence."""
    from perturb import cases

    from pytest_careful.data import dataset
    from pytest_careful.execution.decoding import passthrough_decoder

    conversations = dataset.load(("multi_turn_base", "multi_turn_miss_func"))[::8]
    items = list(cases(conversations, per_conversation=3, seed=1412))
    oracle = run_turn_oracle([{"id": c.id, "result": r, "decoder": "passthrough"} for c, _, r in items])
    assert len(oracle) == len(items)
    dec = passthrough_decoder()
    ours = [_ours(c, r, dec)[0] for c, _, r in items]
    assert ours == [o["matched"] for o in oracle]
    # The cases exercise partial credit, not only all-or-nothing.
    kept = [sum(ok is True for ok in m) for m in ours]
    checked = [sum(ok is not None for ok in m) for m in ours]
    assert any(0 < k < c for k, c in zip(kept, checked)) and 0 in kept


def test_real_run_turn_credit_matches_bfcl_state_checker(real_run: Path) -> None:
    """All 600 conversations of the real run: our per-turn match is bfcl-eval's, turn by turn."""
    from conftest import REAL_RUN_DECODER
    from pytest_careful.data import dataset
    from pytest_careful.data.result_files import read_result_file
    from pytest_careful.execution.decoding import decoder

    entries = []
    for category in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param"):
        found, problems = read_result_file(real_run / f"BFCL_v4_{category}_result.json", category)
        assert not problems
        entries.extend(found)
    assert len(entries) == 600
    oracle = run_turn_oracle([{"id": e.id, "result": e.result, "decoder": REAL_RUN_DECODER} for e in entries])
    dec = decoder(REAL_RUN_DECODER)
    mismatched, inconsistent = [], []
    for entry, theirs in zip(entries, oracle):
        assert theirs["id"] == entry.id
        mine, evaluation = _ours(dataset.get(entry.id), entry.result, dec)
        if mine != theirs["matched"]:
            mismatched.append((entry.id, mine, theirs["matched"]))
        if theirs["valid"] and False in mine:
            inconsistent.append(entry.id)
        assert evaluation.verdict.valid == theirs["valid"]
    assert not mismatched, mismatched[:5]
    assert not inconsistent, inconsistent[:5]  # a BFCL pass has every turn in the reference's state
    # Partial credit is real here: failing conversations that kept some of their checked turns.
    partial = [o["id"] for o in oracle if not o["valid"] and True in o["matched"] and False in o["matched"]]
    print(f"\nreal run: {len(partial)} failing conversations kept some checked turns")
    assert partial


def test_the_credit_replays_nothing_and_captures_no_state_on_the_real_run(
    real_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The credit reuses the replay's snapshots: it replays no call and captures no state of its own
    (what it adds to the evaluation in seconds: ``bench/score.py --turn-credit``)."""
    from conftest import REAL_RUN_DECODER
    from pytest_careful.data import dataset
    from pytest_careful.data.result_files import read_result_file
    from pytest_careful.evaluation.evaluate import evaluate
    from pytest_careful.execution import limits, snapshot
    from pytest_careful.execution.decoding import decoder
    from pytest_careful.scoring import turn_credit

    dec = decoder(REAL_RUN_DECODER)
    entries = [
        entry
        for category in ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param")
        for entry in read_result_file(real_run / f"BFCL_v4_{category}_result.json", category)[0]
    ]
    evaluated = [evaluate(dataset.get(entry.id), entry.result, dec, model_name="credit") for entry in entries]
    captured: list[str] = []
    capture_class = snapshot.capture_class

    def counted(instance: object) -> snapshot.ClassState:
        captured.append(type(instance).__name__)
        return capture_class(instance)

    monkeypatch.setattr(snapshot, "capture_class", counted)
    with limits.metered(limits.Limits(), lambda: 0.0) as meter:
        credits = [turn_credit.of_evaluation(evaluation) for evaluation in evaluated]
    assert meter.calls == 0 and captured == []
    assert sum(credit["turns"] for credit in credits) > len(evaluated)  # it did compare turns
    # The count sees a replay: one conversation evaluated again captures its classes' state.
    evaluate(dataset.get(entries[0].id), entries[0].result, dec, model_name="credit-again")
    assert captured


def test_rows_scorecard_and_junit_carry_turn_credit(pytester: pytest.Pytester, logged_run: Path) -> None:
    from conftest import REAL_RUN_DECODER

    result = pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--careful-results={logged_run}",
        f"--careful-decoder={REAL_RUN_DECODER}",
        "--careful-category=base",
        "-k",
        "base_1",
        "--careful-gate=none",
        "--junitxml=out.xml",
    )
    assert result.ret == 0
    folder = pytester.path / "scorecards" / "gpt-oss-20b" / "standard"
    card = json.loads((folder / "scorecard.json").read_text())
    rows = card["rows"]
    assert rows and all({"turns", "turns_matched", "first_divergent_turn"} <= set(r) for r in rows)
    shares = [r["turns_matched"] / r["turns"] for r in rows]
    assert card["totals"]["all"]["turn_credit"] == pytest.approx(sum(shares) / len(shares), abs=1e-4)
    header, *lines = (folder / "rows.csv").read_text().splitlines()
    assert header.split(",")[-3:] == ["turns", "turns_matched", "first_divergent_turn"]
    assert "turns %" in (folder / "scorecard.md").read_text()
    properties = {
        case.get("name"): {p.get("name"): p.get("value") for p in case.iter("property")}
        for case in ET.parse(pytester.path / "out.xml").getroot().iter("testcase")
    }
    for row in rows:
        props = properties[f"{row['id']}[standard]"]
        assert props["careful_turns_matched"] == str(row["turns_matched"])
        first = row["first_divergent_turn"]
        assert props["careful_first_divergent_turn"] == ("" if first is None else str(first))
    result.stdout.fnmatch_lines(
        [
            f"[[]standard[]] turns matched (per-turn credit*): base "
            f"{100 * card['totals']['all']['turn_credit']:.1f}%, all *"
        ]
    )


def test_unscored_row_has_no_turn_matched() -> None:
    from pytest_careful.data import dataset
    from pytest_careful.effects import declarations
    from pytest_careful.scoring.conversation import ScoringConfig, unscored_row

    conversation = dataset.get("multi_turn_base_3")
    row = unscored_row(conversation, "standard", "missing", ScoringConfig("m", "passthrough", declarations.load()))
    acting = [index for index, calls in enumerate(conversation.ground_truth) if calls]
    assert (row["turns"], row["turns_matched"], row["first_divergent_turn"]) == (len(acting), 0, acting[0])


if __name__ == "__main__":
    _oracle_main()
