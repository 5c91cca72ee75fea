"""BFCL's handler tokenizer without transformers or torch, held to BFCL's requests.

A local BFCL handler (``OSSHandler``) needs two things of its model's files before it
sends anything: the context length (``AutoConfig``'s ``max_position_embeddings``) and a
tokenizer, whose only use on the request path is ``len(tokenizer.tokenize(prompt))``,
from which ``_query_prompting`` sizes ``max_tokens = min(4096, context - count - 2)``.
BFCL's ``spin_up_local_server`` loads both through transformers, and wherever torch is
installed (a vLLM venv) that import alone takes 4-20 s and 350-870 MB per process.

Here both come from the files themselves (and most prompts need no count at all: see
:class:`LightTokenizer`): ``config.json``'s top-level
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

import copy
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...errors import StopRun
from ...handler import Handler

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
    """``max_position_embeddings`` at the top of a flat ``config.json``, where AutoConfig finds it; else None."""
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(config, dict) or any(isinstance(v, dict) and k.endswith("_config") for k, v in config.items()):
        return None  # a composite config (text_config, vision_config...): AutoConfig may not keep the top-level key
    value = config.get("max_position_embeddings")
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


#: Pipeline steps that never make an ASCII text longer: Unicode normal forms and case leave ASCII
#: as it is; Strip and StripAccents only shorten it.
_SAME_LENGTH_NORMALIZERS = frozenset({"NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents"})
#: Pre-tokenizers that split a text without adding characters (ByteLevel: one character per byte).
_SPLITTING_PRE_TOKENIZERS = frozenset(
    {"Split", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits", "BertPreTokenizer", "UnicodeScripts"}
)
#: Slack on top of the bound, for a rebuilt pipeline's prefix (transformers may rebuild a class's own).
_SLACK = 8


def char_bound(spec: dict[str, Any]) -> Callable[[str], int] | None:
    """An upper bound on the tokens of an ASCII text, from ``tokenizer.json``'s pipeline; None: none known.

    Every model (BPE, WordPiece, Unigram, WordLevel, byte fallback) cuts each piece of the
    pre-tokenized text into tokens of one character or more, and an ASCII character is one byte:
    at most one token per character that the normalizer and pre-tokenizer leave. What they add is
    counted, in UTF-8 bytes (a byte-level model cuts a ``▁`` into three). ``Replace`` by a longer
    string adds its growth per occurrence. ``Prepend`` and a
    leading ``▁`` or space (Metaspace, ByteLevel's ``add_prefix_space``) add ``p`` characters to
    each section between added tokens; each added token is one token for ``len(a)`` characters, so
    with every ``len(a) > p`` the sections' prefixes are paid for by the tokens between them:

        tokens <= m + sum(len(s_i) + p) + growth <= len(text) + p + growth + sum(1 + p - len(a_j))

    Anything else (a replacement by pattern, an unknown step) gives no bound.
    """
    normal = _normalizer_extra(spec.get("normalizer"))
    split = _pre_tokenizer_extra(spec.get("pre_tokenizer"))
    if normal is None or split is None:
        return None
    (grown, prepended), (spaced, prefix) = normal, split
    per_section = prepended + prefix

    def growth(text: str) -> int:
        return grown(text) + spaced(text)

    added = [t.get("content") for t in spec.get("added_tokens") or () if isinstance(t, dict)]
    if per_section and not all(isinstance(a, str) and len(a) > per_section for a in added):
        return None

    def bound(text: str) -> int:
        return len(text) + growth(text) + per_section + _SLACK

    return bound


def _normalizer_extra(step: Any) -> Extra | None:
    """(growth of a text by its replacements, characters prepended to each section), or None."""
    if step is None:
        return (lambda text: 0), 0
    kind = step.get("type") if isinstance(step, dict) else None
    if kind in _SAME_LENGTH_NORMALIZERS:
        return (lambda text: 0), 0
    if kind == "Prepend" and isinstance(step.get("prepend"), str):
        return (lambda text: 0), _units(step["prepend"])
    if kind == "Replace":
        pattern, content = step.get("pattern"), step.get("content")
        target = pattern.get("String") if isinstance(pattern, dict) else None
        if not isinstance(target, str) or not target or not isinstance(content, str):
            return None  # a regex: what it matches is not known here
        grows = _units(content) - len(target)  # an ASCII target: its characters are its bytes
        return ((lambda text: 0) if grows <= 0 else (lambda text: grows * text.count(target))), 0
    if kind == "Sequence" and isinstance(step.get("normalizers"), list):
        # A later Replace counts its pattern in the original text; what a Prepend puts before it
        # is counted apart (``▁`` then `` `` -> ``▁``: Llama 2's and Mistral's).
        return _in_sequence([_normalizer_extra(part) for part in step["normalizers"]])
    return None


Extra = tuple[Callable[[str], int], int]


def _in_sequence(parts: list[Extra | None]) -> Extra | None:
    """Steps one after another: their growths and their prefixes add up; one unknown, all unknown."""
    known = [part for part in parts if part is not None]
    if len(known) < len(parts):
        return None
    return (lambda text: sum(growth(text) for growth, _ in known)), sum(prefix for _, prefix in known)


def _units(text: str) -> int:
    """The most pieces a model can cut ``text`` into: one per UTF-8 byte (byte-level and byte fallback)."""
    return len(text.encode("utf-8"))


def _pre_tokenizer_extra(step: Any) -> Extra | None:
    """(growth of a text, units added to each section), or None: not known."""
    if step is None:
        return (lambda text: 0), 0
    kind = step.get("type") if isinstance(step, dict) else None
    if kind in _SPLITTING_PRE_TOKENIZERS:
        return (lambda text: 0), 0
    if kind == "ByteLevel":
        return (lambda text: 0), (1 if step.get("add_prefix_space") else 0)
    if kind == "Metaspace":
        replacement = step.get("replacement", "\u2581")
        scheme = step.get("prepend_scheme", "always" if step.get("add_prefix_space", True) else "never")
        if not isinstance(replacement, str) or scheme not in ("never", "first", "always"):
            return None
        grows = _units(replacement) - 1  # each space becomes the replacement
        prefix = 0 if scheme == "never" else _units(replacement)
        return (lambda text: grows * text.count(" ")), prefix
    if kind == "Sequence" and isinstance(step.get("pretokenizers"), list):
        return _in_sequence([_pre_tokenizer_extra(part) for part in step["pretokenizers"]])
    return None


class LightTokenizer:
    """``tokenize`` by the ``tokenizers`` library; the exact tokenizer near the context's end
    and for everything else, loaded once on first need (``exact``).

    ``sizing_only``: the handler's ``_query_prompting`` is BFCL's own, whose only use of the
    count is ``max_tokens``. Then a prompt whose upper bound (:func:`char_bound`) already leaves
    BFCL's 4096 is not tokenized at all: ``tokenize`` returns that many placeholders, which
    give the request the true count would (the count can only be smaller, the size the same).
    """

    def __init__(
        self, path: Path, exact: Callable[[], Any], context: Callable[[], int], sizing_only: bool = False
    ) -> None:
        # the vllm extra's tokenizer: only a local model run loads it
        from tokenizers import Tokenizer

        self._backend = Tokenizer.from_file(str(path))
        # transformers' tokenize() counts the whole text whatever the file's truncation or padding says.
        self._backend.no_truncation()
        self._backend.no_padding()
        self._load_exact = exact
        self._context = context  # the handler's, which fit_context may shorten
        self._exact: Any = None
        self._lock = threading.Lock()
        self._bound = char_bound(tokenizer_spec(path)) if sizing_only else None
        self._root = self  # the instance whose exact tokenizer every view of it shares (``sized_by``)
        self.exact_loads = 0  # for tests: how often the exact tokenizer was needed (0 or 1)

    def sized_by(self, context: Callable[[], int]) -> LightTokenizer:
        """The same tokenizer, deciding by another context length (a fleet's server's, ``client.station``);
        BFCL's exact tokenizer is still loaded once, for every view."""
        view = copy.copy(self)
        view._context = context
        return view

    def tokenize(self, text: str, **kwargs: Any) -> list[str]:
        if kwargs:
            return list(self.exact().tokenize(text, **kwargs))
        if self._bound is not None and text.isascii():
            most = self._bound(text)
            if self._context() - most - BFCL_RESERVED >= BFCL_MAX_TOKENS:
                return [""] * most  # BFCL sizes the request by len() alone: its cap either way
        # encode_batch, not encode: it lets go of the GIL while it works, and a long prompt takes
        # milliseconds, which the conversations in flight on other threads need.
        tokens: list[str] = self._backend.encode_batch([text], add_special_tokens=False)[0].tokens
        if decisive(len(tokens), self._context()):
            return list(self.exact().tokenize(text))
        return tokens

    def exact(self) -> Any:
        """BFCL's tokenizer (transformers), loaded on first need, once per process."""
        root = self._root
        with root._lock:
            if root._exact is None:
                try:
                    root._exact = root._load_exact()
                except Exception as exc:  # BFCL would have refused at set-up: the run stops, nothing is filed
                    raise StopRun(
                        f"cannot load the model's tokenizer as BFCL does (transformers' AutoTokenizer), which "
                        f"this prompt's count needs: {type(exc).__name__}: {exc}"
                    ) from exc
                root.exact_loads += 1
            return root._exact

    def __getattr__(self, name: str) -> Any:
        # Anything else a handler asks (apply_chat_template, model_max_length...) is BFCL's own.
        if name.startswith("__") or name in (
            "_backend",
            "_load_exact",
            "_context",
            "_exact",
            "_lock",
            "_bound",
            "_root",
        ):
            raise AttributeError(name)
        return getattr(self.exact(), name)


def decisive(count: int, context: int) -> bool:
    """Could the exact count give another ``max_tokens`` than BFCL's cap, if ``count`` is MARGIN off?"""
    return context - int(count * (1 + MARGIN)) - 1 - BFCL_RESERVED < BFCL_MAX_TOKENS


def tokenizer_spec(path: Path) -> dict[str, Any]:
    """tokenizer.json, with the added tokens transformers also takes from tokenizer_config.json."""
    spec: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    try:
        config = json.loads((path.parent / "tokenizer_config.json").read_text(encoding="utf-8"))
        decoder = config.get("added_tokens_decoder") if isinstance(config, dict) else None
    except (OSError, ValueError):
        decoder = None
    more = [t for t in decoder.values() if isinstance(t, dict)] if isinstance(decoder, dict) else []
    return {**spec, "added_tokens": [*(spec.get("added_tokens") or []), *more]}


def bfcl_sizing(handler: Handler) -> bool:
    """Whether the handler counts tokens only where BFCL's ``OSSHandler._query_prompting`` does."""
    # bfcl-eval on first use: a session that runs no model imports none of it (start-up time)
    from bfcl_eval.model_handler.local_inference.base_oss_handler import OSSHandler

    return getattr(type(handler), "_query_prompting", None) is OSSHandler._query_prompting


def exact_loader(folder: Path) -> Callable[[], Any]:
    """BFCL's own load of the tokenizer (``spin_up_local_server``'s AutoTokenizer call) from ``folder``."""

    def load() -> Any:
        # the vllm extra's libraries: only a local model run loads them (seconds, hundreds of MB)
        from transformers import AutoTokenizer

        return without_length_warning(
            AutoTokenizer.from_pretrained(
                pretrained_model_name_or_path=str(folder), local_files_only=True, trust_remote_code=True
            )
        )

    return load


#: The key under which transformers' tokenizer notes that it has warned of a text longer than
#: the model's context (``_eventual_warn_about_too_long_sequence``: once per tokenizer).
LENGTH_WARNING = "sequence-length-is-longer-than-the-specified-maximum"


def without_length_warning(tokenizer: Any) -> Any:
    """``tokenizer``, marked as having given its warning "Token indices sequence length is longer
    than the specified maximum sequence length for this model": a stray line on the terminal, since
    BFCL counts a whole prompt only to size its request and nothing here runs one through the model
    (a prompt past the context is the server's 400, filed as BFCL files it). Its other warnings stay."""
    warned = getattr(tokenizer, "deprecation_warnings", None)
    if isinstance(warned, dict):
        warned[LENGTH_WARNING] = True
    return tokenizer


def light_setup(handler: Handler, local_model_path: str | None) -> bool:
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
            folder / "tokenizer.json",
            exact_loader(folder),
            lambda: int(handler.max_context_length),
            sizing_only=bfcl_sizing(handler),
        )
    except ImportError:
        return False  # no tokenizers library: transformers, which needs it, is not here either
    except Exception:  # a tokenizer.json the library cannot read: transformers says why
        return False
    handler.model_path_or_id = model_id
    handler.max_context_length = context
    handler.tokenizer = tokenizer
    return True
