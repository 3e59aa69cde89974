"""The two source edits ``scripts/install_sglang.sh`` makes in the SGLang venv (run by its python).

    python scripts/sglang_patches.py check|apply

* ``torchvision/_meta_registrations.py``: the torchvision wheel here is CUDA-linked, so on CPU
  torch its C++ ops do not load and ``register_fake("torchvision::nms")`` (and ``qnms``) raise
  ``operator torchvision::nms does not exist`` at import. They are guarded the way the module
  already guards its ``register_meta`` registrations: only when the ops loaded.
* ``sglang/srt/layers/rotary_embedding/base.py``: on an unrecognised platform it imports
  ``vllm._custom_ops.rotary_embedding``; with no vLLM in this venv that raises
  ``ModuleNotFoundError``. The import is made optional, so rotary embedding runs
  ``forward_native``.

Each edit is marked and applied once; a file whose text is not the expected one fails loudly.
Nothing is imported from either package (the point is that they do not import yet).
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

MARK = "# dynbranch: patched by scripts/install_sglang.sh"

GUARD = f'''def _register_fake_if_ops(name):  {MARK}
    # Like register_meta below: only when the C++ ops loaded (a CUDA build on CPU torch has none).
    def wrapper(fn):
        if torchvision.extension._has_ops():
            return torch.library.register_fake(name)(fn)
        return fn

    return wrapper


'''
VLLM_IMPORT = re.compile(r"^(?P<ind>[ \t]*)from vllm\._custom_ops import rotary_embedding"
                         r"(?P<alias> as \w+)?[ \t]*$", re.M)


def package_file(package: str, relative: str) -> Path:
    """A file of an installed package, found without importing the package."""
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        sys.exit(f"sglang_patches: {package} is not installed")
    return Path(spec.origin).parent / relative


def patch_torchvision(src: str) -> str:
    """Guard the nms/qnms fake registrations."""
    for op in ("nms", "qnms"):
        old = f'@torch.library.register_fake("torchvision::{op}")'
        if src.count(old) != 1:
            raise ValueError(f"expected one {old}")
        src = src.replace(old, f'@_register_fake_if_ops("torchvision::{op}")')
    anchor = "def register_meta("
    if src.count(anchor) != 1:
        raise ValueError(f"expected one {anchor}")
    return src.replace(anchor, GUARD + anchor)


def patch_rotary(src: str) -> str:
    """Make the vLLM rotary-embedding import optional."""
    found = list(VLLM_IMPORT.finditer(src))
    if len(found) != 1:
        raise ValueError(f"expected one vllm._custom_ops import, found {len(found)}")
    m = found[0]
    ind, name = m["ind"], (m["alias"] or " as rotary_embedding")[4:]
    new = (f"{ind}try:  {MARK}\n{ind}    {m.group(0).strip()}\n"
           f"{ind}except ImportError:\n{ind}    {name} = None")
    return src[:m.start()] + new + src[m.end():]


PATCHES = (("torchvision", "_meta_registrations.py", patch_torchvision),
           ("sglang", "srt/layers/rotary_embedding/base.py", patch_rotary))


def main(action: str) -> int:
    """``check``: exit 1 unless both edits are in; ``apply``: make the missing ones."""
    missing = 0
    for package, relative, patch in PATCHES:
        path = package_file(package, relative)
        src = path.read_text()
        if MARK in src:
            continue
        if action == "check":
            missing += 1
            continue
        try:
            path.write_text(patch(src))
        except ValueError as exc:
            sys.exit(f"sglang_patches: {path}: {exc} (not the release this script knows)")
        print(f"install_sglang: patched {path}")
    return 1 if missing else 0


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in ("check", "apply"):
        sys.exit("usage: sglang_patches.py check|apply")
    sys.exit(main(sys.argv[1]))
