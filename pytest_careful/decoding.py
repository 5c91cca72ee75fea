"""Decoding logged model output with the model's registered BFCL handler, safely.

BFCL's decoders are kept, but several of them call ``eval`` on model text (the
prompting decoder on ``+``/``-`` expressions and lambdas, the Llama-3.1, Qwen-FC,
Granite, Phi-FC, ... decoders on raw text). Before a handler decodes anything,
the name ``eval`` in each handler module is shadowed by :func:`literal_only_eval`,
which accepts Python literals and bounded number arithmetic and raises on
anything else, so such a step fails to decode (and BFCL drops it) instead of
running. On safe input the result is identical to the stock decoder's
(``tests/test_decoding.py`` compares them on the real run, in a subprocess).

Handlers are built without calling vendor SDK constructors when those need an
API key: decoding needs none.
"""

from __future__ import annotations

import ast
import difflib
import functools
import inspect
import sys
import threading
from dataclasses import dataclass
from typing import Any

from . import _bfcl
from .executor import MAX_CALL_CHARS, Refused, _arithmetic

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
            return _arithmetic(node.op, _literal(node.left), _literal(node.right))
        except Refused as exc:
            raise ValueError(str(exc)) from None
    raise ValueError(f"{type(node).__name__} is not a literal; not evaluated")


def _shadow_eval(handler_class: type) -> None:
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


@functools.cache
def _registry_source() -> dict[str, RegistryEntry | None]:
    """Registry entries parsed from bfcl-eval's model_config.py, without importing it.

    Importing the registry imports every vendor SDK (about 5 s in each pytest
    process); decoding needs one handler module. An entry whose fields are not
    plain literals maps to None and is resolved through the imported registry.
    ``tests/test_decoding.py`` checks every entry against the imported mapping.
    """
    source = (_bfcl.package_root() / "constants" / "model_config.py").read_text(encoding="utf-8")
    tree = ast.parse(source)
    modules = {alias.asname or alias.name: node.module for node in tree.body
               if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}
    entries: dict[str, RegistryEntry | None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id.endswith("_model_map") for t in node.targets
        ) and isinstance(node.value, ast.Dict):
            for key, value in zip(node.value.keys, node.value.values):
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    entries.setdefault(key.value, _entry(key.value, value, modules))
    return entries


def _entry(key: str, call: ast.AST, modules: dict[str, str]) -> RegistryEntry | None:
    if not isinstance(call, ast.Call):
        return None
    fields = {k.arg: k.value for k in call.keywords}
    handler, name, fc = fields.get("model_handler"), fields.get("model_name"), fields.get("is_fc_model")
    if not (isinstance(handler, ast.Name) and handler.id in modules and isinstance(name, ast.Constant)
            and isinstance(name.value, str) and isinstance(fc, ast.Constant)):
        return None
    return RegistryEntry(key, name.value, bool(fc.value), modules[handler.id], handler.id)


@functools.cache
def registry_keys() -> tuple[str, ...]:
    """The registry's keys, in its order (read from source; see ``_registry_source``)."""
    return tuple(_registry_source()) or tuple(_bfcl.model_registry())


def resolve_model(name: str) -> str:
    """A registry key from what a user typed (``Qwen3-8B`` → ``Qwen/Qwen3-8B``)."""
    if name.startswith("scripted:"):  # scripted models decode like the runs they wrote
        from .live.scripted import UnknownPolicy, parse_handle

        try:
            parse_handle(name)
        except UnknownPolicy as exc:
            raise UnknownModel(str(exc)) from None
        return name
    keys = registry_keys()
    if name in keys:
        return name
    by_short = [k for k in keys if k.split("/")[-1] == name or k.replace("/", "_") == name]
    if len(by_short) == 1:
        return by_short[0]
    if len(by_short) > 1:
        raise UnknownModel(f"model name {name!r} is ambiguous: {', '.join(sorted(by_short))}")
    close = difflib.get_close_matches(name, keys, n=5, cutoff=0.5)
    hint = f"; close matches: {', '.join(close)}" if close else ""
    raise UnknownModel(f"{name!r} is not in bfcl-eval {_bfcl.PINNED_VERSION}'s model registry{hint}")


@dataclass
class Decoder:
    """A registered BFCL handler used for decoding only."""

    registry_key: str
    handler: Any

    @property
    def is_fc_model(self) -> bool:
        return bool(self.handler.is_fc_model)

    def decode_step(self, item: Any) -> list[str]:
        """BFCL's ``decode_execute`` on one logged step; raises if it does not decode."""
        return self.handler.decode_execute(item, has_tool_call_tag=False)


@functools.cache
def decoder(registry_key: str) -> Decoder:
    """The decoder of a registry key, as ``bfcl evaluate`` builds it (temperature 0)."""
    key = resolve_model(registry_key)
    if key.startswith("scripted:"):
        from .live.scripted import make_handler

        handler = make_handler(key)
        _shadow_eval(type(handler))
        return Decoder(key, handler)
    entry = _registry_source().get(key)
    if entry is not None:
        import importlib

        _bfcl.contain_project_root()  # handler modules import bfcl's eval_config
        handler_class = getattr(importlib.import_module(entry.handler_module), entry.handler_class)
        model_name, is_fc_model = entry.model_name, entry.is_fc_model
    else:
        config = _bfcl.model_registry()[key]
        handler_class, model_name, is_fc_model = config.model_handler, config.model_name, config.is_fc_model
    _shadow_eval(handler_class)
    return Decoder(key, _build_handler(handler_class, model_name, is_fc_model, key))


def _build_handler(handler_class: type, model_name: str, is_fc_model: bool, key: str) -> Any:
    kwargs = dict(model_name=model_name, temperature=0, registry_name=key, is_fc_model=is_fc_model)
    try:
        return handler_class(**kwargs)
    except Exception:
        # Vendor clients refuse to start without an API key; decoding needs none,
        # so build the handler with BaseHandler's initialiser only.
        from bfcl_eval.model_handler.base_handler import BaseHandler

        handler: Any = object.__new__(handler_class)
        BaseHandler.__init__(handler, **kwargs)
        return handler


def passthrough_decoder() -> Decoder:
    """For input that is already decoded (references, generated and scripted runs)."""
    from .passthrough import PassthroughHandler

    return Decoder("passthrough", PassthroughHandler())
