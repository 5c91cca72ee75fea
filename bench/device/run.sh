#!/usr/bin/env bash
# There, on the 16-core GPU machine, with .device/ carried (bench/device/prepare.sh made it):
# bench/live_loopback.py at L = 1.0, bfcl generate against our command without xdist, -n 8 and
# -n 16, all 200 multi_turn_base conversations. The table and results.json go to $OUT.
#
#   bash bench/device/run.sh                    (device tool: carry [".device"], timeout_s 600)
#   bash bench/device/run.sh --n 20 --latency 0.3   (a rehearsal here: arguments go to live_loopback.py)
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$ROOT"
PY="${PYTHON:-python3}"
SITE="${CAREFUL_DEVICE_SITE:-/tmp/careful-site}"
OUT="${OUT:-/tmp/careful-device-out}"
mkdir -p "$OUT"
rm -rf "$SITE"
"$PY" -m pip install -q --no-deps --no-index --target "$SITE" .device/wheels/*.whl
# The bfcl CLI imports every vendor's SDK (and pandas); the Qwen path calls none of them:
# bench/device/stubs stands in for those the machine lacks (sitecustomize.py says which).
export PYTHONPATH="$SITE:$ROOT/bench/device/stubs"
export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
"$PY" - <<'PY'
import importlib.metadata as m, os
for name in ("torch", "transformers", "tokenizers", "numpy", "pytest", "pytest-careful", "bfcl-eval"):
    try:
        print(f"{name} {m.version(name)}")
    except m.PackageNotFoundError:
        print(f"{name} -")
print(f"cpus {len(os.sched_getaffinity(0))}")
PY
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--latency 1.0)
"$PY" bench/live_loopback.py --model-dir .device/model --sides bfcl,serial,n8,n16 --out "$OUT/runs" "${ARGS[@]}" \
  2>&1 | tee "$OUT/table.txt"
cp "$OUT/runs/results.json" "$OUT/results.json"
rm -rf "$OUT/runs"  # per-run folders: too many files to bring back
