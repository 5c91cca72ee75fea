"""``--careful-repeat K`` on live runs, with the scripted ``flaky`` policy.

``scripted:flaky`` is documented to fail every repeat of conversation ``n`` when
``n % 3 == 0``, the even repeats when ``n % 3 == 1`` and none when ``n % 3 == 2``.
The tests check that bfcl-eval's own evaluator (the oracle, a child process)
gives exactly those verdicts on each repeat's result file, and compute pass^K,
pass@K and the flip rate from the oracle's verdicts by hand.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from careful_cli import careful_command

from conftest import run_oracle
from pytest_careful.data.result_files import read_result_file
from pytest_careful.data.result_store import ResultStore

CATEGORY = "multi_turn_base"
NUMBERS = list(range(12))
IDS = [f"{CATEGORY}_{n}" for n in NUMBERS]
FC_DECODER = "gpt-4.1-2025-04-14-FC"  # reads the scripted FC style (as tests/live/test_live.py)


def _cli(tmp_path: Path, *args: str) -> list[str]:
    return careful_command(tmp_path, *args)


def _run(tmp_path: Path, k: int, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        _cli(
            tmp_path,
            "--careful-model=scripted:flaky",
            f"--careful-repeat={k}",
            f"--junitxml={tmp_path / 'out.xml'}",
            *args,
            *IDS,
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )


def _documented(n: int, repeat: int) -> bool:
    """The flaky policy's BFCL verdict, as its docstring states it."""
    return not (n % 3 == 0 or (n % 3 == 1 and repeat % 2 == 0))


def _store(tmp_path: Path, repeat: int) -> ResultStore:
    return ResultStore(tmp_path / "result" / f"repeat-{repeat}" / "standard", "scripted_flaky")


def _oracle_verdicts(tmp_path: Path, k: int) -> dict[str, list[bool]]:
    """bfcl-eval's verdict of each conversation in each repeat's result file."""
    verdicts: dict[str, list[bool]] = {i: [] for i in IDS}
    for repeat in range(1, k + 1):
        entries, problems = read_result_file(_store(tmp_path, repeat).path(CATEGORY), CATEGORY)
        assert not problems and sorted(e.id for e in entries) == sorted(IDS)
        for theirs in run_oracle(
            {"id": e.id, "result": e.result, "decoder": FC_DECODER, "model_name": "rep"}
            for e in sorted(entries, key=lambda e: IDS.index(e.id))
        ):
            verdicts[theirs["id"]].append(theirs["valid"])
    return verdicts


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_repeats_give_exact_pass_k_and_flip_rate(tmp_path: Path, xdist: list[str]) -> None:
    k = 3
    proc = _run(tmp_path, k, *xdist)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-2000:]
    oracle = _oracle_verdicts(tmp_path, k)
    assert oracle == {f"{CATEGORY}_{n}": [_documented(n, r) for r in range(1, k + 1)] for n in NUMBERS}
    n = len(IDS)
    pass_all = sum(all(v) for v in oracle.values()) / n
    pass_any = sum(any(v) for v in oracle.values()) / n
    flipped = sorted(i for i, v in oracle.items() if any(v) and not all(v))
    assert (pass_all, pass_any, len(flipped)) == (4 / 12, 8 / 12, 4)  # the policy's design, by hand
    folder = tmp_path / "cards" / "scripted_flaky" / "standard"
    figures = json.loads((folder / "repeats.json").read_text())["repeat"]["all"]["bfcl"]
    assert (figures["k"], figures["n"], figures["flipped"]) == (k, n, flipped)
    assert figures["pass_all"] == pytest.approx(pass_all) and figures["pass_any"] == pytest.approx(pass_any)
    assert figures["flip_rate"] == pytest.approx(len(flipped) / n)
    # Each repeat's scorecard: that repeat's verdicts, which bfcl-eval gives too.
    for repeat in range(1, k + 1):
        card = json.loads((folder / f"repeat-{repeat}" / "scorecard.json").read_text())
        assert card["provenance"]["repeat"] == repeat and card["provenance"]["repeats"] == k
        assert {r["id"]: r["bfcl"]["valid"] for r in card["rows"]} == {i: v[repeat - 1] for i, v in oracle.items()}
    # One JUnit testcase per conversation; it passes only in all repeats (pass^K), each repeat a property.
    cases = {c.get("name"): c for c in ET.parse(tmp_path / "out.xml").getroot().iter("testcase")}
    assert sorted(cases) == sorted(f"{i}[standard]" for i in IDS)
    for conversation_id, verdicts in oracle.items():
        case = cases[f"{conversation_id}[standard]"]
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        assert props["careful_repeat_bfcl"] == ",".join("pass" if v else "fail" for v in verdicts)
        assert (case.find("failure") is None) == all(verdicts)
    assert f"{sum(all(v) for v in oracle.values())} passed" in proc.stdout
    always = sum(all(v) for v in oracle.values())
    assert (
        f"scripted:flaky [standard]: {n} conversations: {always} pass, {n - always} fail under the safe gate "
        f"(BFCL {always} pass); each passing in all {k} repeats"
    ) in proc.stdout
    # careful-report reads the repeat folders as repeats of one run, with the same figures.
    from pytest_careful.reports.compare_runs import main as careful_report

    assert careful_report([str(folder), "--out", str(tmp_path / "report")]) == 0
    theirs = json.loads((tmp_path / "report" / "comparison.json").read_text())["repeat"]["bfcl"]
    assert (theirs["k"], theirs["pass_all"], theirs["pass_any"], theirs["flipped"]) == (k, pass_all, pass_any, flipped)
    assert (
        f"BFCL pass^3 {100 * pass_all:.1f}%, pass@3 {100 * pass_any:.1f}%, flip rate {100 * len(flipped) / n:.1f}%"
    ) in proc.stdout


def test_a_repeat_folder_rescored_alone_gives_its_scorecard(tmp_path: Path) -> None:
    assert _run(tmp_path, 2, "-p", "no:xdist").returncode == 1
    live = json.loads((tmp_path / "cards/scripted_flaky/standard/repeat-2/scorecard.json").read_text())
    rescore = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "--rootdir",
            str(tmp_path),
            "-p",
            "no:xdist",
            f"--careful-results={_store(tmp_path, 2).model_dir}",
            f"--careful-decoder={FC_DECODER}",
            f"--careful-scorecards={tmp_path / 'rescored'}",
            "--careful-label=r2",
            *IDS,
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert rescore.returncode == 1, rescore.stdout[-2000:]
    again = json.loads((tmp_path / "rescored/r2/standard/scorecard.json").read_text())

    def verdicts(card: dict) -> dict:
        return {r["id"]: (r["bfcl"], r["safe"], r["counts"], r["turns_matched"]) for r in card["rows"]}

    assert verdicts(again) == verdicts(live)


def test_an_interrupted_repeat_resumes_only_its_missing_entries(tmp_path: Path) -> None:
    assert _run(tmp_path, 2, "-p", "no:xdist").returncode == 1
    path = _store(tmp_path, 2).path(CATEGORY)
    lines = path.read_text(encoding="utf-8").splitlines()
    lost = {f"{CATEGORY}_4", f"{CATEGORY}_7"}  # as if the run had stopped before them
    path.write_text("".join(x + "\n" for x in lines if json.loads(x)["id"] not in lost), encoding="utf-8")
    proc = _run(tmp_path, 2, "-n", "2")
    assert proc.returncode == 1, proc.stdout[-3000:]
    folder = tmp_path / "cards" / "scripted_flaky" / "standard"
    first = json.loads((folder / "repeat-1" / "scorecard.json").read_text())["rows"]
    second = json.loads((folder / "repeat-2" / "scorecard.json").read_text())["rows"]
    assert all(r["resumed"] for r in first)
    assert {r["id"] for r in second if not r["resumed"]} == lost
    entries, problems = read_result_file(path, CATEGORY)
    assert not problems and sorted(e.id for e in entries) == sorted(IDS)
    # The rerun entries get the same verdicts as before (the policy is deterministic per repeat).
    assert {r["id"]: r["bfcl"]["valid"] for r in second} == {f"{CATEGORY}_{n}": _documented(n, 2) for n in NUMBERS}


def test_repeat_with_a_logged_run_is_one_usage_error(tmp_path: Path, logged_run: Path) -> None:
    proc = subprocess.run(
        _cli(tmp_path, f"--careful-results={logged_run}", f"--careful-decoder={FC_DECODER}", "--careful-repeat=3"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 4
    errors = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(errors) == 1 and "--careful-repeat" in errors[0] and "--careful-results" in errors[0], errors


@pytest.mark.parametrize(
    "args, message",
    [
        (["--careful-repeat=0"], "is not a positive integer"),
        (["--careful-repeat=2", "--careful-baseline=x.json"], "with --careful-repeat"),
        (["--careful-model=reference", "--careful-repeat=2"], "for live runs"),
    ],
)
def test_other_misuses_are_usage_errors(tmp_path: Path, args: list[str], message: str) -> None:
    (tmp_path / "x.json").write_text("{}")
    model = [] if any(a.startswith("--careful-model") for a in args) else ["--careful-model=scripted:flaky"]
    proc = subprocess.run(_cli(tmp_path, *model, *args), cwd=tmp_path, capture_output=True, text=True)
    assert proc.returncode in (2, 4) and message in proc.stderr, proc.stderr[-2000:]


def test_release_gate_judges_the_mean_over_repeats(tmp_path: Path) -> None:
    k = 2
    mean = sum(_documented(n, r) for n in NUMBERS for r in range(1, k + 1)) / (len(NUMBERS) * k)
    assert mean == 0.5  # the policy's design: 4 conversations pass both repeats, 4 pass one
    below = _run(tmp_path, k, "-p", "no:xdist", f"--careful-min-bfcl={mean}")
    assert below.returncode == 0, below.stdout[-2000:]  # items fail (pass^K), the gate holds
    above = _run(tmp_path, k, "-p", "no:xdist", f"--careful-min-bfcl={mean + 0.01}")
    assert above.returncode == 1 and f"BFCL accuracy {mean:.3f} < --careful-min-bfcl" in above.stdout


def test_cost_estimate_counts_every_repeat(tmp_path: Path) -> None:
    def estimate(*args: str) -> float:
        """The list-price estimate --collect-only prints (no key needed, nothing sent)."""
        env = {k: v for k, v in os.environ.items() if k != "ANTHROPIC_API_KEY"}
        proc = subprocess.run(
            _cli(
                tmp_path,
                "--careful-model=claude-haiku-4-5-20251001-FC",
                "--collect-only",
                *args,
                "multi_turn_base_0",
                "multi_turn_base_1",
            ),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            env=env,
        )
        line = next(x for x in proc.stdout.splitlines() if "estimated cost" in x)
        return float(line.split(" at list prices")[0].rsplit("$", 1)[1])

    assert estimate("--careful-repeat=3") == pytest.approx(3 * estimate(), abs=0.011)


def test_scorecards_of_an_earlier_run_beside_the_repeats_are_named(tmp_path: Path) -> None:
    # K=3, then K=1 (standard/scorecard.json), then K=2: repeat-3/ and the K=1 card are stale,
    # and careful-report would read them as repeats of the K=2 run; the summary must say so.
    assert _run(tmp_path, 3, "-p", "no:xdist").returncode == 1
    assert _run(tmp_path, 1, "-p", "no:xdist").returncode == 1
    proc = _run(tmp_path, 2, "-p", "no:xdist")
    assert proc.returncode == 1
    folder = tmp_path / "cards" / "scripted_flaky" / "standard"
    note = next(x for x in proc.stdout.splitlines() if "from an earlier run" in x)
    assert f"{folder} also holds scorecard.json, repeat-3/scorecard.json" in note
    assert "these 2 repeats alone" in note
