"""Importing and decoding never writes into site-packages (bfcl-eval's default root)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path


def test_no_writes_under_site_packages(tmp_path):
    site = Path(sysconfig.get_paths()["purelib"])
    before = {p.name for p in site.iterdir()}
    env = {k: v for k, v in os.environ.items() if k not in ("BFCL_PROJECT_ROOT", "OPENAI_API_KEY")}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")
    code = (
        "from pytest_careful import decoding, dataset;"
        "d = decoding.decoder('gpt-4.1-2025-04-14-FC');"  # imports the handler (and bfcl eval_config)
        "print(d.decode_step([{'ls': '{\"a\": true}'}]));"
        "import os; print(os.environ['BFCL_PROJECT_ROOT'])"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    decoded, root = out.stdout.splitlines()[-2:]
    assert decoded == "['ls(a=True)']"  # and no API key was needed to decode
    assert root.startswith(str(tmp_path / "cache"))
    assert {p.name for p in site.iterdir()} - before == set()
    assert (Path(root) / "result").is_dir()  # bfcl's side effect landed in our root instead
