#!/usr/bin/env bash
# The one-command GPU check: the system on a real vLLM, one JSON and a markdown summary.
#
#   scripts/gpu_check.sh OUTDIR              on a machine with an NVIDIA GPU (H200 planned)
#   scripts/gpu_check.sh OUTDIR --cpu-smoke  every step at toy sizes on this CPU machine's vLLM
#
# GPU mode (docs/gpu-check.md says how to run it and read it):
#   1. a venv ($DYNBRANCH_GPU_VENV, default .venv-gpu) with the CUDA vLLM from the package
#      registry (vllm==$VLLM_VERSION, the release whose CPU build the project is tested on), this
#      checkout (editable, with its dependencies) and its vLLM plugin (prefix leases);
#   2. VLLM_BATCH_INVARIANT=1 (batch-invariant kernels: value equivalence is exact);
#   3. python -m loadgen.gpu_check OUTDIR --mode gpu: Qwen3-8B- and Qwen3-32B-shaped models with
#      random weights (--load-format dummy; config written by the project, the tiny model's
#      tokenizer), prefill and batched decode timed at 1-48 sequences, the sim presets
#      qwen3-8b-h200-measured / qwen3-32b-h200-measured fitted, the quick matrix on Routing and
#      Sub-Agent against the sim's prediction, exact equivalence, the LADS cohort with leases.
#   No model or data is downloaded: the only network use is the package install in step 1.
#
# --cpu-smoke: the same steps with the CPU vLLM already in .venv (scripts/install_vllm.sh), toy
# models, no install and no network; tests/real_engine/test_gpu_check.py runs it in CI.
#
# Exit status: 0 when every step passed, 1 when one failed (OUTDIR/summary.md says which), 2 on
# bad usage or a missing venv.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VLLM_VERSION="${DYNBRANCH_GPU_VLLM:-0.32.0}"
USAGE="usage: bash scripts/gpu_check.sh OUTDIR [--cpu-smoke]  (docs/gpu-check.md)"
usage() { echo "$USAGE" >&2; exit 2; }
if [[ "${1:-}" == "--help" || "${1:-}" == "-h" ]]; then
  echo "$USAGE"
  exit 0
fi
[[ $# -ge 1 && $# -le 2 ]] || usage
OUT="$1"
MODE=gpu
if [[ $# -eq 2 ]]; then
  [[ "$2" == "--cpu-smoke" ]] || usage
  MODE=cpu-smoke
fi
mkdir -p "$OUT"

if [[ "$MODE" == "cpu-smoke" ]]; then
  PY="$ROOT/.venv/bin/python"
  [[ -x "$PY" ]] || { echo "gpu_check: no venv at $ROOT/.venv (scripts/setup.sh)" >&2; exit 2; }
  "$PY" -c "import vllm" 2>/dev/null || {
    echo "gpu_check: vLLM is not installed in .venv (scripts/install_vllm.sh)" >&2; exit 2; }
else
  VENV="${DYNBRANCH_GPU_VENV:-$ROOT/.venv-gpu}"
  PY="$VENV/bin/python"
  command -v nvidia-smi >/dev/null || {
    echo "gpu_check: no nvidia-smi: not a GPU machine (use --cpu-smoke here)" >&2; exit 2; }
  [[ -x "$PY" ]] || python3 -m venv "$VENV"
  if ! "$PY" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm') != '$VLLM_VERSION')" 2>/dev/null; then
    echo "gpu_check: installing vllm==$VLLM_VERSION (CUDA build) into $VENV"
    "$PY" -m pip install --quiet "vllm==$VLLM_VERSION"
  fi
  echo "gpu_check: installing this checkout and its vLLM plugin into $VENV"
  "$PY" -m pip install --quiet -e "$ROOT"
  "$PY" -m pip install --quiet --no-deps --no-build-isolation -e "$ROOT/plugins/vllm"
  export VLLM_BATCH_INVARIANT=1
fi

cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
exec "$PY" -m loadgen.gpu_check "$OUT" --mode "$MODE"
