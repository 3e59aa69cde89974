#!/usr/bin/env bash
# Create (or reuse) the virtual environment and install dynbranch into it, with its vLLM plugin
# (plugins/vllm, a distribution of its own; no dependencies, so it installs without vLLM, and its
# tests run anywhere).
# Usage: scripts/setup.sh [EXTRAS]   e.g. scripts/setup.sh test
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DYNBRANCH_VENV:-.venv}
PYTHON=${PYTHON:-python3}
if [ ! -x "$VENV/bin/python" ]; then
  "$PYTHON" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
spec="."
[ -n "${1:-}" ] && spec=".[$1]"
"$VENV/bin/python" -m pip install -q -e "$spec"
"$VENV/bin/python" -m pip install -q --no-deps -e plugins/vllm
