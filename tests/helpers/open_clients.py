"""What a session leaves for the interpreter's exit: a conftest that lists, in each process, the SDK
clients still alive after the plugin's own ``pytest_unconfigure`` (open or closed), and the reader
of its lists.

BFCL's handlers open an HTTP client when built (an OSS handler an OpenAI client for its local
server, Claude's an Anthropic client). One still alive at the interpreter's exit meets the SDK's
``__del__`` after httpx is torn down, which prints ``Exception ignored in:
SyncHttpxClientWrapper.__del__`` and a traceback, closed or not (``is_closed`` reads a module
global that is None by then).
"""

from __future__ import annotations

from pathlib import Path

#: A conftest.py: each process (the controller, every xdist worker) files the modules of its live clients.
COUNTING = """
import gc, os
import pytest


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config):
    gc.unfreeze()  # the plugin froze what it built at start (gc_pause): gc.get_objects() would not see it
    gc.collect()
    left = [type(o).__module__ for o in gc.get_objects() if type(o).__name__ == "SyncHttpxClientWrapper"]
    with open(os.path.join(str(config.rootpath), f"open-clients-{os.getpid()}.txt"), "w") as out:
        out.write(" ".join(left))
"""


def clients_left(folder: Path, processes: int) -> list[str]:
    """The clients the ``processes`` processes of a session rooted at ``folder`` left alive."""
    counts = sorted(folder.glob("open-clients-*.txt"))
    assert len(counts) == processes, counts  # the controller and each worker counted
    return [client for f in counts for client in f.read_text().split()]
