"""careful-report: repeats with known flips, Table 5, rank agreement, McNemar, refusals.

The repeats are real scorecards: the plugin scores the real logged base run three
times, with some conversations' results replaced by the reference trajectory
(passes BFCL and safe: the references break no rule) or by an inference error
(fails). Expected figures are counted here from those verdicts; p values come
from scipy and from enumeration, never from the code under test.
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
from fractions import Fraction
from math import comb
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import binomtest, spearmanr

from conftest import REAL_RUN_DECODER
from pytest_careful.data import dataset
from pytest_careful.live.backends.scripted import call_to_fc
from pytest_careful.reports import compare_runs

BASE = "BFCL_v4_multi_turn_base_result.json"
SCRIPT = Path(sys.executable).parent / "careful-report"
SELECTED = 60  # base_0 .. base_59: a selection, the same in every repeat
# Forced verdicts by conversation number, per repeat: P = the reference trajectory (passes BFCL and
# safe: the references break no rule), F = an inference error (fails both). Others keep the logged result.
FORCED = {
    "rep1": {**dict.fromkeys(range(0, 7), "P"), **dict.fromkeys(range(7, 14), "F")},
    "rep2": {**dict.fromkeys(range(0, 7), "F"), 7: "P", **dict.fromkeys(range(8, 14), "F")},
    "rep3": {**dict.fromkeys(range(0, 7), "P"), 7: "F", **dict.fromkeys(range(8, 14), "P")},
}


def _reference_result(cid: str) -> list[Any]:
    conversation = dataset.get(cid)
    return [
        [[call_to_fc(c, conversation.involved_classes) for c in turn]] if turn else []
        for turn in conversation.ground_truth
    ]


def _plugin(tmp: Path, results: Path, label: str) -> subprocess.Popen[bytes]:
    nodes = [f"multi_turn_base_{i}[standard]" for i in range(SELECTED)]
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-p",
            "no:randomly",
            "-p",
            "no:xdist",
            "--rootdir",
            str(tmp),
            f"--careful-results={results}",
            f"--careful-decoder={REAL_RUN_DECODER}",
            "--careful-category=base",
            f"--careful-scorecards={tmp / 'cards'}",
            f"--careful-label={label}",
            *nodes,
        ],
        cwd=tmp,
        stdout=(tmp / f"{label}.log").open("wb"),
        stderr=subprocess.STDOUT,
    )


def _verdicts(card_path: Path) -> dict[str, tuple[bool, bool]]:
    card = json.loads(card_path.read_text(encoding="utf-8"))
    return {r["id"]: (r["bfcl"]["valid"], r["safe"]) for r in card["rows"]}


@pytest.fixture(scope="module")
def repeats_dir(tmp_path_factory: pytest.TempPathFactory, real_run: Path) -> dict[str, Any]:
    """Three scored repeats of one model; returns the folder and the verdicts each repeat must have."""
    tmp = tmp_path_factory.mktemp("repeats")
    lines = [json.loads(x) for x in (real_run / BASE).read_text(encoding="utf-8").splitlines() if x.strip()]
    procs = {}
    for rep, forced in FORCED.items():
        by_id = {f"multi_turn_base_{i}": kind for i, kind in forced.items()}
        changed = [
            {"id": e["id"], "result": _reference_result(e["id"])}
            if by_id.get(e["id"]) == "P"
            else {"id": e["id"], "result": "Error during inference: scripted failure"}
            if by_id.get(e["id"]) == "F"
            else e
            for e in lines
        ]
        procs[rep] = _plugin(tmp, _write_results(tmp / rep / "gpt-oss-20b", changed), rep)
    for rep, proc in procs.items():
        assert proc.wait(timeout=120) in (0, 1), (tmp / f"{rep}.log").read_text()[-3000:]
    scored = {rep: _verdicts(tmp / "cards" / rep / "standard" / "scorecard.json") for rep in FORCED}
    expected = {}
    for rep, forced in FORCED.items():
        expected[rep] = {
            cid: (forced[int(cid.rsplit("_", 1)[1])] == "P",) * 2
            if int(cid.rsplit("_", 1)[1]) in forced
            else scored["rep1"][cid]
            for cid in scored["rep1"]
        }
    assert len(expected["rep1"]) == SELECTED
    assert scored == expected  # forced ones came out as forced; the rest score the same every time
    return {"cards": tmp / "cards", "expected": expected, "tmp": tmp}


def _write_results(folder: Path, entries: list[dict[str, Any]]) -> Path:
    folder.mkdir(parents=True)
    (folder / BASE).write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    return folder


def _mcnemar_by_enumeration(gained: int, lost: int) -> Fraction:
    """Sum of the probabilities of every split no more likely than the observed one (Binomial(n, 1/2))."""
    n = gained + lost
    observed = comb(n, gained)
    return Fraction(sum(comb(n, x) for x in range(n + 1) if comb(n, x) <= observed), 2**n)


def test_repeats_from_scored_runs_with_known_flips(repeats_dir: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run(
        [str(SCRIPT), str(repeats_dir["cards"]), "--out", str(out)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert "found 3 scorecards below it" in proc.stdout
    report = json.loads((out / "comparison.json").read_text(encoding="utf-8"))
    expected = repeats_dir["expected"]
    ids = sorted(expected["rep1"])
    for index, metric in enumerate(("bfcl", "safe")):
        per_id = {c: [expected[r][c][index] for r in ("rep1", "rep2", "rep3")] for c in ids}
        flipped = sorted(c for c, v in per_id.items() if len(set(v)) == 2)
        got = report["repeat"][metric]
        assert (got["k"], got["n"]) == (3, SELECTED)
        assert got["pass_all"] == pytest.approx(sum(all(v) for v in per_id.values()) / SELECTED)
        assert got["pass_any"] == pytest.approx(sum(any(v) for v in per_id.values()) / SELECTED)
        assert got["flip_rate"] == pytest.approx(len(flipped) / SELECTED) and got["flipped"] == flipped
        assert report["repeat"]["by_category"]["multi_turn_base"][metric]["flipped"] == flipped
    assert len(report["repeat"]["bfcl"]["flipped"]) == 14  # the forced ones, 0..13
    assert "the same 60 conversations (a selection" in report["coverage"]
    for run in report["runs"]:  # the accuracies agree with the totals the plugin wrote
        totals = json.loads(Path(run["path"]).read_text(encoding="utf-8"))["totals"]["all"]
        assert run["bfcl"]["accuracy"] == pytest.approx(totals["bfcl_accuracy"], abs=5e-5)
        assert run["safe"]["accuracy"] == pytest.approx(totals["safe_accuracy"], abs=5e-5)
    stable_ids = [row["id"] for row in report["repeats"][0]["stability"]]
    html = (out / "report.html").read_text(encoding="utf-8")
    assert all(f"<code>{c}</code>" in html for c in stable_ids)
    _check_pairs(report, expected)


def _check_pairs(report: dict[str, Any], expected: dict[str, Any]) -> None:
    names = {r["name"]: r["name"].split(" ")[0] for r in report["runs"]}
    assert len(report["pairs"]) == 3
    seen_p = set()
    for pair in report["pairs"]:
        a, b = expected[names[pair["a"]]], expected[names[pair["b"]]]
        for index, metric in enumerate(("bfcl", "safe")):
            gained = sum(1 for c in a if b[c][index] and not a[c][index])
            lost = sum(1 for c in a if a[c][index] and not b[c][index])
            got = pair[metric]["all"]
            assert (got["gained"], got["lost"]) == (gained, lost)
            exact = _mcnemar_by_enumeration(gained, lost)
            assert got["p"] == pytest.approx(binomtest(min(gained, lost), gained + lost).pvalue, rel=1e-12)
            assert got["p"] == pytest.approx(float(exact), rel=1e-12)
            words = "unlikely to be noise" if exact < Fraction(1, 20) else "within run-to-run noise"
            assert words in pair[metric + "_sentences"]["all"]
            seen_p.add(round(got["p"], 6))
    assert len(seen_p) >= 3  # the flips were chosen so the pairs differ (0.07, 0.03, 0.002)


# --- synthetic variants of one real scorecard: conditions, models, hostile input --------------


@pytest.fixture
def card(real_run: Path) -> dict[str, Any]:
    """The scorecard shipped with the real run (11 base conversations, written by the plugin)."""
    path = real_run / "scorecards" / "gpt-oss-20b-vllm-2025-11-12" / "standard" / "scorecard.json"
    return json.loads(path.read_text(encoding="utf-8"))


def _variant(root: Path, name: str, card: dict[str, Any], **provenance: Any) -> dict[str, Any]:
    new = copy.deepcopy(card)
    new["provenance"].update(provenance)
    (root / name).mkdir(parents=True)
    (root / name / "scorecard.json").write_text(json.dumps(new), encoding="utf-8")
    return new


def _save(root: Path, name: str, card: dict[str, Any]) -> None:
    (root / name / "scorecard.json").write_text(json.dumps(card), encoding="utf-8")


def _run(*args: str) -> int:
    return compare_runs.main([*map(str, args)])


def test_table5_columns_for_hints_and_confirm(card: dict[str, Any], tmp_path: Path) -> None:
    standard = _variant(tmp_path, "std", card, label="m", model="m", protocol="standard")
    confirm = _variant(tmp_path, "conf", card, label="m", model="m", protocol="confirm")
    for number, row in enumerate(confirm["rows"]):
        row["answers"] = {"yes": number % 3, "no": number % 2, "restate": 1}
        row["counts"].update(destructive_calls=2, confirmed_destructive=number % 2)
        if number % 2 == 0:
            row["bfcl"]["valid"] = not row["bfcl"]["valid"]
        row["strict"] = bool(row["safe"] and number % 4 == 0)
    _save(tmp_path, "conf", confirm)
    assert _run(tmp_path, "--out", tmp_path / "out") == 0
    lines = (tmp_path / "out" / "table.md").read_text(encoding="utf-8").splitlines()
    header = next(x for x in lines if x.startswith("| model"))
    needing = sum(1 for r in confirm["rows"] if r["reference_destructive"] > 0)
    assert f"strict / {needing}" in header
    n = len(standard["rows"])
    rows = {x.split("|")[2].strip(): [c.strip() for c in x.split("|")[1:-1]] for x in lines if x.startswith("| m |")}
    std_cells, conf_cells = rows["standard"], rows["confirm"]
    assert std_cells[2] == f"{100 * sum(r['bfcl']['valid'] for r in standard['rows']) / n:.1f}"
    assert std_cells[3:6] == ["–", "–", "–"]  # no miss_func, miss_param, long_context data
    assert std_cells[10:] == ["–"] * 5
    answers = [sum(r["answers"][k] for r in confirm["rows"]) for k in ("yes", "no", "restate")]
    assert conf_cells[10] == " / ".join(map(str, answers))
    assert conf_cells[11] == f"{100 * sum(i % 2 for i in range(n)) / (2 * n):.1f}"
    assert conf_cells[12] == str(sum(r["strict"] for r in confirm["rows"] if r["reference_destructive"] > 0))
    pairs = list(zip((r["bfcl"]["valid"] for r in standard["rows"]), (r["bfcl"]["valid"] for r in confirm["rows"])))
    gained, lost = sum(1 for s, c in pairs if c and not s), sum(1 for s, c in pairs if s and not c)
    assert conf_cells[13] == f"{gained} / {lost}" and gained + lost == len(range(0, n, 2))
    assert float(conf_cells[14]) == pytest.approx(binomtest(min(gained, lost), gained + lost).pvalue, rel=0.05)


def test_rank_agreement_matches_scipy(card: dict[str, Any], tmp_path: Path) -> None:
    accuracies = {}
    for model, (fail_bfcl, fail_safe) in {"m1": (0, 3), "m2": (2, 1), "m3": (4, 6), "m4": (6, 4)}.items():
        variant = _variant(tmp_path, model, card, label=model, model=model)
        for number, row in enumerate(variant["rows"]):
            row["bfcl"]["valid"], row["safe"] = number >= fail_bfcl, number >= fail_safe
        _save(tmp_path, model, variant)
        accuracies[model] = (sum(r["bfcl"]["valid"] for r in variant["rows"]), sum(r["safe"] for r in variant["rows"]))
    expected = spearmanr([accuracies[m][0] for m in sorted(accuracies)], [accuracies[m][1] for m in sorted(accuracies)])
    with pytest.MonkeyPatch.context() as patch:  # careful-report needs no scipy: it is not installed by default
        for name in [m for m in sys.modules if m == "scipy" or m.startswith("scipy.")]:
            patch.setitem(sys.modules, name, None)
        assert _run(tmp_path, "--out", tmp_path / "out") == 0
    report = json.loads((tmp_path / "out" / "comparison.json").read_text(encoding="utf-8"))
    assert report["rank_agreement"]["rho"]["mean"]["rho"] == pytest.approx(expected.statistic)
    assert report["rank_agreement"]["rho"]["mean"]["p"] == pytest.approx(expected.pvalue, rel=1e-9)
    assert report["repeats"] == [] and "repeat" not in report  # four models: no repeats


def test_two_models_get_no_rho_and_a_dash(card: dict[str, Any], tmp_path: Path) -> None:
    _variant(tmp_path, "a", card, label="a", model="a")
    _variant(tmp_path, "b", card, label="b", model="b")
    assert _run(tmp_path / "a", tmp_path / "b", "--out", tmp_path / "out") == 0
    text = (tmp_path / "out" / "table.md").read_text(encoding="utf-8")
    assert "Spearman rho: – (needs standard runs of at least 3 models; there are 2)" in text


def test_different_conversations_need_common_ids(
    card: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _variant(tmp_path, "a", card, label="a")
    fewer = _variant(tmp_path, "b", card, label="b")
    fewer["rows"] = fewer["rows"][:6]
    _save(tmp_path, "b", fewer)
    assert _run(tmp_path, "--out", tmp_path / "out") == 2
    assert "--common-ids" in capsys.readouterr().err
    assert _run(tmp_path, "--out", tmp_path / "out", "--common-ids") == 0
    report = json.loads((tmp_path / "out" / "comparison.json").read_text(encoding="utf-8"))
    assert report["ids"] == 6 and "share" in report["coverage"]
    assert report["repeat"]["bfcl"]["n"] == 6  # same model and condition: two repeats on the shared ids


def _break(card: dict[str, Any], how: str) -> str:
    if how == "other dataset":
        card["provenance"]["dataset"] = "0000000000000000"
    elif how == "other declarations":
        card["provenance"]["declarations"] = "ffffffffffffffff"
    elif how == "bad verdict":
        card["rows"][3]["bfcl"]["valid"] = "yes"
    elif how == "bad count":
        card["rows"][5]["counts"]["collateral_destructive"] = -1
    elif how == "unknown id":
        card["rows"][7]["id"] = "multi_turn_base_9999"
    elif how == "duplicate id":
        card["rows"][4]["id"] = card["rows"][3]["id"]
    elif how == "no model":
        del card["provenance"]["model"]
    return json.dumps(card)


@pytest.mark.parametrize(
    "how",
    [
        "other dataset",
        "other declarations",
        "bad verdict",
        "bad count",
        "unknown id",
        "duplicate id",
        "no model",
        "not json",
        "a list",
        "deeply nested",
        "no rows",
    ],
)
def test_unusable_scorecards_give_one_line_and_exit_2(
    card: dict[str, Any], tmp_path: Path, how: str, capsys: pytest.CaptureFixture[str]
) -> None:
    _variant(tmp_path, "good", card)
    (tmp_path / "bad").mkdir()
    texts = {
        "not json": "{nope",
        "a list": "[1, 2]",
        "deeply nested": "[" * 100_000 + "]" * 100_000,
        "no rows": json.dumps({**card, "rows": []}),
    }
    text = texts.get(how) or _break(copy.deepcopy(card), how)
    (tmp_path / "bad" / "scorecard.json").write_text(text, encoding="utf-8")
    assert _run(tmp_path / "good", tmp_path / "bad", "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert str(tmp_path / "bad" / "scorecard.json") in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("args", [["missing"], ["one"], ["empty"]])
def test_wrong_folders_exit_2(
    card: dict[str, Any], tmp_path: Path, args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    _variant(tmp_path, "one", card)
    (tmp_path / "empty").mkdir()
    assert _run(*(tmp_path / a for a in args), "--out", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert err.startswith("careful-report: ") and err.count("\n") == 1


def test_hostile_names_are_escaped(card: dict[str, Any], tmp_path: Path) -> None:
    evil = "<script>alert(1)</script>\"'|`x`"
    _variant(tmp_path, "a", card, label=evil, model=evil)
    _variant(tmp_path, "b", card, label=evil, model=evil)
    assert _run(tmp_path, "--out", tmp_path / "out") == 0
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert "<script>" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    markdown = (tmp_path / "out" / "table.md").read_text(encoding="utf-8")
    assert "<script>" not in markdown and "\\|" in markdown


def test_console_script_refuses_garbage_without_traceback(tmp_path: Path) -> None:
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "scorecard.json").write_bytes(b"\xff\xfe garbage")
    proc = subprocess.run(
        [str(SCRIPT), str(tmp_path), "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.startswith(f"careful-report: {tmp_path / 'a' / 'scorecard.json'}: not a readable")


def test_partial_folders_are_skipped_when_searching(card: dict[str, Any], tmp_path: Path) -> None:
    _variant(tmp_path / "m", "standard", card, label="x")
    _variant(tmp_path / "m" / "standard", "partial", card, label="y")
    _variant(tmp_path / "n", "standard", card, label="z")
    paths, notes = compare_runs.find_scorecards([tmp_path])
    assert [p.parent.name for p in paths] == ["standard", "standard"]
    assert "skipped 1 partial/ selections" in notes[0]


def test_careful_repeat_folders_are_named_and_grouped_as_repeats(card: dict[str, Any], tmp_path: Path) -> None:
    # --careful-repeat writes <label>/<condition>/repeat-<k>/scorecard.json with provenance.repeat = k
    for k in (1, 2):
        variant = _variant(tmp_path / "m" / "standard", f"repeat-{k}", card, label="m", repeat=k, repeats=2)
        if k == 2:
            variant["rows"][0]["bfcl"]["valid"] = not variant["rows"][0]["bfcl"]["valid"]
            _save(tmp_path / "m" / "standard", "repeat-2", variant)
    assert _run(tmp_path / "m", "--out", tmp_path / "out") == 0
    report = json.loads((tmp_path / "out" / "comparison.json").read_text(encoding="utf-8"))
    assert [r["name"] for r in report["runs"]] == ["m [standard] repeat 1", "m [standard] repeat 2"]
    assert report["repeat"]["bfcl"]["flipped"] == [card["rows"][0]["id"]]
    assert report["repeat"]["bfcl"]["flip_rate"] == pytest.approx(1 / len(card["rows"]))


def test_out_folder_holding_a_scorecard_is_refused(
    card: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --out = an input folder would overwrite that run's own report.html with the comparison page
    _variant(tmp_path, "a", card)
    _variant(tmp_path, "b", card)
    page = tmp_path / "a" / "report.html"
    page.write_text("the run's own page", encoding="utf-8")
    assert _run(tmp_path / "a", tmp_path / "b", "--out", tmp_path / "a") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"careful-report: {tmp_path / 'a'}: holds a scorecard") and err.count("\n") == 1
    assert page.read_text(encoding="utf-8") == "the run's own page"
    assert not (tmp_path / "a" / "table.md").exists()


def test_table5_rows_of_repeats_say_which_repeat(card: dict[str, Any], tmp_path: Path) -> None:
    # three runs of one label and condition: without the repeat in the model cell the rows look alike
    _variant(tmp_path / "m" / "standard", "repeat-1", card, label="m", model="m", repeat=1, repeats=2)
    _variant(tmp_path / "m" / "standard", "repeat-2", card, label="m", model="m", repeat=2, repeats=2)
    _variant(tmp_path / "again", "standard", card, label="m", model="m")
    assert _run(tmp_path / "m", tmp_path / "again", "--out", tmp_path / "out") == 0
    lines = (tmp_path / "out" / "table.md").read_text(encoding="utf-8").splitlines()
    models = [x.split("|")[1].strip() for x in lines if x.startswith("| m ")]
    assert models == ["m repeat 1", "m repeat 2", "m"]
    html = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert all(f">{m}</td>" in html for m in models)


def test_control_characters_in_a_label_are_shown_escaped(
    card: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An ESC sequence reached the terminal (the "read 2 scorecards" line), table.md and the page raw,
    # and a newline in a model name split its Table 5 row.
    for name in ("a", "b"):
        _variant(tmp_path, name, card, label=f"x\x1b[31m{name}", model="m\nn")
    assert _run(tmp_path, "--out", tmp_path / "out") == 0
    written = [capsys.readouterr().out] + [
        (tmp_path / "out" / f).read_text(encoding="utf-8") for f in ("table.md", "report.html", "comparison.json")
    ]
    assert not any("\x1b" in text for text in written)
    assert "x\\x1b[31ma [standard]" in written[0]
    rows = [x for x in written[1].splitlines() if x.startswith("| m") and "31m" in x]
    assert [x.split(" | ")[0] for x in rows] == ["| m\\\\nn (x\\\\x1b\\[31ma)", "| m\\\\nn (x\\\\x1b\\[31mb)"]
