"""The documentation pages, run as they are written: the README, getting-started, rescoring,
the CI gates, extending, and CONTRIBUTING.

Each page's ``bash`` blocks run in order, verbatim, in a clean folder of their own (with
``examples/`` beside them, as in a fresh clone, and the venv active: ``.venv/bin`` first on
PATH); CONTRIBUTING's run in the clone's root, where a contributor types them. ``python``
blocks run in the same order, in one Python session per page (a later block sees what an
earlier one defined), in the same folder. A block followed by an output block must print what
it shows: every shown line, in order, where a line ``...`` stands for lines left out and
``...`` inside a line for text left out; timings and the folder's own path may differ. An
``xml`` block shows lines of the JUnit file its command wrote. Each command of a block runs on
its own; where no output is shown it must complete as pytest does when it ran (exit 0, or 1:
some conversations failed, which is what the examples show). A block marked
``<!-- not run here: WHY -->`` is skipped, and the marker must say why (the setup commands,
which ``.ci/run`` runs; a GPU; an API key).

A shell comment that starts with a count states how many tests the command runs
(``# exactly one``, ``# 5: 10, 100, 104, 105, 107``): pytest's own count must be it, the ids
listed must be as many, and for ``-k WORD`` on a results folder they must be the ids of that
folder's result files that contain WORD, read from the files themselves.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

PAGES = [
    "README.md",
    "docs/getting-started.md",
    "docs/rescoring.md",
    "docs/ci-gates.md",
    "docs/extending.md",
    "CONTRIBUTING.md",
]
#: Pages whose commands a contributor runs from the clone's root.
IN_THE_ROOT = {"CONTRIBUTING.md"}
SKIP = re.compile(r"<!-- not run here: (?P<why>[^>]+?) -->\s*$")
FENCE = re.compile(r"^```(?P<lang>[a-z]*)\s*$")
#: What may differ between the page and a run: timings, and durations pytest adds.
TIMING = re.compile(r"\d+(?:\.\d+)?s\b(?: \(\d+:\d\d:\d\d\))?")


@dataclass
class Block:
    lang: str
    text: str
    line: int  # where it starts in the page
    skip: str | None = None  # why it is not run


def blocks(page: Path) -> list[Block]:
    """The page's fenced blocks, in order, each with the skip marker just above it."""
    found: list[Block] = []
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        # A fence closes only on a line of its own: "``` text" leaves the block open (Markdown renders
        # the rest of the page as code), so a block that never closes fails here.
        end = next((j for j in range(i + 1, len(lines)) if lines[j].rstrip() == "```"), None)
        assert end is not None, (
            f"{page.name}:{i + 1}: a fenced block that never closes (a closing fence with text after it?)"
        )
        above = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = SKIP.search(above)
        found.append(Block(opening["lang"], "\n".join(lines[i + 1 : end]), i + 1, marker["why"] if marker else None))
        i = end + 1
    return found


def _pattern(line: str, fragments: bool = False) -> re.Pattern[str]:
    """A shown line as a pattern: ``...`` matches anything, timings any timing; trailing blanks ignored.
    As ``fragments`` (an excerpt of one long line, as of an XML file), the blanks around each ``...``
    are the excerpt's layout, not the file's."""
    parts = line.rstrip().split("...")
    parts = [p.strip() for p in parts] if fragments else parts
    escaped = [re.escape(TIMING.sub("\0", part)).replace("\0", TIMING.pattern) for part in parts]
    return re.compile(".*?".join(escaped) if fragments else ".*".join(escaped))


def missing_lines(shown: str, printed: str, whole_lines: bool = True) -> list[str]:
    """The shown lines not found in ``printed``, in order (``...`` lines only skip)."""
    lines = [line.rstrip() for line in printed.splitlines()]
    text, position, missing = printed, 0, []
    for want in shown.splitlines():
        if want.strip() in ("", "..."):
            continue
        pattern = _pattern(want, fragments=not whole_lines)
        if whole_lines:
            at = next((i for i in range(position, len(lines)) if pattern.fullmatch(lines[i])), None)
            if at is None:
                missing.append(want)
            else:
                position = at + 1
        else:
            found = pattern.search(text, position)
            if found is None:
                missing.append(want)
            else:
                position = found.end()
    return missing


@pytest.fixture
def clean_folder(tmp_path: Path) -> Path:
    """A folder of its own, as a user's clone would be seen from its root: examples/ beside it."""
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / ".venv").symlink_to(Path(sys.prefix))
    return tmp_path


def commands(block: str) -> list[str]:
    """A bash block's commands: continued lines (``\\``) joined, comment lines left out."""
    out: list[str] = []
    pending = ""
    for line in block.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        pending += line
        if line.endswith("\\"):
            pending = pending[:-1]
            continue
        out.append(pending)
        pending = ""
    return out + ([pending] if pending else [])


def _env() -> dict[str, str]:
    """A user's shell with the venv active."""
    venv = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CAREFUL_"))}
    env.update(PATH=venv + os.pathsep + env.get("PATH", ""), VIRTUAL_ENV=sys.prefix, COLUMNS="120")
    return env


def _run(command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-e", "-c", command], cwd=folder, env=_env(), capture_output=True, text=True, timeout=600
    )


#: Runs the blocks it is sent, one Python session: each block's size in characters on a line, then
#: the block; after it, a line with NUL and ``ok`` or ``error`` (its traceback printed before).
_SESSION = r"""
import sys, traceback
namespace = {"__name__": "__main__"}
while True:
    size = sys.stdin.readline()
    if not size:
        break
    source = sys.stdin.read(int(size))
    try:
        exec(compile(source, "<block>", "exec"), namespace)
        status = "ok"
    except BaseException:
        traceback.print_exc(file=sys.stdout)
        status = "error"
    print("\0" + status, flush=True)
"""


class PythonSession:
    """One Python process that runs a page's ``python`` blocks in order, in one namespace."""

    def __init__(self, folder: Path) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", _SESSION],
            cwd=folder,
            env=_env(),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    def run(self, block: str) -> tuple[bool, str]:
        """Whether the block ran without raising, and what it printed."""
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(f"{len(block)}\n{block}")
        self.process.stdin.flush()
        printed: list[str] = []
        for line in self.process.stdout:
            if line.startswith("\0"):
                return line.strip("\0\n") == "ok", "".join(printed)
            printed.append(line)
        return False, "".join(printed) + "(the session ended)"

    def close(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        self.process.wait(timeout=60)


#: A comment that states how many tests a command runs (``one``, ``5``), and perhaps which numbers
#: (``5: 10, 100, 104``), or only which (``10, 100-109``: eleven).
STATED = re.compile(r"\s#\s+(?:exactly\s+)?(?P<head>one|\d[\d\s,-]*?)(?::\s*(?P<ids>\d[\d\s,-]*?))?\s*(?:\(|$)")
#: pytest's last line: its counts.
COUNTED = re.compile(r"(\d+) (passed|failed|skipped|xfailed|xpassed|errors?)\b")


def stated_count(command: str) -> tuple[int, list[int] | None] | None:
    """The count a command's comment states, and the numbers it lists (``100-109`` expanded)."""
    found = STATED.search(command)
    if found is None:
        return None
    head, listed = found["head"], found["ids"]
    if head == "one" or (head.isdigit() and not listed):
        return (1 if head == "one" else int(head)), None
    numbers = _numbers(listed if listed else head)
    return (int(head) if listed else len(numbers)), numbers


def _numbers(text: str) -> list[int]:
    """``10, 100-102`` as ``[10, 100, 101, 102]``."""
    numbers: list[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        numbers += list(range(int(low), int(high or low) + 1))
    return numbers


def count_run(printed: str) -> int:
    """How many tests pytest ran, by its last counts line (deselected ones left out)."""
    lines = [line for line in printed.splitlines() if COUNTED.search(line) and " in " in line]
    assert lines, f"no counts line in:\n{printed[-2000:]}"
    return sum(int(n) for n, _ in COUNTED.findall(lines[-1]))


def ids_containing(command: str, folder: Path) -> list[int] | None:
    """For ``-k WORD --careful-results DIR``: the numbers of the ids in DIR's result files that
    contain WORD (the ids read from the files, one JSON object a line), else None."""
    word = re.search(r"(?:^|\s)-k\s+(\w+)(?:\s|$)", command)
    results = re.search(r"--careful-results[= ](\S+)", command)
    if word is None or results is None:
        return None
    prefix = re.sub(r"\d+$", "", word[1])
    ids = {
        json.loads(line)["id"]
        for path in sorted((folder / results[1]).rglob("BFCL_v4_*_result.json"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.strip()
    }
    return sorted(int(i.removeprefix(prefix)) for i in ids if word[1] in i and i.startswith(prefix))


def check_stated_count(command: str, printed: str, folder: Path, where: str) -> None:
    """A command's comment that states a count: pytest ran that many, and the ids it lists are those."""
    stated = stated_count(command)
    if stated is None:
        return
    count, numbers = stated
    assert count_run(printed) == count, f"{where}: {command}\nran {count_run(printed)}, the comment says {count}"
    if numbers is not None:
        assert len(numbers) == count, f"{where}: the comment lists {len(numbers)} ids, and says {count}"
        containing = ids_containing(command, folder)
        if containing is not None:
            assert numbers == containing, f"{where}: the run's ids that contain it are {containing}"


@pytest.mark.parametrize("page", PAGES)
def test_every_command_runs_and_prints_what_the_page_shows(page: str, clean_folder: Path) -> None:
    folder = ROOT if page in IN_THE_ROOT else clean_folder
    python = PythonSession(folder)
    try:
        checked = _run_page(page, folder, python)
    finally:
        python.close()
    assert checked, f"{page}: no command with its output to check"
    if page not in IN_THE_ROOT:
        unnamed = unnamed_outputs(clean_folder, (ROOT / page).read_text(encoding="utf-8"))
        assert not unnamed, f"{page}: its commands made {unnamed} where they ran, which the page does not name"


def _run_page(page: str, folder: Path, python: PythonSession) -> int:
    """Run the page's blocks in order; how many outputs were checked."""
    checked, junit = 0, None
    found = blocks(ROOT / page)
    for index, block in enumerate(found):
        where = f"{page}:{block.line}"
        if block.lang == "xml":  # lines of the JUnit file the last command that wrote one wrote
            assert junit is not None, f"{where}: no command above wrote a JUnit file"
            printed = (folder / junit).read_text(encoding="utf-8")
            missing = missing_lines(block.text, printed, whole_lines=False)
            assert not missing, f"{where}: not in {junit}: {missing}"
            checked += 1
        if block.lang not in ("bash", "python"):
            continue
        if block.skip is not None:
            assert len(block.skip.split()) >= 2, f"{where}: say why the block is not run"
            continue
        following = found[index + 1] if index + 1 < len(found) else None
        shown = following if following is not None and following.lang == "" else None
        printed = ""
        if block.lang == "python":
            ok, printed = python.run(block.text)
            assert ok, f"{where}: the block raised\n{printed[-3000:]}"
        for one in commands(block.text) if block.lang == "bash" else []:
            ran = _run(one, folder)
            output = (ran.stdout + ran.stderr).replace(f"{folder}/", "")
            if shown is None:
                assert ran.returncode in (0, 1), f"{where}: {one}\nexit {ran.returncode}\n{output[-3000:]}"
            check_stated_count(one, output, folder, where)
            printed += output
            wrote = re.search(r"--junitxml[= ](\S+)", one)
            junit = wrote.group(1) if wrote else junit
        if shown is not None:
            missing = missing_lines(shown.text, printed)
            assert not missing, f"{where}: not printed: {missing}\n--- printed:\n{printed[-4000:]}"
            checked += 1
    return checked


def unnamed_outputs(folder: Path, page: str) -> list[str]:
    """What a page's commands made in the folder they ran in (``name/`` for a folder) that the page
    does not name: a user finds it there and nothing says what it is. Hidden entries (pytest's own
    cache) and what the fresh clone has (examples/, .venv) are left out."""
    made = [
        p.name + ("/" if p.is_dir() else "")
        for p in sorted(folder.iterdir())
        if p.name not in ("examples", ".venv") and not p.name.startswith(".")
    ]
    return [name for name in made if not re.search(r"(?:^|[\s`(=]|\./)" + re.escape(name), page, re.M)]


def test_outputs_a_page_does_not_name_are_found(tmp_path: Path) -> None:
    for name in ("result", "scorecards", "compare"):
        (tmp_path / name).mkdir()
    (tmp_path / "careful.xml").write_text("")
    (tmp_path / ".pytest_cache").mkdir()
    page = "scorecards in `./scorecards/m/`; `--out compare/`; `--junitxml=careful.xml`; --careful-results=DIR"
    assert unnamed_outputs(tmp_path, page) == ["result/"]


def test_the_matcher_finds_what_is_there_and_only_that() -> None:
    printed = "collected 3 items\na b c\nx [standard]: 1 pass\n800 passed in 5.62s (0:00:05)\n"
    assert not missing_lines("a b c\n...\n800 passed in 1.00s", printed)
    assert not missing_lines("x [standard]: ... pass", printed)
    assert missing_lines("800 passed in 1.00s\na b c", printed) == ["a b c"]  # out of order
    assert missing_lines("a b", printed) == ["a b"]  # a whole line, not a prefix
    assert missing_lines("collected 4 items", printed) == ["collected 4 items"]


def test_a_blocks_commands_are_its_lines_with_continuations_joined() -> None:
    block = "# a comment\npytest a \\\n    --b c\n\npytest d  # a trailing comment stays\n"
    assert commands(block) == ["pytest a     --b c", "pytest d  # a trailing comment stays"]


def test_a_comment_that_states_a_count_is_read_and_checked(tmp_path: Path) -> None:
    assert stated_count("pytest 'x[standard]' --careful-results d   # exactly one") == (1, None)
    assert stated_count("pytest -k multi_turn_base_10 --careful-results d  # 10, 100-109") == (
        11,
        [10, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109],
    )
    assert stated_count("pytest a  # 12") == (12, None)
    assert stated_count("pytest -k b --careful-results d  # 5: 10, 100, 104") == (5, [10, 100, 104])
    assert stated_count("pytest x --careful-results d  # all its protocols") is None
    assert stated_count(".venv/bin/mkdocs build --strict  # or `serve`, to read the site") is None
    assert count_run("...\n3 failed, 2 passed, 7 deselected in 1.20s\n") == 5
    run = tmp_path / "run"
    run.mkdir()
    ids = ["multi_turn_base_1", "multi_turn_base_10", "multi_turn_base_105", "multi_turn_miss_func_10"]
    (run / "BFCL_v4_multi_turn_base_result.json").write_text("".join(f'{{"id": "{i}"}}\n' for i in ids[:3]))
    (run / "BFCL_v4_multi_turn_miss_func_result.json").write_text(f'{{"id": "{ids[3]}"}}\n')
    command = "pytest -k multi_turn_base_10 --careful-results run  # 2: 10, 105"
    assert ids_containing(command, tmp_path) == [10, 105]
    check_stated_count(command, "2 failed in 0.5s", tmp_path, "page:1")
    with pytest.raises(AssertionError, match="the comment says 2"):
        check_stated_count(command, "3 failed in 0.5s", tmp_path, "page:1")
    with pytest.raises(AssertionError, match=r"the run's ids that contain it are \[10, 105\]"):
        check_stated_count(command.replace("10, 105", "10, 104"), "2 failed in 0.5s", tmp_path, "page:1")
