"""Lines a failing run prints in the terminal, at the default verbosity and with -v (issue 28).

    .venv/bin/python bench/terminal_lines.py [--before REV]

Runs, from a temporary folder, the shipped example rescored (160 failures), and the scripted
models loop (800 failures, every one with a long transcript) and destructive (656 failures
with state diffs), each at the default verbosity and with -v, and prints the lines of each
command's whole output. ``--before REV`` also runs the default verbosity with the package as it
was at REV (a git worktree first on PYTHONPATH), for the ratio.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "smollm2-135m-vllm-cpu"
RUNS = {
    "example rescored (160 fail)": [
        f"--careful-results={EXAMPLE}",
        "--careful-decoder=Qwen/Qwen3-4B-Instruct-2507",
        *EXAMPLE.joinpath("conversations.txt").read_text().split(),
    ],
    "scripted:loop (800 fail)": ["--careful-model=scripted:loop"],
    "scripted:destructive (656 fail)": ["--careful-model=scripted:destructive"],
}


def lines(args: list[str], extra: list[str], pythonpath: str | None = None) -> int:
    with tempfile.TemporaryDirectory() as folder:
        env = dict(os.environ, COLUMNS="120")
        if pythonpath:
            env["PYTHONPATH"] = pythonpath
        out = subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", *args, *extra],
            cwd=folder, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        return len((out.stdout + out.stderr).splitlines())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="a git revision to compare the default verbosity with")
    before = parser.parse_args().before
    old = None
    if before:
        old = tempfile.mkdtemp(prefix="careful-before-")
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "-q", "--detach", old, before], check=True)
    try:
        print(f"{'run':34} {'default':>9} {'-v':>9}" + (f" {'before':>9} {'ratio':>6}" if old else ""))
        for name, args in RUNS.items():
            default, verbose = lines(args, []), lines(args, ["-v"])
            row = f"{name:34} {default:9,} {verbose:9,}"
            if old:
                then = lines(args, [], pythonpath=old)
                row += f" {then:9,} {then / default:5.1f}x"
            print(row, flush=True)
    finally:
        if old:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", old], check=False)


if __name__ == "__main__":
    main()
