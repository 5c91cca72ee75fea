"""The plugin's options: each stage's table registered in one ``careful`` group, and read into the one
``RunConfig`` of the run, cross-checked.

Each stage declares its own options (``common.options.Option``, a table per stage): what to score
(``sources/options.py``), how (``scoring/options.py``), where scorecards go and the release gate
(``reports/options.py``), the item audit (``verify/options.py``), live runs (``sources/live_options.py``), the confirm protocol's user
(``protocols/options.py``), each conversation's budget (``execution/limits.py``) and JUnit XML
(here). A message names an option through its object, so each flag is written once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import NoReturn, TypeVar

import pytest

from ..common.bfcl import CATEGORIES
from ..common.options import PREFIX, Option
from ..data.run_settings import recorded_decoder
from ..execution import limits
from ..execution.limits import MAX_CALLS, MAX_MEMORY_MB, MAX_SECONDS, Limits
from ..protocols import options as protocol_options
from ..protocols.options import USER_SCRIPT
from ..reports import options as report_options
from ..reports.options import (
    ALLOW_MISSING,
    ALLOW_PARTIAL_BASELINE,
    BASELINE,
    FAIL_ON_REGRESSION,
    LABEL,
    MIN_BFCL,
    MIN_SAFE,
    REGRESSION_VERDICT,
    REGRESSION_VERDICTS,
    SCORECARDS,
)
from ..scoring import options as scoring_options
from ..scoring.options import BOUNDARY, DETECTOR, DUPLICATE_WRITES, GATE, OPTIMIZE
from ..sources import live_options
from ..sources import options as run_options
from ..sources.live_options import (
    BUDGET_USD,
    CONCURRENCY,
    DTYPE,
    ENDPOINT,
    MAX_MODEL_LEN,
    MAX_OUTPUT_TOKENS,
    OUTPUT,
    REPEAT,
    REQUEST_TIMEOUT,
    SERVER_TIMEOUT,
    SESSION_HEADER,
    VLLM_ARG,
)
from ..sources.options import CATEGORY, DECODER, DEFAULT_PROTOCOLS, HANDLER, MODEL, PROTOCOL, RESULTS
from ..sources.run_config import (
    DEFAULT_REQUEST_TIMEOUT,
    DEFAULT_SERVER_TIMEOUT,
    DEFAULT_SESSION_HEADER,
    REFERENCE_MODEL,
    RunConfig,
)
from ..verify import options as audit_options
from ..verify.options import AUDIT

_T = TypeVar("_T")

#: The harness's own option (``junit.py`` writes what it asks; defined here, so that loading the
#: plugin does not import ``junit.py`` and the XML modules it needs).
JUNIT_STRICT = Option(
    "--careful-junit-strict",
    action="store_true",
    help="JUnit XML valid against Jenkins' junit-10.xsd: each conversation's careful_* values go to "
    "<system-out> as name=value lines instead of testcase <properties>",
)

DEFAULT_OUTPUT = Path("result")

#: The stages' tables, in the order ``--help`` lists them (and the options page shows them).
TABLES: tuple[tuple[Option, ...], ...] = (
    run_options.OPTIONS,
    scoring_options.OPTIONS,
    audit_options.OPTIONS,
    report_options.OPTIONS,
    live_options.OPTIONS,
    live_options.RUN_OPTIONS,
    protocol_options.OPTIONS,
    report_options.REGRESSION_OPTIONS,
    limits.OPTIONS,
    (JUNIT_STRICT,),
)

#: Options that apply to some runs only. Their defaults are None, so that one given where it does
#: not apply is refused instead of silently ignored (which backend each needs: live/source.py).
SCOPED_OPTIONS = (
    DECODER,
    HANDLER,
    OUTPUT,
    ENDPOINT,
    VLLM_ARG,
    DTYPE,
    MAX_MODEL_LEN,
    SERVER_TIMEOUT,
    REQUEST_TIMEOUT,
    SESSION_HEADER,
    BUDGET_USD,
    MAX_OUTPUT_TOKENS,
    REPEAT,
    CONCURRENCY,
)


def add_options(parser: pytest.Parser) -> None:
    """The plugin's options, one group, in the order ``--help`` lists them."""
    group = parser.getgroup("careful", "effect-aware BFCL multi-turn scoring (pytest-careful)")
    for table in TABLES:
        for option in table:
            option.register(group.addoption)
    _errors_in_one_line(parser)


#: How argparse begins what it says of one option's value ("argument --careful-gate: invalid choice: ...").
_ARGUMENT = f"argument {PREFIX}"


def _errors_in_one_line(parser: pytest.Parser) -> None:
    """What argparse says of a ``--careful-*`` value (a type or choice refused, a value missing or
    given to a flag), said as one ``ERROR:`` line like every other option error of the plugin, not in
    pytest's usage block with its rootdir and ini file. ``error`` is argparse's own point of override;
    other messages go to the one it had."""
    optparser = getattr(parser, "optparser", None)  # pytest >= 9: the one argparse parser of the session
    if optparser is None:
        return
    earlier: Callable[[str], NoReturn] = optparser.error

    def error(message: str) -> NoReturn:
        if message.startswith(_ARGUMENT):
            said = message.removeprefix("argument ")
            if said.endswith(": expected one argument"):  # argparse takes a value beginning with - for an option
                said += f" ({said.split(':', 1)[0]}=VALUE for a value that begins with -)"
            raise pytest.UsageError(said)
        earlier(message)

    optparser.error = error  # type: ignore[method-assign]  # an instance's own, as argparse invites


def read_options(config: pytest.Config) -> RunConfig:
    """Options, cross-checked; conflicts raise ``pytest.UsageError``."""
    get = config.getoption
    model, results = get(MODEL.dest), get(RESULTS.dest)
    options = RunConfig(
        active=bool(model or results),
        model=model or "",
        results=results,
        decoder=get(DECODER.dest),
        protocols=DEFAULT_PROTOCOLS if get(PROTOCOL.dest) is None else get(PROTOCOL.dest),
        protocols_given=get(PROTOCOL.dest) is not None,
        categories=get(CATEGORY.dest) or CATEGORIES,
        boundary=get(BOUNDARY.dest),
        detector=get(DETECTOR.dest),
        gate=get(GATE.dest),
        scorecards=get(SCORECARDS.dest),
        baseline=get(BASELINE.dest),
        min_safe=get(MIN_SAFE.dest),
        min_bfcl=get(MIN_BFCL.dest),
        fail_on_regression=get(FAIL_ON_REGRESSION.dest),
        regression_verdict=_or(get(REGRESSION_VERDICT.dest), REGRESSION_VERDICTS[0]),
        handler=get(HANDLER.dest),
        output=_or(get(OUTPUT.dest), DEFAULT_OUTPUT),
        endpoint=tuple(dict.fromkeys(u for urls in get(ENDPOINT.dest) or () for u in urls)),
        vllm_args=tuple(a for args in get(VLLM_ARG.dest) or () for a in args),
        dtype=get(DTYPE.dest),
        max_model_len=get(MAX_MODEL_LEN.dest),
        server_timeout=_or(get(SERVER_TIMEOUT.dest), DEFAULT_SERVER_TIMEOUT),
        request_timeout=_or(get(REQUEST_TIMEOUT.dest), DEFAULT_REQUEST_TIMEOUT),
        session_header=_or(get(SESSION_HEADER.dest), DEFAULT_SESSION_HEADER),
        budget_usd=get(BUDGET_USD.dest),
        max_output_tokens=get(MAX_OUTPUT_TOKENS.dest),
        user_script=get(USER_SCRIPT.dest),
        worker=hasattr(config, "workerinput"),
        collect_only=bool(get("collectonly", False)),
        given=frozenset(o.flag for o in SCOPED_OPTIONS if get(o.dest) not in (None, [])),
        categories_given=get(CATEGORY.dest) is not None,
        label=get(LABEL.dest),
        allow_missing=get(ALLOW_MISSING.dest),
        allow_partial_baseline=get(ALLOW_PARTIAL_BASELINE.dest),
        junit_strict=get(JUNIT_STRICT.dest),
        limits=Limits(get(MAX_CALLS.dest), get(MAX_SECONDS.dest), get(MAX_MEMORY_MB.dest)),
        duplicate_writes=get(DUPLICATE_WRITES.dest),
        repeat=_or(get(REPEAT.dest), 1),
        concurrency=get(CONCURRENCY.dest),
        audit=get(AUDIT.dest),
        optimize=get(OPTIMIZE.dest),
    )
    if options.active:
        _validate(options)
        if get(REGRESSION_VERDICT.dest) is not None and options.baseline is None:  # its default is not "given"
            raise pytest.UsageError(f"{REGRESSION_VERDICT} applies to a {BASELINE} comparison; none was given")
    elif options.release_gate or options.baseline or options.decoder:
        raise pytest.UsageError(f"{PREFIX}* options need {MODEL} or {RESULTS} to select a run")
    return options


def _or(value: _T | None, default: _T) -> _T:
    return default if value is None else value


def _validate(options: RunConfig) -> None:
    _refuse_inapplicable(options)
    if options.results is not None:
        if not options.results.is_dir():
            # A relative path is the working directory's, as pytest reads its own (an ini file's
            # addopts included): say which, for a command run from a subdirectory of the project.
            where = "" if options.results.is_absolute() else f" (relative to the working directory {Path.cwd()})"
            raise pytest.UsageError(f"{RESULTS}: {options.results} is not a directory{where}")
        if options.model == REFERENCE_MODEL:
            raise pytest.UsageError(f"{MODEL}=reference replays the references; it cannot be combined with {RESULTS}")
        if not (options.decoder or options.model or recorded_decoder(options.results)):
            raise pytest.UsageError(
                f"{RESULTS} needs {DECODER} KEY (or {MODEL} NAME) "
                "to know which bfcl-eval handler decodes the run (a run pytest-careful made records it "
                "in careful_settings.json; this folder holds none that names one)"
            )
    if options.live and options.output.exists() and not options.output.is_dir():
        raise pytest.UsageError(f"{OUTPUT}: {options.output} exists and is not a directory")
    if options.budget_usd is not None and not 0 < options.budget_usd < float("inf"):  # NaN too
        raise pytest.UsageError(f"{BUDGET_USD} must be a positive number of dollars")
    if options.max_output_tokens is not None and options.max_output_tokens < 1:
        raise pytest.UsageError(f"{MAX_OUTPUT_TOKENS} must be at least 1")
    if options.fail_on_regression is not None and options.baseline is None:
        raise pytest.UsageError(f"{FAIL_ON_REGRESSION} needs {BASELINE}")
    if options.baseline is not None and not os.path.exists(options.baseline):
        raise pytest.UsageError(f"{BASELINE}: {options.baseline} does not exist")
    if options.scorecards.exists() and not options.scorecards.is_dir():
        raise pytest.UsageError(f"{SCORECARDS}: {options.scorecards} exists and is not a directory")
    if options.repeat > 1 and options.baseline is not None:
        raise pytest.UsageError(
            f"{BASELINE} pairs one run with another; with {REPEAT}, compare "
            "the repeats' scorecard folders with careful-report (or one repeat-<k> folder)"
        )
    if options.allow_partial_baseline and options.baseline is None:
        raise pytest.UsageError(f"{ALLOW_PARTIAL_BASELINE} applies to a {BASELINE} scorecard; none was given")
    if options.user_script != "default" and "confirm" not in options.protocols:
        raise pytest.UsageError(
            f"{USER_SCRIPT}={options.user_script}: the scripted user answers under "
            f"the confirm protocol only; add {PROTOCOL}=confirm"
        )


def _refuse_inapplicable(options: RunConfig) -> None:
    """--careful-decoder without a logged run; live-run options without a live run."""
    if options.results is None and DECODER.flag in options.given:
        raise pytest.UsageError(
            f"{DECODER} names the handler that decodes a logged run: it applies "
            f"to {RESULTS} only (a live run decodes with its model's own handler)"
        )
    unused = sorted(options.given - {DECODER.flag})
    if options.live or not unused:
        return
    run = f"{MODEL}=reference replays the references" if options.results is None else f"{RESULTS} rescores a logged run"
    raise pytest.UsageError(
        f"{', '.join(unused)}: for live runs (a model the plugin runs) only; {run}, which this would not change"
    )
