"""The one place that imports bfcl-eval.

bfcl-eval has import-time side effects we must contain:

* ``bfcl_eval.constants.eval_config`` creates ``result/``, ``score/`` and
  ``.file_locks/`` under ``BFCL_PROJECT_ROOT``, which defaults to site-packages.
  Every module that needs it (the handler registry, ``bfcl_eval.utils``) is
  imported only after :func:`contain_project_root` pointed that variable at a
  private cache directory.
* The handler registry (``constants.model_config``) imports every vendor SDK and
  takes seconds, so it is imported lazily, never at collection time.

The simulators and the multi-turn checker need neither and import cleanly.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
import importlib.util
import os
import re
import tempfile
from pathlib import Path
from types import ModuleType
from typing import Protocol

PINNED_VERSION = "2026.3.23"

#: Multi-turn categories in bfcl-eval's own order.
CATEGORIES: tuple[str, ...] = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
#: The folder of a model's result files: BFCL's get_directory_structure_by_category() for every
#: multi-turn category.
GROUP_DIR = "multi_turn"

#: A conversation id, optionally with its condition, as a pytest node id has it:
#: ``multi_turn_base_17``, ``multi_turn_base_17[standard]``.
NODE_ID = re.compile(r"^(?P<id>multi_turn_[a-z_]+_\d+)(?:\[(?P<condition>[a-z]+)\])?$")

#: The eight simulator classes of the multi-turn categories.
SIMULATOR_CLASSES: tuple[str, ...] = (
    "GorillaFileSystem",
    "MathAPI",
    "MessageAPI",
    "TwitterAPI",
    "TicketAPI",
    "TradingBot",
    "TravelAPI",
    "VehicleControlAPI",
)


class BfclUnavailable(RuntimeError):
    """bfcl-eval is missing or is not the pinned version."""


def bfcl_version() -> str:
    try:
        return importlib.metadata.version("bfcl-eval")
    except importlib.metadata.PackageNotFoundError as exc:
        raise BfclUnavailable(
            "bfcl-eval is not installed; install it with "
            f"`pip install --no-deps bfcl-eval=={PINNED_VERSION}` (see README)"
        ) from exc


@functools.cache
def package_root() -> Path:
    """Directory of the installed ``bfcl_eval`` package (read only)."""
    bfcl_version()
    spec = importlib.util.find_spec("bfcl_eval")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


def data_dir() -> Path:
    return package_root() / "data"


def contain_project_root() -> Path:
    """Point ``BFCL_PROJECT_ROOT`` away from site-packages before bfcl writes there.

    A value the user set is respected.
    """
    root = os.environ.get("BFCL_PROJECT_ROOT")
    if not root:
        cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
        root = os.path.join(cache, "pytest-careful", "bfcl-project-root")
        try:
            os.makedirs(root, exist_ok=True)
        except OSError:  # read-only home: a private temp dir still keeps site-packages clean
            root = tempfile.mkdtemp(prefix="pytest-careful-bfcl-")
        os.environ["BFCL_PROJECT_ROOT"] = root
    return Path(root)


@functools.cache
def simulator_class(class_name: str) -> type:
    """The simulator class ``class_name`` as bfcl-eval defines it."""
    # bfcl-eval on first use: a session that scores nothing imports none of it (start-up time)
    from bfcl_eval.constants.executable_backend_config import CLASS_FILE_PATH_MAPPING

    module = importlib.import_module(CLASS_FILE_PATH_MAPPING[class_name])
    return getattr(module, class_name)


def stateless_classes() -> frozenset[str]:
    # bfcl-eval on first use: a session that scores nothing imports none of it (start-up time)
    from bfcl_eval.constants.executable_backend_config import STATELESS_CLASSES

    return frozenset(STATELESS_CLASSES)


def func_doc_file(class_name: str) -> Path:
    # bfcl-eval on first use: a session that scores nothing imports none of it (start-up time)
    from bfcl_eval.constants.executable_backend_config import (
        MULTI_TURN_FUNC_DOC_FILE_MAPPING,
    )

    return data_dir() / "multi_turn_func_doc" / MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]


class ModelConfig(Protocol):
    """What is read of an entry of bfcl-eval's model registry (its ``ModelConfig``)."""

    model_name: str
    model_handler: type
    is_fc_model: bool


def model_registry() -> dict[str, ModelConfig]:
    """bfcl-eval's ``MODEL_CONFIG_MAPPING`` (slow: imports every vendor SDK)."""
    contain_project_root()
    return _import("bfcl_eval.constants.model_config").MODEL_CONFIG_MAPPING


def _import(name: str) -> ModuleType:
    return importlib.import_module(name)
