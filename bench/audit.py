#!/usr/bin/env python
"""The item audit's cost: ``careful-audit --json`` as a user types it, beside the main job it sits next to.

Commands, each a child process timed from spawn to exit, in interleaved rounds (every command once a
round; medians and ranges printed), CPU as user + system of the whole process tree:

* ``careful-audit --json -j 1`` and ``-j 2``: the whole audit of the 800 references;
* ``pytest --careful-model=reference -n 2``: the main job (the 800 references replayed and scored);
* ``python -c 'reference() of the 800'``: the bare reference replays the audit starts from.

Run: ``.venv/bin/python bench/audit.py [--rounds 3]`` (about 3 minutes on 2 idle cores).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
REPLAY = (
    "from pytest_careful.data import dataset; from pytest_careful.evaluation.replay import reference\n"
    "for c in dataset.load(): reference(c)"
)
COMMANDS = {
    "careful-audit --json -j 1": [PYTHON, "-m", "pytest_careful.cli.audit", "--json", "-j", "1"],
    "careful-audit --json -j 2": [PYTHON, "-m", "pytest_careful.cli.audit", "--json", "-j", "2"],
    "main job (reference, -n 2)": [
        PYTHON,
        "-m",
        "pytest",
        "-p",
        "no:cacheprovider",
        "--careful-model=reference",
        "-n",
        "2",
        "-q",
    ],
    "the 800 reference replays": [PYTHON, "-c", REPLAY],
}


def timed(command: list[str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds (the process tree's user + system) of one command."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0,):
        raise SystemExit(f"{' '.join(command)} exited {done.returncode}: {done.stderr[-500:]}")
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="careful-bench-audit-") as work:
        for _ in range(args.rounds):
            for name, command in COMMANDS.items():
                results[name].append(timed(command, Path(work)))
    print(f"{args.rounds} rounds, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(f"{'command (whole, from spawn to exit)':<36}{'wall':>8}{'range':>16}{'CPU':>8}")
    for name, runs in results.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        span = f"[{min(walls):.2f}-{max(walls):.2f}]"
        print(f"{name:<36}{statistics.median(walls):>7.2f}s{span:>16}{statistics.median(cpus):>7.2f}s")
    audit = statistics.median(w for w, _ in results["careful-audit --json -j 2"])
    main_job = statistics.median(w for w, _ in results["main job (reference, -n 2)"])
    print(f"careful-audit -j 2 / main job: {audit / main_job:.2f}x wall")


if __name__ == "__main__":
    main()
