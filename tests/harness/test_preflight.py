"""What would fail every conversation alike is one usage error, before any item runs.

A missing key, engine or library, and an option that does not apply to the chosen
model, are refused by the controller in ``pytest_configure``: pytest prints the
message once (``ERROR: ...``) and exits 4, with or without xdist, and no item runs.
The user-visible output is checked in a child pytest (pytester); the table of
refused options runs in-process (``parseconfigure``), where only the message matters.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

MODES = {"no-xdist": ["-p", "no:xdist"], "n2": ["-n", "2"]}
CLAUDE = "claude-haiku-4-5-20251001-FC"
VLLM_MODEL = "Qwen3-8B-FC"  # one key: the plain name is ambiguous (FC or prompting)
IDS = ("multi_turn_base_0", "multi_turn_base_1")


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("-p", "no:cacheprovider", *args, *IDS, timeout=120)


def _output(result: pytest.RunResult) -> str:
    return "\n".join(result.outlines + result.errlines)


def _refused_once(result: pytest.RunResult, message: str) -> str:
    """The run stopped with a usage error that says ``message`` once; nothing ran."""
    text = _output(result)
    assert result.ret == pytest.ExitCode.USAGE_ERROR, text[-3000:]
    assert text.count(message) == 1, text[-3000:]
    assert "Traceback" not in text and "INTERNALERROR" not in text
    assert " passed" not in text and " failed" not in text
    return text


# ---------------------------------------------------------------- missing key, engine, library


@pytest.mark.parametrize("mode", list(MODES))
def test_claude_without_a_key_is_one_usage_error(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    result = _run(pytester, f"--careful-model={CLAUDE}", *MODES[mode])
    text = _refused_once(result, "ANTHROPIC_API_KEY is not set")
    assert f"ERROR: --careful-model={CLAUDE}: ANTHROPIC_API_KEY is not set" in text


def test_claude_cost_estimate_needs_no_key(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("ANTHROPIC_AUTH_TOKEN", raising=False)
    result = _run(pytester, f"--careful-model={CLAUDE}", "--careful-budget-usd=5", "--collect-only", "-q")
    assert result.ret == pytest.ExitCode.OK, _output(result)[-3000:]
    assert "careful: estimated cost of 2 conversations" in _output(result)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vllm is installed here")
@pytest.mark.parametrize("mode", list(MODES))
def test_vllm_model_without_the_engine_is_one_usage_error(pytester: pytest.Pytester, mode: str) -> None:
    result = _run(pytester, f"--careful-model={VLLM_MODEL}", *MODES[mode])
    text = _refused_once(result, f"ERROR: --careful-model={VLLM_MODEL}: it runs on vLLM")
    assert "pip install 'pytest-careful[vllm]'" in text


@pytest.mark.skipif(importlib.util.find_spec("transformers") is not None, reason="transformers is installed here")
@pytest.mark.parametrize("mode", list(MODES))
def test_running_server_without_transformers_says_why_it_is_still_needed(pytester: pytest.Pytester, mode: str) -> None:
    result = _run(pytester, f"--careful-model={VLLM_MODEL}", "--careful-endpoint=http://127.0.0.1:9/v1", *MODES[mode])
    text = _refused_once(result, "--careful-endpoint still needs transformers here")
    assert "counts a prompt's tokens with the model's tokenizer" in text and "pip install transformers" in text
    assert "vllm" not in text.lower().replace("vllm-served", "")  # the engine is not what is missing
    assert "point --careful-endpoint" not in text  # not offered as the way out: it is the way in


def test_running_server_needs_no_engine(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """With --careful-endpoint, transformers importable and vllm not, the run gets past the
    checks to fetching the tokenizer (here: offline, not cached, the next usage error)."""
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here")
    stand_in = tmp_path / "stand-in"
    (stand_in / "transformers").mkdir(parents=True)
    (stand_in / "transformers/__init__.py").write_text("")  # found by the check, never imported before the fetch
    monkeypatch.setenv("PYTHONPATH", str(stand_in))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "empty-hf-home"))
    result = _run(pytester, "--careful-model=Qwen/Qwen3-8B", "--careful-endpoint=http://127.0.0.1:9/v1", "-n", "2")
    text = _refused_once(result, "Qwen/Qwen3-8B is not (fully) in the Hugging Face cache")
    said = "\n".join(line for line in text.splitlines() if not line.startswith("careful: model "))  # the resolution
    assert "vllm" not in said.lower().replace("vllm-served", "")


# ---------------------------------------------------------------- options that do not apply

REFUSED = [
    (["--careful-model=reference", "--careful-budget-usd=5"], "--careful-budget-usd: for live runs"),
    (["--careful-model=reference", "--careful-output=out"], "--careful-output: for live runs"),
    (["--careful-model=reference", "--careful-handler=Qwen3-8B"], "--careful-handler: for live runs"),
    (["--careful-model=reference", "--careful-decoder=Qwen3-8B"], "applies to --careful-results only"),
    (
        ["--careful-results=anywhere", "--careful-decoder=Qwen3-8B", "--careful-output=out"],
        "--careful-output: for live runs (a model the plugin runs) only; --careful-results rescores",
    ),
    (
        ["--careful-results=anywhere", "--careful-model=Qwen3-8B", "--careful-max-output-tokens=9"],
        "--careful-max-output-tokens: for live runs",
    ),
    (
        ["--careful-model=scripted:reference", "--careful-max-output-tokens=9"],
        "sets the output limit of Claude and vLLM-served models",
    ),
    (
        ["--careful-model=scripted:reference", "--careful-vllm-arg=--enforce-eager"],
        "--careful-vllm-arg is for vLLM-served models",
    ),
    (["--careful-model=scripted:reference", "--careful-handler=Qwen3-8B"], "is a scripted model"),
    (["--careful-model=scripted:reference", "--careful-decoder=Qwen3-8B"], "applies to --careful-results only"),
    ([f"--careful-model={CLAUDE}", "--careful-dtype=float32"], "--careful-dtype is for vLLM-served models"),
    (
        [f"--careful-model={CLAUDE}", "--careful-endpoint=http://127.0.0.1:9/v1"],
        "--careful-endpoint is for vLLM-served models",
    ),
    ([f"--careful-model={VLLM_MODEL}", "--careful-budget-usd=5"], "covers Claude models only"),
    (
        [
            f"--careful-model={VLLM_MODEL}",
            "--careful-endpoint=http://127.0.0.1:9/v1",
            "--careful-dtype=float32",
            "--careful-server-timeout=5",
        ],
        "--careful-dtype, --careful-server-timeout: settings of the server",
    ),
    ([f"--careful-model={VLLM_MODEL}", "--careful-handler=Qwen3-8B"], "is not a directory"),
    (["--careful-model=reference", "--careful-session-header=x-user-id"], "--careful-session-header: for live runs"),
    (
        ["--careful-model=scripted:reference", "--careful-session-header=x-user-id"],
        "--careful-session-header names the header of a session key sent to vLLM and OpenAI-compatible servers; "
        "scripted:reference is not served by one",
    ),
    (
        [f"--careful-model={CLAUDE}", "--careful-session-header=none"],
        "is not served by one (Claude's requests go through the Anthropic SDK)",
    ),
]


@pytest.mark.parametrize("args, message", REFUSED, ids=[" ".join(a) for a, _ in REFUSED])
def test_an_option_that_does_not_apply_is_refused(pytester: pytest.Pytester, args: list[str], message: str) -> None:
    with pytest.raises(pytest.UsageError, match=_escaped(message)):
        pytester.parseconfigure(*args, "--collect-only")


@pytest.mark.parametrize(
    "args",
    [
        [f"--careful-model={CLAUDE}", "--careful-budget-usd=5", "--careful-max-output-tokens=9"],
        [
            f"--careful-model={VLLM_MODEL}",
            "--careful-dtype=float32",
            "--careful-max-model-len=4096",
            "--careful-vllm-arg=--enforce-eager",
            "--careful-server-timeout=5",
            "--careful-output=out",
        ],
        [f"--careful-model={VLLM_MODEL}", "--careful-endpoint=http://127.0.0.1:9/v1"],
        [f"--careful-model={VLLM_MODEL}", "--careful-max-output-tokens=9"],
        [f"--careful-model={VLLM_MODEL}", "--careful-session-header=x-user-id"],
        ["--careful-model=gpt-4.1-2025-04-14-FC", "--careful-session-header=none"],
    ],
    ids=[
        "claude",
        "vllm-server",
        "vllm-endpoint",
        "vllm-max-output-tokens",
        "vllm-session-header",
        "api-session-header",
    ],
)
def test_the_same_options_are_accepted_where_they_apply(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, args: list[str]
) -> None:
    monkeypatch.setenv("CAREFUL_RUN_ID", "preflight-test")  # a Claude run would export a fresh one
    config = pytester.parseconfigure(*args, "--collect-only")
    assert config.pluginmanager.get_plugin("careful-session") is not None


@pytest.mark.parametrize("mode", list(MODES))
def test_a_refused_option_is_reported_once(pytester: pytest.Pytester, mode: str) -> None:
    result = _run(pytester, "--careful-model=scripted:reference", "--careful-budget-usd=5", *MODES[mode])
    _refused_once(result, "--careful-budget-usd: the spend guard covers Claude models only")


def _escaped(text: str) -> str:
    import re

    return re.escape(text)


def test_several_endpoints_are_read_in_order_and_bad_ones_refused(pytester: pytest.Pytester) -> None:
    import argparse

    from pytest_careful.sources.live_options import endpoint_urls

    assert endpoint_urls("http://a:8000/v1, http://b:8000/v1/") == ("http://a:8000/v1", "http://b:8000/v1")
    with pytest.raises(argparse.ArgumentTypeError, match="expected http"):
        endpoint_urls("gpu-box:8000")
    result = pytester.runpytest_subprocess(
        "-p", "no:cacheprovider", f"--careful-model={VLLM_MODEL}", "--careful-endpoint=gpu-box:8000", timeout=120
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "expected http(s) URLs" in "\n".join(result.errlines)
