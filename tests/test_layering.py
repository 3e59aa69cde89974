"""The layering of ``services/`` (STYLE.md §1, README "Layout"), checked on the import graph built
from the source: no import cycle anywhere (imports under ``if TYPE_CHECKING:`` and inside
functions count), ``services/common`` imports no service, a service reaches another service only
through its ``client`` module, the gateway's demand path only imports downward, core modules stay
protocol-free, and real engines are imported lazily."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "services"
SERVICE_NAMES = ("admission", "csl", "delivery", "engine_agent", "gateway")
Graph = Mapping[str, frozenset[str]]

# The gateway's layers, top first: a module may import modules of its own layer or below, never
# one above. Prefixes are module paths under ``services.gateway``; the longest match wins.
GATEWAY_LAYERS: tuple[tuple[str, ...], ...] = (
    ("server", "__main__"),
    ("servicer", "http"),
    ("core",),
    ("stages",),
    ("speculation",),
    ("execution",),
    ("adapters",),
    ("ports", "values", "templates", "tools", "auth", "config", "client", "sdk", ""),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


@cache
def modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in SERVICES.rglob("*.py") if "pb" not in p.parts)


def imports_of(path: Path, known: Iterable[str], package: str | None = None) -> frozenset[str]:
    """Every ``services.*`` module ``path`` imports, wherever the import statement stands
    (``package``: the module's package, for relative imports; derived from the path)."""
    known = set(known)
    if package is None:
        package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import sub`` names the submodule when ``pkg.sub`` is a module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                       for a in node.names]
        else:
            continue
        found |= {t for t in targets if t.startswith("services.") and "pb" not in t.split(".")}
    return frozenset(found)


@cache
def graph() -> Graph:
    known = modules()
    return {module_name(p): imports_of(p, known)
            for p in SERVICES.rglob("*.py") if "pb" not in p.parts}


def cycles(g: Graph) -> list[list[str]]:
    """Strongly connected components with more than one module, or a module importing itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in g.get(v, ()):
            if w not in g:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in g.get(v, ()):
                found.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(g):
        if v not in index:
            visit(v)
    return found


def service_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in (*SERVICE_NAMES, "common") else None


def boundary_violations(g: Graph) -> list[str]:
    """Imports from ``services.common`` into a service, and imports of another service's
    internals (anything but its ``client`` module)."""
    bad = []
    for src, targets in sorted(g.items()):
        own = service_of(src)
        if own is None:  # services/cli.py, services/launcher.py: the composition of services
            continue
        for dst in sorted(targets):
            other = service_of(dst)
            if other is None or other == own or other == "common":
                continue
            if own == "common":
                bad.append(f"{src} -> {dst}: services/common imports no service")
            elif dst != f"services.{other}.client":
                bad.append(f"{src} -> {dst}: another service only through its client")
    return bad


def gateway_layer(module: str) -> int | None:
    prefix = "services.gateway"
    if module != prefix and not module.startswith(prefix + "."):
        return None
    rest = module[len(prefix) + 1:]
    best, best_len = None, -1
    for level, names in enumerate(GATEWAY_LAYERS):
        for name in names:
            if (rest == name or rest.startswith(name + ".") or name == "") and len(name) > best_len:
                best, best_len = level, len(name)
    return best


def upward_imports(g: Graph) -> list[str]:
    """Gateway modules that import a module of a layer above their own."""
    bad = []
    for src, targets in sorted(g.items()):
        own = gateway_layer(src)
        if own is None:
            continue
        for dst in sorted(targets):
            level = gateway_layer(dst)
            if level is not None and level < own:
                bad.append(f"{src} (layer {own}) -> {dst} (layer {level})")
    return bad


# --- the real tree ---------------------------------------------------------------------------

def test_no_import_cycle_under_services() -> None:
    assert cycles(graph()) == []


def test_common_imports_no_service_and_services_meet_only_through_clients() -> None:
    assert boundary_violations(graph()) == []


def test_the_gateway_demand_path_only_imports_downward() -> None:
    assert upward_imports(graph()) == []


def test_every_gateway_module_has_a_layer_and_every_package_a_docstring() -> None:
    assert [m for m in modules() if m.startswith("services.gateway")
            and gateway_layer(m) is None] == []
    for init in (SERVICES / "gateway").rglob("__init__.py"):
        assert ast.get_docstring(ast.parse(init.read_text())), init


# --- the checks catch what they are for -------------------------------------------------------

def _with(edge: tuple[str, str]) -> dict[str, frozenset[str]]:
    g = dict(graph())
    g[edge[0]] = g[edge[0]] | {edge[1]}
    return g


def test_a_deliberately_added_cycle_is_caught() -> None:
    bad = _with(("services.gateway.speculation.branches", "services.gateway.stages"))
    assert any("services.gateway.stages" in c for c in cycles(bad))
    assert upward_imports(bad)


def test_a_deliberately_added_bad_import_is_caught() -> None:
    assert boundary_violations(_with(("services.common.convert", "services.engine_agent.backend")))
    assert boundary_violations(_with(("services.gateway.core", "services.csl.library")))
    assert not boundary_violations(_with(("services.gateway.core", "services.csl.client")))


def test_type_checking_and_function_level_imports_are_in_the_graph(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from services.csl.library import SubgraphLibrary\n"
                      "def f():\n    import services.gateway.core\n"
                      "from .execution import Executor\n")
    assert imports_of(source, modules(), package="services.gateway") == {
        "services.csl.library", "services.gateway.core", "services.gateway.execution"}


# --- protocol-free cores and lazy engines ------------------------------------------------------

EDGE = {"servicer.py", "server.py", "__main__.py", "cli.py", "launcher.py"}


def _top_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_core_modules_import_no_grpc() -> None:
    """Only edges, clients and the gateway's adapters (ports over gRPC) speak gRPC."""
    offenders = []
    for path in SERVICES.rglob("*.py"):
        if ("pb" in path.parts or path.parent.name in ("common", "adapters") or path.name in EDGE
                or path.name.endswith(("client.py", "servicer.py"))):
            continue
        names = _top_imports(path)
        if "grpc" in names or any(n.startswith("grpc_") for n in names):
            offenders.append(str(path.relative_to(SERVICES)))
    assert offenders == []


def test_core_packages_do_not_import_real_engines_at_import_time() -> None:
    code = ("import sys, services.engine_agent.server, services.gateway.server, services.cli;"
            "bad=[m for m in ('vllm','torch','sglang','transformers') if m in sys.modules];"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
