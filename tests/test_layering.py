"""Core modules stay protocol-free (STYLE.md §1) and real engines are imported lazily."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SERVICES = Path(__file__).resolve().parents[1] / "services"
EDGE = {"servicer.py", "server.py", "__main__.py", "cli.py",
        "launcher.py"}  # and every *client.py (adapters over gRPC)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_modules_import_no_grpc() -> None:
    offenders = []
    for path in SERVICES.rglob("*.py"):
        if ("pb" in path.parts or path.parent.name == "common" or path.name in EDGE
                or path.name.endswith("client.py")):
            continue
        if "grpc" in _imports(path) or any(n.startswith("grpc_") for n in _imports(path)):
            offenders.append(str(path.relative_to(SERVICES)))
    assert offenders == []


def test_core_packages_do_not_import_real_engines_at_import_time() -> None:
    code = ("import sys, services.engine_agent.server, services.gateway.server, services.cli;"
            "bad=[m for m in ('vllm','torch','sglang','transformers') if m in sys.modules];"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
