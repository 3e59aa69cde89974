#!/usr/bin/env bash
# Install a real SGLang (0.5.23, CPU, plain PyTorch path) into its own venv, apart from vLLM's.
#
#   scripts/install_sglang.sh [VENV]          (default: .venv-sglang beside this repo; git-ignored)
#   scripts/install_sglang.sh --lock [VENV]   (re-resolve and rewrite scripts/sglang-cpu.lock)
#
# Follows ../shared/notes/sglang-cpu.md. SGLang's metadata pins torch 2.14.1 and CUDA-only
# packages, so it cannot be installed the ordinary way:
#   1. A venv with torch==2.13.0 (the local CPU wheel), held there by a constraints file.
#   2. `pip install --no-deps sglang==0.5.23`, then its own dependency list read from the
#      installed wheel's METADATA (Requires-Dist with SGLang's specifiers, no extras), minus the
#      CUDA/torch packages in EXCLUDED, plus jsonschema and soundfile. Every version is pinned by
#      scripts/sglang-cpu.lock (the resolved set, passed as pip constraints) and the venv is
#      checked against it afterwards. pip reports conflicts with SGLang's torch/CUDA pins and
#      exits 0; that is expected.
#   3. The two import problems (marked, idempotent edits by scripts/sglang_patches.py):
#      - SGLang's server imports torchvision (multimodal configs), and the torchvision wheel
#        here is CUDA-linked: on CPU torch its C++ ops are missing and `import torchvision`
#        fails in `register_fake("torchvision::nms"/"qnms")`. torchvision==0.28.0 (torch 2.13's)
#        is installed without dependencies and those two registrations are guarded like its
#        other meta registrations. torchaudio and torchcodec are kept out (text needs neither).
#      - sglang/srt/layers/rotary_embedding/base.py imports vllm._custom_ops on an unrecognised
#        platform; with no vLLM in this venv that raises ModuleNotFoundError. The import is made
#        optional, so rotary embedding runs `forward_native`.
#      SGLang imports triton at start-up, so triton stays here (unlike in vLLM's venv).
#   Do not set SGLANG_USE_CPU_ENGINE=1: that needs a CPU build of sgl_kernel that PyPI lacks.
# Idempotent: when everything is already in place it only checks and says so.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
RELOCK=0
if [[ "${1:-}" == "--lock" ]]; then RELOCK=1; shift; fi
VENV="${1:-$ROOT/.venv-sglang}"
LOCK="$ROOT/scripts/sglang-cpu.lock"
PATCHES="$ROOT/scripts/sglang_patches.py"
SGLANG_VERSION="0.5.23"
TORCH_VERSION="2.13.0"
TORCHVISION_VERSION="0.28.0"  # the release paired with torch 2.13
BASE_PYTHON="${DYNBRANCH_SGLANG_PYTHON:-python3}"
# SGLang's requirements left out: torch and torchvision (installed above, pinned), CUDA-only
# kernels (several pin torch==2.14.1, which makes the set unresolvable beside the CPU torch),
# and audio/vision/structured-output packages the text path does not import. Names are compared
# after PEP 503 normalisation.
EXCLUDED=(torch torchvision torchaudio torchcodec flashinfer-python nvidia-cutlass-dsl
          sgl-kernel sglang-kernel flash-attn flash-attn-4 quack-kernels tilelang timm outlines
          cuda-python torch-memory-saver sgl-deep-ep sgl-deep-gemm sgl-flash-mla humming-kernels
          nvshmem4py-cu13 nvidia-mathdx)
BREAKING=(torchaudio torchcodec)
EXTRA=(jsonschema soundfile)

log() { echo "install_sglang: $*"; }

if [[ ! -x "$VENV/bin/python" ]]; then
  "$BASE_PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "python >= 3.11 needed")'
  log "creating the venv $VENV"
  "$BASE_PYTHON" -m venv "$VENV"
fi
VENV="$(cd "$VENV" && pwd)"
PY="$VENV/bin/python"

# pip's noise here: the local mirrors' "Location ... is ignored", and the expected conflicts
# with SGLang's CUDA/torch pins (reported, exit 0; the lock check below is the real test).
NOISE="is ignored: it is neither a file nor a directory|^ERROR: pip's dependency resolver|^sglang [0-9.]+ requires"
pip_q() {
  "$PY" -m pip --quiet "$@" 2> >(grep -vE "$NOISE" >&2)
}

# installed_version, breaking_present
source "$ROOT/scripts/venv_helpers.sh"

constraints() {  # torch held at the CPU wheel, and the lock's pins unless re-locking
  local file="$VENV/dynbranch-constraints.txt"
  echo "torch==$TORCH_VERSION" > "$file"
  if [[ "$RELOCK" == 0 && -f "$LOCK" ]]; then
    grep -vE '^(#|torch==|$)' "$LOCK" >> "$file"
  fi
  echo "$file"
}

requirements() {  # SGLang's own Requires-Dist (markers evaluated, no extras) minus EXCLUDED
  "$PY" - "${EXCLUDED[@]}" <<'EOF'
import importlib.metadata as md, re, sys
from packaging.requirements import Requirement
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
excluded = {norm(n) for n in sys.argv[1:]}
for line in md.requires("sglang") or []:
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if norm(req.name) not in excluded:
        req.marker = None
        print(req)  # with SGLang's own version specifier
EOF
}

freeze() {  # name==version of every distribution in the venv but pip/setuptools/wheel
  "$PY" -m pip freeze --all --exclude-editable 2>/dev/null \
    | grep -viE '^(pip|setuptools|wheel)==' | LC_ALL=C sort -f
}

lock_matches() {
  [[ -f "$LOCK" ]] && diff -q <(grep -vE '^(#|$)' "$LOCK") <(freeze) >/dev/null
}

install_all() {
  local cons name
  cons="$(constraints)"
  if [[ "$(installed_version torch)" != "$TORCH_VERSION"* ]]; then
    log "installing torch==$TORCH_VERSION (the CPU wheel)"
    pip_q install -c "$cons" "torch==$TORCH_VERSION"
  fi
  "$PY" -c "import torch, sys; sys.exit(0 if '+cpu' in torch.__version__ else 'not the +cpu torch: ' + torch.__version__)"
  if [[ "$(installed_version sglang)" != "$SGLANG_VERSION" ]]; then
    log "installing sglang==$SGLANG_VERSION without its dependencies"
    pip_q install -c "$cons" --no-deps "sglang==$SGLANG_VERSION"
  fi
  pip_q install -c "$cons" packaging  # to read the metadata below
  mapfile -t reqs < <(requirements)
  log "installing ${#reqs[@]} of SGLang's requirements (CUDA/torch ones left out) + ${EXTRA[*]}"
  pip_q install -c "$cons" "${reqs[@]}" "${EXTRA[@]}"
  if [[ "$(installed_version torchvision)" != "$TORCHVISION_VERSION" ]]; then
    log "installing torchvision==$TORCHVISION_VERSION without its dependencies"
    pip_q install -c "$cons" --no-deps "torchvision==$TORCHVISION_VERSION"
  fi
  for name in "${BREAKING[@]}"; do
    [[ -z "$(installed_version "$name")" ]] || { log "removing $name"; pip_q uninstall -y "$name"; }
  done
}

check() {  # SGLang's server module imports on CPU torch, without vLLM
  "$PY" -c "
import sglang, torch, torchvision
import sglang.srt.layers.rotary_embedding.base
import sglang.srt.entrypoints.http_server
print('install_sglang: ok, sglang', sglang.__version__, 'torch', torch.__version__)"
}

if [[ "$RELOCK" == 0 && "$(installed_version sglang)" == "$SGLANG_VERSION" \
      && "$(installed_version torch)" == "$TORCH_VERSION"* ]] \
    && ! breaking_present && "$PY" "$PATCHES" check && lock_matches; then
  log "sglang $SGLANG_VERSION and torch $(installed_version torch) already installed in $VENV"
else
  install_all
  "$PY" "$PATCHES" apply
  if [[ "$RELOCK" == 1 || ! -f "$LOCK" ]]; then
    { echo "# scripts/install_sglang.sh --lock: every distribution of the SGLang venv, pinned."
      echo "# Passed to pip as constraints; regenerate with --lock after changing the script."
      freeze; } > "$LOCK"
    log "wrote $LOCK ($(grep -vcE '^(#|$)' "$LOCK") pins)"
  fi
  if ! lock_matches; then
    log "the venv differs from $LOCK:" >&2
    diff <(grep -vE '^(#|$)' "$LOCK") <(freeze) >&2 || true
    exit 1
  fi
fi
check
