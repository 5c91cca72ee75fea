"""The live stage's options: the local model's handler, the output folder, the vLLM server (started
or given), each request's timeout, Claude's spend cap, output tokens, repeats and concurrency.

They sit below ``live/`` (in the sources stage, beside ``RunConfig``'s live settings), so that the
live modules can name them too. Each applies to live runs only: its default is None, so that one
given where it does not apply is refused instead of silently ignored (``harness/options.py``).
"""

from __future__ import annotations

import argparse
import re
import shlex
from urllib.parse import urlsplit

from ..common.options import Option, path, positive_int, positive_number
from .options import HANDLER, MODEL
from .run_config import DEFAULT_REQUEST_TIMEOUT, DEFAULT_SESSION_HEADER


def endpoint_urls(value: str) -> tuple[str, ...]:
    """One or more server URLs, comma-separated; ``http://host:8000`` means its ``/v1``."""
    urls = tuple(_api_root(u.strip().rstrip("/")) for u in value.split(",") if u.strip())
    bad = [u for u in urls if not _valid_url(u)]
    if not urls or bad:
        raise argparse.ArgumentTypeError(f"{(bad or [value])[0]!r}: expected http(s) URLs such as http://host:8000/v1")
    return urls


def _valid_url(url: str) -> bool:
    """http(s), a host, a port that is a number, no blanks: what urllib can open."""
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
    try:
        bare = urlsplit(url).path == "" and url.startswith(("http://", "https://"))
    except ValueError:  # e.g. a malformed port or IPv6 address: refused by the caller
        return url
    return url + "/v1" if bare else url


#: vLLM's --dtype values (0.32).
VLLM_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")

OUTPUT = Option(
    "--careful-output",
    type=path,
    metavar="DIR",
    help="Live runs: where result files go, as bfcl generate lays them out under "
    "DIR/<protocol> (default: ./result); rerunning resumes from them",
)
ENDPOINT = Option(
    "--careful-endpoint",
    action="append",
    type=endpoint_urls,
    metavar="URL[,URL...]",
    help="vLLM: use these running OpenAI-compatible servers (e.g. http://host:8000/v1) instead of "
    "starting one; several (comma-separated or repeated): a fleet, each conversation on one of "
    "them, moved to another when its server stops answering",
)
DTYPE = Option(
    "--careful-dtype",
    metavar="DTYPE",
    choices=VLLM_DTYPES,
    help="vLLM: server dtype (default: the BFCL handler's, as bfcl generate starts it; auto = vLLM's own choice)",
)
MAX_MODEL_LEN = Option(
    "--careful-max-model-len",
    type=positive_int,
    metavar="N",
    help="vLLM: server context length (default: the model's own, as bfcl generate); requests are sized to fit it",
)

#: Server flags the plugin sets itself: another value would start a server it cannot find or name.
_OWN_SERVER_FLAGS = {
    "--host": "it listens on 127.0.0.1",
    "--port": "it listens on a free port the plugin picks",
    "--served-model-name": "requests name the model as BFCL's handler does",
    "--model": f"{MODEL} names it",
}
#: Server flags with an option of their own (shown in the summary as a difference from BFCL's settings).
_SERVER_OPTIONS = {"--dtype": DTYPE, "--max-model-len": MAX_MODEL_LEN}


def _vllm_args(value: str) -> tuple[str, ...]:
    """One ``--careful-vllm-arg``: a flag, ``--flag=value`` or ``"--flag value"`` (split as a shell would)."""
    try:
        args = tuple(shlex.split(value))
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{value!r}: {exc}") from None
    for arg in args:
        flag = arg.split("=", 1)[0]
        if flag in _OWN_SERVER_FLAGS:
            raise argparse.ArgumentTypeError(
                f"{flag} is set by the plugin ({_OWN_SERVER_FLAGS[flag]}); "
                f"to use a server of your own, start it and pass {ENDPOINT}"
            )
        if flag in _SERVER_OPTIONS:
            raise argparse.ArgumentTypeError(
                f"use {_SERVER_OPTIONS[flag]} for {flag} (the summary then names it as a difference from bfcl generate)"
            )
    return args


VLLM_ARG = Option(
    "--careful-vllm-arg",
    dest="careful_vllm_args",
    action="append",
    default=[],
    metavar="ARG",
    type=_vllm_args,
    help="vLLM: extra argument for the server the plugin starts (repeatable; '--flag=value' or '--flag value')",
)
SERVER_TIMEOUT = Option(
    "--careful-server-timeout",
    type=positive_number,
    metavar="SECONDS",
    help="vLLM: how long to wait for the server to become healthy",
)
REQUEST_TIMEOUT = Option(
    "--careful-request-timeout",
    type=positive_number,
    metavar="SECONDS",
    help="vLLM and OpenAI-compatible servers: how long one request may go unanswered (default: "
    f"{DEFAULT_REQUEST_TIMEOUT:g}); past it the request is sent once more, then the run stops",
)
#: What a header name may hold (RFC 9110's token).
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
#: Headers the OpenAI SDK or HTTP itself sets: a session key there would break the request.
_SET_BY_THE_CLIENT = frozenset(
    {"authorization", "api-key", "accept", "connection", "content-length", "content-type", "host", "transfer-encoding"}
)
#: ``--careful-session-header``'s value that sends no session key.
NO_SESSION_HEADER = "none"


def session_header(value: str) -> str:
    """A header name (lowercase, as HTTP/2 sends it), or "" for ``none``."""
    name = value.strip().lower()
    if name == NO_SESSION_HEADER:
        return ""
    if not _TOKEN.fullmatch(name):
        raise argparse.ArgumentTypeError(f"{value!r}: not an HTTP header name (letters, digits and -_.!#$%&'*+^`|~)")
    if name in _SET_BY_THE_CLIENT or name.startswith("x-stainless-"):
        raise argparse.ArgumentTypeError(f"{value!r}: the OpenAI SDK sets that header itself; choose another name")
    return name


SESSION_HEADER = Option(
    "--careful-session-header",
    type=session_header,
    metavar="NAME",
    help="vLLM and OpenAI-compatible servers: the HTTP header that carries each conversation's session "
    f"key, for a router that keeps a conversation on one server (default: {DEFAULT_SESSION_HEADER}; "
    f"{NO_SESSION_HEADER} sends none)",
)
BUDGET_USD = Option(
    "--careful-budget-usd",
    type=float,
    metavar="USD",
    help="Claude: hard spending cap of the output folder, every session together (reruns too); "
    "a request that could cross it is not sent",
)
MAX_OUTPUT_TOKENS = Option(
    "--careful-max-output-tokens",
    type=int,
    metavar="N",
    help="Claude and vLLM: output token limit per request (default: BFCL's handler's: Claude 64000 for "
    "the models it lists; vLLM the context left, up to 4096)",
)
REPEAT = Option(
    "--careful-repeat",
    type=positive_int,
    metavar="K",
    help="Live runs: run each conversation K times (result files in DIR/repeat-<k>/); the summary "
    "reports pass^K, pass@K and the flip rate",
)
CONCURRENCY = Option(
    "--careful-concurrency",
    type=positive_int,
    metavar="C",
    help="Live runs: conversations in flight at once, all xdist workers and servers together (default: "
    "BFCL's 100 per vLLM server, 16 for Claude under the shared rate limiter, 8 otherwise)",
)

#: The server's options and the run's, in the order ``--help`` lists them.
OPTIONS = (HANDLER, OUTPUT, ENDPOINT, VLLM_ARG, DTYPE, MAX_MODEL_LEN, SERVER_TIMEOUT)
RUN_OPTIONS = (REQUEST_TIMEOUT, SESSION_HEADER, BUDGET_USD, MAX_OUTPUT_TOKENS, REPEAT, CONCURRENCY)
