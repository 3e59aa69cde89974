# Shell helpers the install scripts share (sourced, not run). Callers set PY (the venv's python)
# and BREAKING (distributions that must not be installed) before calling them.

installed_version() {  # prints the installed version of a distribution, or nothing
  "$PY" -c '
import importlib.metadata as md, sys
try:
    print(md.version(sys.argv[1]))
except md.PackageNotFoundError:
    pass' "$1"
}

breaking_present() {  # true when any distribution in BREAKING is installed
  local name
  for name in "${BREAKING[@]}"; do
    [[ -n "$(installed_version "$name")" ]] && return 0
  done
  return 1
}
