"""``pytest_careful_model_handlers``: a model of one's own (an internal gateway) runs live and rescored.

The gateway is a subclass of BFCL's OpenAI Responses handler whose client points at the loopback server
(tests/helpers/loopback_vllm.py) through a setting of its own, not OPENAI_BASE_URL: what a team with an
internal endpoint writes. The server sees the model name the entry gives; the run files, scores and
rescores its output like any registered model's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from careful_cli import careful_command, filed_once
from loopback_vllm import LoopbackVLLM

import pytest_careful
from pytest_careful.execution import decoding

IDS = ["multi_turn_base_0", "multi_turn_base_1"]
CONFTEST = '''
import os

from bfcl_eval.model_handler.api_inference.openai_response import OpenAIResponsesHandler

import pytest_careful


class AcmeGateway(OpenAIResponsesHandler):
    """BFCL's OpenAI handler, sent to the team's own gateway."""

    def _build_client_kwargs(self):
        return {"base_url": os.environ["ACME_GATEWAY"], "api_key": "internal"}


def pytest_careful_model_handlers(config):
    return {"acme-large-FC": pytest_careful.ModelEntry(AcmeGateway, model_name="acme-large", is_fc_model=True)}
'''


def _env(server: LoopbackVLLM) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "PYTEST_"))}
    return {**env, "ACME_GATEWAY": server.url}


@pytest.mark.parametrize("xdist", [["-p", "no:xdist"], ["-n", "2"]], ids=["no-xdist", "n2"])
def test_a_gateway_of_ones_own_runs_live_and_is_rescored(tmp_path: Path, xdist: list[str]) -> None:
    (tmp_path / "conftest.py").write_text(CONFTEST)
    with LoopbackVLLM(models=["acme-large", "gpt-4.1-2025-04-14"]) as server:
        live = subprocess.run(
            careful_command(tmp_path, "--careful-model=acme-large-FC", "--careful-gate=none", *xdist, *IDS),
            cwd=tmp_path,
            env=_env(server),
            capture_output=True,
            text=True,
            timeout=300,
        )
        seen = server.stats()
        # The oracle: BFCL's own registered model on the same server, through OPENAI_BASE_URL.
        bfcl = tmp_path / "bfcl"
        bfcl.mkdir()
        registered = subprocess.run(
            careful_command(bfcl, "--careful-model=bfcl:gpt-4.1-2025-04-14-FC", "--careful-gate=none", *IDS),
            cwd=bfcl,
            env={**_env(server), "OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": "sk-loopback"},
            capture_output=True,
            text=True,
            timeout=300,
        )
    out = live.stdout + live.stderr
    assert live.returncode == 0 and registered.returncode == 0, out[-3000:] + registered.stdout[-2000:]
    assert "model acme-large-FC -> registry key acme-large-FC: handler AcmeGateway, FC" in out
    assert seen["requests"] > 0
    filed = filed_once(tmp_path / "result")
    assert sorted(filed) == IDS
    assert filed == filed_once(bfcl / "result")  # the gateway ran as BFCL runs a registered model
    card = json.loads(next((tmp_path / "cards").rglob("scorecard.json")).read_text())
    theirs = json.loads(next((bfcl / "cards").rglob("scorecard.json")).read_text())
    assert card["provenance"]["handler"] == "acme-large-FC"
    assert [r["bfcl"] for r in card["rows"]] == [r["bfcl"] for r in theirs["rows"]]

    # Rescoring the filed run with the same name as decoder, by pytest and by the Python API.
    [folder] = {p.parent for p in (tmp_path / "result").rglob("BFCL_v4_multi_turn_base_result.json")}
    rescore = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "--rootdir", str(tmp_path)]
    again = subprocess.run(
        [
            *rescore,
            f"--careful-results={folder}",
            "--careful-decoder=acme-large-FC",
            "--careful-gate=none",
            f"--careful-scorecards={tmp_path / 'again'}",
            *IDS,
        ],
        cwd=tmp_path,
        env=_env(server),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert again.returncode == 0, (again.stdout + again.stderr)[-3000:]
    rescored = json.loads(next((tmp_path / "again").rglob("scorecard.json")).read_text())
    assert [r["bfcl"] for r in rescored["rows"]] == [r["bfcl"] for r in card["rows"]]


def test_bad_models_of_ones_own_are_usage_errors(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "import pytest_careful\n"
        "def pytest_careful_model_handlers(config):\n"
        "    return {'gpt-4.1-2025-04-14-FC': pytest_careful.ModelEntry(object)}\n"
    )
    done = subprocess.run(
        careful_command(tmp_path, "--careful-model=gpt-4.1-2025-04-14-FC", *IDS),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 4, done.stdout[-2000:]
    assert "model 'gpt-4.1-2025-04-14-FC': the name is taken" in done.stderr and "Traceback" not in done.stderr


def test_own_models_refuse_what_is_not_a_handler_and_undo_cleanly() -> None:
    from bfcl_eval.model_handler.api_inference.openai_response import OpenAIResponsesHandler

    with pytest.raises(decoding.ModelEntryError, match="not a subclass of BFCL's BaseHandler"):
        decoding.own_models({"mine": pytest_careful.ModelEntry(dict)})
    before = decoding.registry_keys()
    undo = decoding.own_models({"mine-FC": pytest_careful.ModelEntry(OpenAIResponsesHandler)})
    try:
        assert decoding.registry_keys() == ("mine-FC", *before)
        assert decoding.registry_entry("mine-FC").handler is OpenAIResponsesHandler
        with pytest.raises(decoding.ModelEntryError, match="registered twice"):
            decoding.own_models({"mine-FC": pytest_careful.ModelEntry(OpenAIResponsesHandler)})
    finally:
        undo()
    assert decoding.registry_keys() == before
