"""A rescoring session leaves no API client alive, in any of its processes (``open_clients``): its
decoders are BFCL handlers, which open one when built, and a client alive at the interpreter's
exit prints "Exception ignored in: SyncHttpxClientWrapper.__del__" and a traceback (9 of them
under the README's test command)."""

from __future__ import annotations

import pytest
from open_clients import COUNTING, clients_left

from conftest import ROOT

EXAMPLE = ROOT / "examples" / "smollm2-135m-vllm-cpu"
MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}


@pytest.mark.parametrize("mode", list(MODES))
def test_rescoring_leaves_no_client_alive(pytester: pytest.Pytester, mode: str) -> None:
    """The shipped SmolLM2 run: its decoder and the format check's candidates are OSS handlers."""
    pytester.makeconftest(COUNTING)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *MODES[mode], f"--careful-results={EXAMPLE}", "multi_turn_base_105"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-2000:]
    assert clients_left(pytester.path, 1 if mode == "no-xdist" else 3) == []
    assert "Exception ignored" not in result.stderr.str()
