"""careful-export on the real logged run: the optimized run is a run (bfcl-eval's checker and this plugin
rescore it, BFCL's verdict as the original's), in the input's own format, and the training records
have the shapes TRL loads."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import pytest_careful
from conftest import REAL_RUN_DECODER, run_oracle
from pytest_careful.cli.export import ExportError, export
from pytest_careful.data import dataset
from pytest_careful.execution.decoding import decoder

FILES = (
    "BFCL_v4_multi_turn_base_result.json",
    "BFCL_v4_multi_turn_miss_func_result.json",
    "BFCL_v4_multi_turn_miss_param_result.json",
)


@pytest.fixture(scope="module")
def exported(real_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("export") / "optimized"
    lines = export(real_run, REAL_RUN_DECODER, out)
    assert lines[-1].startswith("careful-export: 600 conversations, calls "), lines
    return out


def _entries(folder: Path, name: str) -> list[dict]:
    return [json.loads(line) for line in (folder / name).read_text().splitlines()]


def test_the_layout_and_format_are_the_inputs(exported: Path, real_run: Path) -> None:
    dec = decoder(REAL_RUN_DECODER)
    report = json.loads((exported / "optimizer.json").read_text())["conversations"]
    for name in FILES:
        before, after = _entries(real_run, name), _entries(exported, name)
        assert [e["id"] for e in after] == [e["id"] for e in before]  # one entry per conversation read
        for old, new in zip(before, after):
            assert set(new) == set(old)
            if not isinstance(old["result"], list):
                assert new == old
                continue
            assert len(new["result"]) == len(old["result"])  # else BFCL reads it as force-terminated
            for turn, steps in enumerate(new["result"]):
                for key in ("input_token_count", "output_token_count", "latency"):
                    assert len(new[key][turn]) == len(steps)  # aligned with the steps
            calls = 0
            for steps in new["result"]:
                for step in steps:
                    try:
                        decoded = dec.decode_step(step)
                    except Exception:
                        continue
                    calls += len([c for c in decoded if c])
            assert calls == report[new["id"]]["calls_after"], new["id"]
            if report[new["id"]]["rewrites"]:
                assert new["inference_log"][0] == [
                    {"role": "careful_synthetic", "content": new["inference_log"][0][0]["content"]}
                ]
    settings = json.loads((exported / "careful_settings.json").read_text())
    assert settings["decoder"] == REAL_RUN_DECODER and settings["careful_export"]["optimized"] is True


def test_an_untouched_entry_is_written_byte_for_byte(exported: Path, real_run: Path) -> None:
    """The input writes non-ASCII text unescaped, as BFCL does; an entry without rewrites comes back as it was."""
    report = json.loads((exported / "optimizer.json").read_text())["conversations"]
    untouched = 0
    for name in FILES:
        before = (real_run / name).read_text(encoding="utf-8").splitlines()
        after = (exported / name).read_text(encoding="utf-8").splitlines()
        for old, new in zip(before, after):
            if not report[json.loads(old)["id"]].get("rewrites"):
                assert new == old
                untouched += 1
    assert untouched > 50 and any(not line.isascii() for name in FILES for line in _lines(exported / name))


def _lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _bfcl_verdicts(exported: Path, real_run: Path, every: int) -> None:
    """bfcl-eval's own checker on the written files and on the input: the same verdict and error type."""
    before = [e for name in FILES for e in _entries(real_run, name)][::every]
    after = {e["id"]: e for name in FILES for e in _entries(exported, name)}
    theirs = run_oracle({"id": e["id"], "result": e["result"], "decoder": REAL_RUN_DECODER} for e in before)
    ours = run_oracle({"id": e["id"], "result": after[e["id"]]["result"], "decoder": REAL_RUN_DECODER} for e in before)
    assert [(v["id"], v["valid"], v["error_type"]) for v in ours] == [
        (v["id"], v["valid"], v["error_type"]) for v in theirs
    ]


def test_bfcl_evaluate_gives_every_conversation_its_verdict(exported: Path, real_run: Path) -> None:
    """Every 20th conversation here; all 600 in the slow suite."""
    _bfcl_verdicts(exported, real_run, every=20)


@pytest.mark.slow
def test_bfcl_evaluate_gives_all_600_conversations_their_verdict(exported: Path, real_run: Path) -> None:
    _bfcl_verdicts(exported, real_run, every=1)


def test_this_plugin_rescores_it_as_any_run(exported: Path, real_run: Path) -> None:
    mine = {
        r.id: (r.bfcl_pass, r.row["bfcl"]["error_type"], r.row["calls"]) for r in pytest_careful.score_run(exported)
    }
    original = {
        r.id: (r.bfcl_pass, r.row["bfcl"]["error_type"], r.row["calls"])
        for r in pytest_careful.score_run(real_run, decoder=REAL_RUN_DECODER)
    }
    assert {i: v[:2] for i, v in mine.items()} == {i: v[:2] for i, v in original.items()}
    assert sum(v[2] for v in mine.values()) < sum(v[2] for v in original.values())


def test_the_training_records(exported: Path, real_run: Path) -> None:
    positives = [json.loads(line) for line in (exported / "positives.jsonl").read_text().splitlines()]
    pairs = [json.loads(line) for line in (exported / "pairs.jsonl").read_text().splitlines()]
    assert positives and pairs
    for record in positives:
        assert {"id", "messages", "tools"} <= set(record)
        roles = {m["role"] for m in record["messages"]}
        assert roles <= {"user", "assistant", "tool"} and "user" in roles
        assert all(t["type"] == "function" and t["function"]["parameters"]["type"] == "object" for t in record["tools"])
    logged = {e["id"]: e for name in FILES for e in _entries(real_run, name)}
    for record in pairs:
        assert {"prompt", "chosen", "rejected", "tools", "class"} <= set(record)
        assert record["chosen"] != record["rejected"]
        first = record["prompt"][0]
        assert first == dataset.get(record["id"]).questions[0][0]  # the log's own first message
        assert "careful_synthetic" not in json.dumps(record["prompt"])
        assert json.dumps(first) in json.dumps(logged[record["id"]]["inference_log"])
        # a logged step of no call (content []) is an assistant message without an empty tool_calls
        assert all(m.get("tool_calls") != [] for m in record["prompt"])


def test_a_run_without_logs_gives_no_pair(real_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.loads(line) for line in (real_run / FILES[0]).read_text().splitlines()][:20]
    for entry in lines:
        entry.pop("inference_log", None)
    (run / FILES[0]).write_text("".join(json.dumps(e) + "\n" for e in lines))
    said = export(run, REAL_RUN_DECODER, tmp_path / "out")
    assert (tmp_path / "out" / "pairs.jsonl").read_text() == ""
    assert "20 conversations logged no prompts: no pair" in said[-1]


def test_the_input_folder_is_never_the_output(real_run: Path, tmp_path: Path) -> None:
    copy = tmp_path / "run"
    shutil.copytree(real_run, copy, ignore=shutil.ignore_patterns("scorecards"))
    with pytest.raises(ExportError, match="may not be the input folder"):
        export(copy, REAL_RUN_DECODER, copy)
    with pytest.raises(ExportError, match="may not be the input folder"):
        export(copy, REAL_RUN_DECODER, copy / "inside")
