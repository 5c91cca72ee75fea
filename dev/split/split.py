"""Split one module into several by top-level name (issue 30: one concern per module).

    python3 dev/split/split.py PLAN.json

The plan names the source module (already moved with `git mv` to the first target, in a commit of
its own), each target module with its docstring and the top-level names it takes, and the private
names that cross modules with their public names. Each target gets the source's import block
(ruff --fix drops what it does not use) and imports what it uses of the others; the script
refuses a name that no target takes, or one that two take.
"""

from __future__ import annotations

import ast
import json
import re
import sys
from pathlib import Path


def top_level(source: str) -> tuple[str, list[tuple[str, str]]]:
    """The import block (docstring, __future__ and imports) and each top-level statement with its name."""
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    body = tree.body
    first = next(
        i
        for i, node in enumerate(body)
        if not (isinstance(node, (ast.Expr, ast.ImportFrom, ast.Import)) or _type_checking(node))
    )
    header_end = body[first].lineno - 1
    while header_end > 0 and lines[header_end - 1].lstrip().startswith(("#", "@")):
        header_end -= 1
    header = "".join(lines[body[1].lineno - 1 if isinstance(body[0], ast.Expr) else 0 : header_end])
    parts = []
    for index in range(first, len(body)):
        node = body[index]
        start = node.lineno - 1
        if getattr(node, "decorator_list", None):
            start = node.decorator_list[0].lineno - 1
        while start > 0 and lines[start - 1].lstrip().startswith("#"):  # comments above it go with it
            start -= 1
        end = body[index + 1].lineno - 1 if index + 1 < len(body) else len(lines)
        nxt = body[index + 1] if index + 1 < len(body) else None
        if nxt is not None and getattr(nxt, "decorator_list", None):
            end = nxt.decorator_list[0].lineno - 1
        while end > start and lines[end - 1].lstrip().startswith("#"):
            end -= 1
        name = _name(node)
        parts.append((name, "".join(lines[start:end]).rstrip() + "\n"))
    return header, parts


def _type_checking(node: ast.stmt) -> bool:
    """``if TYPE_CHECKING:`` imports belong to the header."""
    return isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"


def _name(node: ast.stmt) -> str:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return node.name
    if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
        return node.targets[0].id
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    if isinstance(node, ast.If) and "__name__" in ast.unparse(node.test):
        return "__main__"  # the module's `if __name__ == "__main__":` block
    raise SystemExit(f"line {node.lineno}: a top-level statement without a name")


def main(plan_file: str) -> None:
    plan = json.loads(Path(plan_file).read_text())
    source_path = Path(plan["source"])
    header, parts = top_level(source_path.read_text())
    owner = {name: target for target, spec in plan["targets"].items() for name in spec["names"]}
    missing = [n for n, _ in parts if n not in owner]
    if missing:
        raise SystemExit(f"no target takes: {', '.join(missing)}")
    renames = plan.get("renames", {})

    def renamed(text: str) -> str:
        for old, new in renames.items():
            text = re.sub(rf"(?<![\w.]){re.escape(old)}\b", new, text)
        return text

    for target, spec in plan["targets"].items():
        own = [text for name, text in parts if owner[name] == target]
        body = renamed("\n\n".join(own))
        used = {n.id for n in ast.walk(ast.parse(body)) if isinstance(n, ast.Name)}
        imports = {}
        for name, other in owner.items():
            public = renames.get(name, name)
            if other != target and public in used:
                imports.setdefault(other, []).append(public)
        extra = "".join(
            f"from .{Path(other).stem} import {', '.join(sorted(names))}\n" for other, names in sorted(imports.items())
        )
        head = header.rstrip() + "\n"
        if extra and "\nif TYPE_CHECKING:" in head:  # the new imports go before the TYPE_CHECKING block
            before, _, after = head.partition("\nif TYPE_CHECKING:")
            head = before.rstrip() + "\n" + extra + "\nif TYPE_CHECKING:" + after
            extra = ""
        text = f'"""{spec["doc"]}"""\n\n' + head + extra + "\n\n" + body
        Path(target).write_text(text)
        print(f"{target}: {len(own)} names; imports {sorted(imports)}")


if __name__ == "__main__":
    main(sys.argv[1])
