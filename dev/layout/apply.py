"""Re-apply issue 25's moves on any checkout: `git mv` per dev/layout/mapping.json, then rewrite references.

    python dev/layout/apply.py            # check coverage, move (commit 1), rewrite (commit 2)
    python dev/layout/apply.py --check    # only report what the mapping does not cover

Commit 1 holds the `git mv`s only (so that history follows each file); commit 2 rewrites every
reference to a moved module in pytest_careful/, tests/, bench/, docs/, README.md, CONTRIBUTING.md,
pyproject.toml and .ci/: import statements (relative ones re-derived from the new place), dotted
names in strings and prose (`pytest_careful.results.evaluate`, monkeypatch targets, entry points,
`python -m`), file paths (`pytest_careful/results.py`, `tests/perturb.py`), `Path(__file__)` depth
in files that moved deeper, the lazy-import table of pytest_careful/__init__.py and the package
list of pyproject.toml. Modules under pytest_careful/ or tests/ that the mapping neither moves nor
keeps are listed, and nothing is done, until the mapping says where they go (or --allow-uncovered).
Standard library only; run it with any Python >= 3.10 from the repository root.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAPPING = Path(__file__).with_name("mapping.json")
PACKAGE = "pytest_careful"
#: where references are rewritten
TEXT_ROOTS = (
    "pytest_careful",
    "tests",
    "bench",
    "docs",
    "README.md",
    "CONTRIBUTING.md",
    "pyproject.toml",
    ".ci",
    "conftest_examples",
    "scorecards/README.md",
    "mkdocs.yml",
    "declarations",
)
TEXT_SUFFIXES = {".py", ".md", ".toml", ".yml", ".yaml", ".cfg", ".ini", ".txt", ".j2", ".sh", ""}
MAX_LINE = 120


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def dotted(path: str) -> str:
    """pytest_careful/data/dataset.py -> pytest_careful.data.dataset (a folder: its package)."""
    p = path[:-3] if path.endswith(".py") else path
    p = p[: -len("/__init__")] if p.endswith("/__init__") else p
    return p.replace("/", ".")


def load() -> dict:
    mapping = json.loads(MAPPING.read_text())
    mapping.setdefault("test_moves", {})
    return mapping


def all_moves(mapping: dict) -> dict[str, str]:
    return {**mapping["moves"], **mapping["test_moves"]}


def uncovered(mapping: dict) -> list[str]:
    """Python modules under pytest_careful/ and tests/ that the mapping does not place."""
    moves = all_moves(mapping)
    placed = set(moves) | set(moves.values())
    keep = list(mapping.get("stay", [])) + list(mapping.get("tests_stay", []))
    keep += list(mapping.get("packages", {})) + list(mapping.get("test_packages", {}))
    out = []
    for f in git("ls-files", PACKAGE, "tests").split():
        if not f.endswith(".py"):
            continue
        if f in placed or any(f == k or f.startswith(k.rstrip("/") + "/") for k in keep):
            continue
        if any(
            f.startswith(src.rstrip("/") + "/") or f.startswith(dst.rstrip("/") + "/")
            for src, dst in moves.items()
            if not src.endswith(".py")
        ):
            continue
        if f.endswith("__init__.py") and any(f == p + "/__init__.py" for p in mapping.get("packages", {})):
            continue
        out.append(f)
    return out


# --- commit 1: the moves ---------------------------------------------------------------------


def move(mapping: dict) -> None:
    moved = 0
    for src, dst in all_moves(mapping).items():
        if not (ROOT / src).exists():
            if (ROOT / dst).exists():
                continue  # already moved
            print(f"apply.py: {src} is not in this checkout (mapping lists it): skipped", file=sys.stderr)
            continue
        (ROOT / dst).parent.mkdir(parents=True, exist_ok=True)
        git("mv", src, dst)
        moved += 1
    if moved:
        tests = " and tests into tests/<stage>/" if mapping["test_moves"] else ""
        git(
            "commit",
            "-q",
            "-m",
            f"Layout (issue 25): move modules into stage subpackages{tests} "
            "(git mv only; dev/layout/apply.py, dev/layout/mapping.json)",
        )
    print(f"apply.py: moved {moved} paths")


# --- commit 2: the references ----------------------------------------------------------------


class Names:
    def __init__(self, mapping: dict) -> None:
        self.modules: dict[str, str] = {}  # old dotted -> new dotted (modules and moved packages)
        self.paths: dict[str, str] = {}  # old path -> new path
        for src, dst in all_moves(mapping).items():
            self.paths[src] = dst
            if src.endswith(".py") and src.startswith(PACKAGE + "/"):
                self.modules[dotted(src)] = dotted(dst)
        self.new_to_old = {dst: src for src, dst in all_moves(mapping).items()}
        self.test_modules: dict[str, str] = {}  # bare test helper name -> new folder (tests/<x>)
        for src, dst in mapping["test_moves"].items():
            self.test_modules[Path(src).stem] = str(Path(dst).parent)
        keys = sorted(self.modules, key=len, reverse=True)
        self.dotted_re = re.compile(r"(?<![\w.])(" + "|".join(re.escape(k) for k in keys) + r")(?![\w])")
        pkeys = sorted(self.paths, key=len, reverse=True)
        self.path_re = re.compile(r"(?<![\w/.])(" + "|".join(re.escape(k) for k in pkeys) + r")(?![\w])")

    def sub_text(self, text: str) -> str:
        text = self.dotted_re.sub(lambda m: self.modules[m.group(1)], text)
        return self.path_re.sub(lambda m: self.paths[m.group(1)], text)


def package_of(module: str, is_init: bool) -> str:
    return module if is_init else module.rsplit(".", 1)[0]


def resolve(pkg: str, level: int, module: str | None) -> str:
    base = pkg.split(".")
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def relative(from_pkg: str, target: str) -> tuple[int, str]:
    """(level, module) of `from <dots><module> import` naming target from package from_pkg."""
    a, b = from_pkg.split("."), target.split(".")
    common = 0
    while common < min(len(a), len(b)) and a[common] == b[common]:
        common += 1
    level = len(a) - common + 1
    return level, ".".join(b[common:])


def render_from(level: int, module: str, names: list[tuple[str, str | None]], indent: str) -> str:
    head = f"{indent}from {'.' * level}{module} import "
    parts = [n if a is None else f"{n} as {a}" for n, a in names]
    line = head + ", ".join(parts)
    if len(line) <= MAX_LINE:
        return line
    inner = ",\n".join(f"{indent}    {p}" for p in parts)
    return f"{head}(\n{inner},\n{indent})"


def rewrite_imports(path: Path, new_module: str, old_module: str, names: Names) -> str | None:
    """Re-derive each import of pytest_careful from the module's new place; None if nothing changed."""
    source = path.read_text()
    tree = ast.parse(source)
    is_init = path.name == "__init__.py"
    old_pkg = package_of(old_module, is_init)
    new_pkg = package_of(new_module, is_init)
    lines = source.splitlines(keepends=True)
    edits: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ImportFrom):
            continue
        if node.level == 0 and not (node.module or "").startswith(PACKAGE):
            continue
        absolute = resolve(old_pkg, node.level, node.module) if node.level else node.module
        assert absolute is not None
        if not absolute.startswith(PACKAGE):
            continue
        new_target = names.modules.get(absolute, absolute)
        # `from X import a, b`: a name that is itself a moved module is imported from its new package
        groups: dict[str, list[tuple[str, str | None]]] = {}
        for alias in node.names:
            sub = f"{absolute}.{alias.name}"
            if sub in names.modules:
                new_sub = names.modules[sub]
                parent, leaf = new_sub.rsplit(".", 1)
                groups.setdefault(parent, []).append(
                    (leaf, alias.asname or (alias.name if leaf != alias.name else None))
                )
            else:
                groups.setdefault(new_target, []).append((alias.name, alias.asname))
        if len(groups) == 1 and new_target == absolute and new_pkg == old_pkg and list(groups) == [absolute]:
            continue  # nothing it names moved, nor did the module
        indent = " " * node.col_offset
        rendered = []
        for target, group in groups.items():
            if node.level:
                level, mod = relative(new_pkg, target)
                if mod == "" and level == 0:
                    level = 1
            else:
                level, mod = 0, target
            rendered.append(render_from(level, mod, group, indent))
        text = "\n".join(rendered)
        first, last = node.lineno - 1, node.end_lineno - 1  # type: ignore[operator]
        prefix = lines[first][: node.col_offset]
        suffix = lines[last][node.end_col_offset :]  # type: ignore[index]
        original = "".join(lines[first : last + 1])
        if prefix.strip() or (suffix.strip() and not suffix.strip().startswith("#")):
            print(f"apply.py: {path}:{node.lineno}: import shares its line; left as is, check it", file=sys.stderr)
            continue
        if "#" in original[len(prefix) : len(original) - len(suffix)] and last > first:
            print(f"apply.py: {path}:{node.lineno}: comments inside a multi-line import are dropped", file=sys.stderr)
        new = text.lstrip(" ") if prefix == indent else text
        if (prefix + new + suffix) != original:
            edits.append((first, last, indent + new.lstrip(" ") + suffix))
    if not edits:
        return None
    for first, last, text in sorted(edits, reverse=True):
        lines[first : last + 1] = [text]
    return "".join(lines)


def text_files() -> list[Path]:
    out = []
    for f in git("ls-files", *[r for r in TEXT_ROOTS if (ROOT / r).exists()]).split():
        p = ROOT / f
        if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.parent.name == ".ci"):
            out.append(p)
    return out


def file_depth_fixups(text: str, delta: int) -> str:
    """A file that moved `delta` folders deeper: its Path(__file__) ancestors move with it."""
    if delta <= 0:
        return text
    text = re.sub(
        r"(Path\(__file__\)(?:\.resolve\(\))?)\.parents\[(\d+)\]",
        lambda m: f"{m.group(1)}.parents[{int(m.group(2)) + delta}]",
        text,
    )
    text = re.sub(
        r"(Path\(__file__\)(?:\.resolve\(\))?)\.parent\.parent(?!\w)",
        lambda m: f"{m.group(1)}.parents[{1 + delta}]",
        text,
    )
    return text


def test_helper_fixups(text: str, names: Names) -> str:
    """tests/<helper>.py and ROOT / "tests" / "<helper>.py" written as paths, when helpers moved."""
    for stem, folder in names.test_modules.items():
        parts = folder.split("/")
        text = re.sub(
            r'"tests" / "' + re.escape(stem) + r'\.py"', " / ".join(f'"{p}"' for p in parts) + f' / "{stem}.py"', text
        )
    return text


def tests_on_path_fixups(text: str, rel: str, old_rel: str | None) -> str:
    """`sys.path.insert(0, ROOT / "tests")` meant the folder of the test module (a child process
    imports it by name) or of the helpers (bench/): now tests/<stage>/ or tests/helpers/."""
    if old_rel is not None and old_rel.startswith("tests/") and rel.startswith("tests/"):
        folder = str(Path(rel).parent)
    elif not rel.startswith("tests/"):
        folder = "tests/helpers"
    else:
        return text
    if folder == "tests":
        return text
    parts = folder.split("/")
    for quote in ('"', "'"):
        joined = " / ".join(f"{quote}{p}{quote}" for p in parts)
        text = text.replace(f"ROOT / {quote}tests{quote})", f"ROOT / {joined})")
        text = text.replace(f"sys.path.insert(0, {quote}tests{quote})", f"sys.path.insert(0, {quote}{folder}{quote})")
    return text


HELPERS_ON_PATH = """
# Shared test helpers (tests/helpers/) are imported by bare name, here and in the child processes
# the tests start (which also import conftest and test modules by name): on sys.path and PYTHONPATH.
HELPERS = Path(__file__).resolve().parent / "helpers"
sys.path.insert(0, str(HELPERS))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(HELPERS), str(Path(__file__).resolve().parent), os.environ.get("PYTHONPATH", "")) if p)
"""


def helpers_on_path(mapping: dict) -> None:
    """tests/conftest.py puts tests/helpers/ on the path when helpers moved there."""
    if not any(dst.startswith("tests/helpers/") for dst in mapping["test_moves"].values()):
        return
    conftest = ROOT / "tests" / "conftest.py"
    text = conftest.read_text()
    if "HELPERS = " in text:
        return
    anchor = 'pytest_plugins = ["pytester"]\n'
    if anchor not in text:
        print(
            "apply.py: tests/conftest.py has no pytest_plugins line; put tests/helpers on sys.path by hand",
            file=sys.stderr,
        )
        return
    conftest.write_text(text.replace(anchor, anchor + HELPERS_ON_PATH, 1))


def rewrite(mapping: dict) -> None:
    names = Names(mapping)
    changed: list[str] = []
    files = text_files()
    for p in files:
        rel = str(p.relative_to(ROOT))
        text = p.read_text()
        new = names.sub_text(text)
        new = test_helper_fixups(new, names)
        old_rel = names.new_to_old.get(rel)
        if old_rel is not None and p.suffix == ".py":
            new = file_depth_fixups(new, rel.count("/") - old_rel.count("/"))
        if p.suffix == ".py" and names.test_modules:
            new = tests_on_path_fixups(new, rel, old_rel)
        if new != text:
            p.write_text(new)
            changed.append(rel)
    # imports, from each module's new place (its old place decides what a relative import meant)
    for p in files:
        rel = str(p.relative_to(ROOT))
        if p.suffix != ".py" or not rel.startswith(PACKAGE + "/"):
            continue
        old_rel = names.new_to_old.get(rel, rel)
        new = rewrite_imports(p, dotted(rel), dotted(old_rel), names)
        if new is not None:
            p.write_text(new)
            changed.append(rel)
    for p in files:  # absolute `from pytest_careful import results` outside the package
        rel = str(p.relative_to(ROOT))
        if p.suffix != ".py" or rel.startswith(PACKAGE + "/"):
            continue
        new = rewrite_imports(p, "outside", "outside", names)
        if new is not None:
            p.write_text(new)
            changed.append(rel)
    for p in files:  # `from pytest_careful import results` inside strings (`python -c`, textwrap scripts)
        rel = str(p.relative_to(ROOT))
        if p.suffix != ".py":
            continue
        text = p.read_text()
        new = IN_STRING.sub(lambda m: in_string(m, names), text)
        if new != text:
            p.write_text(new)
            changed.append(rel)
    special_cases(mapping, names)
    helpers_on_path(mapping)
    for pkg, doc in {**mapping.get("packages", {}), **mapping.get("test_packages", {})}.items():
        init = ROOT / pkg / "__init__.py"
        if not init.exists() and pkg.startswith(PACKAGE):
            init.write_text(f'"""{doc}"""\n')
    git("add", "-A", PACKAGE, "tests", *[r for r in TEXT_ROOTS if (ROOT / r).exists()])
    git(
        "commit",
        "-q",
        "-m",
        "Layout (issue 25): rewrite imports, dotted names and paths for the moves "
        "(dev/layout/apply.py); stage __init__ docstrings",
    )
    print(f"apply.py: rewrote {len(set(changed))} files")


IN_STRING = re.compile(
    r"(?<![\w.])from pytest_careful import (\w+(?: as \w+)?(?:, \w+(?: as \w+)?)*)(?=[;\"'\\]|\\n|$)", re.M
)


def in_string(m: re.Match[str], names: Names) -> str:
    """One `from pytest_careful import a, b` in a string: a statement per new package, joined by `; `."""
    groups: dict[str, list[str]] = {}
    for part in m.group(1).split(", "):
        name, _, alias = part.partition(" as ")
        new = names.modules.get(f"{PACKAGE}.{name}")
        if new is None:
            groups.setdefault(PACKAGE, []).append(part)
            continue
        parent, leaf = new.rsplit(".", 1)
        asname = alias or (name if leaf != name else "")
        groups.setdefault(parent, []).append(leaf + (f" as {asname}" if asname else ""))
    return "; ".join(f"from {pkg} import {', '.join(parts)}" for pkg, parts in groups.items())


def special_cases(mapping: dict, names: Names) -> None:
    init = ROOT / PACKAGE / "__init__.py"
    text = init.read_text()

    def public(m: re.Match[str]) -> str:
        old = f"{PACKAGE}.{m.group(2)}"
        new = names.modules.get(old, old)[len(PACKAGE) + 1 :]
        return f'{m.group(1)}"{new}"'

    text = re.sub(r'("\w+": )"(\w+)"', public, text)
    init.write_text(text)

    pyproject = ROOT / "pyproject.toml"
    text = pyproject.read_text()
    m = re.search(r"^packages = \[(.*?)\]", text, re.M | re.S)
    if m:
        current = re.findall(r'"([^"]+)"', m.group(1))
        wanted = [dotted(p) for p in mapping.get("packages", {})]
        merged = current[:1] + [p for p in wanted if p not in current] + current[1:]
        listed = "".join(f'\n    "{p}",' for p in merged) + "\n"
        text = text[: m.start(1)] + listed + text[m.end(1) :]
    for src, dst in mapping["moves"].items():
        if src.endswith(".py") or not src.startswith(PACKAGE):
            continue
        # package data of a moved folder (templates/*): its package is where it went
        sub = Path(src).name
        text = text.replace(
            f'"{dotted(str(Path(src).parent))}" = ["{sub}/*"]', f'"{dotted(str(Path(dst).parent))}" = ["{sub}/*"]'
        )
    pyproject.write_text(text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only list modules the mapping does not cover")
    parser.add_argument("--allow-uncovered", action="store_true", help="move what is mapped even so")
    parser.add_argument("--only", choices=("move", "rewrite"), help="run one of the two steps")
    args = parser.parse_args(argv)
    mapping = load()
    missing = uncovered(mapping)
    for f in missing:
        print(f"apply.py: not in dev/layout/mapping.json: {f} (add it to moves, test_moves or stay)")
    if args.check:
        return 1 if missing else 0
    if missing and not args.allow_uncovered:
        return 1
    if git("status", "--porcelain", "--untracked-files=no").strip():
        print("apply.py: the work tree has uncommitted changes; commit or stash them first", file=sys.stderr)
        return 1
    if args.only != "rewrite":
        move(mapping)
    if args.only != "move":
        rewrite(mapping)
    return 0


if __name__ == "__main__":
    sys.exit(main())
