"""What a command-line option is, and the value types its stages' options share.

Each stage declares its own options as :class:`Option` objects in a table of its own (``OPTIONS``
in ``sources/options.py``, ``reports/options.py``...); the plugin's ``pytest_addoption`` registers
the tables, and :func:`pytest_careful.harness.options.read_options` reads them into the one
``RunConfig``. A flag's string is written once, in its ``Option``: a message names the option
through it (``f"{BASELINE}: ..."``), so that a renamed flag cannot leave a message behind.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from .text import did_you_mean

#: What every option of the plugin begins with.
PREFIX = "--careful-"

_N = TypeVar("_N", int, float)


@dataclass(frozen=True)
class Option:
    """One ``--careful-*`` option: its flag, and what ``parser.addoption`` is given for it.

    ``str(option)`` is the flag, so that messages can name it: ``f"{RESULTS}: {path} is not a directory"``.
    """

    flag: str
    help: str
    default: object = None
    type: Callable[[str], object] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    action: str | None = None
    #: argparse's attribute (``config.getoption`` reads it); by default the flag's, ``careful_max_calls``
    dest: str = ""

    def __post_init__(self) -> None:
        if not self.dest:
            object.__setattr__(self, "dest", self.flag.removeprefix("--").replace("-", "_"))

    def __str__(self) -> str:
        return self.flag

    def __format__(self, spec: str) -> str:
        return format(self.flag, spec)

    def given(self, value: object) -> str:
        """The option as typed with ``value``: ``--careful-gate=strict``."""
        return f"{self.flag}={value}"

    def register(self, add: Callable[..., object]) -> None:
        """Adds the option to a pytest option group (``group.addoption``)."""
        attrs: dict[str, object] = {"dest": self.dest, "help": self.help}
        if self.action is not None:
            attrs["action"] = self.action
        if self.action != "store_true":
            attrs["default"] = self.default
        for name in ("metavar", "choices", "type"):
            if getattr(self, name) is not None:
                attrs[name] = getattr(self, name)
        if self.choices is not None and self.type is None:  # a misspelled value gets "did you mean"
            attrs["type"] = one_of(self.choices)
        add(self.flag, **attrs)


def csv_of(choices: Mapping[str, str] | tuple[str, ...], what: str) -> Callable[[str], tuple[str, ...]]:
    """A comma-separated list of ``choices``; a mapping also accepts its short names and ``all``."""

    def parse(value: str) -> tuple[str, ...]:
        chosen: list[str] = []
        for part in (p.strip() for p in value.split(",") if p.strip()):
            if isinstance(choices, Mapping):
                part = choices.get(part, part)
                valid = tuple(choices.values())
            else:
                valid = choices
            if part == "all" and isinstance(choices, Mapping):
                chosen.extend(valid)
                continue
            if part not in valid:
                names = list(choices) if isinstance(choices, Mapping) else list(valid)
                raise argparse.ArgumentTypeError(
                    f"unknown {what} {part!r}; expected one of: {', '.join(names)}{did_you_mean(part, names)}"
                )
            chosen.append(part)
        if not chosen:
            raise argparse.ArgumentTypeError(f"no {what} given")
        return tuple(dict.fromkeys(chosen))

    return parse


def one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
    """A ``type`` for an option with ``choices``: argparse checks the type first, so a misspelled value
    is refused here with the value most likely meant ("did you mean safe?"); ``choices`` stays for --help."""

    def check(value: str) -> str:
        if value not in choices:
            raise argparse.ArgumentTypeError(
                f"invalid choice: {value!r} (choose from {', '.join(choices)}){did_you_mean(value, choices)}"
            )
        return value

    check.__name__ = "value"  # argparse's own message names the type: "invalid value: ..."
    return check


def number(convert: Callable[[str], _N], kind: str, ok: Callable[[_N], bool], range_text: str) -> Callable[[str], _N]:
    """An argparse ``type``: ``value`` as ``convert`` reads it, refused in one line outside ``ok``."""

    def parse(value: str) -> _N:
        try:
            read = convert(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {kind}") from None
        if not ok(read):
            raise argparse.ArgumentTypeError(f"{value} is not {range_text}")
        return read

    return parse


fraction = number(float, "a number", lambda n: 0.0 <= n <= 1.0, "between 0 and 1")
positive_int = number(int, "an integer", lambda n: n >= 1, "a positive integer")
positive_number = number(float, "a number", lambda n: 0.0 < n < float("inf"), "a positive, finite number")


def path(value: str) -> Path:
    """A path option as pytest's own ``--junitxml`` reads one: ``~`` and ``$VAR`` expanded.

    The shell expands ``~`` only at the start of a word: ``--careful-results=~/run``, and any
    path in an ini file's ``addopts`` or in ``PYTEST_ADDOPTS``, reach pytest unexpanded.
    """
    if not value.strip():  # "." would be meant by nobody: an unset variable, as in --careful-results=$RUN
        raise argparse.ArgumentTypeError("empty path (an unset variable?)")
    return Path(os.path.expanduser(os.path.expandvars(value)))
