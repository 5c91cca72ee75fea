"""A hub model's files: fetched once by the controller, then read from the cache by everyone.

The user's environment decides where from and whether: ``HF_ENDPOINT`` (the Hub or a
mirror), ``HF_HOME`` / ``HF_HUB_CACHE`` (the cache), ``HF_TOKEN`` (gated and private
repos), ``HF_HUB_OFFLINE`` (no network: the files must be cached already). Nothing here
overrides them. Before the vLLM server starts, the controller (never an xdist worker)
calls :func:`fetch`, which is ``huggingface_hub.snapshot_download`` of what the model
needs, with its progress bars. After that every process reads the cache without asking
the hub (:func:`cached`, and the server runs with ``HF_HUB_OFFLINE=1``).

What a model needs, as vLLM loads a hub id: the root folder's config, tokenizer,
chat-template and remote-code files, and one weight format, the first of
``*.safetensors``, ``*.bin``, ``*.pt`` the repo has (the order of vLLM's
``download_weights_from_hf``). Never sub-folders (vLLM reads the root only:
``original/`` checkpoints, ``onnx/``, ``gguf/``...), GGUF, Flax/TF/ONNX weights, nor
``consolidated*.safetensors`` beside the sharded safetensors (Mistral ships both; vLLM
would fetch both and load one). With ``--careful-endpoint`` the server has its own
weights: only the files BFCL's handler loads (tokenizer and config).

Errors become one :class:`FetchError` sentence naming the repo, the endpoint or the
cache, and what to do.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Config, generation config, tokenizer (json, txt, sentencepiece, tiktoken), chat
#: template, and remote code (BFCL loads tokenizers with ``trust_remote_code=True``).
CONFIG_PATTERNS = ("*.json", "*.txt", "*.model", "*.tiktoken", "*.jinja", "*.py")
#: vLLM's ``load_format=auto``: the first of these that the repo's root folder has.
WEIGHT_FORMATS = ("*.safetensors", "*.bin", "*.pt")
ROOT_ONLY = ("*/*",)  # fnmatch's * crosses "/": this drops every file in a sub-folder
MISTRAL_DUPLICATE = "consolidated*.safetensors"


class FetchError(Exception):
    """The model's files cannot be had: one sentence saying why and what to do."""


@dataclass(frozen=True)
class Wanted:
    """Which of a repo's files to fetch (``snapshot_download``'s patterns)."""

    allow: tuple[str, ...]
    ignore: tuple[str, ...]


def wanted(files: Iterable[str] | None, weights: bool) -> Wanted:
    """The patterns for a repo holding ``files`` (None: the listing is unknown)."""
    root = [f for f in files or () if "/" not in f]
    allow, ignore = list(CONFIG_PATTERNS), list(ROOT_ONLY)
    if weights:
        # Unknown listing: the format nearly every repo vLLM serves has.
        form = (
            WEIGHT_FORMATS[0] if files is None else next((p for p in WEIGHT_FORMATS if fnmatch.filter(root, p)), None)
        )
        if form is not None:
            allow.append(form)
        sharded = [f for f in fnmatch.filter(root, "*.safetensors") if not fnmatch.fnmatch(f, MISTRAL_DUPLICATE)]
        if form == "*.safetensors" and sharded:
            ignore.append(MISTRAL_DUPLICATE)
    return Wanted(tuple(allow), tuple(ignore))


def fetch(repo: str, weights: bool) -> Path:
    """Controller: the repo's snapshot folder, downloaded (with progress bars) unless cached.

    Offline (``HF_HUB_OFFLINE``), the cache must hold it. Raises FetchError.
    """
    # huggingface_hub on first use: not a dependency of the plugin (a vLLM machine has it)
    from huggingface_hub import snapshot_download

    files = None if offline() else _listing(repo)
    if files is None:
        files = _cached_listing(repo)
    patterns = wanted(files, weights)
    try:
        return Path(snapshot_download(repo, allow_patterns=list(patterns.allow), ignore_patterns=list(patterns.ignore)))
    except Exception as exc:  # HTTP, network, disk: explain() makes each one sentence
        raise FetchError(explain(exc, repo)) from None


def cached(repo: str, weights: bool = False) -> Path:
    """In any process, after :func:`fetch`: the repo's snapshot folder, from the cache only."""
    # huggingface_hub on first use: not a dependency of the plugin (a vLLM machine has it)
    from huggingface_hub import snapshot_download

    patterns = wanted(_cached_listing(repo), weights)
    try:
        return Path(
            snapshot_download(
                repo, allow_patterns=list(patterns.allow), ignore_patterns=list(patterns.ignore), local_files_only=True
            )
        )
    except Exception as exc:  # as in fetch(), one sentence whatever went wrong
        errors = _errors()
        if isinstance(exc, errors.LocalEntryNotFoundError):
            # The controller fetched it into the cache this process was started with.
            raise FetchError(
                f"{repo} is not in the Hugging Face cache this process reads ({cache_dir()}), "
                "although the session fetched it: do all processes see the same HF_HOME?"
            ) from None
        raise FetchError(explain(exc, repo)) from None


def _listing(repo: str) -> list[str] | None:
    """The repo's files, as the hub lists them; None if the hub cannot be asked."""
    # huggingface_hub on first use: not a dependency of the plugin (a vLLM machine has it)
    from huggingface_hub import HfApi

    try:
        info = HfApi().model_info(repo)
    except Exception:  # unreachable, unknown, gated: snapshot_download uses the cache, or raises why not
        return None
    return [s.rfilename for s in info.siblings or ()]


def _cached_listing(repo: str) -> list[str] | None:
    """The repo's files as the last download listed them (huggingface_hub >= 1.x keeps it)."""
    try:
        # huggingface_hub on first use: not a dependency of the plugin (a vLLM machine has it)
        from huggingface_hub import get_cached_repo_tree
    except ImportError:
        return None
    try:
        return [f.path for f in get_cached_repo_tree(repo)]
    except Exception:  # not cached yet, or an older cache: the listing is unknown
        return None


def offline() -> bool:
    # huggingface_hub on first use: not a dependency of the plugin (a vLLM machine has it)
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


def endpoint() -> str:
    # huggingface_hub on first use: not a dependency of the plugin (a vLLM machine has it)
    from huggingface_hub import constants

    return str(constants.ENDPOINT)


def cache_dir() -> str:
    # huggingface_hub on first use: not a dependency of the plugin (a vLLM machine has it)
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def explain(exc: BaseException, repo: str) -> str:
    """One sentence for a failed fetch: which repo, where, and what to do."""
    errors = _errors()
    if isinstance(exc, errors.GatedRepoError):
        return (
            f"{repo} is a gated repository on {endpoint()}: accept its terms on the model's page, "
            "then export HF_TOKEN (a token of an account with access)"
        )
    if isinstance(exc, errors.RepositoryNotFoundError):
        return (
            f"{repo} was not found on {endpoint()} (or it is private or gated and this request "
            "had no valid token): check the name; for a private or gated repo export HF_TOKEN"
        )
    if isinstance(exc, errors.RevisionNotFoundError):
        return f"{repo}: its main revision was not found on {endpoint()}"
    if isinstance(exc, errors.LocalEntryNotFoundError) and offline():
        return (
            f"{repo} is not (fully) in the Hugging Face cache ({cache_dir()}) and HF_HUB_OFFLINE "
            f"forbids fetching it: fetch it first where the hub is reachable (`hf download {repo}`, "
            "with the same HF_HOME), or unset HF_HUB_OFFLINE"
        )
    if isinstance(exc, errors.LocalEntryNotFoundError):
        return (
            f"cannot reach {endpoint()} to fetch {repo}, and it is not in the cache ({cache_dir()}): "
            "check the network (proxy, HF_ENDPOINT), or fetch it elsewhere with "
            f"`hf download {repo}` into the same HF_HOME. ({_first_line(exc)})"
        )
    if isinstance(exc, errors.HfHubHTTPError):
        return f"fetching {repo} from {endpoint()} failed: {_first_line(exc)}"
    if isinstance(exc, OSError):
        return f"could not store {repo} in the cache ({cache_dir()}): {exc}"
    return f"fetching {repo} from {endpoint()} failed: {type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    """The cause in a few words (huggingface_hub's messages go on with generic advice)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[0] if lines else type(exc).__name__


def _errors() -> Any:
    """huggingface_hub's error classes (``errors`` since 0.2x; ``utils`` re-exports them in older ones)."""
    try:
        return importlib.import_module("huggingface_hub.errors")
    except ImportError:  # pragma: no cover - old huggingface_hub
        return importlib.import_module("huggingface_hub.utils")
