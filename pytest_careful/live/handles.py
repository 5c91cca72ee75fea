"""``--careful-model`` for live runs: what to build in each process, and how.

A :class:`ModelHandle` is small and picklable-by-value (xdist workers rebuild
it from the same options); :meth:`ModelHandle.handler` builds the BFCL handler
once per process. Kinds:

* ``scripted``: :mod:`.backends.scripted` policies, for tests and demonstrations;
* ``vllm``: a registry key whose handler is an ``OSSHandler`` (or a local model
  directory with ``--careful-handler KEY``), served by one vLLM server;
* ``claude``: a registry key whose handler is BFCL's Claude handler, with the
  fixes of :mod:`.backends.claude` and the spend guard;
* ``api``: any other registered API handler, as BFCL builds it.
"""

from __future__ import annotations

import ast
import difflib
import functools
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

from ..common import bfcl as _bfcl
from ..execution.decoding import (
    RegistryEntry,
    close_clients,
    close_models,
    missing_extra,
    registry_entry,
    registry_keys,
    shadow_eval,
)
from ..sources.options import HANDLER, MODEL
from .backends import scripted
from .backends.registry import backend
from .backends.scripted import POLICIES, PREFIX
from .handler import Handler
from .provenance import Resolution

#: BFCL's default sampling temperature (``bfcl generate --temperature``).
BFCL_TEMPERATURE = 0.001


class HandleError(ValueError):
    """A ``--careful-model`` / ``--careful-handler`` combination that cannot run."""


@dataclass(frozen=True)
class ModelHandle:
    """What ``--careful-model`` names, resolved."""

    kind: str  # scripted | vllm | claude | api
    model: str  # what the user typed, for display
    registry_key: str  # the handler's registry key (or scripted:<policy>)
    model_path: str | None = None  # local model directory (vllm)
    temperature: float = BFCL_TEMPERATURE

    @property
    def result_name(self) -> str:
        """The folder results are filed under (BFCL: ``registry_dir_name``).

        A local model is filed under its own directory name and a hash of its
        path, not its handler's key (a fine-tune is not the model whose prompt
        format it borrows).
        """
        if self.model_path:
            # Two checkpoints both called "final" must not resume each other's results.
            digest = hashlib.sha256(self.model_path.encode()).hexdigest()[:8]
            return f"{Path(self.model_path).name}-{digest}"
        return self.registry_key.replace("/", "_").replace(":", "_")

    def build(self) -> Handler:
        """A fresh BFCL handler for this process (model-specific setup is the caller's)."""
        handler = backend(self.kind).build(self)
        shadow_eval(type(handler))  # the loop decodes with the handler's own decoder
        return handler

    def probe(self) -> Handler:
        """A handler built to read what it would send (model id, dtype), its API clients closed at once:
        one left open to the interpreter's exit prints a traceback from the SDK's ``__del__``."""
        handler = self.build()
        close_clients(handler)
        return handler


def resolve(model: str, handler_key: str | None) -> ModelHandle:
    """The handle for ``--careful-model`` (and ``--careful-handler``); raises HandleError."""
    if model.startswith(scripted.PREFIX):
        try:
            scripted.parse_handle(model)
        except scripted.UnknownPolicy as exc:
            raise HandleError(str(exc)) from None
        return ModelHandle("scripted", model, model)
    local = Path(model).expanduser()
    if handler_key is not None or local.is_dir():
        return _local_model(model, local, handler_key)
    key = _installed(registry_key(model))
    return ModelHandle(_kind(registry_entry(key)), model, key)


def registry_key(name: str, local_only: bool = False) -> str:
    """The registry key a typed model name means, or HandleError (unknown, or ambiguous).

    ``bfcl:KEY`` is KEY exactly, as ``bfcl generate --model KEY`` takes it. Otherwise a
    trailing ``-FC`` or ``-prompt`` chooses the mode; a name matches a key by its full
    form or the part after the organisation (``Qwen3-8B`` for ``Qwen/Qwen3-8B``),
    ignoring case for local-model keys only (API keys are vendors' ids, matched as
    written); the leaderboard's name (``display_name``: ``Qwen3-8B (FC)``) matches too.
    An exact key is taken as is unless a key of another backend also matches it
    (``qwen3-8b``: Alibaba's API, or ``Qwen/Qwen3-8B`` on vLLM?); any other name
    must match one key. Guessing would run another model than meant, with other
    prompts, so several matches are refused with their spellings. ``local_only``
    (``--careful-handler``) looks among local-model keys only.
    """
    keys = registry_keys()
    name = name.strip()  # a pasted name's stray blank is not part of it
    if name.startswith(EXACT_PREFIX):
        key = name.removeprefix(EXACT_PREFIX)
        if key not in keys:
            raise HandleError(
                f"{key!r} is not a key of bfcl-eval {_bfcl.PINNED_VERSION}'s model registry" + _close(key, keys)
            )
        return key
    if local_only:  # --careful-handler: an API handler cannot prompt local weights, so it is no candidate
        keys = tuple(k for k in keys if backend(_kind(registry_entry(k))).local_weights)
    found = [k for k in _candidates(name, keys) if k in keys]
    if name in keys and all(_kind(registry_entry(k)) == _kind(registry_entry(name)) for k in found):
        return name
    if len(found) == 1:
        return found[0]
    unsuffixed = _unsuffixed_key(name, found)
    if unsuffixed is not None:
        return unsuffixed
    if not found:
        raise _unknown(name, keys, local_only)
    raise HandleError(
        f"{name!r} is ambiguous: it matches "
        + "; ".join(f"{_spelling(k, keys)} ({describe(k)})" for k in found)
        + ". Name one as written here"
    )


def _unsuffixed_key(name: str, found: list[str]) -> str | None:
    """BFCL's own naming for a name without a mode: ``Qwen/Qwen3-8B`` is the prompting key and
    ``Qwen/Qwen3-8B-FC`` its FC sibling, so ``Qwen3-8B`` is the former, as ``bfcl generate --model``
    reads it (not a guess; the resolution line names the FC sibling). Every other mix stays ambiguous."""
    if _MODE_SUFFIX.search(name) or _DISPLAY_MODE.search(name):
        return None
    plain = [k for k in found if not k.endswith("-FC")]
    if len(plain) == 1 and all(k == plain[0] or k == plain[0] + "-FC" for k in found):
        return plain[0]
    return None


def fc_sibling(handle: ModelHandle) -> str | None:
    """The FC key beside a prompting key that a name without a mode resolved to, for the resolution line."""
    key = handle.registry_key
    if not backend(handle.kind).remote or key.endswith("-FC") or _MODE_SUFFIX.search(handle.model.strip()):
        return None
    return key + "-FC" if key + "-FC" in registry_keys() else None


def _unknown(name: str, keys: tuple[str, ...], local_only: bool) -> HandleError:
    """No key among ``keys``: say so with close matches; for a handler, name the API key it meant."""
    if local_only:
        api = [name] if name in registry_keys() else _candidates(name, registry_keys())
        if api:
            return HandleError(
                f"{name!r} names {' or '.join(api)}: an API handler, not a local-model (OSS) one" + _close(name, keys)
            )
        return HandleError(
            f"{name!r} is not a local-model key of bfcl-eval {_bfcl.PINNED_VERSION}'s model "
            "registry" + _close(name, keys)
        )
    return HandleError(
        f"{name!r} is not in bfcl-eval {_bfcl.PINNED_VERSION}'s model registry"
        + _close(name, keys)
        + f" (or give a local model directory with {HANDLER} KEY)"
    )


EXACT_PREFIX = "bfcl:"
_MODE_SUFFIX = re.compile(r"-(fc|prompt|prompting)$", re.IGNORECASE)


def _matches(name: str, keys: tuple[str, ...]) -> list[str]:
    """Keys ``name`` may mean: same base name (case-insensitive for local keys), same mode if given."""
    suffix = _MODE_SUFFIX.search(name)
    base = name[: suffix.start()] if suffix else name
    fc = None if suffix is None else suffix.group(1).lower() == "fc"
    found = []
    for key in keys:
        entry = registry_entry(key)
        if fc is not None and entry.is_fc_model != fc:
            continue
        local = backend(_kind(entry)).local_weights
        forms = _forms(key.removesuffix("-FC"), with_org="/" in base)
        if any(f == base or (local and f.lower() == base.lower()) for f in forms):
            found.append(key)
    return found


#: The leaderboard's spelling (BFCL's display names): ``Qwen3-8B (FC)``, ``Llama-3.1-8B-Instruct (Prompt)``,
#: ``DeepSeek-V3.2-Exp (Prompt + Thinking)``: a mode in parentheses at the end.
_DISPLAY_MODE = re.compile(r"\([^()]*\)\s*$")


def _display_matches(name: str) -> list[str]:
    """Keys whose leaderboard name (``display_name``) is ``name``, ignoring case and blanks.

    Several keys share one (an API and a local ``Qwen3-8B (FC)``): the caller refuses the guess.
    """
    wanted = _plain(name)
    exact = [key for key, shown in _display_names().items() if _plain(shown) == wanted]
    if exact or _DISPLAY_MODE.search(name):
        return exact
    # No mode given (``xLAM-2-8b-fc-r``): every mode the leaderboard lists it under.
    return [key for key, shown in _display_names().items() if _plain(_DISPLAY_MODE.sub("", shown)) == wanted]


def _plain(display_name: str) -> str:
    return re.sub(r"\s+", "", display_name).lower().replace("(prompting", "(prompt")


@functools.cache
def _display_names() -> dict[str, str]:
    """Every registry key's ``display_name``, read from model_config.py's source (importing it
    imports every vendor SDK)."""
    tree = ast.parse((_bfcl.package_root() / "constants" / "model_config.py").read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for key, value in zip(node.keys, node.values):
                shown = [k.value for k in getattr(value, "keywords", ()) if k.arg == "display_name"]
                if (
                    isinstance(key, ast.Constant)
                    and isinstance(key.value, str)
                    and shown
                    and isinstance(shown[0], ast.Constant)
                    and isinstance(shown[0].value, str)
                ):
                    names.setdefault(key.value, shown[0].value)
    return names


def _candidates(name: str, keys: tuple[str, ...]) -> list[str]:
    """The keys a name may mean: by the leaderboard's name when it ends in a mode in parentheses,
    else by key spelling, else by the leaderboard's name (``Mistral-Medium-2505``)."""
    if _DISPLAY_MODE.search(name):
        return _display_matches(name)
    return _matches(name, keys) or _display_matches(name)


def _forms(key_base: str, with_org: bool) -> tuple[str, ...]:
    """How a key may be written: in full (``/`` or ``_``), or without its organisation."""
    if with_org:
        return (key_base,)
    return (key_base, key_base.replace("/", "_"), key_base.split("/")[-1])


def _spelling(key: str, keys: tuple[str, ...]) -> str:
    """A name that resolves to ``key`` alone: the key itself where it does, else ``bfcl:KEY``."""
    found = _matches(key, keys)
    return key if all(_kind(registry_entry(k)) == _kind(registry_entry(key)) for k in found) else EXACT_PREFIX + key


def _close(name: str, keys: tuple[str, ...]) -> str:
    """Close matches of a name that is no key, those of the kind of model it asks for first."""
    local = _asks_for_local_weights(name, registry_keys())
    return close_models(
        name,
        (*keys, "reference", *(PREFIX + p for p in POLICIES)),
        first=lambda key: key in registry_keys() and backend(_kind(registry_entry(key))).local_weights == local,
    )


def _asks_for_local_weights(name: str, keys: tuple[str, ...]) -> bool:
    """Whether a name is written as the keys of local weights are (vLLM, SGLang: Hugging Face's
    ``Qwen/Qwen3-8B``, or ``Qwen3-8B`` without the organisation) rather than as a hosted API's
    (a vendor's id, ``qwen3-8b``): the kind of the key one of whose spellings (``_forms``, the mode
    left out) is closest to it, case and all."""
    base = _MODE_SUFFIX.sub("", name)

    def closeness(key: str) -> float:
        forms = _forms(_MODE_SUFFIX.sub("", key), with_org=False)
        return max(difflib.SequenceMatcher(None, base, f).ratio() for f in forms)

    closest = max(keys, key=closeness)
    return backend(_kind(registry_entry(closest))).local_weights


def describe(key: str) -> str:
    """``handler QwenFCHandler, FC, vLLM (local weights)``: what a key runs, for messages."""
    entry = registry_entry(key)
    mode = "FC" if entry.is_fc_model else "prompting"
    return f"handler {entry.handler_class}, {mode}, {backend(_kind(entry)).label}"


def resolution(handle: ModelHandle) -> Resolution:
    """What ``--careful-model`` resolved to, for the run's first lines and the provenance."""
    if not backend(handle.kind).registered:
        return {
            "typed": handle.model,
            "registry_key": handle.registry_key,
            "handler_class": None,
            "mode": "FC" if "prompt" not in handle.registry_key else "prompting",
            "backend": backend(handle.kind).label,
        }
    entry = registry_entry(handle.registry_key)
    resolved: Resolution = {
        "typed": handle.model,
        "registry_key": handle.registry_key,
        "handler_class": f"{entry.handler_module}.{entry.handler_class}",
        "mode": "FC" if entry.is_fc_model else "prompting",
        "backend": backend(handle.kind).label,
    }
    if handle.model_path:
        resolved["model_path"] = handle.model_path
    return resolved


def resolution_line(handle: ModelHandle) -> str:
    """One line: the name as typed, the key, handler class, mode and backend it resolved to."""
    info = resolution(handle)
    handler = (info["handler_class"] or "scripted").rsplit(".", 1)[-1]
    local = f" (weights: {handle.model_path})" if handle.model_path else ""
    sibling = fc_sibling(handle)
    option = HANDLER.flag if handle.model_path else MODEL.flag
    also = f" (BFCL's FC mode of this model is {sibling}: {option}={sibling})" if sibling else ""
    return (
        f"model {info['typed']} -> registry key {info['registry_key']}: handler {handler}, "
        f"{info['mode']}, {info['backend']}{local}{also}"
    )


def _local_model(model: str, local: Path, handler_key: str | None) -> ModelHandle:
    if handler_key is None:
        raise HandleError(
            f"{model} is a local model directory: name the bfcl-eval handler that "
            f"prompts and decodes it with {HANDLER} KEY (e.g. a registry key "
            "of the same model family)"
        )
    if not local.is_dir():
        raise HandleError(f"{HANDLER} is for a local model directory; {model} is not a directory")
    if not (local / "config.json").is_file():
        raise HandleError(f"{local} has no config.json; expected a Hugging Face model directory")
    try:
        key = registry_key(handler_key, local_only=True)
    except HandleError as exc:
        raise HandleError(f"{HANDLER}: {exc}") from None
    if not backend(_kind(registry_entry(key))).local_weights:
        raise HandleError(f"{HANDLER} {key}: its handler is not a local-model (OSS) handler")
    return ModelHandle("vllm", model, _installed(key), model_path=str(local.resolve()))


def _installed(key: str) -> str:
    """``key``, or HandleError with the ``pip install`` line when its vendor SDK is an absent extra."""
    problem = missing_extra(key)
    if problem:
        raise HandleError(problem)
    return key


def _kind(entry: RegistryEntry) -> str:
    # A model of one's own is of the kind of the BFCL handler it subclasses (an OSSHandler: vLLM).
    modules = [c.__module__ for c in entry.handler.__mro__] if entry.handler else [entry.handler_module]
    if any(m.startswith("bfcl_eval.model_handler.local_inference") for m in modules):
        return "vllm"
    if any(m.startswith("bfcl_eval.") and m.endswith(".claude") for m in modules):
        return "claude"
    return "api"
