#!/usr/bin/env bash
# Set everything up and run the main job on the embedded default (simulated engines): the quick
# experiment matrix (four workloads x floor / C1-only / C2-only / full / whole-request cache, one
# seed, low load; a few minutes on 2 cores), then print the summary table and where the report
# (JSON, plots, Markdown) is. Extra arguments go to `dynbranch report` (e.g. --full, --out DIR).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec "${DYNBRANCH_VENV:-.venv}/bin/dynbranch" report "$@"
