"""Decoding logged model output with the model's registered BFCL handler, safely.

BFCL's decoders are kept, but several of them call ``eval`` on model text (the
prompting decoder on ``+``/``-`` expressions and lambdas, the Llama-3.1, Qwen-FC,
Granite, Phi-FC, ... decoders on raw text). Before a handler decodes anything,
the name ``eval`` in each handler module is shadowed by :func:`literal_only_eval`,
which accepts Python literals and bounded number arithmetic and raises on
anything else, so such a step fails to decode (and BFCL drops it) instead of
running. On safe input the result is identical to the stock decoder's
(``tests/execution/test_decoding.py`` compares them on the real run, in a subprocess).

Handlers are built without calling vendor SDK constructors when those need an
API key: decoding needs none.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import inspect
import re
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..common import bfcl as _bfcl
from ..common.text import did_you_mean
from . import limits, plain_values
from .interpreter import MAX_CALL_CHARS, arithmetic
from .passthrough import PassthroughHandler
from .plain_values import Refused

_PATCH_LOCK = threading.Lock()


class UnknownModel(LookupError):
    """A model or handler name that bfcl-eval's registry does not know."""


def literal_only_eval(source: Any, *_: Any, **__: Any) -> Any:
    """A stand-in for ``eval`` that evaluates only literals and number arithmetic."""
    if not isinstance(source, str):
        raise TypeError("literal_only_eval takes a string")
    if len(source) > MAX_CALL_CHARS:
        raise ValueError("input too long to decode")
    tree = ast.parse(source.strip(), mode="eval")
    limits.evaluating(source)
    return _literal(tree.body)


def _literal(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        items = [_literal(e) for e in node.elts]
        return {ast.List: list, ast.Tuple: tuple, ast.Set: set}[type(node)](items)
    if isinstance(node, ast.Dict) and all(k is not None for k in node.keys):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}  # type: ignore[arg-type]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _literal(node.operand)
        if type(value) not in (int, float):
            raise ValueError("unary operator on a non-number")
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.BinOp) and isinstance(
        node.op, (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod)
    ):
        try:
            value = arithmetic(node.op, _literal(node.left), _literal(node.right))
        except Refused as exc:
            raise ValueError(str(exc)) from None
        # Held twice until the step is decoded: the value, and its repr in the call string
        # BFCL's decoder writes (which the replay then counts as the call it keeps).
        limits.charge(2 * plain_values.text_size(value))
        return value
    raise ValueError(f"{type(node).__name__} is not a literal; not evaluated")


def shadow_eval(handler_class: type) -> None:
    """Shadow ``eval`` in every module a handler's decoding code lives in."""
    modules = {"bfcl_eval.model_handler.utils"}
    modules |= {cls.__module__ for cls in inspect.getmro(handler_class)}
    with _PATCH_LOCK:
        for name in modules:
            module = sys.modules.get(name)
            if module is not None and name.startswith("bfcl_eval"):
                module.eval = literal_only_eval  # type: ignore[attr-defined]


@dataclass(frozen=True)
class RegistryEntry:
    """What decoding needs of a ``ModelConfig``, read from model_config.py's source."""

    key: str
    model_name: str
    is_fc_model: bool
    handler_module: str
    handler_class: str
    #: the class itself, for a model of one's own (``own_models``); BFCL's are imported by name
    handler: type | None = field(default=None, compare=False)


@dataclass(frozen=True)
class ModelEntry:
    """A model of one's own (``pytest_careful_model_handlers``), as BFCL's ``ModelConfig`` names one.

    Attributes:
        handler: a subclass of BFCL's ``BaseHandler`` (``bfcl_eval.model_handler.base_handler``): it
            prompts, calls and decodes, as ``bfcl generate`` would run it.
        model_name: the model's name as the handler sends it (default: the name it is registered under).
        is_fc_model: whether it calls functions natively (FC) or writes them as text (prompting).
    """

    handler: type
    model_name: str = ""
    is_fc_model: bool = True


class ModelEntryError(ValueError):
    """A model of one's own that cannot be registered: its name, or its handler."""


#: The models of one's own registered in this process (``own_models``), by name.
_OWN: dict[str, RegistryEntry] = {}
#: Families of models named by a prefix (``scripted:``): prefix -> what builds one's handler from its name,
#: raising UnknownModel for a name of the family that does not exist. Registered by the family's own
#: module (``live.backends.scripted``), which lives above this stage.
_FAMILIES: dict[str, Callable[[str], Any]] = {}


def model_family(prefix: str, make_handler: Callable[[str], Any]) -> None:
    """Register a family of models named ``<prefix><name>``: ``make_handler(name)`` builds a handler."""
    _FAMILIES[prefix] = make_handler


def _family(name: str) -> Callable[[str], Any] | None:
    return next((make for prefix, make in _FAMILIES.items() if name.startswith(prefix)), None)


def own_models(models: Mapping[str, ModelEntry], where: str = "pytest_careful_model_handlers") -> Callable[[], None]:
    """Register models of one's own beside BFCL's registry; returns what unregisters them.

    Their names then resolve like registry keys (``--careful-model``, ``--careful-decoder``).
    A name that is already BFCL's, ``reference``, or ``scripted:``/``bfcl:``-prefixed is refused,
    as is a handler that is not a BFCL handler class (``ModelEntryError``, one line).
    """
    # bfcl_eval: its handler registry stays lazy (importing it loads every vendor SDK)
    from bfcl_eval.model_handler.base_handler import BaseHandler

    bfcl_keys = set(_bfcl_keys())
    added = {}
    for name, model in models.items():
        label = f"{where}: model {name!r}"
        if not isinstance(name, str) or not name.strip() or name != name.strip() or len(name) > 200:
            raise ModelEntryError(f"{label}: a model's name is a non-empty string without surrounding blanks")
        if name in bfcl_keys or name == "reference" or name.startswith(("scripted:", "bfcl:")):
            raise ModelEntryError(f"{label}: the name is taken (BFCL's registry, reference, scripted: or bfcl:)")
        if not isinstance(model, ModelEntry):
            raise ModelEntryError(f"{label}: expected a pytest_careful.ModelEntry, got {type(model).__name__}")
        if not (isinstance(model.handler, type) and issubclass(model.handler, BaseHandler)):
            raise ModelEntryError(f"{label}: its handler {model.handler!r} is not a subclass of BFCL's BaseHandler")
        cls = model.handler
        added[name] = RegistryEntry(
            name, model.model_name or name, bool(model.is_fc_model), cls.__module__, cls.__qualname__, cls
        )
    clash = sorted(set(added) & set(_OWN))
    if clash:
        raise ModelEntryError(f"{where}: {', '.join(clash)} registered twice")
    _OWN.update(added)

    def undo() -> None:
        for name in added:
            _OWN.pop(name, None)

    return undo


@functools.cache
def registry_source() -> dict[str, RegistryEntry | None]:
    """Registry entries parsed from bfcl-eval's model_config.py, without importing it.

    Importing the registry imports every vendor SDK (about 5 s in each pytest
    process); decoding needs one handler module. An entry whose fields are not
    plain literals maps to None and is resolved through the imported registry.
    ``tests/execution/test_decoding.py`` checks every entry against the imported mapping.
    """
    source = (_bfcl.package_root() / "constants" / "model_config.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    modules = {
        alias.asname or alias.name: node.module
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }
    entries: dict[str, RegistryEntry | None] = {}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id.endswith("_model_map") for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    entries.setdefault(key.value, _entry(key.value, value, modules))
    return entries


def _entry(key: str, call: ast.AST, modules: dict[str, str]) -> RegistryEntry | None:
    if not isinstance(call, ast.Call):
        return None
    fields = {k.arg: k.value for k in call.keywords}
    handler, name, fc = fields.get("model_handler"), fields.get("model_name"), fields.get("is_fc_model")
    if not (
        isinstance(handler, ast.Name)
        and handler.id in modules
        and isinstance(name, ast.Constant)
        and isinstance(name.value, str)
        and isinstance(fc, ast.Constant)
    ):
        return None
    return RegistryEntry(key, name.value, bool(fc.value), modules[handler.id], handler.id)


#: Modules of the vendor SDKs installed by an extra, and that extra (pyproject.toml).
PROVIDER_EXTRAS: dict[str, str] = {
    "google.genai": "google",
    "mistralai": "mistral",
    "cohere": "cohere",
    "qwen_agent": "qwen",
    "soundfile": "qwen",
    "writerai": "writer",
    "boto3": "bedrock",
    "botocore": "bedrock",
    "datamodel_code_generator": "minicpm",
}


class MissingExtra(ImportError):
    """A handler whose vendor SDK is an extra that is not installed; the message says which."""


def missing_extra(key: str) -> str | None:
    """The ``pip install`` hint when an SDK the handler of ``key`` imports is absent, else None.

    Reads the sources (``_sdk_imports``) and looks the SDKs up with ``find_spec``:
    nothing is imported, so the controller can refuse a run up front for free.
    """
    entry = registry_source().get(key)
    if entry is None:  # scripted handles; entries resolved through the imported registry
        return None
    for module in _sdk_imports(entry.handler_module):
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):  # a parent package that is itself missing
            found = False
        if not found:
            return _extra_hint(entry, module)
    return None


def _provider(module: str, parent: bool = False) -> str | None:
    """The PROVIDER_EXTRAS module that ``module`` is or is in (or, with ``parent``, a parent package of:
    ``from google import genai`` fails naming ``google``)."""
    return next(
        (
            m
            for m in PROVIDER_EXTRAS
            if module == m or module.startswith(m + ".") or (parent and m.startswith(module + "."))
        ),
        None,
    )


def _extra_hint(entry: RegistryEntry, module: str) -> str:
    extra = PROVIDER_EXTRAS[module]
    return (
        f"{entry.key}'s handler ({entry.handler_module}) needs the {module} package, which is not "
        f"installed: pip install 'pytest-careful[{extra}]'"
    )


@functools.cache
def _sdk_imports(module: str) -> tuple[str, ...]:
    """Extra-installed SDK modules that importing bfcl-eval module ``module`` imports.

    Follows bfcl-eval's own module-level imports (a handler's base classes live in
    other modules); imports inside functions run only when called, so they are left out.
    """
    seen, pending, sdks = set(), [module], []
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        for imported in _module_level_imports(name):
            if imported.startswith("bfcl_eval."):
                pending.append(imported)
            elif (provider := _provider(imported)) and provider not in sdks:
                sdks.append(provider)
    return tuple(sdks)


def _module_level_imports(module: str) -> list[str]:
    parts = module.split(".")[1:]
    path = _bfcl.package_root().joinpath(*parts)
    path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
    if not path.is_file():
        return []
    found: list[str] = []
    pending: list[ast.stmt] = list(ast.parse(path.read_text(encoding="utf-8")).body)
    while pending:  # module body, including if/try blocks, not function or class bodies
        node = pending.pop()
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # `from google import genai` imports the submodule google.genai
            found += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
        elif isinstance(node, (ast.If, ast.Try)):
            pending += node.body + node.orelse + getattr(node, "finalbody", [])
            pending += [s for handler in getattr(node, "handlers", []) for s in handler.body]
    return found


def import_handler_class(entry: RegistryEntry) -> type:
    """The handler class of ``entry``, importing its module only; MissingExtra names the extra."""
    if entry.handler is not None:  # a model of one's own: the class itself
        return entry.handler
    _bfcl.contain_project_root()  # handler modules import bfcl's eval_config
    try:
        module = importlib.import_module(entry.handler_module)
    except ImportError as exc:  # also `from google import genai` with another google.* package there
        provider = _provider(exc.name or "", parent=True)
        if provider is None:
            raise
        raise MissingExtra(_extra_hint(entry, provider)) from None
    return getattr(module, entry.handler_class)  # type: ignore[no-any-return]


def registry_keys() -> tuple[str, ...]:
    """The models of one's own (``own_models``), then the registry's keys in its order."""
    return tuple(_OWN) + _bfcl_keys() if _OWN else _bfcl_keys()


@functools.cache
def _bfcl_keys() -> tuple[str, ...]:
    """BFCL's registry keys, in its order (read from source; see ``registry_source``)."""
    return tuple(registry_source()) or tuple(_bfcl.model_registry())


def resolve_model(name: str) -> str:
    """A registry key from what a user typed (``Qwen3-8B`` → ``Qwen/Qwen3-8B``)."""
    make = _family(name)
    if make is not None:  # scripted models decode like the runs they wrote
        make(name)  # UnknownModel for a policy that does not exist
        return name
    keys = registry_keys()
    if name in keys:
        return name
    by_short = [k for k in keys if k.split("/")[-1] == name or k.replace("/", "_") == name]
    if len(by_short) == 1:
        return by_short[0]
    if len(by_short) > 1:
        raise UnknownModel(f"model name {name!r} is ambiguous: {', '.join(sorted(by_short))}")
    hint = close_models(name, ("reference", *keys))
    raise UnknownModel(f"{name!r} is not in bfcl-eval {_bfcl.PINNED_VERSION}'s model registry{hint}")


#: How a registry key ends in a release date: ``-2024-11-20``, ``-20250929``, ``-2507``.
_RELEASE_DATE = re.compile(r"-(?:\d{4}-\d{2}-\d{2}|\d{8}|\d{4})$")


def model_stem(key: str) -> str:
    """A key as people say the model: ``gpt-4o`` of ``gpt-4o-2024-11-20-FC``, ``qwen3-8b`` of
    ``Qwen/Qwen3-8B`` (no organisation, mode, release date or case)."""
    return _RELEASE_DATE.sub("", key.rsplit("/", 1)[-1].removesuffix("-FC")).lower()


def close_models(name: str, keys: Iterable[str], first: Callable[[str], bool] | None = None) -> str:
    """``; did you mean ...?`` for a model name that is no key: the keys of the models it begins
    (``llama-4``: the Llama-4 keys), else the keys spelled close to it, else those of models named
    close to it (``gpt-9-turbo``: the ``gpt-4o``, ``gpt-5-nano`` keys); ``first``: the keys to name
    before the others (``did_you_mean``)."""
    keys = tuple(keys)
    stem = model_stem(name)
    begun = [k for k in keys if model_stem(k).startswith(stem)] if len(stem) >= _MIN_STEM else []
    return (
        did_you_mean(name, begun, cutoff=0.0, first=first)
        or did_you_mean(name, keys, first=first)
        or did_you_mean(name, keys, form=model_stem, first=first)
    )


#: A name shorter than this begins too many models to suggest them.
_MIN_STEM = 4


@dataclass
class Decoder:
    """A registered BFCL handler used for decoding only."""

    registry_key: str
    handler: Any

    @property
    def is_fc_model(self) -> bool:
        return bool(self.handler.is_fc_model)

    def decode_step(self, step: Any) -> list[str]:
        """BFCL's ``decode_execute`` on one logged step (the model's output, as logged: any JSON value);
        raises if it does not decode."""
        return self.handler.decode_execute(step, has_tool_call_tag=False)


@functools.cache
def decoder(registry_key: str) -> Decoder:
    """The decoder of a registry key, as ``bfcl evaluate`` builds it (temperature 0)."""
    key = resolve_model(registry_key)
    make = _family(key)
    if make is not None:
        handler = make(key)
        shadow_eval(type(handler))
        return Decoder(key, handler)
    entry = _OWN.get(key) or registry_source().get(key)
    if entry is not None:
        handler_class = import_handler_class(entry)
        model_name, is_fc_model = entry.model_name, entry.is_fc_model
    else:
        config = _bfcl.model_registry()[key]
        handler_class, model_name, is_fc_model = config.model_handler, config.model_name, config.is_fc_model
    shadow_eval(handler_class)
    return Decoder(key, _build_handler(handler_class, model_name, is_fc_model, key))


#: The SDKs whose clients a BFCL handler opens in its initialiser (an OSS handler's OpenAI client
#: for its local server, Claude's Anthropic client).
_CLIENT_SDKS = ("openai", "anthropic", "httpx")


def close_clients(handler: Any) -> None:
    """Close the API clients a handler holds, and let go of them (the attribute set to None).

    A client still alive when the interpreter exits meets the SDK's ``__del__`` after httpx is torn
    down, which prints "Exception ignored in: SyncHttpxClientWrapper.__del__" and a traceback,
    closed or not (its ``is_closed`` reads a module global that is None by then). Let go, it is
    freed at once (the SDKs' clients hold no reference cycle), while httpx is there.
    """
    for name, value in list(vars(handler).items()):
        # the SDK test first: asking any other value for `close` may run its __getattr__ (the
        # tokenizer's loads transformers, seconds at the exit)
        if type(value).__module__.partition(".")[0] not in _CLIENT_SDKS:
            continue
        close = getattr(value, "close", None)
        if callable(close):
            try:
                close()
            except Exception:  # noqa: BLE001 -- a client that cannot close is the SDK's affair; decoding goes on
                pass
            setattr(handler, name, None)


def _build_handler(handler_class: type, model_name: str, is_fc_model: bool, key: str) -> Any:
    kwargs = dict(model_name=model_name, temperature=0, registry_name=key, is_fc_model=is_fc_model)
    try:
        built = handler_class(**kwargs)
    except Exception:
        # Vendor clients refuse to start without an API key; decoding needs none,
        # so build the handler with BaseHandler's initialiser only.
        from bfcl_eval.model_handler.base_handler import BaseHandler  # bfcl_eval: the handler registry stays lazy

        handler: Any = object.__new__(handler_class)
        BaseHandler.__init__(handler, **kwargs)
        return handler
    close_clients(built)  # decoding only: nothing is sent
    return built


def passthrough_decoder() -> Decoder:
    """For input that is already decoded (references, generated and scripted runs)."""
    return Decoder("passthrough", PassthroughHandler())


def registry_entry(key: str) -> RegistryEntry:
    """The registry entry of ``key``: read from model_config.py's source, else from the registry itself."""
    entry = _OWN.get(key) or registry_source().get(key)
    if entry is None:
        config = _bfcl.model_registry()[key]
        cls = config.model_handler
        return RegistryEntry(key, config.model_name, config.is_fc_model, cls.__module__, cls.__name__)
    return entry
