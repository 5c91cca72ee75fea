"""A logged run that lacks entries, against ``bfcl evaluate`` itself: refused where bfcl-eval's runner
refuses the result file, and under ``--careful-allow-missing`` BFCL's accuracy over the entries present,
as its ``--partial-eval`` computes it.

The run is generated: the references' calls as a prompting model writes them (``Qwen/Qwen3-8B``), some
conversations answered in prose, every third one left out of the file. bfcl-eval's runner scores the
same folder in a child process (its checker ``eval``s model output: never in the process under test).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pytest

from pytest_careful.data import dataset

KEY = "Qwen/Qwen3-8B"  # a prompting handler: each step is BFCL's "[f(a=1), g()]" text
CATEGORY = "multi_turn_base"
IDS = [f"{CATEGORY}_{n}" for n in range(200)]
PRESENT = [cid for n, cid in enumerate(IDS) if n % 3 != 2]
PROSE = {cid for n, cid in enumerate(IDS) if n % 5 == 0}  # no call: BFCL fails them
ROUNDED = 0.00005  # a scorecard's accuracies have four decimals

#: bfcl-eval's own runner (``bfcl evaluate``), with and without ``--partial-eval`` (``allow_missing``).
BFCL_EVALUATE = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    from bfcl_eval.eval_checker import eval_runner
    root, model, category = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    for name, partial in (("whole", False), ("present", False), ("present", True)):
        score = root / f"score-{name}-{partial}"
        try:
            eval_runner.runner([model], [category], root / name, score, allow_missing=partial)
        except ValueError as exc:
            print(json.dumps({"run": name, "partial": partial, "refused": str(exc)}))
            continue
        [file] = score.rglob(f"BFCL_v4_{category}_score.json")
        header = json.loads(file.read_text().splitlines()[0])
        print(json.dumps({"run": name, "partial": partial, **header}))
""")


def _write_run(folder: Path, ids: list[str]) -> Path:
    folder.mkdir(parents=True)
    lines = []
    for cid in ids:
        turns = [
            ["[" + ", ".join(calls) + "]"] if calls and cid not in PROSE else ["I would rather not."]
            for calls in dataset.get(cid).ground_truth
        ]
        lines.append(json.dumps({"id": cid, "result": turns}))
    (folder / f"BFCL_v4_{CATEGORY}_result.json").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[tuple[str, bool], dict[str, Any]]]:
    """The run with every entry and with a third of them left out, and what bfcl-eval's runner said of each."""
    root = tmp_path_factory.mktemp("bfcl")
    model = KEY.replace("/", "_")  # bfcl evaluate's folder name for the registry key
    _write_run(root / "whole" / model, IDS)
    _write_run(root / "present" / model, PRESENT)
    env = {**os.environ, "BFCL_PROJECT_ROOT": tempfile.mkdtemp(prefix="bfcl-"), "OPENAI_API_KEY": "unused"}
    proc = subprocess.run(
        [sys.executable, "-c", BFCL_EVALUATE, str(root), model, CATEGORY],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    said = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return root, {(s["run"], s["partial"]): s for s in said}


def _ours(pytester: pytest.Pytester, root: Path, name: str, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--careful-results={root / name / KEY.replace('/', '_')}",
        f"--careful-decoder={KEY}",
        f"--careful-scorecards=cards-{name}",
        *args,
    )


def _totals(pytester: pytest.Pytester, name: str) -> dict[str, Any]:
    path = pytester.path / f"cards-{name}/{KEY.replace('/', '_')}/standard/scorecard.json"
    return dict(json.loads(path.read_text()))


def test_the_whole_file_is_evaluated_by_both(
    pytester: pytest.Pytester, runs: tuple[Path, dict[tuple[str, bool], dict[str, Any]]]
) -> None:
    root, bfcl = runs
    assert "refused" not in bfcl[("whole", False)]
    whole = _ours(pytester, root, "whole", "-p", "no:xdist")
    assert whole.ret in (0, 1), whole.stdout.str()[-3000:] + whole.stderr.str()[-3000:]
    card = _totals(pytester, "whole")
    assert card["totals"]["all"]["bfcl_pass"] == bfcl[("whole", False)]["correct_count"]
    assert card["totals"]["all"]["bfcl_accuracy"] == pytest.approx(bfcl[("whole", False)]["accuracy"], abs=ROUNDED)
    assert card["provenance"]["selection"]["complete"] is True


@pytest.mark.parametrize("mode", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_refused_and_allowed_as_bfcl_evaluate_refuses_and_partially_evaluates(
    pytester: pytest.Pytester, runs: tuple[Path, dict[tuple[str, bool], dict[str, Any]]], mode: list[str]
) -> None:
    root, bfcl = runs
    # Entries left out: bfcl refuses the file unless given --partial-eval, and so do we, in one line.
    assert "--partial-eval" in bfcl[("present", False)]["refused"]
    refused = _ours(pytester, root, "present", *mode)
    assert refused.ret == pytest.ExitCode.USAGE_ERROR, refused.stdout.str()[-3000:]
    [line] = [x for x in refused.stderr.str().splitlines() if x.startswith("ERROR:")]
    assert f"{len(IDS) - len(PRESENT)} of {len(IDS)} selected conversations have no entry" in line
    assert "--careful-allow-missing" in line and not (pytester.path / "cards-present").exists()

    # --careful-allow-missing: the entries present, scored as --partial-eval scores them.
    partial = bfcl[("present", True)]
    assert partial["total_count"] == len(PRESENT) and 0 < partial["accuracy"] < 1  # a pass/fail mix
    allowed = _ours(pytester, root, "present", *mode, "--careful-allow-missing")
    assert allowed.ret in (0, 1), allowed.stdout.str()[-3000:]
    card = _totals(pytester, "present")
    totals, selection = card["totals"]["all"], card["provenance"]["selection"]
    assert (totals["conversations"], totals["bfcl_pass"]) == (partial["total_count"], partial["correct_count"])
    assert totals["bfcl_accuracy"] == pytest.approx(partial["accuracy"], abs=ROUNDED)
    assert (selection["present"], selection["missing"], selection["complete"]) == (
        len(PRESENT),
        len(IDS) - len(PRESENT),
        False,
    )
