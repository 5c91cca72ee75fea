#!/usr/bin/env python
"""The optimizer's cost on a real run: the commands a user types, side by side (issue 47's goal: at most 3x
a plain rescoring).

Commands, each a child process timed from spawn to exit, in interleaved rounds (every command once a
round; medians and ranges printed), CPU as user + system of the whole process tree, on the logged
gpt-oss-20b run (600 conversations; ``../shared/real-runs/gpt-oss-20b-vllm-2025-11-12`` or
``CAREFUL_REAL_RUN``):

* ``pytest --careful-results=RUN -n 2``: the plain rescoring;
* ``pytest --careful-results=RUN -n 2 --careful-optimize``: the same with ``verified_surplus_calls``;
* ``careful-export RUN --out DIR``: the optimized run, positives, pairs and ``optimizer.json`` (one process).

Run: ``.venv/bin/python bench/optimizer.py [--rounds 3]`` (about 2 minutes on 2 idle cores).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUN = Path(os.environ.get("CAREFUL_REAL_RUN") or ROOT.parent / "shared" / "real-runs" / "gpt-oss-20b-vllm-2025-11-12")
DECODER = "gpt-4.1-2025-04-14-FC"
PYTEST = [
    sys.executable,
    "-m",
    "pytest",
    "-p",
    "no:cacheprovider",
    "-q",
    "-n",
    "2",
    f"--careful-results={RUN}",
    f"--careful-decoder={DECODER}",
]
COMMANDS = {
    "rescoring (-n 2)": PYTEST,
    "rescoring --careful-optimize (-n 2)": [*PYTEST, "--careful-optimize"],
    "careful-export (1 process)": [
        sys.executable,
        "-m",
        "pytest_careful.cli.export",
        str(RUN),
        "--decoder",
        DECODER,
        "--out",
        "exported",
    ],
}


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    shutil.rmtree(cwd / "exported", ignore_errors=True)
    shutil.rmtree(cwd / "scorecards", ignore_errors=True)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):  # 1: conversations failed, as a real run's do
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-800:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not RUN.is_dir():
        raise SystemExit(f"no logged run at {RUN} (set CAREFUL_REAL_RUN)")
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="careful-bench-optimizer-") as work:
        for _ in range(args.rounds):
            for name, command in COMMANDS.items():
                results[name].append(timed(command, Path(work)))
    print(f"{args.rounds} rounds, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}, run {RUN.name}")
    print(f"{'command (whole, from spawn to exit)':<40}{'wall':>8}{'range':>16}{'CPU':>8}")
    for name, runs in results.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        span = f"[{min(walls):.2f}-{max(walls):.2f}]"
        print(f"{name:<40}{statistics.median(walls):>7.2f}s{span:>16}{statistics.median(cpus):>7.2f}s")
    base = statistics.median(w for w, _ in results["rescoring (-n 2)"])
    for name in list(COMMANDS)[1:]:
        ratio = statistics.median(w for w, _ in results[name]) / base
        print(f"{name} / rescoring: {ratio:.2f}x wall (goal <= 3x: {'met' if ratio <= 3 else 'MISSED'})")


if __name__ == "__main__":
    main()
