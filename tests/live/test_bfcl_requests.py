"""What reaches the server is what BFCL sends: byte for byte, for every local handler family.

For each family, the same conversations go through ``bfcl generate`` (BFCL's own handler, its
tokenizer loaded by transformers) and through the plugin (the handler's tokenizer read by
``tokenizers``, ``live/backends/vllm/tokens.py``), each against its own loopback vLLM stand-in that keeps every
request body as it came. The bodies must be the same bytes: prompt text, ``max_tokens``,
temperature, stop tokens and the rest, whatever order the conversations ran in.

Two model folders hold SmolLM2-135M's real tokenizer (``tests/helpers/loopback_model.py``): one
with a 40,960-token context, where BFCL asks for its cap of 4096, and one with SmolLM2's own 8,192,
where the prompts come near the end and every count decides ``max_tokens``.

``gpt-oss`` has no local handler in bfcl-eval 2026.3.23: the logged gpt-oss-20b run was made by
BFCL's OpenAI FC handler against vLLM's chat API, which sends messages and no token counts. That
route is checked here too (``OPENAI_BASE_URL`` at the stand-in).

Runs in the venv ``.ci/setup-vllm-cpu`` builds (transformers, torch, the ``bfcl`` script), marked
``vllm_cpu`` as its other tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.vllm_cpu,
    pytest.mark.skipif(
        importlib.util.find_spec("transformers") is None, reason="BFCL's side loads its tokenizer with transformers"
    ),
]

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
sys.path.insert(0, str(HELPERS))

from loopback_vllm import LoopbackVLLM  # noqa: E402

IDS = ["multi_turn_base_0", "multi_turn_base_1", "multi_turn_base_2"]

CHAT_TEMPLATE = "tiiuae/Falcon3-3B-Instruct-FC"  # Falcon3FCHandler: the prompt is the model's chat template

#: One registry key per family of local handler the plugin drives through vLLM. Falcon3's
#: prompt is the model's chat template (``apply_chat_template``), as the generic OSS handler's.
LOCAL = [
    "Qwen/Qwen3-8B-FC",  # QwenFCHandler
    "Qwen/Qwen3-8B",  # QwenHandler (prompting)
    "meta-llama/Llama-3.1-8B-Instruct",  # LlamaHandler
    "meta-llama/Llama-3.1-8B-Instruct-FC",  # LlamaHandler_3_1
    CHAT_TEMPLATE,
    "google/gemma-3-1b-it",  # GemmaHandler
    "microsoft/Phi-4-mini-instruct",  # PhiHandler
]


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import loopback_model

    long = loopback_model.prepare()
    short = tmp_path_factory.mktemp("smollm2-8k")
    for name in loopback_model.REQUIRED_FILES:
        shutil.copy(long / name, short / name)
    config = json.loads((short / "config.json").read_text())
    config["max_position_embeddings"] = 8192  # SmolLM2's own
    (short / "config.json").write_text(json.dumps(config))
    return {"40k": long, "8k": short}


def _environment(root: Path, server: LoopbackVLLM) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("REMOTE_OPENAI_", "PYTEST_", "OPENAI_"))}
    env.update(
        {
            "BFCL_PROJECT_ROOT": str(root),
            "LOCAL_SERVER_ENDPOINT": "127.0.0.1",
            "LOCAL_SERVER_PORT": str(server.port),
            "OPENAI_BASE_URL": server.url,
            "OPENAI_API_KEY": "loopback",
            "HF_HUB_OFFLINE": "1",
        }
    )
    return env


def _bfcl(key: str, model: Path | None, root: Path, server: LoopbackVLLM) -> None:
    (root / "test_case_ids_to_generate.json").write_text(json.dumps({"multi_turn_base": IDS}))
    local = ["--skip-server-setup", "--local-model-path", str(model)] if model is not None else []
    done = subprocess.run(
        [str(Path(sys.executable).with_name("bfcl")), "generate", "--model", key, "--run-ids", *local],
        cwd=root,
        env=_environment(root, server),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def _ours(key: str, model: Path | None, root: Path, server: LoopbackVLLM) -> subprocess.CompletedProcess[str]:
    model_args = (
        [f"--careful-model={model}", f"--careful-handler={key}", f"--careful-endpoint={server.url}"]
        if model is not None
        else [f"--careful-model=bfcl:{key}"]
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", str(root), "-o", "addopts="]
        + ["-n", "2", "--careful-gate=none", f"--careful-output={root / 'result'}", *model_args, *IDS],
        cwd=root,
        env=_environment(root, server),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode in (0, 1), done.stdout[-3000:] + done.stderr[-3000:]
    return done


def _sent(run: object, key: str, model: Path | None, root: Path) -> Counter[bytes]:
    root.mkdir()
    server = LoopbackVLLM(models=[str(model) if model is not None else key], keep_bodies=True).start()
    try:
        run(key, model, root, server)  # type: ignore[operator]
    finally:
        server.stop()
    assert server.bodies
    return Counter(server.bodies)


def _max_tokens(bodies: Counter[bytes]) -> set[object]:
    return {json.loads(body).get("max_tokens") for body in bodies}


@pytest.mark.parametrize("context", ["40k", "8k"])
@pytest.mark.parametrize("key", LOCAL)
def test_local_handlers_send_what_bfcl_sends(
    key: str, context: str, model_dirs: dict[str, Path], tmp_path: Path
) -> None:
    model = model_dirs[context]
    theirs = _sent(_bfcl, key, model, tmp_path / "bfcl")
    ours = _sent(_ours, key, model, tmp_path / "ours")
    assert ours == theirs  # the same bodies, as many times each
    if context == "40k":
        assert _max_tokens(ours) == {4096}, "far from the context's end, BFCL asks for its cap"
    elif key != CHAT_TEMPLATE:  # SmolLM2's template leaves the tools out: short prompts, far from the end
        assert _max_tokens(ours) - {4096}, "near the context's end the count decides max_tokens"


def _variant(folder: Path, base: Path, variant: str) -> Path:
    """A model folder whose tokenizer.json is not SmolLM2's plain byte-level one."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    folder.mkdir()
    for name in ("config.json", "tokenizer_config.json", "tokenizer.json"):
        shutil.copy(base / name, folder / name)
    if variant == "truncating":  # as some fine-tunes ship it: transformers' tokenize() ignores it
        tokenizer = Tokenizer.from_file(str(base / "tokenizer.json"))
        tokenizer.enable_truncation(512)
    else:  # sentencepiece-like, as Llama 2 and Mistral: Metaspace and byte fallback, trained here
        from pytest_careful.data import dataset

        tokenizer = Tokenizer(models.BPE(unk_token="<unk>", byte_fallback=True))
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first")
        corpus = [json.dumps(dataset.get(f"multi_turn_base_{i}").functions) for i in range(0, 200, 20)]
        special = ["<unk>", "<|im_start|>", "<|im_end|>", "<|endoftext|>", "<tool_call>", "</tool_call>"]
        tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=6000, special_tokens=special))
        settings = json.loads((base / "tokenizer_config.json").read_text())
        settings.pop("added_tokens_decoder", None)  # SmolLM2's ids; this vocabulary has its own
        settings.update(tokenizer_class="PreTrainedTokenizerFast", unk_token="<unk>")
        (folder / "tokenizer_config.json").write_text(json.dumps(settings))
        config = json.loads((base / "config.json").read_text())
        config["max_position_embeddings"] = 8192  # near the end for the longer prompts
        (folder / "config.json").write_text(json.dumps(config))
    tokenizer.save(str(folder / "tokenizer.json"))
    return folder


@pytest.mark.parametrize("variant", ["truncating", "metaspace"])
def test_other_tokenizer_files_send_what_bfcl_sends(variant: str, model_dirs: dict[str, Path], tmp_path: Path) -> None:
    model = _variant(tmp_path / "model", model_dirs["8k" if variant == "truncating" else "40k"], variant)
    theirs = _sent(_bfcl, "Qwen/Qwen3-8B-FC", model, tmp_path / "bfcl")
    ours = _sent(_ours, "Qwen/Qwen3-8B-FC", model, tmp_path / "ours")
    assert ours == theirs
    assert _max_tokens(ours) - {4096}, "the counts decided max_tokens"


def test_gpt_oss_route_sends_what_bfcl_sends(tmp_path: Path) -> None:
    """gpt-oss-20b as the logged run served it: BFCL's OpenAI FC handler against a vLLM server."""
    key = "gpt-4.1-2025-04-14-FC"
    theirs = _sent(_bfcl, key, None, tmp_path / "bfcl")
    ours = _sent(_ours, key, None, tmp_path / "ours")
    assert ours == theirs
