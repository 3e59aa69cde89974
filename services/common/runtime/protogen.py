"""Regenerate the Python stubs from ``protos/`` (``python -m services.common.runtime.protogen``).

protoc writes absolute imports (``from dynbranch.v1 import common_pb2``) that mirror the proto
package; we rewrite them to the in-repo package ``services.common.pb`` so the stubs need no
``sys.path`` tricks. ``tests/test_protos.py`` calls :func:`generate` into a temporary folder and
fails when the committed stubs differ.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PROTO_ROOT = REPO / "protos"
PROTO_DIR = PROTO_ROOT / "dynbranch" / "v1"
OUT_DIR = Path(__file__).resolve().parents[1] / "pb"
_IMPORT = re.compile(r"^from dynbranch\.v1 import (\w+) as", re.MULTILINE)
_INIT = ('"""Generated protobuf and gRPC stubs (python -m services.common.runtime.protogen); '
         'do not edit."""\n')


def generate(out_dir: Path) -> list[Path]:
    """Generate stubs for every proto into ``out_dir``; return the files written."""
    from grpc_tools import protoc  # build-time tool: imported only here

    include = Path(protoc.__file__).resolve().parent / "_proto"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_DIR.glob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={tmp}",
                f"--pyi_out={tmp}", f"--grpc_python_out={tmp}", *protos]
        if protoc.main(args) != 0:
            raise RuntimeError(f"protoc failed on {protos}")
        out_dir.mkdir(parents=True, exist_ok=True)
        written = []
        for src in sorted((Path(tmp) / "dynbranch" / "v1").iterdir()):
            text = _IMPORT.sub(r"from services.common.pb import \1 as", src.read_text())
            dst = out_dir / src.name
            dst.write_text(text)
            written.append(dst)
    (out_dir / "__init__.py").write_text(_INIT)
    return written + [out_dir / "__init__.py"]


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT_DIR,
                        help="output folder (default: %(default)s)")
    args = parser.parse_args(argv)
    if args.out == OUT_DIR:
        shutil.rmtree(OUT_DIR, ignore_errors=True)
    for path in generate(args.out):
        print(path.relative_to(REPO) if path.is_relative_to(REPO) else path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
