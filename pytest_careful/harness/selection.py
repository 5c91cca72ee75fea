"""The command line as pytest would read it, had it known our options from the start.

Two things go wrong when a plugin's options are unknown to pytest's first pass
over the command line (it parses before entry-point plugins load):

* the value of a space-separated option (``--careful-results /data/run``) is
  taken for a path argument, so the rootdir becomes the common ancestor of the
  working directory and that path (it can be ``/``), the project's ini file is
  not found, scorecards and ``.pytest_cache`` land there, and node ids print as
  ``../../multi_turn_base_1[standard]``;
* conversation ids given as arguments (``multi_turn_base_17[standard]``, a copied
  node id) name no file, and pytest refuses them.

:func:`prepare` runs in ``pytest_load_initial_conftests`` (the first hook an
entry-point plugin sees, with the argument list still open to change): it finds
the true path arguments with the parser's own table of options, takes
conversation ids off them, and recomputes the rootdir and ini file from what is
left, as pytest's ``determine_setup`` would.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from _pytest.config.findpaths import determine_setup

from ..common.bfcl import NODE_ID
from ..common.options import PREFIX
from ..common.text import counted, did_you_mean
from ..sources.options import CATEGORY, MODEL, PROTOCOL, RESULTS

if TYPE_CHECKING:  # the plugin imports this module in every session; a type costs nothing
    from ..reports.card import Narrowed

#: Options whose presence asks for a pytest-careful run.
RUN_OPTIONS = (MODEL.flag, RESULTS.flag)


@dataclass
class Selection:
    """Conversations named on the command line (arguments and ``--deselect`` values)."""

    #: node ids or bare conversation ids given as arguments, in order
    node_ids: list[str] = field(default_factory=list)
    #: ``--deselect`` values that name conversations (matched exactly, not as prefixes)
    deselected: list[str] = field(default_factory=list)

    def selects(self, conversation_id: str, condition: str) -> bool:
        return not self.node_ids or _matches(self.node_ids, conversation_id, condition)

    def deselects(self, conversation_id: str, condition: str) -> bool:
        return _matches(self.deselected, conversation_id, condition)

    def conversation_ids(self) -> set[str]:
        return {NODE_ID.match(n)["id"] for n in self.node_ids}  # type: ignore[index]


def _matches(names: Sequence[str], conversation_id: str, condition: str) -> bool:
    return conversation_id in names or f"{conversation_id}[{condition}]" in names


SELECTION_KEY = pytest.StashKey[Selection]()


def check(selection: Selection, categories: tuple[str, ...], protocols: tuple[str, ...], known: set[str]) -> None:
    """A named conversation that this run has no item for is a usage error, as pytest's "not found"."""
    for name in [*selection.node_ids, *selection.deselected]:
        match = NODE_ID.match(name)
        assert match is not None
        conversation, condition = match["id"], match["condition"]
        category = conversation.rsplit("_", 1)[0]
        if category not in categories and conversation in known:
            raise pytest.UsageError(
                f"{name}: its category {category} is not among this run's ({', '.join(categories)}); see {CATEGORY}"
            )
        if conversation not in known:
            raise pytest.UsageError(f"{name}: no such conversation in bfcl-eval's multi-turn dataset")
        if condition is not None and condition not in protocols:
            raise pytest.UsageError(f"{name}: this run's protocols are {', '.join(protocols)} ({PROTOCOL})")


def keep_node_ids_as_printed(config: pytest.Config) -> None:
    """Print conversation node ids as they are, not relative to the working directory.

    pytest prints node ids relative to the working directory when the rootdir
    is elsewhere (a subdirectory of a project): ``../multi_turn_base_17[standard]``
    names no file, and pasted back it would not select anything.
    """
    relative = config.cwd_relative_nodeid

    def careful_relative(nodeid: Any) -> Any:
        return nodeid if NODE_ID.match(str(nodeid)) else relative(nodeid)

    config.cwd_relative_nodeid = careful_relative  # type: ignore[method-assign]


def positional_indices(parser: argparse.ArgumentParser, args: Sequence[str]) -> list[int]:
    """Indices of ``args`` that argparse would read as positional arguments.

    Walks the arguments with the parser's own option table: an option that
    takes a value consumes the next argument (``-k expr``, ``--deselect id``,
    ``--careful-results DIR``) unless the value is attached (``-kexpr``,
    ``--opt=value``). An unknown option is taken to be a flag, as argparse takes it.
    """
    actions = parser._option_string_actions  # argparse's own lookup table
    indices: list[int] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            return indices + list(range(i + 1, len(args)))
        if arg.startswith("--") and len(arg) > 2:
            i += 1 + (("=" not in arg) and _takes_value(actions.get(arg)))
        elif arg.startswith("-") and len(arg) > 1 and not _is_number(arg):
            i += 1 + _short_cluster_needs_next(actions, arg)
        else:
            indices.append(i)
            i += 1
    return indices


def _takes_value(action: argparse.Action | None) -> bool:
    return action is not None and action.nargs != 0


def _short_cluster_needs_next(actions: dict[str, argparse.Action], arg: str) -> bool:
    """``-xvk`` → ``-k`` takes the next argument; ``-kexpr`` or ``-n2`` carry their value."""
    for position in range(1, len(arg)):
        action = actions.get("-" + arg[position])
        if _takes_value(action):
            return position == len(arg) - 1
        if action is None:
            return False
    return False


def _is_number(arg: str) -> bool:
    try:
        float(arg)
    except ValueError:
        return False
    return True


def prepare(config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """Take conversation ids off ``args`` and put rootdir and ini file where pytest would."""
    expand_argument_files(args)
    optparser = parser.optparser
    if any(a.startswith(PREFIX) for a in args):
        _refuse_unknown_careful_options(args, optparser)
    if not any(a.startswith(RUN_OPTIONS) for a in args):
        return
    positional = positional_indices(optparser, args)
    selection = Selection()
    for index in reversed(positional):
        if NODE_ID.match(args[index]):
            selection.node_ids.insert(0, args.pop(index))
    paths = [args[i] for i in positional_indices(optparser, args)]
    selection.deselected = _claim_deselect(args, optparser)
    config.stash[SELECTION_KEY] = selection
    _redetermine_setup(config, args, paths)


def _refuse_unknown_careful_options(args: list[str], optparser: argparse.ArgumentParser) -> None:
    """A misspelled ``--careful-*`` option, said with the option it most likely meant (argparse's own
    "unrecognized arguments" names no candidate)."""
    known = [o for o in optparser._option_string_actions if o.startswith(PREFIX)]
    for index in set(range(len(args))) - set(positional_indices(optparser, args)):
        name = args[index].split("=", 1)[0]
        if name.startswith(PREFIX) and name not in known:
            hint = did_you_mean(name, known, cutoff=0.6, prefix=PREFIX)
            hint = hint or f" (pytest --help lists the {PREFIX}* options)"
            raise pytest.UsageError(f"unrecognized option {name}{hint}")


def expand_argument_files(args: list[str], depth: int = 0) -> None:
    """``pytest @ids.txt``: the file's lines in its place, one argument each, as pytest's argparse reads
    them (``fromfile_prefix_chars``), so that conversation ids listed there are claimed like typed ones.
    A file that names no conversation and no careful option, or cannot be read, is left to pytest."""
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("@") and len(arg) > 1 and depth < 10:
            try:  # a regular file only: a pipe (@/dev/stdin) read here would be empty for pytest after
                file = Path(arg[1:])
                lines = file.read_text(encoding="utf-8").splitlines() if file.is_file() else []
            except (OSError, UnicodeDecodeError):
                lines = []
            expand_argument_files(lines, depth + 1)  # argparse reads @files within @files too
            if any(NODE_ID.match(line) or line.startswith(PREFIX) for line in lines):
                args[i : i + 1] = lines
                i += len(lines)
                continue
        i += 1


def _claim_deselect(args: list[str], optparser: argparse.ArgumentParser) -> list[str]:
    """``--deselect`` values that name conversations: ours to match exactly.

    pytest deselects by node-id *prefix*, so ``--deselect multi_turn_base_1``
    would also drop conversations 10-19 and 100-199. Such values are taken off
    the command line and matched exactly in collection.
    """
    claimed: list[str] = []
    positional = set(positional_indices(optparser, args))
    i = 0
    while i < len(args):
        arg = args[i]
        value = None
        if i not in positional and arg == "--deselect" and i + 1 < len(args):
            value, width = args[i + 1], 2
        elif i not in positional and arg.startswith("--deselect="):
            value, width = arg.split("=", 1)[1], 1
        if value is not None and NODE_ID.match(value):
            claimed.append(value)
            del args[i : i + width]
            positional = set(positional_indices(optparser, args))
            continue
        i += 1
    return claimed


def _redetermine_setup(config: pytest.Config, args: list[str], paths: list[str]) -> None:
    """Recompute rootdir and ini file from the true path arguments (see module docstring)."""
    try:
        ns = config.known_args_namespace
        rootpath, inipath, inicfg, ignored = determine_setup(
            inifile=ns.inifilename,
            override_ini=ns.override_ini,
            args=paths,
            rootdir_cmd_arg=ns.rootdir or None,
            invocation_dir=config.invocation_params.dir,
        )
    except (TypeError, AttributeError):  # another pytest: leave its choice alone
        return
    if (rootpath, inipath) == (config.rootpath, config.inipath):
        return
    old_root, old_ini = config.rootpath, config.inipath
    _drop_addopts(config, args)
    _set_setup(config, rootpath, inipath, inicfg, ignored)
    addopts = config.getini("addopts") if inipath is not None else []
    args[:0] = list(addopts)
    ns = config.known_args_namespace
    derived = str(old_ini.parent) if old_ini is not None else str(old_root)
    if ns.confcutdir == derived:  # pytest derived it from the wrong setup: derive it again
        ns.confcutdir = str(inipath.parent) if inipath is not None else str(rootpath)


def _drop_addopts(config: pytest.Config, args: list[str]) -> None:
    """Remove the wrongly found ini file's ``addopts`` that pytest put in front of ``args``."""
    if config.inipath is None:
        return
    addopts = list(config.getini("addopts"))
    if addopts and args[: len(addopts)] == addopts:
        del args[: len(addopts)]


def _set_setup(config: Any, rootpath: Path, inipath: Path | None, inicfg: Any, ignored: Any) -> None:
    # pytest has no public setter: these are the attributes its own ``parse`` sets.
    config._rootpath = rootpath
    config._inipath = inipath
    config._inicfg = inicfg
    config._ignored_config_files = ignored
    config._inicache.clear()
    config._parser.extra_info["rootdir"] = str(rootpath)
    config._parser.extra_info["inifile"] = str(inipath)


def describe(config: pytest.Config) -> Narrowed:
    """What narrowed the run, for the scorecard's provenance (empty entries left out)."""
    selection = config.stash.get(SELECTION_KEY, Selection())
    get = config.getoption
    described: Narrowed = {
        "node_ids": selection.node_ids,
        "keyword": get("keyword", "") or "",
        "markexpr": get("markexpr", "") or "",
        "deselect": [*selection.deselected, *(get("deselect", None) or [])],
        "last_failed": bool(get("lf", False)),
        "stepwise": bool(get("stepwise", False)),
        "exitfirst_or_maxfail": int(get("maxfail", 0) or 0),
    }
    for key in [k for k, v in described.items() if not v]:
        del described[key]  # type: ignore[misc]  # the keys are Narrowed's own, all optional
    return described


def why_none_selected(config: pytest.Config, collected: int) -> str:
    """What chose none of the ``collected`` conversation items, said as such (not "none scored")."""
    keyword, marks = config.getoption("keyword", ""), config.getoption("markexpr", "")
    items = counted(collected, "item")
    if keyword:
        return (
            f"-k {keyword!r} matched none of this run's {items} (node ids look like "
            "multi_turn_base_17[standard]; -k matches substrings of them and of their markers)"
        )
    if marks:
        return f"-m {marks!r} matched none of this run's {items} (see `pytest --markers` for the careful markers)"
    return f"none of this run's {items} was selected (--deselect, --lf or a plugin deselected them all)"
