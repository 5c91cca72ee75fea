"""What the tests' loopback servers share (loopback_vllm, fault_proxy, loopback_hub): an HTTP server
served on a daemon thread for a bounded time, and a context manager around start and stop."""

from __future__ import annotations

import threading
from http.server import ThreadingHTTPServer
from types import TracebackType

from typing_extensions import Self  # typing.Self is 3.11+; the project supports 3.10


def serve(
    httpd: ThreadingHTTPServer, name: str, lifetime: float | None, stop: object, poll: float = 0.05
) -> threading.Timer | None:
    """Serve ``httpd`` on a daemon thread; after ``lifetime`` seconds ``stop()`` is called (None: never).

    The bound is what keeps a hung test from leaving a server behind it.
    """
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": poll}, name=name, daemon=True).start()
    if lifetime is None:
        return None
    timer = threading.Timer(lifetime, stop)  # type: ignore[arg-type]
    timer.daemon = True
    timer.start()
    return timer


def shut(httpd: ThreadingHTTPServer | None, timer: threading.Timer | None) -> None:
    """Stop serving and close the socket; cancel the lifetime's timer."""
    if httpd is not None:
        httpd.shutdown()
        httpd.server_close()
    if timer is not None:
        timer.cancel()


class Serving:
    """``with Server(...) as server:`` for a class with ``start() -> Self`` and ``stop()``."""

    def start(self) -> Self:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
