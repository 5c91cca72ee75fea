"""BFCL's handler tokenizer without transformers or torch, held to BFCL's requests.

A local BFCL handler (``OSSHandler``) needs two things of its model's files before it
sends anything: the context length (``AutoConfig``'s ``max_position_embeddings``) and a
tokenizer, whose only use on the request path is ``len(tokenizer.tokenize(prompt))``,
from which ``_query_prompting`` sizes ``max_tokens = min(4096, context - count - 2)``.
BFCL's ``spin_up_local_server`` loads both through transformers, and wherever torch is
installed (a vLLM venv) that import alone takes 4-20 s and 350-870 MB per process.

Here both come from the files themselves: ``config.json``'s top-level
``max_position_embeddings`` and ``tokenizer.json`` read by the ``tokenizers`` library
(0.1 s, 60 MB), which is what a fast transformers tokenizer runs. The count decides a
request only near the context's end: whenever the prompt is short enough that
``max_tokens`` is 4096 even if the light count were :data:`MARGIN` off, the request is
the same whatever the exact count. Nearer the end the count is taken with BFCL's own
tokenizer, loaded once per process, on first need; so is anything else a handler asks of
its tokenizer (``apply_chat_template``: the generic handler's prompt). Without a
``tokenizer.json``, or a ``config.json`` that says its context length at the top, BFCL
loads its files itself, as before (:func:`light_setup` returns False).

tests/live/test_bfcl_requests.py holds this to BFCL: the same conversations through
BFCL's own handler and through the plugin send byte-identical request bodies.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: How far the light count may be from the exact one before the request would change:
#: within it, a prompt this far from the context's end gets BFCL's 4096 either way.
MARGIN = 0.25
#: BFCL's cap on ``max_tokens`` and the tokens it keeps free (base_oss_handler._query_prompting).
BFCL_MAX_TOKENS = 4096
BFCL_RESERVED = 2


def files_folder(local_model_path: str | None, model_id: str) -> Path | None:
    """Where BFCL's ``spin_up_local_server`` reads the tokenizer and config, when it is a folder here.

    A local model's own folder; for a hub id, ``REMOTE_OPENAI_TOKENIZER_PATH`` when
    ``REMOTE_OPENAI_BASE_URL`` is set too (BFCL's switch, which the caller sets to the
    fetched snapshot). None: BFCL would ask the hub itself.
    """
    remote = os.environ.get("REMOTE_OPENAI_BASE_URL") and os.environ.get("REMOTE_OPENAI_TOKENIZER_PATH")
    if remote:
        return Path(remote)
    return Path(local_model_path) if local_model_path is not None else None


def context_length(folder: Path) -> int | None:
    """``max_position_embeddings`` at the top of ``config.json``, where AutoConfig finds it; else None."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("max_position_embeddings") if isinstance(config, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class LightTokenizer:
    """``tokenize`` by the ``tokenizers`` library; the exact tokenizer near the context's end
    and for everything else, loaded once on first need (``exact``)."""

    def __init__(self, path: Path, exact: Callable[[], Any], context: Callable[[], int]) -> None:
        from tokenizers import Tokenizer

        self._backend = Tokenizer.from_file(str(path))
        self._load_exact = exact
        self._context = context  # the handler's, which fit_context may shorten
        self._exact: Any = None
        self._lock = threading.Lock()
        self.exact_loads = 0  # for tests: how often the exact tokenizer was needed (0 or 1)

    def tokenize(self, text: str, **kwargs: Any) -> list[str]:
        if kwargs:
            return list(self.exact().tokenize(text, **kwargs))
        # encode_batch, not encode: it lets go of the GIL while it works, and a long prompt takes
        # milliseconds, which the conversations in flight on other threads need.
        tokens: list[str] = self._backend.encode_batch([text], add_special_tokens=False)[0].tokens
        if decisive(len(tokens), self._context()):
            return list(self.exact().tokenize(text))
        return tokens

    def exact(self) -> Any:
        """BFCL's tokenizer (transformers), loaded on first need, once per process."""
        with self._lock:
            if self._exact is None:
                self._exact = self._load_exact()
                self.exact_loads += 1
            return self._exact

    def __getattr__(self, name: str) -> Any:
        # Anything else a handler asks (apply_chat_template, model_max_length...) is BFCL's own.
        if name.startswith("__") or name in ("_backend", "_load_exact", "_context", "_exact", "_lock"):
            raise AttributeError(name)
        return getattr(self.exact(), name)


def decisive(count: int, context: int) -> bool:
    """Could the exact count give another ``max_tokens`` than BFCL's cap, if ``count`` is MARGIN off?"""
    return context - int(count * (1 + MARGIN)) - 1 - BFCL_RESERVED < BFCL_MAX_TOKENS


def exact_loader(folder: Path) -> Callable[[], Any]:
    """BFCL's own load of the tokenizer (``spin_up_local_server``'s AutoTokenizer call) from ``folder``."""

    def load() -> Any:
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(
            pretrained_model_name_or_path=str(folder), local_files_only=True, trust_remote_code=True
        )

    return load


def light_setup(handler: Any, local_model_path: str | None) -> bool:
    """Set up ``handler`` as ``spin_up_local_server(skip_server_setup=True)`` does, from the files;
    False (nothing changed) where they do not allow it: BFCL's own set-up must run."""
    model_id = local_model_path if local_model_path is not None else handler.model_name_huggingface
    folder = files_folder(local_model_path, model_id)
    if folder is None or not (folder / "tokenizer.json").is_file():
        return False
    if local_model_path is not None and not (Path(local_model_path) / "tokenizer_config.json").is_file():
        return False  # BFCL refuses such a folder, with its own message
    context = context_length(folder)
    if context is None:
        return False
    try:
        tokenizer = LightTokenizer(
            folder / "tokenizer.json", exact_loader(folder), lambda: int(handler.max_context_length)
        )
    except ImportError:
        return False  # no tokenizers library: transformers, which needs it, is not here either
    except Exception:  # a tokenizer.json the library cannot read: transformers says why
        return False
    handler.model_path_or_id = model_id
    handler.max_context_length = context
    handler.tokenizer = tokenizer
    return True
