"""Everything a user sees, recorded from one checkout and compared with another's (issue 48).

A refactor must not move a byte that a user reads. ``record`` runs a fixed set of user commands
from a checkout and keeps what each printed and every file it wrote; ``compare`` holds two such
recordings side by side, file by file::

    .venv/bin/python bench/compare_outputs.py record /tmp/before --checkout /path/to/old-checkout
    .venv/bin/python bench/compare_outputs.py record /tmp/after                 # this checkout
    .venv/bin/python bench/compare_outputs.py compare /tmp/before /tmp/after    # exit 0: all the same

The commands (``COMMANDS``), each in a fresh folder of its own, run by this Python with the
checkout first on ``PYTHONPATH`` (so one venv serves both checkouts):

* ``references``: the README's main job, the references as the model, all 800 conversations;
* ``scripted-standard``, ``-hints``, ``-confirm``: ``scripted:ask`` on ``multi_turn_base`` under each
  protocol, with its failures' texts (``-rf``) and JUnit XML;
* ``smollm2``: the shipped SmolLM2 logged run (``examples/smollm2-135m-vllm-cpu``), rescored;
* ``real-run``: the real gpt-oss-20b run, rescored, where ``../shared/real-runs`` lies beside the
  checkout (a user's clone has none: skipped, and said so);
* ``careful-report``: the report over the three scripted scorecards;
* ``help``: ``pytest --help`` (the careful group's options, their help text);
* ``options-reference``: the docs' options table (``docs/hooks/options_reference.py``'s ``render()``).

Every command runs with ``COLUMNS=80`` (what a pipe gets): the help text wraps at the terminal's width.

What is masked before comparing, and why (everything else must be equal):

* the recording's own folders (the checkout, each command's folder): they differ by design;
* wall-clock times: pytest's ``in 5.62s``, ISO dates and times, times of day, ``Nm Ns`` and ``N.Ns``
  durations, JUnit's ``time=`` and ``timestamp=``, JSON keys that hold a time (``seconds``,
  ``duration``, ``started``, ``finished``, ``timestamp``, ``elapsed``, ``wall_s``, ``time``): a
  machine's speed is not what a user reads;
* which conversations the summary lists as the slowest (each line's ``pytest '<id>'``): the
  machine's timing picks them (the lines and the command after the id are kept);
* a live session's folder name (``.careful/sessions/<start>-<run id>``) and its progress file's pid,
  in file names and in text: new each run;
* the checkout's commit and the day of the run in the provenance (``git_sha``, ``date``, and the
  ``pytest-careful 0.1.0 (<commit>), ..., <date>`` line): a refactor is a new commit by definition;
* pids and ``0x...`` addresses: a new process each run; ``run.lock``'s line (its holder's pid, start
  and command line, cut at a width that the recording's path moves);
* temporary folders (``/tmp/...``): pytest's and the plugin's own, new each run;
* the JUnit ``hostname``.

JSON files are parsed, masked key by key, and compared as canonical JSON (sorted keys); any other
UTF-8 file line by line after the masks; anything else (PNG) byte for byte. ``compare`` exits 0 when every file is the
same, 1 when one differs or is missing on one side (each named, with its first differing lines),
2 on unusable input.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent.parent
IDS_FILE = "examples/smollm2-135m-vllm-cpu/conversations.txt"
REAL_RUN = Path("../shared/real-runs/gpt-oss-20b-vllm-2025-11-12")
REAL_RUN_DECODER = "gpt-4.1-2025-04-14-FC"
OPTIONS_HOOK = "docs/hooks/options_reference.py"
COMMON = ["-p", "no:cacheprovider", "-p", "no:randomly", "-o", "addopts=", "--careful-scorecards=cards"]


@dataclass(frozen=True)
class Command:
    name: str
    args: tuple[str, ...]  # after `python -m pytest` (or the console script, for careful-report)
    needs: str | None = None  # a path, relative to the checkout, without which it is skipped
    program: str = "pytest"  # or "careful-report", or "options-reference" (the docs' options table)


def _scripted(protocol: str) -> Command:
    return Command(
        f"scripted-{protocol}",
        (
            *COMMON,
            "--careful-model=scripted:ask",
            f"--careful-protocol={protocol}",
            "--careful-category=base",
            "--careful-gate=none",
            "-q",
            "-rf",
            "--junitxml=junit.xml",
        ),
    )


COMMANDS = (
    Command("references", (*COMMON, "--careful-model=reference", "-n", "2", "-q")),
    _scripted("standard"),
    _scripted("hints"),
    _scripted("confirm"),
    Command(
        "smollm2",
        (*COMMON, "--careful-results={checkout}/examples/smollm2-135m-vllm-cpu", f"@{{checkout}}/{IDS_FILE}", "-q"),
        needs=IDS_FILE,
    ),
    Command(
        "real-run",
        (
            *COMMON,
            f"--careful-results={{checkout}}/{REAL_RUN}",
            f"--careful-decoder={REAL_RUN_DECODER}",
            "--careful-gate=none",
            "-n",
            "2",
            "-q",
        ),
        needs=str(REAL_RUN),
    ),
    Command(
        "careful-report",
        (
            "--out",
            "report",
            "{out}/scripted-standard/cards",
            "{out}/scripted-hints/cards",
            "{out}/scripted-confirm/cards",
        ),
        program="careful-report",
    ),
    Command("help", ("-p", "no:randomly", "-o", "addopts=", "--help")),
    Command("options-reference", (), needs=OPTIONS_HOOK, program="options-reference"),
)

#: The ways a command runs: the console script's function, or the docs' hook, by this Python.
PROGRAMS = {
    "careful-report": "from pytest_careful.reports.compare_runs import main; main()",
    "options-reference": (
        "import importlib.util, sys; spec = importlib.util.spec_from_file_location('options_reference', sys.argv[1]); "
        "module = sys.modules['options_reference'] = importlib.util.module_from_spec(spec); "
        "spec.loader.exec_module(module); print(module.render(), end='')"
    ),
}


# --- record ---------------------------------------------------------------------------


def record(out: Path, checkout: Path) -> int:
    out.mkdir(parents=True, exist_ok=True)
    for command in COMMANDS:
        folder = out / command.name
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        if command.needs and not (checkout / command.needs).exists():
            (folder / "SKIPPED").write_text(f"{command.needs} is not beside {checkout}\n")
            print(f"{command.name}: skipped ({command.needs} is not there)")
            continue
        started = time.monotonic()
        rc = _run(command, folder, checkout, out)
        print(f"{command.name}: exit {rc} in {time.monotonic() - started:.1f} s")
    return 0


def _run(command: Command, folder: Path, checkout: Path, out: Path) -> int:
    args = [a.format(checkout=checkout, out=out) for a in command.args]
    if command.program == "options-reference":
        argv = [sys.executable, "-c", PROGRAMS[command.program], str(checkout / OPTIONS_HOOK)]
    elif command.program in PROGRAMS:
        argv = [sys.executable, "-c", PROGRAMS[command.program], *args]
    else:
        argv = [sys.executable, "-m", "pytest", "--rootdir", str(folder), *args]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    # The checkout's package first: one venv records any checkout (its editable install may point elsewhere).
    env["PYTHONPATH"] = os.pathsep.join([str(checkout), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    env["BFCL_PROJECT_ROOT"] = str(folder / ".bfcl")  # bfcl-eval writes on import: never into the checkout
    env["COLUMNS"] = "80"  # --help and pytest's lines wrap at the terminal's width: the same on both sides
    proc = subprocess.run(argv, cwd=folder, env=env, capture_output=True, text=True)
    (folder / "COMMAND").write_text(" ".join(argv[1:]) + "\n")
    (folder / "stdout.txt").write_text(proc.stdout)
    (folder / "stderr.txt").write_text(proc.stderr)
    (folder / "EXIT").write_text(f"{proc.returncode}\n")
    shutil.rmtree(folder / ".bfcl", ignore_errors=True)
    return proc.returncode


# --- masks ----------------------------------------------------------------------------

SESSION_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{8}\b")  # a live session's folder: its start and run id

TIME_KEYS = frozenset({"seconds", "duration", "started", "finished", "timestamp", "elapsed", "wall_s", "time"})
#: JSON keys whose value is the recording's checkout and day, not what the code computed
RECORDING_KEYS = {"git_sha": "<commit>", "date": "<date>"}
TEXT_MASKS = (
    # run.lock: its holder's pid, start and command line, cut at a width (the line depends on the recording's path)
    (re.compile(r"^pid \d+, since \d\d:\d\d:\d\d: .*$", re.M), "pid <pid>, since <time>: <command line>"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?"), "<datetime>"),
    (SESSION_ID, "<session>"),
    # the provenance line: the checkout's commit and the day it ran (scorecard.md, report.html, careful-report)
    (re.compile(r"(pytest-careful \S+ )\([0-9a-f]{10}\)"), r"\1(<commit>)"),
    (re.compile(r"(?<=, )\d{4}-\d\d-\d\d(?=$|<)", re.M), "<date>"),
    (re.compile(r"(<td>(?:git_sha|date)</td><td[^>]*>)[^<]*"), r"\1<commit or date>"),  # report.html's table
    (re.compile(r"\b\d\d:\d\d:\d\d\b"), "<time>"),
    (re.compile(r"\bin \d+(\.\d+)?s\b( \(\d+:\d\d:\d\d\))?"), "in <s>"),
    (re.compile(r"\b\d+(\.\d+)? ?(ms|s)\b(?= |,|\)|$)"), "<s>"),
    (re.compile(r"\b\d+m ?\d+(\.\d+)?s\b"), "<m s>"),
    (re.compile(r'\b(time|timestamp)="[^"]*"'), r'\1="<time>"'),
    (re.compile(r'\bhostname="[^"]*"'), 'hostname="<host>"'),
    (re.compile(r"\bpid[ =:]\d+"), "pid <pid>"),
    (re.compile(r"0x[0-9a-f]{6,}"), "<addr>"),
    (re.compile(r"/tmp/[^\s\"'<>]*"), "<tmp>"),
    # the summary's "slowest conversations": which ones, and their order, are the machine's timing
    (re.compile(r"^(\s+<s>  pytest )'[^']*'", re.M), r"\1'<one of the slowest>'"),
)
#: In a file's name: a live session's folder (its start and run id) and a process's progress file (its pid)
NAME_MASKS = ((SESSION_ID, "<session>"), (re.compile(r"(?<=/progress/)\d+(?=\.json$)"), "<pid>"))


def mask_text(text: str, folders: dict[str, str]) -> str:
    for path, name in sorted(folders.items(), key=lambda kv: -len(kv[0])):  # longest first: nested folders
        text = text.replace(path, name)
    for pattern, repl in TEXT_MASKS:
        text = pattern.sub(repl, text)
    return text


def mask_json(value: Any, folders: dict[str, str]) -> Any:
    if isinstance(value, dict):
        return {
            k: "<time>" if k in TIME_KEYS else RECORDING_KEYS.get(k) or mask_json(v, folders) for k, v in value.items()
        }
    if isinstance(value, list):
        return [mask_json(v, folders) for v in value]
    if isinstance(value, str):
        return mask_text(value, folders)
    return value


# --- compare --------------------------------------------------------------------------


def _folders(recording: Path) -> dict[str, str]:
    """The recording's own paths, by the placeholder that stands for them on both sides."""
    found = {str(recording.resolve()): "<recording>"}
    for command in (recording / c.name / "COMMAND" for c in COMMANDS):
        if command.exists():
            for part in command.read_text().split():
                checkout = re.match(r"(?:--careful-results=|@)?(/.*?)/(examples|\.\./shared|docs/hooks)/", part)
                if checkout:
                    found[checkout.group(1)] = "<checkout>"
    return found


def _normal(path: Path, folders: dict[str, str]) -> bytes:
    raw = path.read_bytes()
    if path.suffix == ".json":
        try:
            return json.dumps(mask_json(json.loads(raw), folders), indent=1, sort_keys=True).encode()
        except ValueError:
            pass
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:  # a chart's PNG: byte for byte
        return raw
    return raw if "\0" in text else mask_text(text, folders).encode()


def _name(relative: str) -> str:
    for pattern, repl in NAME_MASKS:
        relative = pattern.sub(repl, relative)
    return relative


def _files(recording: Path) -> dict[str, Path]:
    """Each file of the recording by its masked name (a session's folder and a pid differ each run)."""
    return {_name(str(p.relative_to(recording))): p for p in sorted(recording.rglob("*")) if p.is_file()}


def compare(a: Path, b: Path, context: int = 3, limit: int = 40) -> int:
    if not all((r / COMMANDS[0].name).is_dir() for r in (a, b)):
        print(f"not a recording (no {COMMANDS[0].name}/ in both): {a} {b}", file=sys.stderr)
        return 2
    fa, fb = _folders(a), _folders(b)
    a_files, b_files = _files(a), _files(b)
    names = sorted(a_files.keys() | b_files.keys())
    differing = 0
    for name in names:
        if name not in a_files or name not in b_files:
            differing += 1
            print(f"{name}: only in {a if name in a_files else b}")
            continue
        left, right = _normal(a_files[name], fa), _normal(b_files[name], fb)
        if left == right:
            continue
        differing += 1
        print(f"{name}: differs")
        if b"\0" in left or b"\0" in right:
            print(f"  binary: {len(left)} bytes against {len(right)}")
            continue
        diff = difflib.unified_diff(
            left.decode().splitlines(),
            right.decode().splitlines(),
            str(a_files[name]),
            str(b_files[name]),
            n=context,
            lineterm="",
        )
        for line in list(diff)[:limit]:
            print(f"  {line}")
    print(f"{len(names) - differing} of {len(names)} files the same, {differing} differ")
    return 1 if differing else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    sub = parser.add_subparsers(dest="what", required=True)
    rec = sub.add_parser("record", help="run the commands from a checkout, keep what they printed and wrote")
    rec.add_argument("out", type=Path)
    rec.add_argument("--checkout", type=Path, default=HERE, help="the checkout whose package runs (default: this one)")
    cmp_ = sub.add_parser("compare", help="two recordings, file by file, after the masks")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    if args.what == "record":
        return record(args.out.resolve(), args.checkout.resolve())
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())
