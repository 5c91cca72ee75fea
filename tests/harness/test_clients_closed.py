"""A rescoring session leaves no API client open, in any of its processes (``open_clients``): its
decoders are BFCL handlers, which open one when built. Under the README's test command, decoders
built in the suite's own workers printed 9 "Exception ignored in: SyncHttpxClientWrapper.__del__"
tracebacks at exit; the plugin's runs the same in theirs."""

from __future__ import annotations

import pytest
from open_clients import COUNTING, open_clients

from conftest import ROOT

EXAMPLE = ROOT / "examples" / "smollm2-135m-vllm-cpu"
MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}


@pytest.mark.parametrize("mode", list(MODES))
def test_rescoring_leaves_no_client_open(pytester: pytest.Pytester, mode: str) -> None:
    """The shipped SmolLM2 run: its decoder and the format check's candidates are OSS handlers."""
    pytester.makeconftest(COUNTING)
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", *MODES[mode], f"--careful-results={EXAMPLE}", "multi_turn_base_105"
    )
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()[-2000:]
    assert open_clients(pytester.path, 1 if mode == "no-xdist" else 3) == []
    assert "Exception ignored" not in result.stderr.str()
