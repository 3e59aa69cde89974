#!/usr/bin/env bash
# Set everything up and run the main job on the embedded default (simulated engines):
# start the mesh, send a small batch of requests through the gateway, print a summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${DYNBRANCH_VENV:-.venv}/bin/dynbranch" demo "$@"
