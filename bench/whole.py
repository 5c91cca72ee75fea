"""The whole command a user types: `bfcl evaluate` against `pytest --careful-results`.

    .venv/bin/python bench/whole.py               # ~3 min on 2 cores
    .venv/bin/python bench/whole.py --rounds 5
    .venv/bin/python bench/whole.py --setup       # + README's setup command in a fresh venv (~1 min)

Everything is a child process timed from spawn to exit, interleaved round by round
(on a shared machine, load hits every command alike); medians are printed, with the
spread. Peak RSS is each process's VmHWM, polled from /proc every 10 ms over the whole
process tree (xdist workers included). The real 600-conversation run of
../shared/real-runs/ is registered under the decoder key for `bfcl evaluate`, with
BFCL_PROJECT_ROOT in a temp dir, exactly as pytest reads it. `bfcl evaluate` needs
the `[bfcl-cli]` extra (it imports the whole handler registry) and an OPENAI_API_KEY
to build the handler (a dummy: nothing is sent).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REAL_RUN = ROOT.parent / "shared" / "real-runs" / "gpt-oss-20b-vllm-2025-11-12"
KEY = "gpt-4.1-2025-04-14-FC"
CATEGORIES = ("multi_turn_base", "multi_turn_miss_func", "multi_turn_miss_param")
PY = sys.executable
TARGETS = {"pytest": 4.0, "pytest -n 2": 2.5}


@dataclass
class Run:
    """One timed child process tree: wall time and each process's peak RSS (MB)."""

    wall: float
    returncode: int
    cpu: float = 0.0  # user + system seconds of the whole tree (children reaped by their parents)
    peaks: dict[str, float] = field(default_factory=dict)  # role -> peak RSS, largest of that role
    tail: str = ""


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(c) for c in f.read().split()]
    except OSError:
        return []


def _tree(pid: int) -> list[int]:
    out, pending = [], [pid]
    while pending:
        p = pending.pop()
        out.append(p)
        pending.extend(_children(p))
    return out


def _hwm_and_role(pid: int) -> tuple[float, str] | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None
    match = re.search(r"VmHWM:\s+(\d+) kB", status)
    if not match:
        return None
    # xdist's workers are started by execnet; anything else (a fork about to exec git) is "other"
    role = "worker" if "execnet" in cmd or "import sys;exec(eval(" in cmd else "other"
    return int(match.group(1)) / 1024, role


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> Run:
    """Run ``cmd``; its wall time and the peak RSS of every process of its tree."""
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    peaks: dict[int, tuple[float, str]] = {}
    import threading

    output: list[bytes] = []
    reader = threading.Thread(target=lambda: output.append(proc.stdout.read()))  # type: ignore[union-attr]
    reader.start()
    while True:
        # wait4, not poll(): its rusage counts the descendants the child reaped (xdist workers)
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        for pid in _tree(proc.pid):
            seen = _hwm_and_role(pid)
            if seen and seen[0] > peaks.get(pid, (0.0, ""))[0]:
                peaks[pid] = seen
        time.sleep(0.01)
    wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    reader.join()
    by_role: dict[str, float] = {}
    for pid, (mb, role) in peaks.items():
        role = "controller" if pid == proc.pid else role
        by_role[role] = max(by_role.get(role, 0.0), mb)
    text = b"".join(output).decode(errors="replace")
    return Run(wall, proc.returncode, usage.ru_utime + usage.ru_stime, by_role, text[-400:])


def prepare(tmp: Path) -> dict[str, Path]:
    """BFCL's project root (for bfcl evaluate) and logged runs of 200, 400 and 600 conversations."""
    bfcl_model = tmp / "bfcl-root" / "result" / KEY
    bfcl_model.mkdir(parents=True)
    paths = {"bfcl-root": tmp / "bfcl-root", "work": tmp / "work"}
    paths["work"].mkdir()
    for n in (1, 2, 3):
        run = tmp / f"run{200 * n}" / "gpt-oss-20b"
        run.mkdir(parents=True)
        for category in CATEGORIES[:n]:
            shutil.copy(REAL_RUN / f"BFCL_v4_{category}_result.json", run)
        paths[f"run{200 * n}"] = run
    for category in CATEGORIES:
        shutil.copy(REAL_RUN / f"BFCL_v4_{category}_result.json", bfcl_model)
    return paths


def commands(paths: dict[str, Path]) -> dict[str, list[str]]:
    bfcl = str(Path(PY).with_name("bfcl"))
    careful = [PY, "-m", "pytest", f"--careful-decoder={KEY}"]
    return {
        "bfcl evaluate": [bfcl, "evaluate", "--model", KEY, "--test-category", ",".join(CATEGORIES)],
        "pytest": careful + [f"--careful-results={paths['run600']}"],
        "pytest -n 2": careful + [f"--careful-results={paths['run600']}", "-n", "2"],
        "reference main job (-n 2, 800 conv)": [
            PY,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--careful-model=reference",
            "-n",
            "2",
            "-q",
        ],
        # The same again straight after: its scorecard folder is kept, so the charts are reused.
        "reference main job, rerun": [
            PY,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--careful-model=reference",
            "-n",
            "2",
            "-q",
        ],
        "0 conv (200-conv run, -k selects none)": careful
        + [f"--careful-results={paths['run200']}", "-k", "no_such_conversation"],
        "200 conv": careful + [f"--careful-results={paths['run200']}"],
        "400 conv": careful + [f"--careful-results={paths['run400']}"],
        "0 conv, -n 2": careful + [f"--careful-results={paths['run200']}", "-n", "2", "-k", "no_such_conversation"],
        # What the fixed cost is made of, step by step.
        "python -c pass": [PY, "-c", "pass"],
        "import pytest": [PY, "-c", "import pytest"],
        "import openai": [PY, "-c", "import openai"],
        "pytest --co, no plugin (-p no:careful)": [PY, "-m", "pytest", "-p", "no:careful", "--co", "-q"],
        "pytest --co, plugin installed, inactive": [PY, "-m", "pytest", "--co", "-q"],
    }


def _env(paths: dict[str, Path]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTEST_ADDOPTS", "PYTHONPROFILEIMPORTTIME")}
    env.update(BFCL_PROJECT_ROOT=str(paths["bfcl-root"]), OPENAI_API_KEY=env.get("OPENAI_API_KEY", "sk-unused"))
    return env


def measure(rounds: int, paths: dict[str, Path]) -> dict[str, list[Run]]:
    cmds, env = commands(paths), _env(paths)
    runs: dict[str, list[Run]] = {name: [] for name in cmds}
    for number in range(rounds):
        for name, cmd in cmds.items():  # interleaved: each round runs every command once
            if "rerun" not in name:  # a first run: no scorecards (and charts to reuse) from before
                shutil.rmtree(paths["work"] / "scorecards", ignore_errors=True)
            runs[name].append(timed(cmd, paths["work"], env))
        print(f"  round {number + 1}/{rounds} done", file=sys.stderr)
    return runs


def _cpu(runs: list[Run]) -> float:
    return statistics.median(r.cpu for r in runs)


def _median(runs: list[Run]) -> float:
    return statistics.median(r.wall for r in runs)


def _spread(runs: list[Run]) -> str:
    walls = sorted(r.wall for r in runs)
    return f"[{walls[0]:.2f}-{walls[-1]:.2f}]"


def _peaks(runs: list[Run]) -> str:
    roles: dict[str, float] = {}
    for run in runs:
        for role, mb in run.peaks.items():
            if role == "other":
                continue
            roles[role] = max(roles.get(role, 0.0), mb)
    return ", ".join(f"{role} {mb:.0f} MB" for role, mb in sorted(roles.items()))


def report(runs: dict[str, list[Run]]) -> None:
    bfcl = _median(runs["bfcl evaluate"])
    print(f"\n{'command (whole, from spawn to exit)':44s} {'wall':>7s} {'range':>13s} {'CPU':>7s}  peak RSS")
    for name, rs in runs.items():
        bad = [r for r in rs if r.returncode not in (0, 1, 5)]
        flag = f"  EXIT {bad[0].returncode}: {bad[0].tail!r}" if bad else ""
        print(f"{name:44s} {_median(rs):6.2f}s {_spread(rs):>13s} {_cpu(rs):6.2f}s  {_peaks(rs)}{flag}")
    print()
    for name, target in TARGETS.items():
        ratio = bfcl / _median(runs[name])
        cpu = _cpu(runs["bfcl evaluate"]) / _cpu(runs[name])
        print(
            f"bfcl evaluate / {name:12s} {ratio:5.2f}x wall, {cpu:5.2f}x CPU  "
            f"(target >= {target}x wall: {'met' if ratio >= target else 'MISSED'})"
        )
    ref = _median(runs["reference main job (-n 2, 800 conv)"])
    again = _median(runs["reference main job, rerun"])
    print(
        f"reference main job, -n 2         {ref:5.2f} s first run, {again:.2f} s rerun "
        f"(target < 3 s: {'met' if ref < 3 else 'MISSED'} on a first run, {'met' if again < 3 else 'MISSED'} on a rerun)"
    )
    bfcl_peak = max(r.peaks.get("controller", 0) for r in runs["bfcl evaluate"])
    ours = max(
        mb
        for name, rs in runs.items()
        if name.startswith(("pytest", "reference")) and "--co" not in name
        for r in rs
        for role, mb in r.peaks.items()
        if role != "other"
    )
    print(
        f"largest peak RSS of any pytest process {ours:.0f} MB vs bfcl evaluate {bfcl_peak:.0f} MB "
        f"(target below: {'met' if ours < bfcl_peak else 'MISSED'})"
    )
    _scaling(runs)


def _scaling(runs: dict[str, list[Run]]) -> None:
    points = [(0, "0 conv (200-conv run, -k selects none)"), (200, "200 conv"), (400, "400 conv"), (600, "pytest")]
    xs = [n for n, _ in points]
    ys = [_median(runs[name]) for _, name in points]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    print(
        "\nscaling, no xdist: "
        + ", ".join(f"{x}: {y:.2f} s" for x, y in zip(xs, ys))
        + f"; least squares: {my - slope * mx:.2f} s fixed + {1000 * slope:.2f} ms/conversation"
    )
    steps = [
        "python -c pass",
        "import pytest",
        "import openai",
        "pytest --co, no plugin (-p no:careful)",
        "pytest --co, plugin installed, inactive",
        "0 conv (200-conv run, -k selects none)",
        "0 conv, -n 2",
    ]
    print("fixed cost, step by step: " + ", ".join(f"{s} {_median(runs[s]):.2f} s" for s in steps))


def import_breakdown(paths: dict[str, Path], extra: list[str]) -> None:
    """Where the 0-conversation run's import time goes: self time summed by top-level package, per process."""
    env = {**_env(paths), "PYTHONPROFILEIMPORTTIME": "1"}
    cmd = [
        PY,
        "-m",
        "pytest",
        f"--careful-decoder={KEY}",
        f"--careful-results={paths['run200']}",
        "-k",
        "no_such_conversation",
        *extra,
    ]
    started = time.perf_counter()
    out = subprocess.run(cmd, cwd=paths["work"], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    processes, totals = 0, dict[str, float]()
    for line in out.stderr.splitlines():
        match = re.match(r"import time:\s+(\d+) \|\s+\d+ \| (\s*)(\S+)", line)
        if not match:
            continue
        if match.group(3) == "site" and not match.group(2):  # imported once by each interpreter
            processes += 1
        top = match.group(3).split(".")[0]
        totals[top] = totals.get(top, 0) + int(match.group(1)) / 1e6
    total = sum(totals.values())
    head = ", ".join(f"{name} {secs:.2f}" for name, secs in sorted(totals.items(), key=lambda x: -x[1])[:9])
    print(
        f"\nimports of the 0-conversation run {' '.join(extra) or '(no xdist)'}: {wall:.2f} s wall "
        f"(with import profiling), {processes} interpreters, {total:.2f} s importing (CPU, all processes): {head}"
    )


REASONS = {  # why each big package is in the default install
    "numpy": "pinned; matplotlib and bfcl-eval's numpy users",
    "anthropic": "Claude handler (core)",
    "matplotlib": "HTML report figures",
    "openai": "OpenAI FC decoder, vLLM's client (core)",
    "fontTools": "matplotlib",
    "PIL": "matplotlib (pillow)",
    "pip": "every venv",
    "bfcl_eval": "the benchmark itself",
    "pygments": "pytest, rich",
    "setuptools": "every venv / editable install",
    "pydantic_core": "openai, anthropic",
    "kiwisolver": "matplotlib",
}


def setup_command(tmp: Path) -> None:
    """README's setup command in a fresh venv (pip's cache as it is): time, size, biggest packages."""
    venv = tmp / "fresh"
    cmd = (
        f"python3 -m venv {venv} && {venv}/bin/pip install -q --no-deps bfcl-eval==2026.3.23 "
        f"&& {venv}/bin/pip install -q -e {ROOT}"
    )
    started = time.perf_counter()
    subprocess.run(cmd, shell=True, check=True, capture_output=True)
    elapsed = time.perf_counter() - started
    size = _du(venv)
    disk = int(subprocess.run(["du", "-sm", str(venv)], capture_output=True, text=True).stdout.split()[0])
    print(
        f"\nREADME setup command, fresh venv: {elapsed:.1f} s (target <= 40 s), venv {size:.0f} MB of files, "
        f"{disk} MB by du -sm (target <= 450 MB)"
    )
    site = next(venv.glob("lib/python*/site-packages"))
    sizes = sorted(((_du(p), p.name) for p in site.iterdir() if not p.name.endswith(".dist-info")), reverse=True)
    for mb, name in sizes[:12]:
        stem = name.split(".")[0]
        print(f"  {mb:6.1f} MB  {name:32s} {REASONS.get(stem, '')}")


def _du(path: Path) -> float:
    if path.is_file():
        return path.stat().st_size / 2**20
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--setup", action="store_true", help="also time README's setup command in a fresh venv")
    args = parser.parse_args()
    if not REAL_RUN.is_dir():
        sys.exit(f"the real run is not at {REAL_RUN}")
    with tempfile.TemporaryDirectory(prefix="bench-whole-") as tmp:
        paths = prepare(Path(tmp))
        print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}; {args.rounds} interleaved rounds")
        report(measure(args.rounds, paths))
        import_breakdown(paths, [])
        import_breakdown(paths, ["-n", "2"])
        if args.setup:
            setup_command(Path(tmp))


if __name__ == "__main__":
    main()
