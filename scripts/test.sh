#!/usr/bin/env bash
# Set everything up and run the whole test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh test
exec "${DYNBRANCH_VENV:-.venv}/bin/python" -m pytest "$@"
