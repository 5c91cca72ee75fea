"""The Python API: score a logged run, or read a scorecard, from a notebook or a script. No pytest.

``score_run`` opens the run as ``pytest --careful-results`` opens it (``sources.open_source``) and
scores each conversation with the function the pytest items call (``score_conversation``), under
the same budget, so the two cannot disagree; a test checks it on every conversation of a real run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path

from .common.bfcl import CATEGORIES, NODE_ID
from .data import dataset
from .effects import declarations
from .execution import limits
from .execution.decoding import ModelEntry, ModelEntryError, own_models
from .live.backends import scripted
from .protocols.detector import MODES as DETECTORS
from .protocols.registry import NAMES as PROTOCOLS
from .reports.scorecard import Scorecard, load
from .scoring.conversation import RESOURCE_LIMIT, ConversationResult, ScoringConfig, score_conversation, unscored_row
from .scoring.rules import DUPLICATE_WRITES, Rule, Settings, built_in, checking, opt_in
from .sources.reference_logged import Source, open_source
from .sources.run_config import RunConfig, SourceError
from .verify.audit_file import for_mode
from .verify.options import AUDIT_MODES, MARK


def score_run(
    results_dir: Path | str,
    decoder: str | None = None,
    protocol: str = "standard",
    categories: Sequence[str] | str | None = None,
    *,
    ids: Iterable[str] | str | Path | None = None,
    model: str | None = None,
    rules: Iterable[Rule | type[Rule]] = (),
    boundary: str = "final",
    detector: str = "strict",
    duplicate_writes: str = "paper",
    user_script: str = "default",
    budget: limits.Limits | None = None,
    models: Mapping[str, ModelEntry] | None = None,
    modify_rules: Callable[[list[Rule]], None] | None = None,
    audit: str = MARK,
    optimize: bool = False,
    allow_missing: bool = False,
) -> list[ConversationResult]:
    """Score a logged BFCL run: one typed result per conversation, in dataset order.

    The same as ``pytest --careful-results=DIR --careful-decoder=KEY --careful-protocol=P`` gives
    for the folder (its scorecard's rows are the results' ``row``), without a pytest session.

    Args:
        results_dir: the run's folder (BFCL's ``result/<model>`` layout, or any folder holding
            ``BFCL_v4_multi_turn_<category>_result.json`` files).
        decoder: the BFCL registry key whose decoder reads the output (``--careful-decoder``);
            None: ``model``, else the folder's ``careful_settings.json``.
        protocol: ``standard``, ``hints`` or ``confirm``.
        categories: ``base``, ``multi_turn_miss_func``...; a string is one category; None: the
            categories the folder has (with ``ids``: theirs).
        ids: the conversations to score, as pytest takes them on its command line: ids
            (``multi_turn_base_17``, or the node id ``multi_turn_base_17[standard]``), or a file of
            them, one a line, as ``@file`` (a ``Path``, or a string ``"@conversations.txt"``);
            None: every conversation of the categories.
        model: the run's name in the results (default: the folder's name).
        rules: rules of your own (``pytest_careful.Rule`` instances or subclasses), after the built-in ones.
        boundary, detector, duplicate_writes, user_script: as the ``--careful-*`` options.
        budget: each conversation's scoring budget (``--careful-max-calls`` and so on); None: the defaults.
        models: models of your own by name (``pytest_careful.ModelEntry``), as ``pytest_careful_model_handlers``
            gives them: ``decoder`` may then name one. Registered for this call only.
        modify_rules: changes the run's rules in place, as ``pytest_careful_modify_rules`` does
            (a built-in rule turned off, or a variant in its place).
        audit: ``mark`` (each result's ``audit`` holds the item audit's findings of its reference),
            or ``off``, as ``--careful-audit``; ``exclude`` concerns the figures, which a scorecard makes.
        optimize: add the opt-in rule ``verified_surplus_calls``, as ``--careful-optimize``.
        allow_missing: score only the conversations the folder has an entry for, as
            ``--careful-allow-missing`` (and ``bfcl evaluate --partial-eval``) does; without it a
            selection holding any it has none for is refused (SourceError), as pytest refuses it.

    Raises:
        SourceError (a ValueError): the folder, decoder or a setting cannot be used; the message says why.
    """
    if isinstance(categories, str):  # one category, not a sequence of its letters
        categories = [categories]
    chosen = None if ids is None else _chosen_ids(ids, protocol)
    if chosen is not None and not categories:  # node ids name their category, as on the command line
        categories = [c for c in CATEGORIES if any(i.rsplit("_", 1)[0] == c for i in chosen)]
    config = _run_config(results_dir, decoder, protocol, categories, model, boundary, detector, duplicate_writes)
    if chosen is not None:
        _check_ids(chosen, config.categories)
    scripted.register()  # a scripted model's results folder decodes with its handler
    budget = budget or limits.Limits()
    if audit not in AUDIT_MODES:
        raise SourceError(f"audit: {audit!r} is not one of {', '.join(AUDIT_MODES)}")
    config = dataclasses.replace(config, user_script=user_script, limits=budget, audit=audit, optimize=optimize)
    run_rules = _rules(config, rules, modify_rules)
    try:
        undo = own_models(models or {}, "score_run(models=...)")
    except ModelEntryError as problem:
        raise SourceError(str(problem)) from None
    try:
        return _score(config, run_rules, budget, chosen, allow_missing)
    finally:
        undo()


def _rules(
    config: RunConfig, own: Iterable[Rule | type[Rule]], modify: Callable[[list[Rule]], None] | None
) -> tuple[Rule, ...]:
    """The built-in rules under the run's settings, then ``own``, as ``modify`` leaves them; checked."""
    ours = built_in(_settings(config)) + opt_in(_settings(config))
    try:
        found = list(checking.collect([ours, list(own)], "score_run(rules=...)", ours))
        if modify is not None:
            modify(found)
        return checking.collect([found], "score_run(modify_rules=...)", ours)
    except checking.RuleError as problem:
        raise SourceError(str(problem)) from None


def _settings(config: RunConfig) -> Settings:
    return Settings(
        boundary=config.boundary,
        detector=config.detector,
        duplicate_writes=config.duplicate_writes,
        optimize=config.optimize,
    )


def _chosen_ids(ids: Iterable[str] | str | Path, protocol: str) -> frozenset[str]:
    """The conversation ids ``ids`` names (see ``score_run``); SourceError naming what is wrong."""
    if isinstance(ids, Path) or (isinstance(ids, str) and ids.startswith("@")):
        return _ids_in_file(Path(str(ids).removeprefix("@")) if isinstance(ids, str) else ids, protocol)
    names = [ids] if isinstance(ids, str) else list(ids)
    return frozenset(_conversation_id(str(name), protocol, "ids") for name in names)


def _ids_in_file(path: Path, protocol: str) -> frozenset[str]:
    """The ids of a file as pytest reads ``@file``: one a line (blank lines left out)."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SourceError(f"ids: cannot read {path}: {type(exc).__name__}: {exc}") from None
    return frozenset(
        _conversation_id(line.strip(), protocol, f"{path}:{number}")
        for number, line in enumerate(lines, start=1)
        if line.strip()
    )


def _conversation_id(name: str, protocol: str, where: str) -> str:
    """The conversation a pytest node id or a bare id names; SourceError for anything else."""
    match = NODE_ID.match(name)
    if match is None:
        raise SourceError(
            f"{where}: {name[:200]!r} is not a conversation id (multi_turn_base_17, or multi_turn_base_17[standard])"
        )
    if match["condition"] is not None and match["condition"] != protocol:
        raise SourceError(f"{where}: {name} is a {match['condition']} item; this run's protocol is {protocol}")
    return match["id"]


def _check_ids(chosen: frozenset[str], categories: Sequence[str]) -> None:
    """Every id is a conversation of BFCL's dataset in the run's categories, as ``pytest`` checks node ids."""
    known = {c.id for c in dataset.load(CATEGORIES)}
    for cid in sorted(chosen):
        if cid not in known:
            raise SourceError(f"ids: {cid}: no such conversation in bfcl-eval's multi-turn dataset")
        if cid.rsplit("_", 1)[0] not in categories:
            raise SourceError(
                f"ids: {cid}: its category is not among the categories asked for ({', '.join(categories)})"
            )


def _score(
    config: RunConfig,
    run_rules: tuple[Rule, ...],
    budget: limits.Limits,
    ids: frozenset[str] | None = None,
    allow_missing: bool = False,
) -> list[ConversationResult]:
    source = open_source(config)
    decl = declarations.load()
    scoring = ScoringConfig(
        model=source.model,
        decoder_key=source.decoder_key,
        declarations=decl,
        settings=_settings(config),
        rules=run_rules,
        reexamined=source.reexamined(config, decl),
        audit=for_mode(config.audit),
    )
    chosen = source.categories or config.categories
    protocol = config.protocols[0]
    selected = [c for c in dataset.load(chosen) if ids is None or c.id in ids]
    lacking = [c.id for c in selected if source.lacks_entry(protocol, c.id)]
    if lacking and not allow_missing:  # as the plugin refuses the selection (harness.session.missing_entries)
        raise SourceError(
            f"{len(lacking)} of {len(selected)} selected conversations have no entry in {config.results} "
            f"(e.g. {lacking[0]}); allow_missing=True scores only the entries present (as bfcl evaluate "
            "--partial-eval does), or choose the conversations it holds with ids="
        )
    return [
        _result(source, conversation, protocol, scoring, budget)
        for conversation in selected
        if not source.lacks_entry(protocol, conversation.id)
    ]


def read_scorecard(path: Path | str) -> Scorecard:
    """A ``scorecard.json`` (or its folder) as a typed ``Scorecard``; ValueError naming the file otherwise."""
    return load(path)


def _result(
    source: Source, conversation: dataset.Conversation, protocol: str, scoring: ScoringConfig, budget: limits.Limits
) -> ConversationResult:
    """One conversation, as its pytest item scores it (``harness.item.run_conversation``)."""
    try:
        result, entry = source.result(protocol, conversation)
    except LookupError as problem:
        row = unscored_row(conversation, protocol, f"input problem: {problem}", scoring)
        return ConversationResult.from_row(row, scoring.rule_names)
    decoder = source.decoder()
    try:
        with limits.metered(budget):
            row, _ = score_conversation(conversation, result, entry, decoder, protocol, scoring)
    except limits.ResourceLimit as exceeded:
        row = unscored_row(conversation, protocol, exceeded.reason, scoring, RESOURCE_LIMIT)
    return ConversationResult.from_row(row, scoring.rule_names)


def _run_config(
    results_dir: Path | str,
    decoder: str | None,
    protocol: str,
    categories: Sequence[str] | None,
    model: str | None,
    boundary: str,
    detector: str,
    duplicate_writes: str,
) -> RunConfig:
    """The ``RunConfig`` the same command line would give (``harness.options.read_options``)."""
    if protocol not in PROTOCOLS:
        raise SourceError(f"protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    if duplicate_writes not in DUPLICATE_WRITES:
        raise SourceError(f"duplicate_writes {duplicate_writes!r}: expected one of {', '.join(DUPLICATE_WRITES)}")
    if detector not in DETECTORS:
        raise SourceError(f"detector {detector!r}: expected one of {', '.join(DETECTORS)}")
    if boundary not in declarations.BOUNDARIES:
        raise SourceError(f"boundary {boundary!r}: expected one of {', '.join(declarations.BOUNDARIES)}")
    folder = Path(results_dir)
    if not folder.is_dir():
        raise SourceError(f"{folder}: no such folder")
    chosen = tuple(_category(c) for c in categories) if categories else CATEGORIES
    return RunConfig(
        active=True,
        model=model or "",
        results=folder,
        decoder=decoder,
        protocols=(protocol,),
        categories=chosen,
        categories_given=bool(categories),
        boundary=boundary,
        detector=detector,
        gate="safe",
        scorecards=Path("scorecards"),
        baseline=None,
        min_safe=None,
        min_bfcl=None,
        fail_on_regression=None,
        duplicate_writes=duplicate_writes,
        worker=True,  # no background format check: nothing here would print its warnings
    )


def _category(name: str) -> str:
    full = name if name.startswith("multi_turn_") else f"multi_turn_{name}"
    if full not in CATEGORIES:
        raise SourceError(
            f"category {name!r}: expected one of {', '.join(c.removeprefix('multi_turn_') for c in CATEGORIES)}"
        )
    return full
