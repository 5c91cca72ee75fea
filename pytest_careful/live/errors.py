"""What can go wrong with a live conversation, as exceptions every live module raises or catches.

Their own module: the backends (:mod:`.backends.claude`, :mod:`.backends.vllm.server`, :mod:`.backends.vllm.client`), the spend guard
(:mod:`.backends.claude.budget`) and the source (:mod:`.source`) all use them, and the source imports the backends.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..sources.run_config import DEFAULT_REQUEST_TIMEOUT as DEFAULT_REQUEST_TIMEOUT  # live modules' name for it

if TYPE_CHECKING:
    from ..data.result_files import LoggedEntry


class LiveError(RuntimeError):
    """A conversation that could not be run (API, server, budget); it is retried next time.

    ``entry`` is the error entry written for it, when the run goes on: the
    conversation is then scored as BFCL scores it (an inference error, a
    failure), so the scorecard agrees with ``bfcl evaluate`` on the same file.
    """

    def __init__(self, message: str, entry: LoggedEntry | None = None) -> None:
        super().__init__(message)
        self.entry = entry


class StopRun(LiveError):
    """A problem that ends the whole run (credit exhausted, budget spent, server dead)."""


class RunAgain(LiveError):
    """The conversation could not run where it was sent and can elsewhere (another server)."""


class NotRun(LiveError):
    """Not run in this session through no fault of the model (rate limits outlasted every
    retry, or the run stopped): nothing is written, the item is skipped with the reason,
    and a rerun of the same command runs it."""


class ServerStopped(StopRun):
    """The server stopped answering, or hung: the run stops, and the conversation that met it is
    unscored (``careful:server_error``), never filed as the model's inference error."""


class ServerError(LiveError):
    """The server kept failing one request (5xx, a body that does not parse, a reset connection)
    while it answered others: the conversation is unscored (``careful:server_error``), nothing is
    filed, and a rerun of the same command runs it. The run goes on."""


class OutputUnwritable(StopRun):
    """The output folder cannot take what the run must write (disk full, read-only): the run stops
    at once, and nothing more is sent (a result that cannot be filed would be thrown away)."""


class SetupFailed(LiveError):
    """This plugin could not set up a conversation (its simulators): neither the model's fault nor
    the server's. Unscored, nothing filed, and a rerun of the same command runs it."""


class ServerHung(ServerStopped):
    """The server did not answer a request twice within ``--careful-request-timeout``.

    ``url``: that server's, where known (a fleet's server that hangs leaves the fleet: ``backends.vllm.fleet_client``).
    """

    def __init__(self, message: str, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url


class ServerGone(ServerStopped):
    """The server answered an error status and then stopped answering (``/models``): it is going or gone.

    ``url``: that server's (a fleet's server that is gone leaves the fleet: ``backends.vllm.fleet_client``).
    """

    def __init__(self, message: str, url: str | None = None) -> None:
        super().__init__(message)
        self.url = url
