"""Stand-ins for the modules ``bfcl generate`` imports but its Qwen path never calls, on a
machine that lacks them (bench/device/run.sh puts this folder on PYTHONPATH).

bfcl-eval's CLI imports its whole model registry, and with it every vendor's SDK, pandas and
the code generator of one handler. A module named here that cannot be imported for real is
served by a stand-in whose every attribute is a class that accepts anything; a module that is
installed is imported as it is. Nothing here runs in the code measured beyond the imports.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from typing import Any

STUBBED = (
    "boto3",
    "botocore",
    "cohere",
    "dashscope",
    "datamodel_code_generator",
    "google.genai",
    "mistralai",
    "pandas",
    "qwen_agent",
    "soundfile",
    "writerai",
)


class _Anything(type):
    """A class whose attributes are more such classes, callable and subscriptable: ``X.y.z(...)[0]``."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything(name, (), {})


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if not any(fullname == s or fullname.startswith(s + ".") for s in STUBBED):
            return None
        if fullname in _REAL:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: Any) -> types.ModuleType:
        module = _Module(spec.name)
        module.__path__ = []  # a package: its sub-modules are stand-ins too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class _Parents(importlib.abc.MetaPathFinder):
    """Last in line: an empty package for a stand-in's parent that does not exist (``google``)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if any(s.startswith(fullname + ".") for s in STUBBED):
            return importlib.machinery.ModuleSpec(fullname, _Finder(), is_package=True)
        return None


def _installed(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


_REAL = {name for name in STUBBED if "." not in name and _installed(name)}
sys.meta_path.insert(0, _Finder())
sys.meta_path.append(_Parents())
