"""A fleet of servers used as one (issue 40): K servers of SEQS slots against one of K x SEQS slots.

Each server is the loopback vLLM stand-in (tests/helpers/loopback_vllm.py) as its own process,
with a batch limit: at most ``--max-num-seqs`` requests run at once, each for L seconds, the rest
queue (and its ``/metrics`` says how many). Our command runs all of ``multi_turn_base`` (BFCL's
``Qwen/Qwen3-8B-FC`` handler, SmolLM2's real tokenizer: bench/live_loopback.py's set-up) against:

* one big server of K x SEQS slots at L (``--careful-endpoint=URL``);
* K servers of SEQS slots each at L (``--careful-endpoint=URL,URL,...``);
* with ``--mixed``: two servers of SEQS slots, one at L and one at 2L.

each with no xdist (``-p no:xdist``) and ``-n 2``, from a fresh folder against fresh servers,
``--careful-concurrency`` left at its default (100 per server). Printed per command:
conversations/min and its ratio to the big server's (same K, same xdist); requests and
conversations per server as the servers counted them, and how many conversations had requests on
more than one server (0: every conversation stayed on one server).

The mixed fleet's ideal: its fast server has 2/3 of the fleet's capacity (SEQS/L against
SEQS/2L), so it should serve 2/3 of the requests, and the fleet should reach 3/4 of what two
servers at L reach (the K = 2 fleet of the same run, same xdist): both ratios are printed.

    .venv-bench/bin/python bench/live_fleet.py                       # K = 2, 4; SEQS 25, L = 2 s; --mixed
    .venv-bench/bin/python bench/live_fleet.py --k 4 --sides serial --n 80
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import live_loopback as base  # noqa: E402  (the loopback bench's process tree, server and command)


@dataclass
class Run:
    setup: str  # big, fleet, mixed
    k: int
    side: str
    conversations: int
    wall_s: float
    returncode: int
    entries: int
    servers: list[dict[str, Any]] = field(default_factory=list)  # per server: url, latency, seqs, requests, ...
    split: int = 0  # conversations with requests on more than one server
    summary: str = ""  # our summary's servers line
    folder: str = ""

    @property
    def per_minute(self) -> float:
        return 60.0 * self.conversations / self.wall_s

    @property
    def complete(self) -> bool:
        return self.returncode in (0, 1) and self.entries >= self.conversations


def _servers(specs: list[tuple[float, int]], model: str, folder: Path) -> list[base.Server]:
    out = []
    for n, (latency, seqs) in enumerate(specs):
        own = folder / f"server-{n}"
        own.mkdir(parents=True)
        out.append(base.Server(latency, seqs, model, own))
    return out


def measure(
    setup: str, k: int, specs: list[tuple[float, int]], side: str, args: argparse.Namespace, ids: list[str], root: Path
) -> Run:
    folder = root / f"{setup}-{len(specs)}x{specs[0][1]}" / side
    servers = _servers(specs, args.model_dir, folder)
    run_dir = folder / "run"
    run_dir.mkdir()
    urls = ",".join(s.url for s in servers)
    cmd = base.ours_command(args.ours_python, args.model_dir, urls, side, ids if args.n else None, args.extra)
    env = base._environment(run_dir, servers[0])
    try:
        wall, rc, *_rest, tail = base.run_measured(cmd, run_dir, env, args.timeout)
    finally:
        finished = [s.finish() for s in servers]
    written, _ = base.entries(run_dir)
    per_server, where = [], defaultdict(set)
    for n, (server, (stats, _cpu)) in enumerate(zip(servers, finished)):
        records = json.loads(server.stats_file.read_text()).get("records", [])
        digests = {r.get("conversation") for r in records if r.get("conversation")}
        for digest in digests:
            where[digest].add(n)
        per_server.append(
            {
                "url": server.url,
                "latency": specs[n][0],
                "seqs": specs[n][1],
                "requests": stats["requests"],
                "conversations": len(digests),
                "mean_in_flight": stats["mean_in_flight"],
                "queued": stats["queued"],
            }
        )
    log = (run_dir / "command.log").read_text(errors="replace").splitlines()
    said = next((line for line in log if line.startswith("servers: ")), "")
    alike = _alike(ids)  # conversations that begin alike are one digest: their split would not be seen
    split = sum(len(s) > 1 for digest, s in where.items() if digest not in alike)
    run = Run(setup, k, side, len(ids), wall, rc, written, per_server, split, said, str(folder))
    print(
        f"{setup} {len(specs)}x{specs[0][1]} {side}: {wall:.1f} s, rc {rc}, {written} entries, "
        + ", ".join(f"{s['requests']} req / {s['conversations']} conv" for s in per_server)
        + ("" if run.complete else f"\n{tail[-2000:]}"),
        file=sys.stderr,
        flush=True,
    )
    return run


def _alike(ids: list[str]) -> set[str]:
    """Digests (the loopback server's name for a conversation) that two of ``ids`` share: the same first message."""
    from collections import Counter

    from loopback_vllm import conversation_digest

    from pytest_careful.data import dataset

    counts = Counter(conversation_digest(dataset.get(i).questions[0][0]["content"]) for i in ids)
    return {digest for digest, n in counts.items() if n > 1}


def table(runs: list[Run]) -> str:
    head = f"{'setup':<22}{'command':<20}{'conv/min':>9}{'ratio':>8}  {'requests per server':<28}{'conversations per server':<28}{'split':>6}"
    lines = [head, "-" * len(head)]
    for run in runs:
        seqs = run.servers[0]["seqs"]
        label = {"fleet": f"{run.k} x {seqs} slots", "big": f"1 x {seqs} slots", "mixed": f"2 x {seqs}, L and 2L"}[
            run.setup
        ]
        if not run.complete:
            lines.append(
                f"{label:<22}{base.LABELS[run.side]:<20}  FAILED: rc {run.returncode}, {run.entries} entries ({run.folder})"
            )
            continue
        ratio = ""
        big = next((r for r in runs if r.setup == "big" and r.k == run.k and r.side == run.side and r.complete), None)
        if run.setup == "fleet" and big is not None:
            ratio = f"{run.per_minute / big.per_minute:.2f}x"
        if run.setup == "mixed":
            pair = next(
                (r for r in runs if r.setup == "fleet" and r.k == 2 and r.side == run.side and r.complete), None
            )
            ratio = f"{run.per_minute / (0.75 * pair.per_minute):.2f}x" if pair is not None else ""
        requests = " / ".join(str(s["requests"]) for s in run.servers)
        conversations = " / ".join(str(s["conversations"]) for s in run.servers)
        lines.append(
            f"{label:<22}{base.LABELS[run.side]:<20}{run.per_minute:>9.1f}{ratio:>8}  {requests:<28}{conversations:<28}{run.split:>6}"
        )
    for run in runs:
        if run.setup == "mixed" and run.complete:
            total = sum(s["requests"] for s in run.servers)
            share = run.servers[0]["requests"] / total
            lines.append(
                f"mixed, {base.LABELS[run.side]}: the L server served {share:.1%} of the requests "
                f"(ideal 66.7%: {share / (2 / 3):.2f}x)"
            )
    return "\n".join(lines)


def parse(argv: list[str]) -> argparse.Namespace:
    own, extra = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--k", default="2,4", help="fleet sizes, comma-separated")
    parser.add_argument("--seqs", type=int, default=25, help="each fleet server's --max-num-seqs")
    parser.add_argument("--latency", type=float, default=2.0, help="L: seconds per request")
    parser.add_argument("--sides", default="serial,n2", help="serial (-p no:xdist), n2 (-n 2)")
    parser.add_argument("--mixed", action=argparse.BooleanOptionalAction, default=True, help="the L + 2L fleet")
    parser.add_argument("--n", type=int, help="the first N multi_turn_base conversations (default: all 200)")
    parser.add_argument("--ours-python", default=sys.executable)
    parser.add_argument("--model-dir")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(own)
    args.extra = extra
    return args


def main(argv: list[str] | None = None) -> int:
    import os

    args = parse(sys.argv[1:] if argv is None else argv)
    args.ours_python = os.path.abspath(args.ours_python)
    if not args.model_dir:
        import loopback_model

        args.model_dir = str(loopback_model.prepare())
    args.model_dir = str(Path(args.model_dir).absolute())
    ids = base.conversation_ids(args.n)
    root = args.out or Path(tempfile.mkdtemp(prefix="careful-live-fleet-"))
    runs: list[Run] = []
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    for k in (int(x) for x in args.k.split(",")):
        for side in args.sides.split(","):
            runs.append(measure("big", k, [(args.latency, k * args.seqs)], side, args, ids, root))
            runs.append(measure("fleet", k, [(args.latency, args.seqs)] * k, side, args, ids, root))
    if args.mixed:
        for side in args.sides.split(","):
            runs.append(
                measure("mixed", 2, [(args.latency, args.seqs), (2 * args.latency, args.seqs)], side, args, ids, root)
            )
    (root / "results.json").write_text(json.dumps([asdict(r) for r in runs], indent=1))
    print(
        f"{len(ids)} multi_turn_base conversations, handler {base.HANDLER}, L = {args.latency:g} s, SEQS = {args.seqs}, "
        f"--careful-concurrency default (100 per server); started {started}"
    )
    print(table(runs))
    print("ratio: fleet against the big server (same K, same command); mixed against 3/4 of the 2 x SEQS fleet at L")
    print(
        "split: conversations whose requests went to more than one server, as the servers counted them "
        "(by their first user message; two that begin alike, multi_turn_base_40 and _43, are left out)"
    )
    for run in runs:
        if run.summary:
            print(f"{run.setup} {run.k} {run.side}: {run.summary[:200]}")
    print(f"runs kept in {root}")
    return 0 if all(r.complete for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
