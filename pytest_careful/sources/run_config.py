"""A run's settings as one frozen dataclass (``RunConfig``), with no pytest in it.

Its pytest registration and the checks of the command line live in ``harness/options.py``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..execution.limits import Limits

#: ``--careful-model=reference``: the references themselves, replayed (every verdict passes).
REFERENCE_MODEL = "reference"
#: ``--careful-server-timeout``'s default, in seconds.
DEFAULT_SERVER_TIMEOUT = 1800.0
#: ``--careful-request-timeout``'s default, in seconds: sized for the slowest real answer (4096 tokens
#: from a loaded CPU engine take about two minutes), not for a hung server (BFCL passes 72000).
DEFAULT_REQUEST_TIMEOUT = 300.0
#: ``--careful-session-header``'s default: the header vllm-router's ``consistent_hash`` policy reads first,
#: and Ray Serve's and llm-d's session routing read by default.
DEFAULT_SESSION_HEADER = "x-session-id"


class SourceError(ValueError):
    """A run that cannot be read as asked (a missing folder, an unknown decoder): one line for the user.

    The harness turns it into ``pytest.UsageError``; the Python API raises it as it is.
    """


@dataclass(frozen=True)
class RunConfig:
    """A run's settings, validated: what every stage below ``harness`` reads, with no pytest in it.

    ``harness.options.read_options`` builds it once from the command line;
    ``pytest_careful.score_run`` builds one from its arguments. ``active`` is false when the
    plugin was not asked for.
    """

    active: bool
    model: str
    results: Path | None
    decoder: str | None
    protocols: tuple[str, ...]
    categories: tuple[str, ...]  # resolved: CATEGORIES when not given (see categories_given)
    boundary: str
    detector: str
    gate: str
    scorecards: Path
    baseline: Path | None
    min_safe: float | None
    min_bfcl: float | None
    fail_on_regression: float | None
    #: the verdict a baseline comparison pairs (``reports.options.REGRESSION_VERDICTS``)
    regression_verdict: str = "safe"
    handler: str | None = None
    output: Path = Path("result")
    endpoint: tuple[str, ...] = ()  # --careful-endpoint: running servers, in the order given
    vllm_args: tuple[str, ...] = ()
    dtype: str | None = None  # None: the BFCL handler's, as bfcl generate starts the server
    max_model_len: int | None = None
    server_timeout: float = DEFAULT_SERVER_TIMEOUT
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT  # each request to a vLLM or OpenAI-compatible server
    #: the header each request to an OpenAI-compatible server carries its conversation's session key in
    #: (``live/session_key.py``); "" sends none
    session_header: str = DEFAULT_SESSION_HEADER
    budget_usd: float | None = None
    max_output_tokens: int | None = None  # None: BFCL's handler's own
    user_script: str = "default"
    worker: bool = False  # an xdist worker (config.workerinput), not the controller
    collect_only: bool = False  # --collect-only: nothing runs (checks of keys and engines wait)
    given: frozenset[str] = frozenset()  # the SCOPED_OPTIONS given, as flags
    categories_given: bool = True  # --careful-category given (else a logged run's own categories)
    protocols_given: bool = True  # --careful-protocol given (else the default, standard)
    #: the categories only of the conversations named as node ids (a selection's denominator is the run's)
    categories_from_node_ids: bool = False
    label: str | None = None
    allow_missing: bool = False
    allow_partial_baseline: bool = False
    junit_strict: bool = False
    limits: Limits = Limits()  # each conversation's scoring budget
    duplicate_writes: str = "paper"  # rules.DUPLICATE_WRITES
    repeat: int = 1  # --careful-repeat: runs of each conversation (live runs only)
    concurrency: int | None = None  # --careful-concurrency (None: the backend's default, live/inflight.py)
    audit: str = "mark"  # --careful-audit: off, mark or exclude (verify/options.py)
    optimize: bool = False  # --careful-optimize: the opt-in verified_surplus_calls rule

    @property
    def live(self) -> bool:
        return self.results is None and self.model != REFERENCE_MODEL

    @property
    def release_gate(self) -> bool:
        return any(x is not None for x in (self.min_safe, self.min_bfcl, self.fail_on_regression))
