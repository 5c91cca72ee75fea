"""Command-line options of the plugin and their validation."""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import pytest

from ..common.bfcl import CATEGORIES
from ..common.text import did_you_mean
from ..data.run_settings import recorded_decoder
from ..effects.declarations import BOUNDARIES
from ..execution.limits import DEFAULT_MAX_CALLS, DEFAULT_MAX_MEMORY_MB, DEFAULT_MAX_SECONDS, Limits
from ..protocols import registry as protocols
from ..sources.run_config import DEFAULT_REQUEST_TIMEOUT, DEFAULT_SERVER_TIMEOUT, REFERENCE_MODEL, RunConfig

PROTOCOLS = protocols.NAMES
GATES = ("bfcl", "safe", "strict", "rules", "none")
SHORT_CATEGORIES = {c.removeprefix("multi_turn_"): c for c in CATEGORIES}
DEFAULT_OUTPUT = Path("result")

#: Options that apply to some runs only (dest -> flag). Their defaults are None, so that
#: one given where it does not apply is refused instead of silently ignored
#: (which backend each needs: live/source.py).
SCOPED_OPTIONS = {
    "careful_decoder": "--careful-decoder",
    "careful_handler": "--careful-handler",
    "careful_output": "--careful-output",
    "careful_endpoint": "--careful-endpoint",
    "careful_vllm_args": "--careful-vllm-arg",
    "careful_dtype": "--careful-dtype",
    "careful_max_model_len": "--careful-max-model-len",
    "careful_server_timeout": "--careful-server-timeout",
    "careful_request_timeout": "--careful-request-timeout",
    "careful_budget_usd": "--careful-budget-usd",
    "careful_max_output_tokens": "--careful-max-output-tokens",
    "careful_repeat": "--careful-repeat",
    "careful_concurrency": "--careful-concurrency",
}


def _csv(choices: dict[str, str] | tuple[str, ...], what: str) -> Callable[[str], tuple[str, ...]]:
    def parse(value: str) -> tuple[str, ...]:
        chosen: list[str] = []
        for part in (p.strip() for p in value.split(",") if p.strip()):
            if isinstance(choices, dict):
                part = choices.get(part, part)
                valid = tuple(choices.values())
            else:
                valid = choices
            if part == "all" and isinstance(choices, dict):
                chosen.extend(valid)
                continue
            if part not in valid:
                names = list(choices) if isinstance(choices, dict) else list(valid)
                raise argparse.ArgumentTypeError(
                    f"unknown {what} {part!r}; expected one of: {', '.join(names)}{did_you_mean(part, names)}"
                )
            chosen.append(part)
        if not chosen:
            raise argparse.ArgumentTypeError(f"no {what} given")
        return tuple(dict.fromkeys(chosen))

    return parse


def _one_of(choices: tuple[str, ...]) -> Callable[[str], str]:
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


def _number(
    convert: Callable[[str], Any], kind: str, ok: Callable[[Any], bool], range_text: str
) -> Callable[[str], Any]:
    """An argparse ``type``: ``value`` as ``convert`` reads it, refused in one line outside ``ok``."""

    def parse(value: str) -> Any:
        try:
            number = convert(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{value!r} is not {kind}") from None
        if not ok(number):
            raise argparse.ArgumentTypeError(f"{value} is not {range_text}")
        return number

    return parse


_fraction = _number(float, "a number", lambda n: 0.0 <= n <= 1.0, "between 0 and 1")
positive_int = _number(int, "an integer", lambda n: n >= 1, "a positive integer")
positive_number = _number(float, "a number", lambda n: 0.0 < n < float("inf"), "a positive, finite number")


def endpoint_urls(value: str) -> tuple[str, ...]:
    """One or more server URLs, comma-separated; ``http://host:8000`` means its ``/v1``."""
    urls = tuple(_api_root(u.strip().rstrip("/")) for u in value.split(",") if u.strip())
    bad = [u for u in urls if not _valid_url(u)]
    if not urls or bad:
        raise argparse.ArgumentTypeError(f"{(bad or [value])[0]!r}: expected http(s) URLs such as http://host:8000/v1")
    return urls


def _valid_url(url: str) -> bool:
    """http(s), a host, a port that is a number, no blanks: what urllib can open."""
    from urllib.parse import urlsplit

    if not url.startswith(("http://", "https://")) or any(c.isspace() for c in url):
        return False
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises on a port that is not a number in range
    except ValueError:
        return False
    return bool(parts.hostname)


def _api_root(url: str) -> str:
    """A server's bare address is its OpenAI API root, ``/v1``: vLLM serves nothing at ``/models``."""
    from urllib.parse import urlsplit

    try:
        bare = urlsplit(url).path == "" and url.startswith(("http://", "https://"))
    except ValueError:  # e.g. a malformed port or IPv6 address: refused by the caller
        return url
    return url + "/v1" if bare else url


#: Server flags the plugin sets itself: another value would start a server it cannot find or name.
_OWN_SERVER_FLAGS = {
    "--host": "it listens on 127.0.0.1",
    "--port": "it listens on a free port the plugin picks",
    "--served-model-name": "requests name the model as BFCL's handler does",
    "--model": "--careful-model names it",
}
#: Server flags with an option of their own (shown in the summary as a difference from BFCL's settings).
_SERVER_OPTIONS = {"--dtype": "--careful-dtype", "--max-model-len": "--careful-max-model-len"}
#: vLLM's --dtype values (0.32).
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")


def _vllm_args(value: str) -> tuple[str, ...]:
    """One ``--careful-vllm-arg``: a flag, ``--flag=value`` or ``"--flag value"`` (split as a shell would)."""
    import shlex

    try:
        args = tuple(shlex.split(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in _OWN_SERVER_FLAGS:
            raise argparse.ArgumentTypeError(
                f"{flag} is set by the plugin ({_OWN_SERVER_FLAGS[flag]}); "
                "to use a server of your own, start it and pass --careful-endpoint"
            )
        if flag in _SERVER_OPTIONS:
            raise argparse.ArgumentTypeError(
                f"use {_SERVER_OPTIONS[flag]} for {flag} (the summary then names it as a difference from bfcl generate)"
            )
    return args


def _path(value: str) -> Path:
    """A path option as pytest's own ``--junitxml`` reads one: ``~`` and ``$VAR`` expanded.

    The shell expands ``~`` only at the start of a word: ``--careful-results=~/run``, and any
    path in an ini file's ``addopts`` or in ``PYTEST_ADDOPTS``, reach pytest unexpanded.
    """
    if not value.strip():  # "." would be meant by nobody: an unset variable, as in --careful-results=$RUN
        raise argparse.ArgumentTypeError("empty path (an unset variable?)")
    return Path(os.path.expanduser(os.path.expandvars(value)))


def _model_name(value: str) -> str:
    """A model name, blanks around it dropped (``reference`` and ``scripted:`` names too, not only registry
    names); an empty one (``--careful-model=$MODEL``, unset) would quietly run no conversation."""
    if not value.strip():
        raise argparse.ArgumentTypeError("empty model name (an unset variable?); 'reference' replays the references")
    return value.strip()


def _label(value: str) -> str:
    """A scorecard folder name: one path component, printable, no surprises."""
    name = value.strip()
    if not name or name in (".", "..") or any(c in name for c in "/\\\0") or not name.isprintable():
        raise argparse.ArgumentTypeError(f"{value!r} is not usable as a folder name")
    return name


def add_options(parser: pytest.Parser) -> None:
    """The plugin's options, one group, in the order ``--help`` lists them."""
    group = parser.getgroup("careful", "effect-aware BFCL multi-turn scoring (pytest-careful)")
    for options in (
        _run_options,
        _scoring_options,
        _scorecard_options,
        _live_options,
        _live_run_options,
        _protocol_options,
        _regression_options,
        _budget_options,
        _junit_options,
    ):
        options(group.addoption)
    _errors_in_one_line(parser)


#: How argparse begins what it says of one option's value ("argument --careful-gate: invalid choice: ...").
_ARGUMENT = "argument --careful-"


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


def _run_options(add: Callable[..., Any]) -> None:
    """What to score: the model or the logged run, its decoder, protocols and categories."""
    add(
        "--careful-model",
        dest="careful_model",
        default=None,
        type=_model_name,
        metavar="NAME",
        help="Model to evaluate: 'reference' (BFCL's reference trajectories); a bfcl-eval registry name "
        "(Qwen3-8B-FC, claude-haiku-4-5-20251001-FC): run live on vLLM or the vendor's API, or with "
        "--careful-results the handler that decodes a logged run; a local model folder (with "
        "--careful-handler); or scripted:NAME, a deterministic test model (scripted:ask asks before every call)",
    )
    add(
        "--careful-results",
        dest="careful_results",
        default=None,
        type=_path,
        metavar="DIR",
        help="Rescore a logged BFCL run (bfcl generate's result files) found under DIR",
    )
    add(
        "--careful-decoder",
        dest="careful_decoder",
        default=None,
        metavar="KEY",
        help="bfcl-eval registry key whose handler decodes the logged run",
    )
    add(
        "--careful-protocol",
        dest="careful_protocol",
        default=("standard",),
        type=_csv(PROTOCOLS, "protocol"),
        metavar="LIST",
        help="Protocols to run, comma-separated (each one an item parameter, [standard]): standard (BFCL's own), "
        "hints (MCP effect hints in the function docs), confirm (a scripted user answers the model's questions); "
        "default: standard",
    )
    add(
        "--careful-category",
        dest="careful_category",
        default=None,
        type=_csv(SHORT_CATEGORIES, "category"),
        metavar="LIST",
        help="Categories, comma-separated: base, miss_func, miss_param, long_context, all "
        "(default: all; for a logged run, those it has result files for)",
    )


def _scoring_options(add: Callable[..., Any]) -> None:
    """How to score: the destructive boundary, the question detector, duplicate writes, the item's gate."""
    add(
        "--careful-boundary",
        dest="careful_boundary",
        default="final",
        choices=BOUNDARIES,
        type=_one_of(BOUNDARIES),
        help="Which functions count as destructive for the rules: final (default: the 24 any of the four "
        "annotators marked), majority (the 17 most of A1-A3 marked), or one annotator's own set: A1 and A4 "
        "human, A2 and A3 model annotators (declarations/destructive.yaml)",
    )
    add(
        "--careful-detector",
        dest="careful_detector",
        default="strict",
        choices=("strict", "question_mark", "last_sentence", "loose"),
        type=_one_of(("strict", "question_mark", "last_sentence", "loose")),
        help="Question detector the 'asked' rule uses",
    )
    add(
        "--careful-duplicate-writes",
        dest="careful_duplicate_writes",
        default="paper",
        choices=("paper", "visible"),
        type=_one_of(("paper", "visible")),
        help="Writes the duplicate-write rule covers: paper (every non-idempotent write, cd too), "
        "visible (all but the hidden-only cd)",
    )
    add(
        "--careful-gate",
        dest="careful_gate",
        default="safe",
        choices=GATES,
        type=_one_of(GATES),
        help="What fails an item: bfcl verdict, safe (default), strict, rules (any rule), none",
    )


def _scorecard_options(add: Callable[..., Any]) -> None:
    """Where scorecards go, and the baseline and accuracy floors of the release gate."""
    add(
        "--careful-scorecards",
        dest="careful_scorecards",
        default=Path("scorecards"),
        type=_path,
        metavar="DIR",
        help="Where scorecards are written (default: ./scorecards)",
    )
    add(
        "--careful-label",
        dest="careful_label",
        default=None,
        type=_label,
        metavar="NAME",
        help="Name of this run's scorecard folder (default: the model, or the results folder's name)",
    )
    add(
        "--careful-allow-missing",
        dest="careful_allow_missing",
        action="store_true",
        help="Release gates judge only the conversations that could be scored; unscored ones "
        "(missing, unreadable) are skipped instead of failed",
    )
    add(
        "--careful-allow-partial-baseline",
        dest="careful_allow_partial_baseline",
        action="store_true",
        help="Accept a --careful-baseline scorecard that scored only a selection of its run",
    )
    add(
        "--careful-baseline",
        dest="careful_baseline",
        default=None,
        type=_path,
        metavar="PATH",
        help="An earlier scorecard.json (or its folder) to compare with, paired McNemar",
    )
    add(
        "--careful-min-safe",
        dest="careful_min_safe",
        default=None,
        type=_fraction,
        metavar="X",
        help="Release gate: fail unless success under effect safety is at least X overall",
    )
    add(
        "--careful-min-bfcl",
        dest="careful_min_bfcl",
        default=None,
        type=_fraction,
        metavar="X",
        help="Release gate: fail unless BFCL accuracy is at least X overall",
    )


def _live_options(add: Callable[..., Any]) -> None:
    """Live runs: the local model's handler, the output folder, and the vLLM server (started or given)."""
    add(
        "--careful-handler",
        dest="careful_handler",
        default=None,
        metavar="KEY",
        help="With a local model directory as --careful-model: the bfcl-eval registry key "
        "whose handler prompts and decodes it",
    )
    add(
        "--careful-output",
        dest="careful_output",
        default=None,
        type=_path,
        metavar="DIR",
        help="Live runs: where result files go, as bfcl generate lays them out under "
        "DIR/<protocol> (default: ./result); rerunning resumes from them",
    )
    add(
        "--careful-endpoint",
        dest="careful_endpoint",
        default=None,
        action="append",
        type=endpoint_urls,
        metavar="URL[,URL...]",
        help="vLLM: use these running OpenAI-compatible servers (e.g. http://host:8000/v1) instead of "
        "starting one; several (comma-separated or repeated): a fleet, each conversation on one of "
        "them, moved to another when its server stops answering",
    )
    add(
        "--careful-vllm-arg",
        dest="careful_vllm_args",
        action="append",
        default=[],
        metavar="ARG",
        type=_vllm_args,
        help="vLLM: extra argument for the server the plugin starts (repeatable; '--flag=value' or '--flag value')",
    )
    add(
        "--careful-dtype",
        dest="careful_dtype",
        default=None,
        metavar="DTYPE",
        choices=VLLM_DTYPES,
        type=_one_of(VLLM_DTYPES),
        help="vLLM: server dtype (default: the BFCL handler's, as bfcl generate starts it; auto = vLLM's own choice)",
    )
    add(
        "--careful-max-model-len",
        dest="careful_max_model_len",
        default=None,
        type=positive_int,
        metavar="N",
        help="vLLM: server context length (default: the model's own, as bfcl generate); requests are sized to fit it",
    )
    add(
        "--careful-server-timeout",
        dest="careful_server_timeout",
        default=None,
        type=positive_number,
        metavar="SECONDS",
        help="vLLM: how long to wait for the server to become healthy",
    )


def _live_run_options(add: Callable[..., Any]) -> None:
    """Live runs: each request's timeout, Claude's spend cap, output tokens, repeats and concurrency."""
    add(
        "--careful-request-timeout",
        dest="careful_request_timeout",
        default=None,
        type=positive_number,
        metavar="SECONDS",
        help="vLLM and OpenAI-compatible servers: how long one request may go unanswered (default: "
        f"{DEFAULT_REQUEST_TIMEOUT:g}); past it the request is sent once more, then the run stops",
    )
    add(
        "--careful-budget-usd",
        dest="careful_budget_usd",
        default=None,
        type=float,
        metavar="USD",
        help="Claude: hard spending cap of the output folder, every session together (reruns too); "
        "a request that could cross it is not sent",
    )
    add(
        "--careful-max-output-tokens",
        dest="careful_max_output_tokens",
        default=None,
        type=int,
        metavar="N",
        help="Claude and vLLM: output token limit per request (default: BFCL's handler's: Claude 64000 for "
        "the models it lists; vLLM the context left, up to 4096)",
    )
    add(
        "--careful-repeat",
        dest="careful_repeat",
        default=None,
        type=positive_int,
        metavar="K",
        help="Live runs: run each conversation K times (result files in DIR/repeat-<k>/); the summary "
        "reports pass^K, pass@K and the flip rate",
    )
    add(
        "--careful-concurrency",
        dest="careful_concurrency",
        default=None,
        type=positive_int,
        metavar="C",
        help="Live runs: conversations in flight at once, all xdist workers and servers together (default: "
        "BFCL's 100 per vLLM server, 16 for Claude under the shared rate limiter, 8 otherwise)",
    )


def _protocol_options(add: Callable[..., Any]) -> None:
    """The confirm protocol's scripted user."""
    add(
        "--careful-user-script",
        dest="careful_user_script",
        default="default",
        choices=("default", "no_failure_yes", "asking_sentences_only"),
        type=_one_of(("default", "no_failure_yes", "asking_sentences_only")),
        help="Confirm protocol: how the scripted user answers: default (yes to a proposal of a destructive call "
        "the reference makes), or a stricter variant for a sensitivity study: no_failure_yes (no yes to a text "
        "reporting a failure), asking_sentences_only (a yes only when the question itself names the call)",
    )


def _regression_options(add: Callable[..., Any]) -> None:
    """The release gate's regression test against the baseline."""
    add(
        "--careful-fail-on-regression",
        dest="careful_fail_on_regression",
        default=None,
        type=_fraction,
        metavar="ALPHA",
        help="Release gate: fail when a category is significantly worse than the baseline (p < ALPHA)",
    )


def _budget_options(add: Callable[..., Any]) -> None:
    """Each conversation's scoring budget."""
    add(
        "--careful-max-calls",
        dest="careful_max_calls",
        default=DEFAULT_MAX_CALLS,
        type=positive_int,
        metavar="N",
        help=f"Budget of each conversation's scoring: calls replayed (default {DEFAULT_MAX_CALLS:,}); "
        "over it, that conversation fails with a resource_limit reason",
    )
    add(
        "--careful-max-seconds",
        dest="careful_max_seconds",
        default=DEFAULT_MAX_SECONDS,
        type=positive_number,
        metavar="S",
        help=f"Budget of each conversation's scoring: wall time (default {DEFAULT_MAX_SECONDS:g} s)",
    )
    add(
        "--careful-max-memory-mb",
        dest="careful_max_memory_mb",
        default=DEFAULT_MAX_MEMORY_MB,
        type=positive_number,
        metavar="MB",
        help=f"Budget of each conversation's scoring: state snapshots, calls and results held, and every "
        f"value the decoder or a call builds ('a' * 199999, [x] * 100000) at the length of its text, "
        f"counted (default {DEFAULT_MAX_MEMORY_MB:g} MB)",
    )


def _junit_options(add: Callable[..., Any]) -> None:
    """JUnit XML."""
    add(
        "--careful-junit-strict",
        dest="careful_junit_strict",
        action="store_true",
        help="JUnit XML valid against Jenkins' junit-10.xsd: each conversation's careful_* values go to "
        "<system-out> as name=value lines instead of testcase <properties>",
    )


def read_options(config: pytest.Config) -> RunConfig:
    """Options, cross-checked; conflicts raise ``pytest.UsageError``."""
    get = config.getoption
    model, results = get("careful_model"), get("careful_results")
    options = RunConfig(
        active=bool(model or results),
        model=model or "",
        results=results,
        decoder=get("careful_decoder"),
        protocols=get("careful_protocol"),
        categories=get("careful_category") or CATEGORIES,
        boundary=get("careful_boundary"),
        detector=get("careful_detector"),
        gate=get("careful_gate"),
        scorecards=get("careful_scorecards"),
        baseline=get("careful_baseline"),
        min_safe=get("careful_min_safe"),
        min_bfcl=get("careful_min_bfcl"),
        fail_on_regression=get("careful_fail_on_regression"),
        handler=get("careful_handler"),
        output=_or(get("careful_output"), DEFAULT_OUTPUT),
        endpoint=tuple(dict.fromkeys(u for urls in get("careful_endpoint") or () for u in urls)),
        vllm_args=tuple(a for args in get("careful_vllm_args") or () for a in args),
        dtype=get("careful_dtype"),
        max_model_len=get("careful_max_model_len"),
        server_timeout=_or(get("careful_server_timeout"), DEFAULT_SERVER_TIMEOUT),
        request_timeout=_or(get("careful_request_timeout"), DEFAULT_REQUEST_TIMEOUT),
        budget_usd=get("careful_budget_usd"),
        max_output_tokens=get("careful_max_output_tokens"),
        user_script=get("careful_user_script"),
        worker=hasattr(config, "workerinput"),
        collect_only=bool(get("collectonly", False)),
        given=frozenset(flag for dest, flag in SCOPED_OPTIONS.items() if get(dest) not in (None, [])),
        categories_given=get("careful_category") is not None,
        label=get("careful_label"),
        allow_missing=get("careful_allow_missing"),
        allow_partial_baseline=get("careful_allow_partial_baseline"),
        junit_strict=get("careful_junit_strict"),
        limits=Limits(get("careful_max_calls"), get("careful_max_seconds"), get("careful_max_memory_mb")),
        duplicate_writes=get("careful_duplicate_writes"),
        repeat=_or(get("careful_repeat"), 1),
        concurrency=get("careful_concurrency"),
    )
    if options.active:
        _validate(options)
    elif options.release_gate or options.baseline or options.decoder:
        raise pytest.UsageError("--careful-* options need --careful-model or --careful-results to select a run")
    return options


def _or(value: Any, default: Any) -> Any:
    return default if value is None else value


def _validate(options: RunConfig) -> None:
    _refuse_inapplicable(options)
    if options.results is not None:
        if not options.results.is_dir():
            # A relative path is the working directory's, as pytest reads its own (an ini file's
            # addopts included): say which, for a command run from a subdirectory of the project.
            where = "" if options.results.is_absolute() else f" (relative to the working directory {Path.cwd()})"
            raise pytest.UsageError(f"--careful-results: {options.results} is not a directory{where}")
        if options.model == REFERENCE_MODEL:
            raise pytest.UsageError(
                "--careful-model=reference replays the references; it cannot be combined with --careful-results"
            )
        if not (options.decoder or options.model or recorded_decoder(options.results)):
            raise pytest.UsageError(
                "--careful-results needs --careful-decoder KEY (or --careful-model NAME) "
                "to know which bfcl-eval handler decodes the run (a run pytest-careful made records it "
                "in careful_settings.json; this folder holds none that names one)"
            )
    if options.live and options.output.exists() and not options.output.is_dir():
        raise pytest.UsageError(f"--careful-output: {options.output} exists and is not a directory")
    if options.budget_usd is not None and not 0 < options.budget_usd < float("inf"):  # NaN too
        raise pytest.UsageError("--careful-budget-usd must be a positive number of dollars")
    if options.max_output_tokens is not None and options.max_output_tokens < 1:
        raise pytest.UsageError("--careful-max-output-tokens must be at least 1")
    if options.fail_on_regression is not None and options.baseline is None:
        raise pytest.UsageError("--careful-fail-on-regression needs --careful-baseline")
    if options.baseline is not None and not os.path.exists(options.baseline):
        raise pytest.UsageError(f"--careful-baseline: {options.baseline} does not exist")
    if options.scorecards.exists() and not options.scorecards.is_dir():
        raise pytest.UsageError(f"--careful-scorecards: {options.scorecards} exists and is not a directory")
    if options.repeat > 1 and options.baseline is not None:
        raise pytest.UsageError(
            "--careful-baseline pairs one run with another; with --careful-repeat, compare "
            "the repeats' scorecard folders with careful-report (or one repeat-<k> folder)"
        )
    if options.allow_partial_baseline and options.baseline is None:
        raise pytest.UsageError(
            "--careful-allow-partial-baseline applies to a --careful-baseline scorecard; none was given"
        )
    if options.user_script != "default" and "confirm" not in options.protocols:
        raise pytest.UsageError(
            f"--careful-user-script={options.user_script}: the scripted user answers under "
            "the confirm protocol only; add --careful-protocol=confirm"
        )


def _refuse_inapplicable(options: RunConfig) -> None:
    """--careful-decoder without a logged run; live-run options without a live run."""
    if options.results is None and "--careful-decoder" in options.given:
        raise pytest.UsageError(
            "--careful-decoder names the handler that decodes a logged run: it applies "
            "to --careful-results only (a live run decodes with its model's own handler)"
        )
    unused = sorted(options.given - {"--careful-decoder"})
    if options.live or not unused:
        return
    run = (
        "--careful-model=reference replays the references"
        if options.results is None
        else "--careful-results rescores a logged run"
    )
    raise pytest.UsageError(
        f"{', '.join(unused)}: for live runs (a model the plugin runs) only; {run}, which this would not change"
    )
