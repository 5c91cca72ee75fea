"""The README, getting-started and rescoring pages, run as they are written.

Each page's ``bash`` blocks run in order, verbatim, in a clean folder of their own (with
``examples/`` beside them, as in a fresh clone, and the venv active: ``.venv/bin`` first on
PATH). A block followed by an output block must print what it shows: every shown line, in
order, where a line ``...`` stands for lines left out and ``...`` inside a line for text
left out; timings and the folder's own path may differ. An ``xml`` block shows lines of the
JUnit file its command wrote. Each command of a block runs on its own; where no output is
shown it must complete as pytest does when it ran (exit 0, or 1: some conversations failed,
which is what the examples show). A block marked
``<!-- not run here: WHY -->`` is skipped, and the marker must say why (the setup commands,
which ``.ci/run`` runs; a GPU; an API key).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import ROOT

PAGES = ["README.md", "docs/getting-started.md", "docs/rescoring.md"]
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
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
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


def _run(command: str, folder: Path) -> subprocess.CompletedProcess[str]:
    venv = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "CAREFUL_"))}
    env.update(PATH=venv + os.pathsep + env.get("PATH", ""), VIRTUAL_ENV=sys.prefix, COLUMNS="120")
    return subprocess.run(
        ["bash", "-e", "-c", command], cwd=folder, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.parametrize("page", PAGES)
def test_every_command_runs_and_prints_what_the_page_shows(page: str, clean_folder: Path) -> None:
    checked, junit = 0, None
    found = blocks(ROOT / page)
    for index, block in enumerate(found):
        where = f"{page}:{block.line}"
        if block.lang == "xml":  # lines of the JUnit file the last command that wrote one wrote
            assert junit is not None, f"{where}: no command above wrote a JUnit file"
            printed = (clean_folder / junit).read_text(encoding="utf-8")
            missing = missing_lines(block.text, printed, whole_lines=False)
            assert not missing, f"{where}: not in {junit}: {missing}"
            checked += 1
        if block.lang != "bash":
            continue
        if block.skip is not None:
            assert len(block.skip.split()) >= 2, f"{where}: say why the block is not run"
            continue
        following = found[index + 1] if index + 1 < len(found) else None
        shown = following if following is not None and following.lang == "" else None
        printed = ""
        for one in commands(block.text):
            ran = _run(one, clean_folder)
            output = (ran.stdout + ran.stderr).replace(f"{clean_folder}/", "")
            if shown is None:
                assert ran.returncode in (0, 1), f"{where}: {one}\nexit {ran.returncode}\n{output[-3000:]}"
            printed += output
            wrote = re.search(r"--junitxml[= ](\S+)", one)
            junit = wrote.group(1) if wrote else junit
        if shown is not None:
            missing = missing_lines(shown.text, printed)
            assert not missing, f"{where}: not printed: {missing}\n--- printed:\n{printed[-4000:]}"
            checked += 1
    assert checked, f"{page}: no command with its output to check"
    unnamed = unnamed_outputs(clean_folder, (ROOT / page).read_text(encoding="utf-8"))
    assert not unnamed, f"{page}: its commands made {unnamed} where they ran, which the page does not name"


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
