"""The options reference, generated at ``mkdocs build`` time from the plugin's own option table.

The table is read the way pytest reads it: the module that the ``pytest11`` entry point
``careful`` names (``pytest_careful.plugin``) gets its ``pytest_addoption`` hook called with a
real pytest ``Parser``, and the ``careful`` group's options are listed in the order they are
registered. Nothing is typed in twice, so the page cannot drift from ``pytest --help``
(``tests/test_docs_options.py`` compares the two).

As an MkDocs hook (``mkdocs.yml``: ``hooks:``), it replaces the marker line in ``options.md``.
"""

from __future__ import annotations

import html
import importlib
import re
from dataclasses import dataclass
from importlib import metadata
from pathlib import PurePath
from types import ModuleType
from typing import Any

MARKER = "<!-- careful-options -->"
PAGE = "options.md"
GROUP = "careful"


@dataclass(frozen=True)
class Option:
    """One row of the reference: the flag, what it takes, its default and pytest's help text."""

    flag: str
    dest: str
    takes: str  # what --help shows after the flag: METAVAR, {a,b,...}, or "" for a switch
    choices: tuple[str, ...]
    default: str  # "" when the option has none worth showing
    help: str


def plugin_module() -> ModuleType:
    """The module pytest loads for this plugin, found through its ``pytest11`` entry point."""
    for entry in metadata.entry_points(group="pytest11"):
        if entry.name == GROUP:
            module = entry.load()
            assert isinstance(module, ModuleType)
            return module
    return importlib.import_module("pytest_careful.plugin")  # not installed: the source tree's


def registered() -> list[Any]:
    """The plugin's option objects, as its ``pytest_addoption`` registers them on a pytest Parser."""
    from _pytest.config.argparsing import Parser

    parser = Parser(_ispytest=True)
    plugin_module().pytest_addoption(parser=parser)
    return list(parser.getgroup(GROUP).options)


def _default(value: Any) -> str:
    if value is None or value is False or value == [] or value == ():
        return ""
    if isinstance(value, (tuple, list)):
        return ",".join(str(v) for v in value)
    if isinstance(value, PurePath):
        return f"./{value}"
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
        return f"{value:,}"
    return str(value)


def options() -> list[Option]:
    """The reference's rows, one per option, in the order the plugin registers them."""
    rows = []
    for option in registered():
        attrs = option.attrs()
        flag = max(option.names(), key=len)
        choices = tuple(str(c) for c in attrs.get("choices") or ())
        if attrs.get("nargs") == 0:  # a switch (store_true)
            takes = ""
        elif attrs.get("metavar"):  # argparse shows the metavar rather than the choices
            takes = attrs["metavar"]
        elif choices:
            takes = "{" + ",".join(choices) + "}"
        else:
            takes = attrs.get("dest", "").upper()
        rows.append(
            Option(flag, attrs.get("dest", ""), takes, choices, _default(attrs.get("default")), attrs.get("help") or "")
        )
    return rows


def _cell(text: str) -> str:
    """Plain text as one Markdown table cell: HTML and Markdown punctuation escaped."""
    text = html.escape(text, quote=False)
    return re.sub(r"([\\`*_\[\]|])", r"\\\1", " ".join(text.split()))


def render() -> str:
    """The reference as a Markdown table."""
    lines = ["| option | takes | default | meaning |", "|---|---|---|---|"]
    for row in options():
        takes = f"`{row.takes}`" if row.takes else "(switch)"
        if row.choices:  # one span per value: a column of words that wrap, not one long {a,b,...}
            values = "one of " + ", ".join(f"`{c}`" for c in row.choices)
            takes = values if row.takes.startswith("{") else f"{takes} {values}"
        default = f"`{row.default}`" if row.default else ""
        lines.append(f"| `{row.flag}` | {takes} | {default} | {_cell(row.help)} |")
    return "\n".join(lines) + "\n"


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs hook: the options page gets the table in place of its marker line."""
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"{PAGE} has no {MARKER} line for the generated options table")
    return markdown.replace(MARKER, render())
