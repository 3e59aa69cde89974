#!/usr/bin/env bash
# Set everything up and run the main job on the embedded default (simulated engines): the quick
# experiment matrix (four workloads x floor / C1-only / C2-only / full / whole-request cache, one
# seed, low load; the README says how long it took and on what machine), then print the summary
# table and where the report (JSON, plots, Markdown) is. Extra arguments go to `dynbranch
# report` (e.g. --full, --out DIR, --data-dir DIR). -h or --help prints the usage below and the
# report's own options, and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DYNBRANCH_VENV:-.venv}

for arg in "$@"; do
  if [ "$arg" = "-h" ] || [ "$arg" = "--help" ]; then
    cat <<USAGE
usage: bash scripts/demo.sh [DYNBRANCH REPORT ARGUMENTS...]

Install the project into $VENV (created when absent), then run \`dynbranch report\` with the
arguments given: the quick experiment matrix on simulated engines, its summary and where the
report is. -h, --help: this text and the report's options; nothing is installed.

environment:
  DYNBRANCH_DATA_DIR=DIR   the shared data sets (default ../shared/data; or --data-dir DIR)
  DYNBRANCH_VENV=DIR       the project's virtual environment (default .venv)

USAGE
    if [ -x "$VENV/bin/dynbranch" ]; then
      exec "$VENV/bin/dynbranch" report --help
    fi
    echo "the report's own options are listed here once $VENV holds dynbranch (run the script once)."
    exit 0
  fi
done
bash scripts/setup.sh
exec "$VENV/bin/dynbranch" report "$@"
