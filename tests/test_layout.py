"""The package's layout rules (docs/architecture.md), read from the source with ``ast``.

* no private name (``_x``) of one module is imported or used by another, in the package or
  the tests: what another module needs is public in its stage;
* no import circle among the package's modules, counting imports made inside functions
  (they hide a circle, they do not break it); ``if TYPE_CHECKING:`` imports do not count.

The layer order between stages is import-linter's contract (pyproject.toml, ``lint-imports``).
"""

from __future__ import annotations

import ast
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


def _type_checking_nodes(tree: ast.AST) -> set[int]:
    """ids of the nodes under ``if TYPE_CHECKING:``."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for child in node.body:
                out.update(id(n) for n in ast.walk(child))
    return out


def _imports(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[int, str, str | None]]:
    """(line, imported module, imported name or None) for each import of a package module."""
    tree = ast.parse(path.read_text(), str(path))
    skip = _type_checking_nodes(tree)
    out: list[tuple[int, str, str | None]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
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
    assert not circles, "import circles (imports inside functions included):\n" + "\n".join(
        " <-> ".join(c) for c in circles
    )
