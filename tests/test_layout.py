"""The package's layout rules (docs/architecture.md), read from the source with ``ast``.

* no private name (``_x``) of one module is imported or used by another, in the package or
  the tests: what another module needs is public in its stage;
* no import circle of any kind among the package's modules: imports made inside functions and
  ``if TYPE_CHECKING:`` imports count (they hide a circle, they do not break it);
* an import inside a function only for an optional heavy dependency (``LAZY_OK``), with a comment
  on its line or the line above that says why; every other import is at the module's top;
* no class name defined twice in the package;
* nothing below ``harness/`` imports pytest, ``_pytest`` or xdist, not even under ``if TYPE_CHECKING:``
  (import-linter does not see external packages here).

The layer order between stages is import-linter's contract (pyproject.toml, ``lint-imports``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "pytest_careful"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((ROOT / PACKAGE).rglob("*.py"))}


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _imports(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str, str | None]]:
    """(line, imported module, imported name or None) for each import of a package module."""
    tree = ast.parse(path.read_text(), str(path))
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, None) for a in node.names if a.name.startswith(PACKAGE)]
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            if not target.startswith(PACKAGE):
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}"
                out.append((node.lineno, sub, None) if sub in modules else (node.lineno, target, alias.name))
    return out


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _private_uses(path: Path, module: str, modules: dict[str, Path]) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    found = []
    bound: dict[str, str] = {}  # local name -> package module it is bound to
    for line, target, name in _imports(module, path, modules):
        if name is not None and _private(name) and target != module:
            found.append(f"{path.relative_to(ROOT)}:{line}: imports {target}.{name}")
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            target = _resolve(module, path.name == "__init__.py", node)
            for alias in node.names:
                if f"{target}.{alias.name}" in modules:
                    bound[alias.asname or alias.name] = f"{target}.{alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in modules and alias.asname:
                    bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and _private(node.attr)
            and bound[node.value.id] != module
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: uses {bound[node.value.id]}.{node.attr}")
    return found


def test_no_private_name_crosses_a_module() -> None:
    modules = _modules()
    files = [(name, path) for name, path in modules.items()]
    files += [(f"tests.{p.stem}", p) for p in sorted((ROOT / "tests").rglob("*.py"))]
    found = [use for name, path in files for use in _private_uses(path, name, modules)]
    assert not found, "private names used across modules:\n" + "\n".join(found)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = graph.setdefault(name, set())
        for _, target, _ in _imports(name, path, modules):
            if target in modules and target != name:
                # importing a.b.c runs a and a.b first: a package's __init__ counts only if it imports
                edges.add(target)
    return graph


def test_the_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circles() -> None:
    circles = _cycles(_graph())
    assert not circles, "import circles (imports inside functions and under TYPE_CHECKING included):\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )


#: Top-level packages an import inside a function may load: optional or heavy dependencies whose
#: import a default path must not pay for (seconds, hundreds of MB, or bfcl-eval's handler registry,
#: which imports dozens of vendor SDKs: tests/test_install_hygiene.py). Everything else is imported
#: at the module's top, so that a file's top shows what it depends on.
LAZY_OK = frozenset(
    {
        "vllm",
        "anthropic",
        "openai",
        "matplotlib",
        "transformers",
        "tokenizers",
        "torch",
        "huggingface_hub",
        "scipy",
        "mpmath",
        "bfcl_eval",
    }
)


def _function_imports(path: Path) -> list[tuple[int, ast.Import | ast.ImportFrom]]:
    """(line, node) for each import statement inside a function (at any depth) of ``path``."""
    tree = ast.parse(path.read_text(), str(path))
    found: dict[int, ast.Import | ast.ImportFrom] = {}
    for func in ast.walk(tree):
        if isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in ast.walk(func):
                if isinstance(node, ast.Import | ast.ImportFrom):
                    found[id(node)] = node
    return sorted(((n.lineno, n) for n in found.values()), key=lambda x: x[0])


def _top_packages(node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.ImportFrom):
        return {"." if node.level else (node.module or "").split(".")[0]}
    return {alias.name.split(".")[0] for alias in node.names}


def _has_reason(lines: list[str], lineno: int) -> bool:
    """A ``#`` comment on the import's line or on the line just above it."""
    here = lines[lineno - 1]
    above = lines[lineno - 2].strip() if lineno >= 2 else ""
    return "#" in here or above.startswith("#")


#: pytest's entry point, imported in every session of the venv: it imports the run's own stages
#: inside the hook or fixture that needs them (as pytest-xdist's plugin.py imports dsession in
#: pytest_configure), so that a session that asks for no run loads none of them.
ENTRY = ROOT / PACKAGE / "plugin.py"


def function_import_offenders(paths: list[Path], base: Path = ROOT, entry: Path = ENTRY) -> list[str]:
    out = []
    for path in paths:
        lines = path.read_text().splitlines()
        for lineno, node in _function_imports(path):
            text = lines[node.lineno - 1].strip()
            where = f"{path.relative_to(base)}:{lineno}: {text}"
            lazy_ok = LAZY_OK | {"."} if path == entry else LAZY_OK
            if not _top_packages(node) <= lazy_ok:
                out.append(f"{where}  (not an optional heavy dependency: import it at the module's top)")
            elif not _has_reason(lines, node.lineno):
                out.append(f"{where}  (no comment on the line or above it says why it is imported here)")
    return out


def test_the_function_import_check_tells_each_kind(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import json\n\n\ndef f():\n    from .x import y\n    import sys\n\n\n"
        "def g():\n    # heavy: only a live run loads it\n    import torch\n    from openai import OpenAI\n"
        "    import vllm  # the engine, a GPU machine's extra\n"
    )
    entry = tmp_path / "plugin.py"
    entry.write_text("def f():\n    from .x import y  # the run's stage, with the run\n    from .z import w\n")
    found = function_import_offenders([sample, entry], base=tmp_path, entry=entry)
    assert [f.split("  (")[0] for f in found] == [
        "sample.py:5: from .x import y",
        "sample.py:6: import sys",
        "sample.py:12: from openai import OpenAI",
        "plugin.py:3: from .z import w",
    ]


def test_imports_inside_functions_only_for_optional_heavy_dependencies() -> None:
    found = function_import_offenders(sorted((ROOT / PACKAGE).rglob("*.py")))
    assert not found, f"{len(found)} imports inside functions:\n" + "\n".join(found)


def _class_names(path: Path) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), str(path))
    return [(node.name, node.lineno) for node in ast.walk(tree) if isinstance(node, ast.ClassDef)]


def duplicate_class_names(paths: list[Path], base: Path = ROOT) -> list[str]:
    where: dict[str, list[str]] = {}
    for path in paths:
        for name, line in _class_names(path):
            where.setdefault(name, []).append(f"{path.relative_to(base)}:{line}")
    return [f"{name}: {', '.join(places)}" for name, places in sorted(where.items()) if len(places) > 1]


def test_the_duplicate_check_finds_a_nested_class_too(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("class Totals:\n    pass\n\n\nclass Meter:\n    pass\n")
    (tmp_path / "b.py").write_text("def f():\n    class Totals:\n        pass\n")
    found = duplicate_class_names([tmp_path / "a.py", tmp_path / "b.py"], base=tmp_path)
    assert found == ["Totals: a.py:1, b.py:2"]


def test_no_class_name_is_defined_twice() -> None:
    found = duplicate_class_names(sorted((ROOT / PACKAGE).rglob("*.py")))
    assert not found, "class names defined more than once (one name, one concept):\n" + "\n".join(found)


def getattr_probes(paths: list[Path], base: Path = ROOT) -> list[str]:
    """``getattr(<...>source, "name", ...)``: an attribute asked of a source outside its declared interface."""
    out = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"):
                continue
            if len(node.args) < 2 or not isinstance(node.args[1], ast.Constant):
                continue
            target = ast.unparse(node.args[0])
            if target == "source" or target.endswith(".source"):
                out.append(f"{path.relative_to(base)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_probe_check_finds_a_probe(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def f(state, source, handler):\n"
        "    a = getattr(state.source, 'handle', None)\n"
        "    b = getattr(source, 'runs', None)\n"
        "    c = getattr(handler, 'client', None)\n"
        "    return state.source.warnings\n"
    )
    assert getattr_probes([sample], base=tmp_path) == [
        "sample.py:2: getattr(state.source, 'handle', None)",
        "sample.py:3: getattr(source, 'runs', None)",
    ]


def test_a_source_is_asked_only_through_its_declared_interface() -> None:
    """What the harness asks of a source is declared on ``sources.reference_logged.Source``
    (a logged run's plain answers; ``live.source.LiveSource`` gives its run's), never probed."""
    found = getattr_probes(sorted((ROOT / PACKAGE).rglob("*.py")))
    assert not found, "attributes probed on a source:\n" + "\n".join(found)


_FLAG = re.compile(r"--careful-[a-z]+(?:-[a-z]+)*")


def flag_literals(paths: list[Path], base: Path = ROOT) -> dict[str, list[str]]:
    """Each ``--careful-*`` flag and where a string literal spells it (docstrings left out)."""
    where: dict[str, list[str]] = {}
    for path in paths:
        tree = ast.parse(path.read_text(), str(path))
        docs = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
                for flag in _FLAG.findall(node.value):
                    where.setdefault(flag, []).append(f"{path.relative_to(base)}:{node.lineno}")
    return where


def test_the_flag_check_sees_messages_and_skips_docstrings(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        '"""Reads --careful-model."""\nMODEL = "--careful-model"\n\n\n'
        'def f(x):\n    """--careful-model again."""\n    return f"--careful-model={x}: unknown"\n'
    )
    assert flag_literals([sample], base=tmp_path) == {"--careful-model": ["sample.py:2", "sample.py:7"]}


def test_each_flag_is_written_once() -> None:
    """A flag's string is its option's (``common.options.Option`` in its stage's table); a message
    names it through the object (``f"{MODEL}=..."``), so a renamed flag cannot leave a stale one."""
    twice = {
        f: places for f, places in flag_literals(sorted((ROOT / PACKAGE).rglob("*.py"))).items() if len(places) > 1
    }
    assert not twice, "flags spelt out more than once:\n" + "\n".join(f"{f}: {', '.join(p)}" for f, p in twice.items())


#: What only the pytest side imports: pytest, its internals, xdist.
PYTEST_ROOTS = frozenset({"pytest", "_pytest", "xdist"})
#: The pytest side: harness/ and the modules above it (plugin.py, hookspec.py, api.py). Every other
#: package is below it (the layers in pyproject.toml) or a console script (cli/), and runs without pytest.
PYTEST_SIDE = "harness"


def pytest_imports(paths: list[Path], base: Path = ROOT) -> list[str]:
    """Each import of pytest, ``_pytest`` or xdist in ``paths``: at the top, inside a function or under
    ``if TYPE_CHECKING:`` (a type named from pytest is a dependency on it too), or by name
    (``importlib.import_module("pytest")``)."""
    out = []
    for path in paths:
        for node in sorted(ast.walk(ast.parse(path.read_text(), str(path))), key=lambda n: getattr(n, "lineno", 0)):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [] if node.level else [node.module or ""]
            elif (
                isinstance(node, ast.Call)
                and ast.unparse(node.func).split(".")[-1] in {"import_module", "__import__"}
                and node.args
                and isinstance(node.args[0], ast.Constant)
                and isinstance(node.args[0].value, str)
            ):
                names = [node.args[0].value]
            else:
                continue
            if any(name.split(".")[0] in PYTEST_ROOTS for name in names):
                out.append(f"{path.relative_to(base)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_pytest_check_finds_every_kind_of_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(
        "from __future__ import annotations\n\nimport json\nimport pytest as p\nfrom typing import TYPE_CHECKING\n\n"
        "from .pytest import helper\n\nif TYPE_CHECKING:\n    from _pytest.capture import CaptureManager\n\n\n"
        "def f():\n    import xdist.plugin\n    import importlib\n    return importlib.import_module('pytest')\n"
    )
    assert pytest_imports([sample], base=tmp_path) == [
        "sample.py:4: import pytest as p",
        "sample.py:10: from _pytest.capture import CaptureManager",
        "sample.py:14: import xdist.plugin",
        "sample.py:16: importlib.import_module('pytest')",
    ]


def pytest_free_packages() -> list[Path]:
    """Every package of ``pytest_careful`` but the pytest side's."""
    return sorted(init.parent for init in (ROOT / PACKAGE).glob("*/__init__.py") if init.parent.name != PYTEST_SIDE)


def test_nothing_below_the_harness_imports_pytest() -> None:
    """pytest is the harness's (``harness/``): the stages below it, and the console scripts, run without
    it (import-linter sees no external package here). The live run's progress line is drawn through
    ``harness/progress_display.py``."""
    packages = pytest_free_packages()
    assert {"live", "sources", "common"} <= {p.name for p in packages}, packages
    found = pytest_imports([path for package in packages for path in sorted(package.rglob("*.py"))])
    assert not found, "pytest imported below the harness:\n" + "\n".join(found)
