"""Session keys as a router sees them (issue 49): one key per conversation and repeat, one server each.

Three loopback vLLM stand-ins behind a loopback router that hashes on ``x-session-id``
(``tests/helpers/loopback_router.py``; requests without the header go round robin), the plugin
run on ``gpt-4.1-2025-04-14-FC`` through ``OPENAI_BASE_URL`` with ``--careful-repeat=2``: without
xdist, with ``-n 2``, and with ``--careful-session-header=none`` (no key: the control). Which
conversation a request is of is read from its body (the first user message's digest), not from
the key. Prints, per run, the model requests, how many carried a key, and how many (conversation,
key) groups were served by one server::

    .venv/bin/python bench/session_keys.py --conversations 40
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "tests" / "helpers"), str(ROOT / "tests")]

from careful_cli import careful_command  # noqa: E402  (the tests' helpers, put on the path above)
from loopback_router import LoopbackRouter  # noqa: E402
from loopback_vllm import LoopbackVLLM, conversation_digest  # noqa: E402

from pytest_careful.data import dataset  # noqa: E402

MODEL = "gpt-4.1-2025-04-14"
RUNS = {
    "no xdist": ["-p", "no:xdist"],
    "-n 2": ["-n", "2"],
    "no key (--careful-session-header=none), no xdist": ["-p", "no:xdist", "--careful-session-header=none"],
}


def measure(ids: list[str], args: list[str], servers: int) -> str:
    digests = {conversation_digest(dataset.get(i).questions[0][0]["content"]): i for i in ids}
    folder = Path(tempfile.mkdtemp(prefix="careful-session-keys-"))
    with contextlib.ExitStack() as stack:
        backends = [stack.enter_context(LoopbackVLLM(latency=0.02, models=[MODEL])) for _ in range(servers)]
        router = stack.enter_context(LoopbackRouter([b.url for b in backends]))
        env = {
            **os.environ,
            "OPENAI_BASE_URL": router.url,
            "OPENAI_API_KEY": "sk-loopback",
            "PYTHONPATH": os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "tests")]),
        }
        command = careful_command(
            folder,
            f"--careful-model={MODEL}-FC",
            "--careful-gate=none",
            "--careful-concurrency=4",
            "--careful-repeat=2",
        )
        done = subprocess.run([*command, *args, *ids], cwd=folder, env=env, capture_output=True, text=True)
        records = router.records
    groups: dict[tuple[str, str | None], set[int | None]] = defaultdict(set)
    for record in records:
        groups[(digests[record.conversation], record.key)].add(record.backend)
    keyed = sum(r.key is not None for r in records)
    alone = sum(len(backends) == 1 for backends in groups.values())
    return (
        f"exit {done.returncode}; {len(records)} model requests, {keyed} with a key; "
        f"(conversation, key) groups on one server: {alone} of {len(groups)}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conversations", type=int, default=40, help="multi_turn_base_0 .. N-1 (default 40)")
    parser.add_argument("--servers", type=int, default=3, help="loopback servers behind the router (default 3)")
    options = parser.parse_args()
    ids = [f"multi_turn_base_{i}" for i in range(options.conversations)]
    for label, args in RUNS.items():
        print(f"{label}: {measure(ids, args, options.servers)}", flush=True)


if __name__ == "__main__":
    main()
