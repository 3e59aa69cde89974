"""The rooms of ``services/`` and ``loadgen/`` (STYLE.md §1, docs/development.md "Layout and
rules"), checked on the import graph built from the source (imports under ``if TYPE_CHECKING:``
and inside functions count; imports of the generated stubs count as protocol imports).

Every module of a service is in one room, by folder:

* ``face``: the service package's ``__init__`` (its in-process API);
* ``edge``: the transport a service serves or calls through — the top-level ``servicer``,
  ``server``, ``client`` and ``__main__`` modules, and the service's other transport modules
  named in ``EDGES`` (never matched by a suffix of a file name);
* ``adapters``: anything under the service's ``adapters/`` folder (the engine agent's is
  ``backends/``): the gRPC and HTTP edges of what its core calls;
* ``core``: everything else (ports, values, settings, the composition root's logic).

``services/common`` is two rooms: ``values`` (protocol-free) and ``runtime`` (may speak gRPC),
with the generated stubs ``pb`` counted as runtime. The rules:

1. no import cycle, in ``services/`` or in ``loadgen/``;
2. ``common`` imports no service; ``values`` imports nothing of ``runtime``;
3. a service reaches another only through that service's ``client`` module or its public face
   (its package, whose ``__all__`` is the in-process API);
4. a core or values module speaks no protocol: no gRPC, no protobuf, no stubs, no
   ``common.runtime``, no HTTP client or server library;
5. direction in every service: the core imports neither its adapters nor its edge, the
   adapters do not import the edge;
6. inside the gateway, the demand path imports only downward (``GATEWAY_LAYERS``), and every
   gateway module has a layer (no catch-all);
7. real engines are imported lazily.

Each rule is shown to fail on a planted violation below.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SERVICES = ROOT / "services"
LOADGEN = ROOT / "loadgen"
SERVICE_NAMES = ("admission", "corpus", "csl", "delivery", "engine_agent", "gateway")
Graph = Mapping[str, frozenset[str]]

#: Each service's transport modules besides servicer/server/client/__main__ (module paths under
#: the service), and why each is one.
EDGES: dict[str, tuple[str, ...]] = {
    "admission": (),
    "corpus": ("convert",),  # the servicer's and the client's proto <-> value conversion
    "csl": ("convert",),  # the servicer's proto <-> value conversion
    "delivery": (),
    # the engine agent's transport sits at its top: the multiplexed Generate stream (both ends)
    # and the calibration command that drives a real engine
    "engine_agent": ("mux_servicer", "mux_client", "calibrate"),
    # the OpenAI-compatible HTTP front; the client SDK; the harness-side tagging interceptor
    "gateway": ("http", "sdk", "tagging"),
}
EDGE_NAMES = ("servicer", "server", "client", "__main__")
ADAPTER_FOLDERS = {"engine_agent": "backends"}
#: Top-level packages whose imports are protocol imports.
PROTOCOL_PACKAGES = ("grpc", "grpc_status", "grpc_health", "grpc_reflection", "google.protobuf",
                     "httpx", "aiohttp", "fastapi", "starlette", "uvicorn", "zmq")
PROTOCOL_MODULES = ("services.common.pb", "services.common.runtime")

# The gateway's layers, top first: a module may import modules of its own layer or below, never
# one above. Prefixes are module paths under ``services.gateway`` (the longest match wins); the
# package itself (its face) is the top layer. Every gateway module must match one.
GATEWAY_LAYERS: tuple[tuple[str, ...], ...] = (
    ("server", "__main__"),
    ("servicer", "http"),
    ("core",),
    ("stages",),
    ("speculation",),
    ("execution",),
    ("adapters",),
    ("ports", "values", "templates", "tools", "auth", "config", "client", "sdk", "tagging"),
)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources(*folders: Path) -> list[Path]:
    return [p for f in folders for p in sorted(f.rglob("*.py")) if "pb" not in p.parts]


@cache
def modules() -> frozenset[str]:
    return frozenset(module_name(p) for p in _sources(SERVICES, LOADGEN))


def _targets(node: ast.AST, package: str, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    # ``from pkg import sub`` names the submodule when ``pkg.sub`` is a module
    return [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]


def all_imports_of(path: Path, known: Iterable[str], package: str | None = None) -> frozenset[str]:
    """Every module ``path`` imports (any package), wherever the import statement stands
    (``package``: the module's package, for relative imports; derived from the path)."""
    known = set(known)
    if package is None:
        package = module_name(path) if path.name == "__init__.py" else module_name(path.parent)
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        found.update(_targets(node, package, known))
    return frozenset(found)


def imports_of(path: Path, known: Iterable[str], package: str | None = None) -> frozenset[str]:
    """The project modules (``services.*``, ``loadgen.*``) ``path`` imports, stubs included."""
    return frozenset(t for t in all_imports_of(path, known, package)
                     if t.split(".")[0] in ("services", "loadgen"))


@cache
def graph() -> Graph:
    known = modules()
    return {module_name(p): imports_of(p, known) for p in _sources(SERVICES, LOADGEN)}


@cache
def full_imports() -> Graph:
    known = modules()
    return {module_name(p): all_imports_of(p, known) for p in _sources(SERVICES, LOADGEN)}


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


# --- rooms -----------------------------------------------------------------------------------

def service_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "services" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in (*SERVICE_NAMES, "common") else None


def _within(rest: str, prefix: str) -> bool:
    return rest == prefix or rest.startswith(prefix + ".")


def room(module: str) -> str | None:
    """``face``, ``edge``, ``adapters``, ``core``, ``values``, ``runtime``, or None (not a
    service module: the CLI, the launcher, loadgen)."""
    service = service_of(module)
    if service is None:
        return None
    rest = module.removeprefix(f"services.{service}").removeprefix(".")
    if service == "common":
        if _within(rest, "values"):
            return "values"
        if _within(rest, "runtime") or _within(rest, "pb"):
            return "runtime"
        return "face" if rest == "" else None
    if rest == "":
        return "face"
    if rest in EDGE_NAMES or any(_within(rest, e) for e in EDGES[service]):
        return "edge"
    if _within(rest, ADAPTER_FOLDERS.get(service, "adapters")):
        return "adapters"
    return "core"


def unplaced(names: Iterable[str]) -> list[str]:
    """Service modules that fall in no room (a ``services/common`` module outside its rooms)."""
    return sorted(m for m in names if service_of(m) is not None and room(m) is None)


def is_protocol(target: str) -> bool:
    return any(target == p or target.startswith(p + ".")
               for p in (*PROTOCOL_PACKAGES, *PROTOCOL_MODULES))


def protocol_violations(g: Graph) -> list[str]:
    """Core and values modules that import a protocol (gRPC, protobuf, the stubs, runtime,
    HTTP)."""
    return [f"{src} ({room(src)}) -> {dst}" for src, targets in sorted(g.items())
            if room(src) in ("core", "values") for dst in sorted(targets) if is_protocol(dst)]


def boundary_violations(g: Graph) -> list[str]:
    """``common`` importing a service or values importing runtime; and imports of another
    service's internals (anything but its ``client`` module or its face)."""
    bad = []
    for src, targets in sorted(g.items()):
        own = service_of(src)
        if own is None:  # services/cli.py, services/launcher.py, loadgen: compositions
            continue
        for dst in sorted(targets):
            other = service_of(dst)
            if own == "common" and other not in (None, "common"):
                bad.append(f"{src} -> {dst}: services/common imports no service")
            elif room(src) == "values" and room(dst) == "runtime":
                bad.append(f"{src} -> {dst}: common values import nothing of runtime")
            elif other not in (None, own, "common") and dst not in (
                    f"services.{other}.client", f"services.{other}"):
                bad.append(f"{src} -> {dst}: another service only through its client or face")
    return bad


#: room → rooms of its own service it may not import.
FORBIDDEN = {"core": ("adapters", "edge", "face"), "adapters": ("edge", "face")}


def direction_violations(g: Graph) -> list[str]:
    """Inside each service: a core module importing its adapters or edge, an adapter its edge."""
    bad = []
    for src, targets in sorted(g.items()):
        own, src_room = service_of(src), room(src)
        if own in (None, "common") or src_room not in FORBIDDEN:
            continue
        for dst in sorted(targets):
            if service_of(dst) == own and room(dst) in FORBIDDEN[src_room]:
                bad.append(f"{src} ({src_room}) -> {dst} ({room(dst)})")
    return bad


def gateway_layer(module: str) -> int | None:
    prefix = "services.gateway"
    if module == prefix:
        return 0
    if not module.startswith(prefix + "."):
        return None
    rest = module[len(prefix) + 1:]
    best, best_len = None, -1
    for level, names in enumerate(GATEWAY_LAYERS):
        for name in names:
            if _within(rest, name) and len(name) > best_len:
                best, best_len = level, len(name)
    return best


def upward_imports(g: Graph) -> list[str]:
    """Gateway modules that import a module of a layer above their own."""
    bad = []
    for src, targets in sorted(g.items()):
        own = gateway_layer(src)
        if own is None or src == "services.gateway":
            continue
        for dst in sorted(targets):
            level = gateway_layer(dst)
            if level is not None and level < own:
                bad.append(f"{src} (layer {own}) -> {dst} (layer {level})")
    return bad


def unlayered(names: Iterable[str]) -> list[str]:
    return sorted(m for m in names if m.startswith("services.gateway") and gateway_layer(m) is None)


# --- the real tree ---------------------------------------------------------------------------

def test_no_import_cycle_under_services_or_loadgen() -> None:
    assert cycles(graph()) == []
    assert any(m.startswith("loadgen.bench") for m in graph())  # loadgen is walked


def test_every_service_module_is_in_a_room() -> None:
    assert unplaced(modules()) == []
    rooms = {room(m) for m in modules()}
    assert {"face", "edge", "adapters", "core", "values", "runtime"} <= rooms


def test_common_imports_no_service_and_services_meet_only_through_clients() -> None:
    assert boundary_violations(graph()) == []


def test_cores_and_values_speak_no_protocol() -> None:
    assert protocol_violations(full_imports()) == []


def test_every_service_imports_inward() -> None:
    assert direction_violations(graph()) == []


def test_the_gateway_demand_path_only_imports_downward() -> None:
    assert upward_imports(graph()) == []


def speculation_entries(g: Graph) -> list[str]:
    """The demand path (``stages``, ``execution``) importing speculation: it reaches early fill
    only through ``ports.SpeculationPort``, called once per demand."""
    return [f"{src} -> {dst}" for src in ("services.gateway.stages", "services.gateway.execution")
            for dst in sorted(g.get(src, ())) if dst.startswith("services.gateway.speculation")]


def test_the_demand_path_reaches_speculation_only_through_its_port() -> None:
    assert speculation_entries(graph()) == []
    assert speculation_entries(_with(("services.gateway.stages",
                                      "services.gateway.speculation.branches")))


def test_every_gateway_module_has_a_layer_and_every_package_a_docstring() -> None:
    assert unlayered(modules()) == []
    for init in SERVICES.rglob("__init__.py"):
        assert ast.get_docstring(ast.parse(init.read_text())), init


# --- each rule fails on a planted violation -----------------------------------------------------

def _with(edge: tuple[str, str], g: Graph | None = None) -> dict[str, frozenset[str]]:
    planted = dict(graph() if g is None else g)
    planted[edge[0]] = planted.get(edge[0], frozenset()) | {edge[1]}
    return planted


def test_a_planted_cycle_is_caught_in_services_and_in_loadgen() -> None:
    bad = _with(("services.gateway.execution", "services.gateway.stages"))
    assert any("services.gateway.stages" in c for c in cycles(bad))
    assert upward_imports(bad)
    loop = _with(("loadgen.bench.fault_report", "loadgen.bench.faults"))
    assert any("loadgen.bench.faults" in c for c in cycles(loop))


def test_planted_boundary_violations_are_caught() -> None:
    assert boundary_violations(_with(("services.common.runtime.convert",
                                      "services.engine_agent.backend")))
    assert boundary_violations(_with(("services.common.values.errors",
                                      "services.common.runtime.grpc_errors")))
    assert boundary_violations(_with(("services.gateway.core", "services.csl.core")))
    assert not boundary_violations(_with(("services.gateway.core", "services.csl.client")))
    assert not boundary_violations(_with(("services.gateway.core", "services.csl")))


def test_planted_protocol_imports_in_a_core_are_caught() -> None:
    g = full_imports()
    for target in ("grpc", "services.common.pb.engine_pb2", "services.common.runtime.convert",
                   "httpx", "google.protobuf.message"):
        assert protocol_violations(_with(("services.admission.pricing", target), g)), target
        assert protocol_violations(_with(("services.common.values.errors", target), g)), target
    assert not protocol_violations(_with(("services.admission.servicer", "grpc"), g))


def test_planted_outward_imports_are_caught_in_every_service() -> None:
    for core, adapter, edge in (
            ("services.admission.core", "services.admission.adapters.engine_load",
             "services.admission.servicer"),
            ("services.delivery.sender", "services.delivery.adapters.engines",
             "services.delivery.servicer"),
            ("services.engine_agent.sim.engine", "services.engine_agent.backends.sim",
             "services.engine_agent.mux_servicer"),
            ("services.csl.core", "services.csl.convert", "services.csl.servicer"),
            ("services.gateway.stages", "services.gateway.adapters.engines",
             "services.gateway.http.front")):
        assert direction_violations(_with((core, edge))), (core, edge)
        if room(adapter) == "adapters":
            assert direction_violations(_with((core, adapter))), (core, adapter)
            assert direction_violations(_with((adapter, edge))), (adapter, edge)


def test_rooms_are_by_folder_not_by_file_name_suffix() -> None:
    # a core module named like an edge is still core, and one in adapters/ is an adapter
    assert room("services.admission.fake_servicer") == "core"
    assert room("services.gateway.speculation.mux_client") == "core"
    assert room("services.gateway.adapters.anything") == "adapters"
    assert room("services.engine_agent.backends.sim") == "adapters"
    assert unplaced(["services.common.helpers"]) == ["services.common.helpers"]
    assert unlayered(["services.gateway.newroom"]) == ["services.gateway.newroom"]


def test_type_checking_and_function_level_imports_are_in_the_graph(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                      "    from services.csl.core import SubgraphLibrary\n"
                      "def f():\n    import services.gateway.core\n"
                      "from .execution import Executor\n"
                      "from services.common.pb import engine_pb2\n")
    assert imports_of(source, modules(), package="services.gateway") == {
        "services.csl.core", "services.gateway.core", "services.gateway.execution",
        "services.common.pb"}


# --- lazy engines ------------------------------------------------------------------------------

def test_core_packages_do_not_import_real_engines_at_import_time() -> None:
    code = ("import sys, services.engine_agent.server, services.gateway.server, services.cli;"
            "bad=[m for m in ('vllm','torch','sglang','transformers') if m in sys.modules];"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
