"""Hostile result files by class: survive any file a model or a broken run can write.

One logged run is built from the real one: a few conversations left as they are, and one
conversation per mutation class, each mutated as :data:`MUTATIONS` says. It is rescored
as a user would (a child pytest, with and without ``-n 2``), and each class is checked
against what the user must see: no traceback, a located line for each input problem,
and every other conversation scored exactly as in the unmutated run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import REAL_RUN_DECODER, run_oracle
from pytest_careful.data.result_files import read_result_file

CATEGORY = "multi_turn_base"
FILE = f"BFCL_v4_{CATEGORY}_result.json"
#: conversations left untouched: their rows must not move
UNTOUCHED = [f"{CATEGORY}_{n}" for n in (0, 3, 7)]


@dataclass(frozen=True)
class Mutation:
    """One class of hostile entry: the conversation it is applied to, and how."""

    conversation: str
    mutate: Callable[[dict[str, Any], bytes], bytes]
    #: None: the entry is read and scored; else a part of its located input problem
    problem: str | None = None
    #: the verdict is bfcl-eval's own on the mutated entry (else: the unmutated entry's, unchanged)
    oracle: bool = False


def _with(**fields: str) -> Callable[[dict[str, Any], bytes], bytes]:
    """The entry with ``fields`` set to raw JSON text (NaN, Infinity: what json.dumps would not write)."""

    def mutate(entry: dict[str, Any], raw: bytes) -> bytes:
        text = json.dumps({k: v for k, v in entry.items() if k not in fields})[:-1]
        return (text + "".join(f', "{k}": {v}' for k, v in fields.items()) + "}").encode()

    return mutate


def _counts(value: str) -> Callable[[dict[str, Any], bytes], bytes]:
    """Every step's input and output token count ``value`` (raw JSON text)."""

    def mutate(entry: dict[str, Any], raw: bytes) -> bytes:
        counts = "[" + ", ".join("[" + ", ".join([value] * len(t)) + "]" for t in entry["result"]) + "]"
        return _with(input_token_count=counts, output_token_count=counts)(entry, raw)

    return mutate


def _first_step(*calls: dict[str, Any]) -> Callable[[dict[str, Any], bytes], bytes]:
    """The entry with one more step, ``calls`` (FC ``{name: arguments}``), opening its first turn."""

    def mutate(entry: dict[str, Any], raw: bytes) -> bytes:
        result = entry["result"]
        return json.dumps({**entry, "result": [[list(calls)] + result[0]] + result[1:]}).encode()

    return mutate


def _raw(text: Callable[[dict[str, Any]], str]) -> Callable[[dict[str, Any], bytes], bytes]:
    return lambda entry, raw: text(entry).encode("utf-8", "surrogatepass")


MUTATIONS: dict[str, Mutation] = {
    # Python's json reads NaN and +-Infinity; counts of that kind are no counts (before: int(nan)
    # raised inside the rules, the conversation got no row and a traceback)
    "token_count_nan": Mutation(f"{CATEGORY}_1", _counts("NaN")),
    "token_count_infinity": Mutation(f"{CATEGORY}_2", _counts("Infinity")),
    "token_count_minus_infinity": Mutation(f"{CATEGORY}_4", _counts("-Infinity")),
    "latency_nan": Mutation(f"{CATEGORY}_5", _with(latency="[[NaN, Infinity]]")),
    "token_count_huge_int": Mutation(f"{CATEGORY}_6", _counts("9" * 400)),
    # calls BFCL's decoder and executor see: scored as bfcl-eval scores them (oracle)
    "private_and_dunder_names": Mutation(
        f"{CATEGORY}_8",
        _first_step({"_load_scenario": '{"scenario": {}}'}, {"__init__": "{}"}, {"__class__": "{}"}),
        oracle=True,
    ),
    "attribute_chain_names": Mutation(
        f"{CATEGORY}_9",
        _first_step({"a.b.c": "{}"}, {"GorillaFileSystem.ls": "{}"}, {"ls.__globals__": "{}"}),
        oracle=True,
    ),
    "arguments_not_an_object": Mutation(
        f"{CATEGORY}_19",
        _first_step({"cd": "not json"}, {"cd": "[1, 2]"}, {"cd": "null"}, {"ls": {"a": True}}),
        oracle=True,
    ),
    "arguments_non_finite_or_huge": Mutation(
        f"{CATEGORY}_11",
        _first_step({"cd": '{"folder": NaN}'}, {"cd": '{"folder": 1e400}'}, {"cd": '{"folder": ' + "9" * 5000 + "}"}),
        oracle=True,
    ),
    "arguments_that_try_to_escape": Mutation(
        f"{CATEGORY}_12",
        _first_step(
            {"cd": json.dumps({"folder": "__import__('os').system('exit 3')"})}, {"cd": '{"folder": {"__class__": 1}}'}
        ),
        oracle=True,
    ),
    "surrogates_and_controls": Mutation(
        f"{CATEGORY}_13",
        _raw(
            lambda e: json.dumps(
                {
                    **e,
                    "result": [[[{"cd\ud800\u001b[2J": '{"folder": "\\udfff"}'}], "\u0000\u0007"] + e["result"][0]]
                    + e["result"][1:],
                }
            )
        ),
        oracle=True,
    ),
    "another_class_s_methods": Mutation(
        f"{CATEGORY}_20",
        _first_step(  # TwitterAPI and files only
            {"get_stock_info": '{"symbol": "AAPL"}'}, {"book_flight": '{"access_token": "x"}'}, {"close_ticket": "{}"}
        ),
        oracle=True,
    ),
    # entries BFCL could not have written: one located problem each
    "result_a_dict": Mutation(
        f"{CATEGORY}_14",
        lambda e, raw: json.dumps({**e, "result": {"x": 1}}).encode(),
        problem="'result' must be a list of turns",
    ),
    "more_turns_than_the_conversation": Mutation(
        f"{CATEGORY}_15",
        lambda e, raw: json.dumps({**e, "result": e["result"] + [[]] * 3}).encode(),
        problem="'result' has",
    ),
    "nested_10000_deep": Mutation(
        f"{CATEGORY}_16",
        _raw(lambda e: json.dumps({"id": e["id"], "result": 0}).replace("0}", "[" * 10_000 + "]" * 10_000 + "}")),
        problem="not readable as JSON",
    ),
    "two_entries_on_one_line": Mutation(
        f"{CATEGORY}_17", lambda e, raw: raw + b' {"id": "x"}', problem="not valid JSON (Extra data"
    ),
    "truncated": Mutation(f"{CATEGORY}_18", lambda e, raw: raw[: len(raw) // 2], problem="not valid JSON"),
}


def build(real_run: Path, folder: Path, mutated: bool) -> dict[str, int]:
    """The run's base file in ``folder``: untouched lines, and the mutated ones; line numbers by class."""
    lines = {json.loads(line)["id"]: line for line in (real_run / FILE).read_bytes().split(b"\n") if line}
    out, where = [lines[cid] for cid in UNTOUCHED], {}
    for name, mutation in MUTATIONS.items():
        raw = lines[mutation.conversation]
        out.append(mutation.mutate(json.loads(raw), raw) if mutated else raw)
        where[name] = len(out)
    folder.mkdir(parents=True)
    (folder / FILE).write_bytes(b"\n".join(out) + b"\n")
    return where


@dataclass
class Rescored:
    rc: int
    out: str
    rows: dict[str, dict[str, Any]]
    lines: dict[str, int]
    path: Path


def rescore(root: Path, real_run: Path, mutated: bool, *args: str) -> Rescored:
    folder = root / "run"
    where = build(real_run, folder, mutated)
    ids = UNTOUCHED + [m.conversation for m in MUTATIONS.values()]
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            "-q",
            "--careful-results",
            str(folder),
            "--careful-decoder",
            REAL_RUN_DECODER,
            "--junitxml",
            "junit.xml",
            *ids,
            *args,
        ],
        cwd=root,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=600,
        env={k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CAREFUL"))},
    )
    card = root / "scorecards" / "run" / "standard" / "scorecard.json"
    rows = {r["id"]: r for r in json.loads(card.read_text())["rows"]} if card.exists() else {}
    return Rescored(proc.returncode, proc.stdout + proc.stderr, rows, where, folder / FILE)


@pytest.fixture(scope="module")
def unmutated(real_run: Path, tmp_path_factory: pytest.TempPathFactory) -> Rescored:
    return rescore(tmp_path_factory.mktemp("unmutated"), real_run, False)


@pytest.fixture(scope="module", params=[[], ["-n", "2"]], ids=["no-xdist", "n2"])
def hostile(real_run: Path, tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Rescored:
    return rescore(tmp_path_factory.mktemp("hostile"), real_run, True, *request.param)


@pytest.fixture(scope="module")
def bfcl_verdicts(real_run: Path) -> dict[str, Any]:
    """bfcl-eval's own verdict on each mutated entry the oracle can score (one oracle run)."""
    lines = {json.loads(line)["id"]: line for line in (real_run / FILE).read_bytes().split(b"\n") if line}
    cases = []
    for mutation in (m for m in MUTATIONS.values() if m.oracle):
        raw = lines[mutation.conversation]
        entry = json.loads(mutation.mutate(json.loads(raw), raw))
        cases.append({"id": entry["id"], "result": entry["result"], "decoder": REAL_RUN_DECODER})
    return {case["id"]: verdict for case, verdict in zip(cases, run_oracle(cases), strict=True)}


def _row(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "model"}


def test_the_run_completes_without_a_traceback(hostile: Rescored, unmutated: Rescored) -> None:
    assert hostile.rc == unmutated.rc == pytest.ExitCode.TESTS_FAILED, hostile.out[-3000:]
    for text in ("Traceback", "INTERNALERROR", "\nE   ", "\nerror: "):
        assert text not in hostile.out, hostile.out[-3000:]
    assert set(hostile.rows) == set(unmutated.rows)


def test_the_junit_report_is_well_formed_xml(hostile: Rescored, unmutated: Rescored) -> None:
    """Surrogates, NUL and terminal escapes in the calls do not break the XML a CI reads."""
    import xml.etree.ElementTree as ElementTree

    cases = ElementTree.parse(hostile.path.parent.parent / "junit.xml").getroot().iter("testcase")
    assert sum(1 for _ in cases) == len(unmutated.rows)


def test_untouched_conversations_score_as_before(hostile: Rescored, unmutated: Rescored) -> None:
    for cid in UNTOUCHED:
        assert _row(hostile.rows[cid]) == _row(unmutated.rows[cid]), cid


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_each_class(hostile: Rescored, unmutated: Rescored, bfcl_verdicts: dict[str, Any], name: str) -> None:
    mutation = MUTATIONS[name]
    row, before = hostile.rows[mutation.conversation], unmutated.rows[mutation.conversation]
    located = f"input problem: {hostile.path}:{hostile.lines[name]} [{mutation.conversation}]: "
    if mutation.oracle:
        assert "unscored" not in row and located not in hostile.out
        bfcl = bfcl_verdicts[mutation.conversation]
        assert (row["bfcl"]["valid"], row["bfcl"]["error_type"]) == (bfcl["valid"], bfcl["error_type"])
    elif mutation.problem is None:  # read and scored: the verdict and every rule as before
        assert "unscored" not in row and located not in hostile.out
        assert (row["bfcl"], row["counts"], row["violations"]) == (
            before["bfcl"],
            before["counts"],
            before["violations"],
        )
    else:
        assert f"{located}{mutation.problem}" in hostile.out, hostile.out[-3000:]
        assert row["unscored"].startswith(f"input problem: {hostile.path}:{hostile.lines[name]}")


def test_non_finite_counts_are_left_out_of_the_token_totals(hostile: Rescored) -> None:
    for name in ("token_count_nan", "token_count_infinity", "token_count_minus_infinity"):
        assert hostile.rows[MUTATIONS[name].conversation]["tokens"]["input"] == 0


# -- file level: the whole file is in a form BFCL does not write -----------------------------------


@pytest.fixture(scope="module")
def real_text(real_run: Path) -> bytes:
    """Twelve lines of the real run, as written."""
    return b"".join(line + b"\n" for line in (real_run / FILE).read_bytes().split(b"\n")[:12])


def _read(tmp_path: Path, data: bytes) -> tuple[list[Any], list[Any]]:
    path = tmp_path / FILE
    path.write_bytes(data)
    return read_result_file(path, CATEGORY)


def _bfcl_reads(tmp_path: Path, data: bytes) -> list[tuple[str, Any]]:
    """The entries bfcl-eval's own reader (``load_file``) takes from ``data``."""
    from bfcl_eval.utils import load_file

    path = tmp_path / "bfcl.json"
    path.write_bytes(data)
    return [(e["id"], e["result"]) for e in load_file(path, use_lock=False)]


@pytest.mark.parametrize("newline", [b"\r", b"\r\n", b"\n"], ids=["cr", "crlf", "lf"])
def test_lines_end_where_bfcl_eval_ends_them(tmp_path: Path, real_text: bytes, newline: bytes) -> None:
    """bfcl-eval reads a result file in text mode: ``\\r`` alone ends a line too (before: a
    file written with old-Mac line ends was one line, every conversation lost)."""
    data = real_text.replace(b"\n", newline)
    entries, problems = _read(tmp_path, data)
    assert problems == []
    assert [(e.id, e.result) for e in entries] == _bfcl_reads(tmp_path, data)
    assert [e.line for e in entries] == list(range(1, 13))


def test_a_lone_cr_between_tokens_splits_the_line_as_in_bfcl_eval(tmp_path: Path, real_text: bytes) -> None:
    first, rest = real_text.split(b"\n", 1)
    broken = first.replace(b', "result"', b',\r "result"', 1) + b"\n" + rest
    entries, problems = _read(tmp_path, broken)
    assert [(p.line, p.conversation) for p in problems] == [(1, f"{CATEGORY}_0"), (2, None)]
    assert [e.line for e in entries] == list(range(3, 14))  # the rest keep bfcl-eval's line numbers


def test_a_utf8_byte_order_mark_is_not_an_entry_lost(tmp_path: Path, real_text: bytes) -> None:
    """An editor's BOM (before: line 1 was lost as 'not valid JSON ... truncated line?')."""
    entries, problems = _read(tmp_path, b"\xef\xbb\xbf" + real_text)
    plain, _ = _read(tmp_path, real_text)
    assert [(e.id, e.result, e.line) for e in entries] == [(e.id, e.result, e.line) for e in plain]
    assert len(problems) == 1 and problems[0].line == 1 and "byte order mark" in problems[0].message


@pytest.mark.parametrize("form", ["gzip", "utf-16", "utf-16-no-bom", "json-array", "json-array-pretty"])
def test_a_file_in_another_form_is_one_problem_that_says_which(tmp_path: Path, real_text: bytes, form: str) -> None:
    """Not hundreds of line problems (before: 800 'not valid UTF-8' lines for a gzip file, 12 'Extra
    data ... truncated line?' for a pretty-printed array), but one, naming the form and the fix."""
    import gzip

    lines = real_text.decode("utf-8").splitlines()
    data = {
        "gzip": lambda: gzip.compress(real_text),
        "utf-16": lambda: real_text.decode("utf-8").encode("utf-16"),
        "utf-16-no-bom": lambda: real_text.decode("utf-8").encode("utf-16-le"),
        "json-array": lambda: ("[" + ", ".join(lines) + "]").encode(),
        "json-array-pretty": lambda: ("[\n" + ",\n".join(lines) + "\n]\n").encode(),
    }[form]()
    entries, problems = _read(tmp_path, data)
    assert entries == [] and len(problems) == 1, [str(p) for p in problems][:5]
    shown = str(problems[0])
    assert shown.startswith(f"{tmp_path / FILE}: ") and len(shown) < 400
    assert {
        "gzip": "gzip",
        "utf-16": "UTF-16",
        "utf-16-no-bom": "UTF-16",
        "json-array": "JSON array",
        "json-array-pretty": "JSON array",
    }[form] in shown


def test_two_entries_on_one_line_are_not_called_truncated(tmp_path: Path, real_text: bytes) -> None:
    first, second, rest = real_text.split(b"\n", 2)
    entries, problems = _read(tmp_path, first + second + b"\n" + rest)
    assert [(p.line, p.conversation) for p in problems] == [(1, f"{CATEGORY}_0")]
    assert "truncated" not in problems[0].message and "one line" in problems[0].message
    assert len(entries) == 10


def test_each_conversation_of_an_unreadable_file_says_why(tmp_path: Path, real_text: bytes) -> None:
    """A conversation's failure names the file's own problem, not only "no entry" (before: every
    conversation of a gzip'd file failed with "no entry for ..." and nothing else)."""
    import gzip

    from pytest_careful.sources.reference_logged import Source

    path = tmp_path / FILE
    path.write_bytes(gzip.compress(real_text))
    source = Source("run", REAL_RUN_DECODER)
    source.files[("standard", CATEGORY)] = path
    source.problems.extend(read_result_file(path, CATEGORY)[1])
    said = source.problem_for("standard", f"{CATEGORY}_0")
    assert said.startswith(f"{path}: no entry for {CATEGORY}_0") and "gzip-compressed" in said


# -- a confirm run's inference log: BFCL's keys are step_<n>; a file can hold any key ----------------


@pytest.mark.parametrize("key", ["step_x", "step_" + "9" * 5000, "step_\u00b2", "step_\u0663", "step_"])
def test_odd_step_keys_in_a_confirm_log_are_not_steps(key: str) -> None:
    """Before: ``int(key[5:])`` raised for ``step_x`` (and for 5,000 digits, and ``step_²``,
    which ``isdigit`` passes), failing the conversation with a traceback and no row."""
    from pytest_careful.protocols import answer_log, confirm_log

    log = [
        {
            "begin_of_turn_query": [],
            key: [{confirm_log.ANSWER_LOG_KEY: "yes"}],
            "step_1": [{confirm_log.ANSWER_LOG_KEY: "yes"}],
        }
    ]
    assert confirm_log.confirmations(log, [[0, 1, 2]]) == {0: [1]}  # step_1 only: decoded steps 0 and 1 precede it
    assert [n for n, _ in answer_log.logged_steps(log[0])] == [1]


def _junk(rng: Any, depth: int = 0) -> Any:
    """A JSON value of any shape, with the confirm log's own keys and answers among the choices."""
    from pytest_careful.protocols import confirm_log

    atoms: list[Any] = [None, 0, 5, 2.5, True, "", "yes", "no", "restate", "step_1", [], {}, 10**30]
    draw = rng.random()
    if depth > 3 or draw < 0.4:
        return rng.choice(atoms)
    if draw < 0.6:
        return [_junk(rng, depth + 1) for _ in range(rng.randrange(4))]
    keys = ["role", "content", confirm_log.ANSWER_LOG_KEY, "model_response_decoded", "step_0", "step_x"]
    return {rng.choice(keys): _junk(rng, depth + 1) for _ in range(rng.randrange(5))}


def test_a_confirm_log_of_any_shape_is_read_without_raising() -> None:
    """Seeded shapes of a logged confirm run's inference log (before: an answer kind that was
    an object raised in ``answer_counts``, a decoded response that was a number in ``executed_calls``)."""
    import random

    from pytest_careful.protocols import answer_log, confirm_log

    rng = random.Random(5)
    for _ in range(3000):

        def record() -> Any:
            return rng.choice(
                [
                    {
                        "role": "handler_log",
                        "content": "Successfully decoded model response.",
                        "model_response_decoded": _junk(rng),
                    },
                    {
                        confirm_log.ANSWER_LOG_KEY: rng.choice(["yes", _junk(rng)]),
                        "role": "user",
                        "content": _junk(rng),
                    },
                    _junk(rng),
                ]
            )

        log = [
            {
                "begin_of_turn_query": _junk(rng),
                **{f"step_{n}": [record() for _ in range(rng.randrange(3))] for n in range(3)},
            }
        ]
        confirm_log.confirmations(log, [[0, 1]])
        assert set(confirm_log.answer_counts(log)) == {"yes", "no", "restate"}
        answer_log.logged_answers([[_junk(rng), "text?", _junk(rng)]], log)


# -- careful_settings.json beside the results: its values reach the usage error ---------------------


@pytest.mark.parametrize("value", ["conf\u0000irm\u001b[2J", "c" * 100_000, "a\u2028b\ud800"])
def test_a_planted_settings_value_is_quoted_not_pasted(tmp_path: Path, value: str) -> None:
    """Before: the file's ``condition`` and ``user_script`` went raw into the one-line error (a
    terminal escape cleared the screen; 100,000 characters made a 200 kB error)."""
    from pytest_careful.data.run_settings import SETTINGS_FILE
    from pytest_careful.sources.reference_logged import protocol_problem, script_problem

    (tmp_path / FILE).write_text("")
    (tmp_path / SETTINGS_FILE).write_text(json.dumps({"condition": value}))
    for said in (protocol_problem("confirm", [tmp_path / FILE], tmp_path), script_problem(value, "default")):
        assert said is not None and said.isprintable() and len(said) < 1000, said
        said.encode("utf-8")  # no lone surrogate reaches the terminal
