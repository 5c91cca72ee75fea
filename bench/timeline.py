"""Where a live run's seconds go: one run's phases, from its own records (issue 49).

Runs one command of ``bench/live_loopback.py`` (our pytest against the loopback batching server,
or ``bfcl generate``) and reads back what the run and its server left behind::

    .venv-vllm/bin/python bench/timeline.py                          # pytest -n 2, L = 1 s, all of base
    .venv-vllm/bin/python bench/timeline.py --side bfcl --latency 2
    .venv-vllm/bin/python bench/timeline.py --ours-python .venv/bin/python --dump   # the lean venv; stacks

The phases, each from a record, never from the command's own idea of itself:

* **spawn**: the bench starts the command (t = 0);
* **workers**: the first and last xdist worker process seen (the process tree, sampled every 50 ms);
* **first request / last response**: the server's own request log (received, answered);
* **busy span**: first request to last response; the whole command's wall time against it;
* **last result line**: the newest modification time of the run's result files;
* **scorecards**: the newest file under ``scorecards/`` (the run's last write);
* **summary**: the moment the command printed the ``careful`` section and its last line
  (its output read through a pipe, each chunk timestamped as it arrives);
* **workers gone**: the last worker process seen;
* **exit**: ``wait4`` returns.

``--dump`` adds ``py-spy dump`` of the command and its workers every 0.5 s from the last response
to the exit (py-spy from the bench's own venv or PATH), printed with their times, so that a gap
between two phases shows which function held it. The dumps stop the process for a few
milliseconds each: compare timings without ``--dump``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
import live_loopback as ll  # noqa: E402  (bench/ is not a package)

POLL_S = 0.05
DUMP_EVERY_S = 0.25
WORKER_MARKS = ("sys.stdin.readline", "[pytest-xdist")


@dataclass
class Seen:
    """What the samplers saw, in time.time() seconds."""

    workers: dict[int, tuple[float, float]] = field(default_factory=dict)  # pid -> (first, last) seen
    chunks: list[tuple[float, bytes]] = field(default_factory=list)
    dumps: list[tuple[float, str]] = field(default_factory=list)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _is_worker(pid: int, root: int) -> bool:
    # execnet starts each xdist worker as `python -c "import sys;exec(eval(sys.stdin.readline()))"`;
    # xdist then retitles it `[pytest-xdist running] ...` where setproctitle is installed
    line = _cmdline(pid)
    return pid != root and any(mark in line for mark in WORKER_MARKS)


def sample(root: int, seen: Seen, done: threading.Event) -> None:
    while not done.is_set():
        now = time.time()
        for pid in ll.tree(root):
            if _is_worker(pid, root):
                first, _ = seen.workers.get(pid, (now, now))
                seen.workers[pid] = (first, now)
        done.wait(POLL_S)


def read_output(stream: BinaryIO, seen: Seen) -> None:
    read = stream.read1
    while chunk := read(65536):
        seen.chunks.append((time.time(), chunk))


def _result_lines(run_dir: Path) -> int:
    total = 0
    for path in run_dir.rglob("*_result.json"):
        try:
            total += path.read_bytes().count(b"\n")
        except OSError:
            continue
    return total


def dump_after(
    root: int, run_dir: Path, wanted: int, seen: Seen, done: threading.Event, py_spy: str, until: float | None
) -> None:
    """py-spy dumps of the tree every DUMP_EVERY_S: from the spawn to ``until`` when given (the
    start-up), else once every conversation has its result line (the end)."""
    while until is None and not done.is_set() and _result_lines(run_dir) < wanted:
        done.wait(POLL_S)
    while not done.is_set() and (until is None or time.time() < until):
        for pid in ll.tree(root):
            try:
                out = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True)
            except FileNotFoundError:
                seen.dumps.append((time.time(), f"no py-spy at {py_spy}: pip install py-spy"))
                return
            if out.returncode == 0:
                seen.dumps.append((time.time(), f"pid {pid}:\n{out.stdout}"))
        done.wait(DUMP_EVERY_S)


def _py_spy() -> str:
    """py-spy on PATH, beside this Python, or in the checkout's .venv."""
    return shutil.which("py-spy") or next(
        (str(p) for p in (Path(sys.executable).with_name("py-spy"), BENCH.parent / ".venv/bin/py-spy") if p.exists()),
        "py-spy",
    )


def _first_line_time(seen: Seen, needle: bytes) -> float | None:
    text = b""
    for at, chunk in seen.chunks:
        text += chunk
        if needle in text:
            return at
    return None


def _newest(paths: list[Path]) -> float | None:
    times = [p.stat().st_mtime for p in paths if p.is_file()]
    return max(times) if times else None


def run(args: argparse.Namespace) -> int:
    if not args.model_dir:
        import loopback_model

        args.model_dir = str(loopback_model.prepare())
    args.model_dir = str(Path(args.model_dir).absolute())
    folder = Path(args.out or tempfile.mkdtemp(prefix="careful-timeline-"))
    folder.mkdir(parents=True, exist_ok=True)
    shutil.rmtree(folder / "run", ignore_errors=True)  # a rerun into the same --out starts clean
    server = ll.Server(args.latency, args.max_num_seqs, args.model_dir, folder)
    run_dir = folder / "run"
    run_dir.mkdir()
    ids = ll.conversation_ids(args.n)
    subset = args.n is not None
    if args.side == "bfcl":
        if subset:
            (run_dir / "test_case_ids_to_generate.json").write_text(json.dumps({"multi_turn_base": ids}))
        cmd = ll.bfcl_command(args.bfcl_python, args.model_dir, subset)
    else:
        cmd = ll.ours_command(
            args.ours_python, args.model_dir, server.url, args.side, ids if subset else None, args.extra
        )
    seen, done = Seen(), threading.Event()
    started = time.time()
    proc = subprocess.Popen(
        cmd, cwd=run_dir, env=ll._environment(run_dir, server), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    threads = [
        threading.Thread(target=sample, args=(proc.pid, seen, done), daemon=True),
        threading.Thread(target=read_output, args=(proc.stdout, seen), daemon=True),
    ]
    py_spy = _py_spy()
    if args.dump:
        threads.append(
            threading.Thread(
                target=dump_after,
                args=(
                    proc.pid,
                    run_dir,
                    len(ids),
                    seen,
                    done,
                    py_spy,
                    started + args.dump_start if args.dump_start else None,
                ),
                daemon=True,
            )
        )
    for t in threads:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    exited = time.time()
    done.set()
    for t in threads:
        t.join(timeout=5)
    stats, _ = server.finish()
    (folder / "command.log").write_bytes(b"".join(c for _, c in seen.chunks))
    first, last = stats.get("first_request"), stats.get("last_response")
    results = list(run_dir.rglob("*_result.json"))
    cards = [p for p in run_dir.rglob("*") if "scorecards" in p.parts]
    workers = list(seen.workers.values())
    phases: list[tuple[str, float | None]] = [
        ("spawn", started),
        ("first worker seen", min((w[0] for w in workers), default=None)),
        ("first request", first),
        ("last response", last),
        ("last result line written", _newest(results)),
        ("'careful' summary printed", _first_line_time(seen, b" careful ")),
        ("scorecards written", _newest(cards)),
        ("pytest's last line printed", seen.chunks[-1][0] if seen.chunks else None),
        ("last worker gone", max((w[1] for w in workers), default=None)),
        ("exit", exited),
    ]
    print(
        f"{' '.join(cmd[2:4]) if args.side != 'bfcl' else 'bfcl generate'} ... ({args.side}), L = {args.latency:g} s, "
        f"{len(ids)} conversations, rc {os.waitstatus_to_exitcode(status)}, "
        f"CPU {usage.ru_utime + usage.ru_stime:.1f} s; kept in {folder}"
    )
    print(f"{'phase':<30}{'t (s)':>8}{'after last response':>22}")
    for name, at in sorted(phases, key=lambda p: (p[1] is None, p[1] or 0)):
        if at is None:
            print(f"{name:<30}{'-':>8}")
            continue
        after = f"{at - last:+.2f}" if last is not None and at >= last else ""
        print(f"{name:<30}{at - started:>8.2f}{after:>22}")
    if first is not None and last is not None:
        busy = last - first
        print(
            f"busy span {busy:.2f} s; whole command {exited - started:.2f} s = {(exited - started) / busy:.2f}x it; "
            f"exit {exited - last:.2f} s after the last response"
        )
    for at, text in seen.dumps:
        if args.dump_start:
            print(f"--- {at - started:.2f} s after the spawn, {text}")
        elif last is not None and at >= last:
            print(f"--- +{at - last:.2f} s after the last response, {text}")
    return 0 if os.waitstatus_to_exitcode(status) in (0, 1) else 1


def parse(argv: list[str]) -> argparse.Namespace:
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--side", default="n2", choices=sorted(ll.SIDES))
    parser.add_argument("--latency", type=float, default=1.0, help="seconds per request")
    parser.add_argument("--n", type=int, help="the first N multi_turn_base conversations (default: all)")
    parser.add_argument("--ours-python", default=sys.executable)
    parser.add_argument("--bfcl-python")
    parser.add_argument("--model-dir")
    parser.add_argument("--max-num-seqs", type=int, default=256)
    parser.add_argument("--dump", action="store_true", help="py-spy dumps from the last response to the exit")
    parser.add_argument(
        "--dump-start", type=float, metavar="S", help="with --dump: the dumps cover the first S seconds instead"
    )
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(own)
    args.extra = extra
    args.ours_python = os.path.abspath(args.ours_python)
    args.bfcl_python = os.path.abspath(args.bfcl_python or args.ours_python)
    return args


if __name__ == "__main__":
    sys.exit(run(parse(sys.argv[1:])))
