"""The rooms of ``services/`` and ``loadgen/`` (STYLE.md §1, docs/development.md "Layout and
rules"), checked on the import graph built from the source (what counts as an edge: below the
rules).

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
   ``common.runtime``, no HTTP client or server library, no socket, ``ssl``, ``urllib`` or
   ``http.client``/``http.server``, and no other service's edge or adapter (a core holding
   another service's client speaks its protocol, whether the client comes from its module or
   as a name of the service's face);
5. direction in every service: the core imports neither its adapters nor its edge, the
   adapters do not import the edge;
6. inside the gateway, the demand path imports only downward (``GATEWAY_LAYERS``), and every
   gateway module has a layer (no catch-all);
7. real engines are imported lazily;
8. only the modules that exist for it import by a name read at run time (``importlib``,
   ``__import__``, ``runpy``, ``pkgutil``, ``eval``/``exec``): the face machinery and the
   registries, listed with their reasons in ``DYNAMIC_IMPORTERS``.

What counts as an edge: every import statement (also under ``if TYPE_CHECKING:`` and inside
functions; imports of the generated stubs are protocol imports), a name imported from a face
(``from services.csl import CslClient``, or ``csl.CslClient`` after ``import services.csl as
csl``) as the module its face table names, a face's table itself, and every string that names
a module for a later import: a project module's dotted path, ``"module:attribute"`` of any
package (registry tables, also when built by an f-string from module constants), and the
literal argument of ``__import__``/``import_module``. The boundary rule (3) reads a face's
names as the face, which it allows; every other rule reads them as the modules behind it.

Each rule is shown to fail on a planted violation below, and each of the eight plants that
fooled an earlier version of this test (issue 40: ``importlib.import_module``, ``__import__``,
a string resolved through a registry, another service's gRPC client in a core directly or
through its package, ``urllib``, ``http.client``, ``socket``) is a case in ``PLANTS``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterable, Mapping
from functools import cache
from pathlib import Path

import pytest

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
#: Packages and modules whose imports are protocol imports: gRPC and protobuf, the HTTP client
#: and server libraries, and the standard library's sockets and HTTP (``urllib.parse`` too: a
#: core has no URLs to parse).
PROTOCOL_PACKAGES = ("grpc", "grpc_status", "grpc_health", "grpc_reflection", "google.protobuf",
                     "httpx", "httpcore", "h11", "h2", "aiohttp", "requests", "urllib3",
                     "websockets", "fastapi", "starlette", "uvicorn", "zmq",
                     "socket", "socketserver", "ssl", "http.client", "http.server", "urllib",
                     "xmlrpc", "asyncio.streams")
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
    ("reuse",),
    ("execution",),
    ("adapters",),
    ("ports", "values", "pace", "templates", "tools", "auth", "config", "client", "sdk",
     "tagging"),
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


def _package_of(module: str, is_package: bool) -> str:
    return module if is_package else module.rpartition(".")[0]


def _targets(node: ast.AST, package: str, known: frozenset[str],
             faces: Mapping[str, Mapping[str, str]]) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if not isinstance(node, ast.ImportFrom):
        return []
    base = node.module or ""
    if node.level:
        anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
        base = ".".join(anchor + ([base] if base else []))
    found = []
    for a in node.names:
        if f"{base}.{a.name}" in known:  # ``from pkg import sub`` names the submodule
            found.append(f"{base}.{a.name}")
        elif a.name in faces.get(base, {}):  # a name of a face: the module that defines it
            found.append(faces[base][a.name])
        else:
            found.append(base)
    return found


@cache
def _nodes(tree: ast.AST) -> tuple[ast.AST, ...]:
    """Every node of ``tree`` (walked once, read by each reading below)."""
    return tuple(ast.walk(tree))


def face_table(tree: ast.AST, module: str) -> dict[str, str]:
    """A face's table, read as edges: ``lazy_face(__name__, {name: submodule})`` → name → the
    module that defines it (empty when ``tree`` is no face)."""
    for node in _nodes(tree):
        if (isinstance(node, ast.Call) and getattr(node.func, "id", "") == "lazy_face"
                and len(node.args) == 2 and isinstance(node.args[1], ast.Dict)):
            table = node.args[1]
            return {k.value: f"{module}.{v.value}"
                    for k, v in zip(table.keys, table.values, strict=True)
                    if isinstance(k, ast.Constant) and isinstance(v, ast.Constant)}
    return {}


def _module_strings(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` constants, to read the f-strings a table builds from them."""
    return {t.id: node.value.value for node in tree.body if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)
            for t in node.targets if isinstance(t, ast.Name)}


def _piece(value: ast.expr, named: Mapping[str, str]) -> str:
    if isinstance(value, ast.Constant):
        return str(value.value)
    if isinstance(value, ast.FormattedValue) and isinstance(value.value, ast.Name):
        return named.get(value.value.id, "?")
    return "?"  # not known before run time: names no module


def _strings(tree: ast.Module) -> list[str]:
    """Every string the source spells: constants, and f-strings made of constants and module
    constants (``f"{_SERVERS}:launch"``)."""
    named = _module_strings(tree)
    found = []
    for node in _nodes(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            found.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            found.append("".join(_piece(v, named) for v in node.values))
    return found


def _dotted(text: str) -> bool:
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def named_module(text: str, known: frozenset[str]) -> str | None:
    """The module a string names for a later import, as registries hold them: a project module
    (``"services.csl.core"``), or ``"module:attribute"`` of any package (``"grpc:aio"``)."""
    module, colon, attribute = text.partition(":")
    if colon and _dotted(module) and _dotted(attribute):
        return module
    return text if text in known else None


#: What imports a module by a name computed at run time (or runs code that may).
DYNAMIC_NAMES = ("__import__", "import_module", "eval", "exec")
DYNAMIC_ATTRIBUTES = ("__import__", "import_module", "spec_from_file_location",
                      "module_from_spec", "exec_module", "load_module", "resolve_name",
                      "run_module", "run_path")
DYNAMIC_MODULES = ("importlib", "runpy", "pkgutil", "zipimport", "builtins")
#: Parts of ``importlib`` that import nothing.
STATIC_IMPORTLIB = ("importlib.metadata", "importlib.resources")


def _is_dynamic_module(target: str) -> bool:
    return (any(target == m or target.startswith(m + ".") for m in DYNAMIC_MODULES)
            and not any(target == m or target.startswith(m + ".") for m in STATIC_IMPORTLIB))


def dynamic_imports(tree: ast.AST, package: str = "") -> list[str]:
    """Where ``tree`` imports by name at run time: the import machinery imported
    (``importlib``, ``runpy``, ``pkgutil``, ``builtins``), ``__import__``/``import_module``/
    ``eval``/``exec`` named, or spelled as a string (``getattr(builtins, "__import__")``)."""
    found = []
    for node in _nodes(tree):
        what = ""
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            bad = [t for t in _targets(node, package, frozenset(), {}) if _is_dynamic_module(t)]
            if isinstance(node, ast.ImportFrom) and node.module == "importlib":
                bad = [f"importlib.{a.name}" for a in node.names
                       if f"importlib.{a.name}" not in STATIC_IMPORTLIB]
            what = ", ".join(bad)
        elif isinstance(node, ast.Name) and node.id in DYNAMIC_NAMES:
            what = node.id
        elif isinstance(node, ast.Attribute) and node.attr in DYNAMIC_ATTRIBUTES:
            what = f".{node.attr}"
        elif isinstance(node, ast.Constant) and node.value in ("__import__", "import_module"):
            what = repr(node.value)
        if what:
            found.append(f"line {node.lineno}: {what}")
    return found


def _face_attributes(tree: ast.AST, package: str, known: frozenset[str],
                     faces: Mapping[str, Mapping[str, str]]) -> list[str]:
    """``import services.csl as csl; csl.CslClient``: the module each face attribute is from."""
    aliases: dict[str, str] = {}
    for node in _nodes(tree):
        if isinstance(node, ast.Import):
            # ``import a.b`` binds ``a``; ``import a.b as c`` binds ``c`` to ``a.b``
            for a in node.names:
                top = a.name.split(".")[0]
                aliases[a.asname or top] = a.name if a.asname else top
        elif isinstance(node, ast.ImportFrom):
            aliases.update({a.asname or a.name: t for a, t in zip(
                node.names, _targets(node, package, known, {}), strict=True)})
    aliases = {alias: target for alias, target in aliases.items()
               if any(face == target or face.startswith(target + ".") for face in faces)}
    found = []
    if not aliases:
        return found
    for node in _nodes(tree):
        if isinstance(node, ast.Attribute):
            chain = [node.attr]
            value = node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in aliases:
                dotted = ".".join([aliases[value.id], *reversed(chain)])
                face, _, name = dotted.rpartition(".")
                if name in faces.get(face, {}):
                    found.append(faces[face][name])
    return found


def _imported_by_name(tree: ast.AST) -> list[str]:
    """The literal module names passed to ``__import__``/``import_module`` (any package)."""
    return [node.args[0].value for node in _nodes(tree) if isinstance(node, ast.Call)
            and (getattr(node.func, "id", "") or getattr(node.func, "attr", "")) in (
                "__import__", "import_module")
            and node.args and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)]


def all_imports_in(source: str, module: str, is_package: bool, known: frozenset[str],
                   faces: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    """Every module the source of ``module`` reaches (any package), wherever the reach stands:
    import statements (also under ``if TYPE_CHECKING:`` and inside functions), names of a face
    (the module that defines them, read from the face's table; with ``faces`` empty, the face
    itself), the face's own table, and strings that name a module for a later import (registry
    tables, the argument of a dynamic import)."""
    return _reach(ast.parse(source), module, is_package, known, faces)


def _reach(tree: ast.Module, module: str, is_package: bool, known: frozenset[str],
           faces: Mapping[str, Mapping[str, str]]) -> frozenset[str]:
    package = _package_of(module, is_package)
    found: set[str] = set()
    for node in _nodes(tree):
        found.update(_targets(node, package, known, faces))
    found.update(face_table(tree, module).values())
    if faces:
        found.update(_face_attributes(tree, package, known, faces))
    found.update(m for m in (named_module(s, known) for s in _strings(tree)) if m)
    found.update(_imported_by_name(tree))
    found.discard(module)
    return frozenset(found)


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


@cache
def _trees() -> dict[str, tuple[ast.Module, bool]]:
    """Every module's syntax tree, and whether it is a package."""
    return {module_name(p): (ast.parse(p.read_text()), _is_package(p))
            for p in _sources(SERVICES, LOADGEN)}


@cache
def faces() -> dict[str, dict[str, str]]:
    """Every face's table: package → exported name → the module that defines it."""
    tables = {m: face_table(tree, m) for m, (tree, _) in _trees().items()}
    return {m: t for m, t in tables.items() if t}


def all_imports_of(path: Path, known: Iterable[str], package: str | None = None) -> frozenset[str]:
    """Every module the file at ``path`` reaches (see ``all_imports_in``); ``package``: the
    module path to read it as (derived from ``path`` when None)."""
    module = module_name(path) if package is None else package
    return all_imports_in(path.read_text(), module, package is not None or _is_package(path),
                          frozenset(known), faces())


def _project(targets: Iterable[str]) -> frozenset[str]:
    return frozenset(t for t in targets if t.split(".")[0] in ("services", "loadgen"))


def imports_of(path: Path, known: Iterable[str], package: str | None = None) -> frozenset[str]:
    """The project modules (``services.*``, ``loadgen.*``) ``path`` reaches, stubs included."""
    return _project(all_imports_of(path, known, package))


@cache
def full_imports() -> Graph:
    known = modules()
    return {m: _reach(tree, m, pkg, known, faces()) for m, (tree, pkg) in _trees().items()}


@cache
def graph() -> Graph:
    return {m: _project(targets) for m, targets in full_imports().items()}


@cache
def statement_graph() -> Graph:
    """The project graph with a face's names read as the face (what the boundary rule allows:
    another service's face), not as the modules behind it."""
    known = modules()
    return {m: _project(_reach(tree, m, pkg, known, {})) for m, (tree, pkg) in _trees().items()}


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


def speaks_protocol(src: str, dst: str) -> bool:
    """Whether ``src`` importing ``dst`` speaks a protocol: ``dst`` is one (``is_protocol``), or
    it is another service's edge or adapter (its client, its stubs' users), whether imported from
    its module or as a name of its face."""
    other = service_of(dst)
    return is_protocol(dst) or (other not in (None, "common", service_of(src))
                                and room(dst) in ("edge", "adapters"))


def protocol_violations(g: Graph) -> list[str]:
    """Core and values modules that speak a protocol (gRPC, protobuf, the stubs, runtime, HTTP,
    sockets, another service's client)."""
    return [f"{src} ({room(src)}) -> {dst}" for src, targets in sorted(g.items())
            if room(src) in ("core", "values") for dst in sorted(targets)
            if speaks_protocol(src, dst)]


#: The modules that exist to import by a name read at run time, and why; a dynamic import
#: anywhere else hides an edge from this test. Their tables are read as edges (strings that name
#: a module, ``face_table``).
DYNAMIC_IMPORTERS = {
    # the lazy face of every service package (PEP 562): a name is imported when first asked for
    "services.common.values.face": "faces",
    # the one table of engine backends, held as import paths so reading it imports no engine
    "services.engine_agent.registry": "registry",
    # the table of benchmarks, each imported only when it runs
    "loadgen.bench": "registry",
    # ALLOWED, not a face or a registry: ``dynbranch serve NAME`` imports the one server named in
    # its ``SERVICES`` table (importing all six servers to start one would load every service);
    # the table's strings are edges of the CLI like its imports
    "services.cli": "the CLI's table of servers",
}


def dynamic_violations(trees: Mapping[str, tuple[ast.Module, bool]]) -> list[str]:
    """Modules outside ``DYNAMIC_IMPORTERS`` that import by a name read at run time (``trees``:
    module → its syntax tree and whether it is a package)."""
    return [f"{m}: {where}" for m, (tree, pkg) in sorted(trees.items())
            if m not in DYNAMIC_IMPORTERS
            for where in dynamic_imports(tree, _package_of(m, pkg))]


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


#: Registry → the folder its table names, allowed by the direction rule, and why.
REGISTRY_TABLES = {
    # ALLOWED: the one table of backends names each backend's class, server launcher and tiny
    # model builder by import path (reading it imports no engine: the settings check and the
    # command lines read only names). The paths are resolved when an adapter or a composition
    # asks (``backends.factory``, ``services.engine_presets`` through ``resolve`` and
    # ``tiny_model_path``), never by a core on its own; moving the paths out of the core would
    # split the one table in two.
    "services.engine_agent.registry": "services.engine_agent.backends",
}


def direction_violations(g: Graph) -> list[str]:
    """Inside each service: a core module importing its adapters or edge, an adapter its edge
    (a registry naming the folder ``REGISTRY_TABLES`` allows it excepted)."""
    bad = []
    for src, targets in sorted(g.items()):
        own, src_room = service_of(src), room(src)
        if own in (None, "common") or src_room not in FORBIDDEN:
            continue
        for dst in sorted(targets):
            if src in REGISTRY_TABLES and _within(dst, REGISTRY_TABLES[src]):
                continue
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
    assert boundary_violations(statement_graph()) == []


def test_cores_and_values_speak_no_protocol() -> None:
    assert protocol_violations(full_imports()) == []


def test_only_faces_and_registries_import_by_a_name_read_at_run_time() -> None:
    assert dynamic_violations(_trees()) == []
    for module in DYNAMIC_IMPORTERS:  # no stale entry: each still imports by name
        tree, package = _trees()[module]
        assert dynamic_imports(tree, _package_of(module, package)), module


def test_face_and_registry_tables_are_edges() -> None:
    g = graph()
    assert "services.csl.client" in g["services.csl"]  # the face's table
    assert "services.engine_agent.backends.sim" in g["services.engine_agent.registry"]
    assert "loadgen.bench.overhead" in g["loadgen.bench"]
    assert "services.gateway.server" in g["services.cli"]  # ``dynbranch serve``'s table
    # a name imported from a face is an edge to the module that defines it
    assert "services.engine_agent.registry" in g["services.engine_agent.config"]


def test_every_service_imports_inward() -> None:
    assert direction_violations(graph()) == []


def test_the_gateway_demand_path_only_imports_downward() -> None:
    assert upward_imports(graph()) == []


def speculation_entries(g: Graph) -> list[str]:
    """The demand path (``stages``, ``reuse``, ``execution``) importing speculation: it reaches
    early fill only through ``ports.SpeculationPort``, called once per demand."""
    path = [m for m in g if m in ("services.gateway.stages", "services.gateway.execution")
            or m.startswith("services.gateway.reuse")]
    return [f"{src} -> {dst}" for src in sorted(path)
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
    loop = _with(("loadgen.faults.report", "loadgen.bench.faults"))
    assert any("loadgen.bench.faults" in c for c in cycles(loop))


def test_planted_boundary_violations_are_caught() -> None:
    g = statement_graph()
    assert boundary_violations(_with(("services.common.runtime.convert",
                                      "services.engine_agent.backend"), g))
    assert boundary_violations(_with(("services.common.values.errors",
                                      "services.common.runtime.grpc_errors"), g))
    assert boundary_violations(_with(("services.gateway.core", "services.csl.core"), g))
    # the boundary allows a client or a face; a core holding a client speaks a protocol (below)
    assert not boundary_violations(_with(("services.gateway.core", "services.csl.client"), g))
    assert not boundary_violations(_with(("services.gateway.core", "services.csl"), g))


def test_planted_protocol_imports_in_a_core_are_caught() -> None:
    g = full_imports()
    for target in ("grpc", "services.common.pb.engine_pb2", "services.common.runtime.convert",
                   "httpx", "google.protobuf.message"):
        assert protocol_violations(_with(("services.admission.pricing", target), g)), target
        assert protocol_violations(_with(("services.common.values.errors", target), g)), target
    assert not protocol_violations(_with(("services.admission.servicer", "grpc"), g))


def _planted(module: str, source: str, through_faces: bool = True) -> dict[str, frozenset[str]]:
    """The whole graph (every package) with ``module``'s reach read from ``source``;
    ``through_faces=False``: the boundary rule's reading (a face's names as the face)."""
    g = dict(full_imports() if through_faces else statement_graph())
    g[module] = all_imports_in(source, module, False, modules(), faces() if through_faces else {})
    return g


CORE = "services.gateway.stages"

#: The eight plants that fooled the test before (issue 40): each source, planted in a core, must
#: be reported. ``rules``: which checks report it.
PLANTS = {
    "importlib.import_module": (
        "import importlib\ndef channel():\n    return importlib.import_module('grpc')\n",
        ("dynamic", "protocol")),
    "__import__": ("def channel():\n    return __import__('grpc').insecure_channel('x')\n",
                   ("dynamic", "protocol")),
    "a string resolved through a registry": (
        "from services.engine_agent import resolve\n"
        "def channel():\n    return resolve('grpc.aio:insecure_channel')('x')\n"
        "LIBRARY = 'services.csl.core:SubgraphLibrary'\n",
        ("protocol", "boundary")),
    "another service's gRPC client, directly": (
        "from services.csl.client import CslClient\n", ("protocol",)),
    "another service's gRPC client, through its package": (
        "from services.csl import CslClient\n", ("protocol",)),
    "urllib": ("from urllib.request import urlopen\n", ("protocol",)),
    "http.client": ("import http.client\n", ("protocol",)),
    "socket": ("import socket\n", ("protocol",)),
}


def _reports(module: str, source: str) -> dict[str, list[str]]:
    return {"dynamic": dynamic_violations({module: (ast.parse(source), False)}),
            "protocol": protocol_violations(_planted(module, source)),
            "boundary": boundary_violations(_planted(module, source, through_faces=False))}


@pytest.mark.parametrize("plant", sorted(PLANTS))
def test_each_plant_that_fooled_the_test_is_caught(plant: str) -> None:
    source, rules = PLANTS[plant]
    reports = _reports(CORE, source)
    for rule in rules:
        assert any(r.startswith(CORE) for r in reports[rule]), (plant, rule, reports)
    # in an edge, the same protocol is fine; dynamic imports are not
    edge = _reports("services.gateway.servicer", source)
    assert not [r for r in edge["protocol"] if r.startswith("services.gateway.servicer")]
    assert bool(edge["dynamic"]) == ("dynamic" in rules)


@pytest.mark.parametrize("source", [
    "from importlib import import_module as load\nload('grpc')\n",
    "import builtins\ngetattr(builtins, '__import__')('grpc')\n",
    "getattr(__builtins__, '__import__')\n",
    "import importlib.util\nimportlib.util.spec_from_file_location('m', 'm.py')\n",
    "import pkgutil\npkgutil.resolve_name('grpc:aio')\n",
    "import runpy\nrunpy.run_module('grpc')\n",
    "exec('import grpc')\n",
    "eval(\"__import__('grpc')\")\n",
])
def test_other_spellings_of_a_dynamic_import_are_caught(source: str) -> None:
    assert dynamic_violations({CORE: (ast.parse(source), False)}), source


@pytest.mark.parametrize("source", [
    "import services.csl as csl\nCLIENT = csl.CslClient\n",
    "from services import csl\nCLIENT = csl.CslClient\n",
    "import services.csl\nCLIENT = services.csl.CslClient\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from services.csl import CslClient\n",
    "from services.engine_agent import EngineAgentClient\n",  # the engine agent's own client
    "from services.gateway import GatewayClient\n",  # a harness's client in another core
])
def test_a_core_holding_another_service_client_through_its_face_speaks_a_protocol(
        source: str) -> None:
    core = "services.admission.pricing"
    assert [r for r in protocol_violations(_planted(core, source)) if r.startswith(core)], source
    # what the face hands over that is no client or adapter is protocol-free
    plain = "from services.csl import SubgraphLibrary\n"
    assert not [r for r in protocol_violations(_planted(core, plain)) if r.startswith(core)]


def test_a_registry_table_naming_another_service_internals_is_caught() -> None:
    registry = "services.engine_agent.registry"
    source = (ROOT / "services/engine_agent/registry.py").read_text() + (
        "\n_STAGES = 'services.gateway'\n"
        "BACKENDS['planted'] = BackendSpec('planted', f'{_STAGES}.stages:StageService')\n")
    assert any("services.gateway.stages" in r
               for r in boundary_violations(_planted(registry, source, through_faces=False)))
    # importlib.metadata imports no module by name
    static = ast.parse("from importlib.metadata import version\n")
    assert not dynamic_violations({CORE: (static, False)})


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
