"""A hub model's files: fetched once by the controller, read from the cache afterwards.

The hub is :class:`loopback_hub.LoopbackHub` (``HF_ENDPOINT`` points at it; nothing
leaves 127.0.0.1); the download is huggingface_hub's own ``snapshot_download``.
pytest runs in a child process (pytester), so what the user would see is checked:
the progress bar, one clear error, the exit code.

Where a run must get past the controller's check that transformers and vllm are
importable, stand-in packages of those names are put on ``PYTHONPATH``: nothing
imports the transformers stand-in before the point these tests check, and the vllm
stand-in's ``api_server`` only reports what it finds in the cache, then exits 3.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from loopback_hub import DECOYS, LoopbackHub, generated_model, with_decoys

from pytest_careful.live.backends.vllm.hub import wanted

REPO = "Qwen/Qwen3-4B-Instruct-2507"  # a registry key whose handler is BFCL's OSS (vLLM) handler
MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}
MODEL_FILES = generated_model()

# The engine stand-in: what a server process finds, offline, in the cache the controller filled.
STAND_IN_SERVER = """
import os, sys
from huggingface_hub import try_to_load_from_cache
args = sys.argv[1:]
model = args[args.index("--model") + 1]
found = try_to_load_from_cache(model, "model.safetensors")
print(f"stand-in engine: HF_HUB_OFFLINE={os.environ.get('HF_HUB_OFFLINE')} "
      f"weights in cache: {isinstance(found, str)}", flush=True)
sys.exit(3)
"""


# ---------------------------------------------------------------- which files


def _matches(files: list[str], repo_files: list[str] | None, weights: bool) -> list[str]:
    """The files of ``files`` that snapshot_download would take with ``wanted``'s patterns."""
    from huggingface_hub.utils import filter_repo_objects

    patterns = wanted(repo_files, weights)
    return sorted(
        filter_repo_objects(files, allow_patterns=list(patterns.allow), ignore_patterns=list(patterns.ignore))
    )


def test_safetensors_are_taken_and_other_formats_and_folders_are_not() -> None:
    files = [
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "merges.txt",
        "vocab.json",
        "chat_template.jinja",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "pytorch_model.bin",
        "consolidated.safetensors",
        "original/consolidated.00.pth",
        "original/params.json",
        "model.gguf",
        "README.md",
        ".gitattributes",
        "onnx/model.onnx",
    ]
    assert _matches(files, files, weights=True) == [
        "chat_template.jinja",
        "config.json",
        "generation_config.json",
        "merges.txt",
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "vocab.json",
    ]


def test_bin_weights_only_where_there_are_no_safetensors() -> None:
    files = ["config.json", "tokenizer.model", "pytorch_model.bin", "model.pt"]
    assert _matches(files, files, weights=True) == ["config.json", "pytorch_model.bin", "tokenizer.model"]


def test_a_running_server_needs_the_tokenizer_and_config_only() -> None:
    files = ["config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors", "modeling_x.py"]
    assert _matches(files, files, weights=False) == [
        "config.json",
        "modeling_x.py",
        "tokenizer.json",
        "tokenizer_config.json",
    ]


# ---------------------------------------------------------------- helpers


@pytest.fixture
def stand_ins(tmp_path: Path) -> Path:
    """Packages named transformers and vllm; vllm's api_server is STAND_IN_SERVER."""
    root = tmp_path / "stand-ins"
    (root / "transformers").mkdir(parents=True)
    (root / "transformers/__init__.py").write_text("")
    server = root / "vllm/entrypoints/openai"
    server.mkdir(parents=True)
    for folder in (root / "vllm", root / "vllm/entrypoints", server):
        (folder / "__init__.py").write_text("")
    (server / "api_server.py").write_text(STAND_IN_SERVER)
    return root


def _env(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, endpoint: str | None, offline: bool, stand_ins: Path | None = None
) -> Path:
    """The child pytest's environment: its own HF cache, the loopback hub or none, online or not."""
    home = tmp_path / "hf-home"
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    if endpoint is None:
        monkeypatch.delenv("HF_ENDPOINT", raising=False)
    else:
        monkeypatch.setenv("HF_ENDPOINT", endpoint)
    if offline:
        monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    else:
        monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    if stand_ins is not None:
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(stand_ins), os.environ.get("PYTHONPATH")])))
    return home


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        f"--careful-model={REPO}",
        f"--careful-output={pytester.path / 'result'}",
        *args,
        "multi_turn_base_0",
        "multi_turn_base_1",
        timeout=120,
    )


def _text(result: pytest.RunResult) -> str:
    return "\n".join(result.outlines + result.errlines)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- through pytest


@pytest.mark.parametrize("mode", list(MODES))
def test_controller_fetches_once_with_progress_then_everything_reads_the_cache(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stand_ins: Path, mode: str
) -> None:
    with LoopbackHub({REPO: with_decoys(MODEL_FILES)}) as hub:
        url = hub.url
        _env(monkeypatch, tmp_path, url, offline=False, stand_ins=stand_ins)
        first = _run(pytester, *MODES[mode])
    # Each file the model needs, once, whatever the number of workers; nothing else.
    assert sorted(hub.downloaded()) == sorted(MODEL_FILES), hub.downloaded()
    assert not set(hub.downloaded()) & set(DECOYS)
    text = _text(first)
    assert f"careful: {REPO}: weights, tokenizer and config from {url}" in text
    assert f"Fetching {len(MODEL_FILES)} files" in "\n".join(first.errlines)  # the progress bar, on the terminal
    # The server started after the fetch, offline, and found the weights in the cache.
    assert "stand-in engine: HF_HUB_OFFLINE=1 weights in cache: True" in text
    assert first.ret == pytest.ExitCode.USAGE_ERROR
    assert text.count("exited with code 3 while starting") == 1 and "Traceback" not in text

    # The hub is gone and the user is offline: the cache is enough.
    _env(monkeypatch, tmp_path, f"http://127.0.0.1:{_closed_port()}", offline=True, stand_ins=stand_ins)
    second = _run(pytester, *MODES[mode])
    text = _text(second)
    assert "from the cache" in text and "offline" in text and "Fetching" not in text
    assert "stand-in engine: HF_HUB_OFFLINE=1 weights in cache: True" in text
    assert text.count("exited with code 3 while starting") == 1 and "Traceback" not in text


@pytest.mark.parametrize("mode", list(MODES))
def test_offline_and_not_cached_is_one_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stand_ins: Path, mode: str
) -> None:
    home = _env(monkeypatch, tmp_path, None, offline=True, stand_ins=stand_ins)
    result = _run(pytester, *MODES[mode])
    text = _text(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert text.count(f"ERROR: --careful-model={REPO}: {REPO} is not (fully) in the Hugging Face cache") == 1
    assert f"hf download {REPO}" in text and "unset HF_HUB_OFFLINE" in text and str(home) in text
    assert "Traceback" not in text and "passed" not in text and "failed" not in text
    assert not (pytester.path / "result/.careful/vllm-server.log").exists()  # no server was started


def test_a_missing_repo_names_the_repo_the_endpoint_and_the_token(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stand_ins: Path
) -> None:
    with LoopbackHub({"someone/else": MODEL_FILES}) as hub:
        url = hub.url
        _env(monkeypatch, tmp_path, url, offline=False, stand_ins=stand_ins)
        result = _run(pytester, "-n", "2")
    text = _text(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert text.count(f"{REPO} was not found on {url}") == 1 and "HF_TOKEN" in text
    assert "Traceback" not in text and not hub.downloaded()


def test_a_gated_repo_says_to_accept_its_terms_and_set_a_token(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stand_ins: Path
) -> None:
    with LoopbackHub({REPO: MODEL_FILES}, gated=(REPO,)) as hub:
        url = hub.url
        _env(monkeypatch, tmp_path, url, offline=False, stand_ins=stand_ins)
        result = _run(pytester, "-p", "no:xdist")
    text = _text(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert text.count(f"{REPO} is a gated repository on {url}") == 1 and "export HF_TOKEN" in text
    assert "Traceback" not in text


def test_an_unreachable_hub_without_a_cache_says_so(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, stand_ins: Path
) -> None:
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    _env(monkeypatch, tmp_path, endpoint, offline=False, stand_ins=stand_ins)
    result = _run(pytester, "-p", "no:xdist")
    text = _text(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert text.count(f"cannot reach {endpoint} to fetch {REPO}") == 1 and "Traceback" not in text


# ---------------------------------------------------------------- with a running server


def test_a_running_server_gets_only_the_tokenizer_fetched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--careful-endpoint: the controller fetches what BFCL's handler loads, and every process finds it cached."""
    script = (
        "import sys\n"
        "from pytest_careful.live.backends.vllm import hub, server as v\n"
        f"plan = v.ServerPlan(model={REPO!r}, endpoints=('http://127.0.0.1:9/v1',))\n"
        # Fetched first; then the server is asked, and nothing listens there.
        "assert v.start_for_session(plan, print).startswith('no --careful-endpoint server can run it')\n"
        f"print('cached', sorted(p.name for p in hub.cached({REPO!r}).iterdir()))\n"
    )
    with LoopbackHub({REPO: with_decoys(MODEL_FILES)}) as hub:
        _env(monkeypatch, tmp_path, hub.url, offline=False)
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr[-3000:]
    tokenizer = sorted(n for n in MODEL_FILES if n != "model.safetensors")
    assert sorted(hub.downloaded()) == tokenizer
    assert f"cached {json.dumps(tokenizer)}".replace('"', "'") in run.stdout
