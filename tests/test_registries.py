"""One copy of every list (STYLE.md; DESIGN.md §3): backend, workload, lease mode, arrival, clock
and profile names are defined once, in their table, and every ``choices``, settings check, bench
table, report list and switch is derived from it. Checked on the source: no literal list, tuple,
set or dict keys elsewhere in ``services/`` or ``loadgen/`` names two or more of them, and no
comparison elsewhere switches on a lease mode, arrival, clock or profile by its literal name."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from loadgen.arms.specs import ARM_SPECS
from loadgen.meshes.clocks import CLOCKS
from loadgen.workloads import WORKLOADS
from loadgen.workloads.profiles import PROFILES
from loadgen.workloads.schedule import ARRIVALS
from services.admission.policies import POLICIES as ADMISSION_POLICIES
from services.delivery.policies import POLICIES as DELIVERY_POLICIES
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.leases.state import LEASE_MODES
from services.engine_agent.registry import BACKEND_NAMES, BACKENDS, MESH_BACKENDS, resolve, spec

ROOT = Path(__file__).resolve().parents[1]
#: Where the names may appear together, and why: the registry itself, and data keyed by a name
#: that is not a list of them.
REGISTRIES = {
    "backend": (frozenset(BACKENDS), {
        "services/engine_agent/registry.py",
        # the metric and request flavors of the HTTP engines (a vLLM or SGLang server), which
        # the remote backends speak: engine dialects, not backend names
        "services/engine_agent/backends/remote/engine_metrics.py",
        "services/engine_agent/backends/openai.py"}),
    "workload": (frozenset(WORKLOADS), {
        # the paper's published figures, per workload (dynbranch §5.2)
        "loadgen/report/summary.py"}),
    "admission policy": (frozenset(ADMISSION_POLICIES), {"services/admission/policies.py"}),
    "delivery policy": (frozenset(DELIVERY_POLICIES), {"services/delivery/policies.py"}),
    "lease mode": (frozenset(LEASE_MODES), {"services/engine_agent/leases/state.py"}),
    "arm": (frozenset(ARM_SPECS), {"loadgen/arms/specs.py"}),
    "arrival": (frozenset(ARRIVALS), {"loadgen/workloads/schedule.py"}),
    "clock": (frozenset(CLOCKS), {"loadgen/meshes/clocks.py"}),
    "profile": (frozenset(PROFILES), {"loadgen/workloads/profiles.py"}),
}
#: The tables no code outside their module switches on by a literal name: kind → (names, the
#: word the compared expression holds when it is that kind, e.g. ``settings.mode``).
SWITCHES = {
    "lease mode": (frozenset(LEASE_MODES), "mode"),
    "arrival": (frozenset(ARRIVALS), "arrival"),
    "clock": (frozenset(CLOCKS), "clock"),
    "profile": (frozenset(PROFILES), "profile"),
}


def literal_lists(tree: ast.AST) -> list[tuple[int, set[str], bool]]:
    """Every literal collection's string members (dict keys for dicts), with its line, and
    whether it is a table or a choice list by form: a dict, a ``choices=`` value or a
    ``Literal[...]`` subscript."""
    tables: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "choices":
            tables.add(id(node.value))
        elif isinstance(node, ast.Subscript) and getattr(node.value, "id", "") == "Literal":
            tables.add(id(node.slice))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
            tables.add(id(node))
        else:
            continue
        found.append((node.lineno, {e.value for e in items
                                    if isinstance(e, ast.Constant) and isinstance(e.value, str)},
                      id(node) in tables))
    return found


def copy_lines(source: str, names: frozenset[str]) -> list[tuple[int, list[str]]]:
    """Lines of ``source`` holding a copy of ``names``: the whole list, or a table or choice
    list keyed by two or more of them (a run choosing some arms or policies by name is a
    selection, not a copy)."""
    out = []
    for line, members, table in literal_lists(ast.parse(source)):
        named = members & names
        if len(named) >= 2 and (named == names or table):
            out.append((line, sorted(named)))
    return out


def copies(names: frozenset[str]) -> list[str]:
    # a registry of one kind may share names with another (the ``fixed`` arm runs the ``fixed``
    # policy); what it lists is its own kind's
    allowed = {f for _, files in REGISTRIES.values() for f in files}
    return [f"{rel}:{line}: {named}"
            for folder in ("services", "loadgen") for path in sorted((ROOT / folder).rglob("*.py"))
            if "/pb/" not in (rel := path.relative_to(ROOT).as_posix()) and rel not in allowed
            for line, named in copy_lines(path.read_text(), names)]


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_names_are_listed_once(kind: str) -> None:
    assert copies(REGISTRIES[kind][0]) == []


def test_the_check_finds_a_planted_copy() -> None:
    planted = ('import argparse\nfrom typing import Literal\n'
               'p = argparse.ArgumentParser()\n'
               'p.add_argument("--b", choices=["sim", "vllm"])\n'
               'RATES = {"routing": 1, "hci": 2}\n'
               'Mode = Literal["lads", "ttl"]\n'
               f'ALL = {tuple(WORKLOADS)!r}\n'
               'SOME = ("routing", "hci")\n')
    found = {(kind, line) for kind, (names, _) in REGISTRIES.items()
             for line, _ in copy_lines(planted, names)}
    assert ("backend", 4) in found and ("workload", 5) in found and ("lease mode", 6) in found
    assert ("workload", 7) in found and ("workload", 8) not in found  # a selection is no copy


def test_every_backend_names_a_builder_and_its_modules_exist() -> None:
    for name, backend in BACKENDS.items():
        for path in filter(None, (backend.builder, backend.launcher, backend.tiny_model)):
            module, _, attr = path.partition(":")
            assert attr, (name, path)
            assert (ROOT / (module.replace(".", "/") + ".py")).is_file(), (name, path)
        assert backend.server == bool(backend.launcher), name
    assert callable(resolve(BACKENDS["sim"].builder).from_settings)


def test_an_unknown_backend_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ValueError, match="--backend: unknown 'tgi'; known: sim, vllm"):
        spec("tgi", "--backend")
    with pytest.raises(ValueError, match="known: " + ", ".join(BACKEND_NAMES)):
        EngineAgentSettings(backend="tgi")


def test_the_tiny_model_is_cached_in_the_repositorys_ignored_folder() -> None:
    from services.engine_agent.backends.tiny_model import default_cache_root

    assert default_cache_root() == ROOT / ".dynbranch"


def test_every_registered_workload_lists_its_decisions_and_rate() -> None:
    from loadgen.workloads.base import Workload

    for name, workload in WORKLOADS.items():
        assert workload.name == name
        assert workload.decisions is not Workload.decisions, name
        assert workload.low_rate > 0, name


def class_names(source: str) -> list[str]:
    """The names of the classes ``source`` defines (nested ones too)."""
    return [n.name for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]


def twice_defined(files: dict[str, str]) -> dict[str, list[str]]:
    """Class names defined more than once across ``files`` (path -> source), with where."""
    where: dict[str, list[str]] = {}
    for rel, source in files.items():
        for name in class_names(source):
            where.setdefault(name, []).append(rel)
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_one_name_per_concept() -> None:
    """No class name is defined twice in ``services/`` or ``loadgen/`` (private ones included):
    two things called ``Mesh`` or ``ToolResult`` are two concepts under one name."""
    files = {rel: path.read_text()
             for folder in ("services", "loadgen") for path in sorted((ROOT / folder).rglob("*.py"))
             if "/pb/" not in (rel := path.relative_to(ROOT).as_posix())}
    assert twice_defined(files) == {}
    planted = dict(files, **{"loadgen/planted.py": "class ProcessMesh:\n    pass\n"})
    assert twice_defined(planted) == {"ProcessMesh": ["services/launcher.py", "loadgen/planted.py"]}


def switch_lines(source: str, names: frozenset[str], word: str) -> list[tuple[int, str]]:
    """Comparisons in ``source`` of an expression holding ``word`` (``opts.clock``,
    ``r.get("arrival")``) with a literal one of ``names``, or a literal collection of them."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        literals = {e.value for o in operands
                    for e in (o.elts if isinstance(o, (ast.Tuple, ast.List, ast.Set)) else [o])
                    if isinstance(e, ast.Constant) and isinstance(e.value, str)}
        named = literals & names
        if named and any(word in ast.unparse(o).lower() for o in operands
                         if not isinstance(o, ast.Constant)):
            found.append((node.lineno, min(named)))
    return found


@pytest.mark.parametrize("kind", sorted(SWITCHES))
def test_no_string_switch_over_a_table(kind: str) -> None:
    names, word = SWITCHES[kind]
    home = REGISTRIES[kind][1]
    found = [f"{rel}:{line}: {name}"
             for folder in ("services", "loadgen") for path in sorted((ROOT / folder).rglob("*.py"))
             if "/pb/" not in (rel := path.relative_to(ROOT).as_posix()) and rel not in home
             for line, name in switch_lines(path.read_text(), names, word)]
    assert found == []


def test_the_switch_check_finds_planted_switches() -> None:
    planted = ('if settings.mode == "lads": pass\n'
               'if opts.clock != "virtual": pass\n'
               'if r.get("arrival") in ("poisson",): pass\n'
               'if name != "lads": pass\n'  # a workload or bench named lads: no lease mode
               'if r.get("load") == "serial": pass\n')  # a load level
    lines = {line for kind, (names, word) in SWITCHES.items()
             for line, _ in switch_lines(planted, names, word)}
    assert lines == {1, 2, 3}


def test_every_choice_list_is_its_table() -> None:
    from services.cli import build_parser

    parser = build_parser()
    commands = next(a for a in parser._actions if a.dest == "command").choices
    options = {o: a.choices for name in ("up", "bench") for a in commands[name]._actions
               for o in a.option_strings}
    assert list(options["--backend"]) == list(BACKENDS)
    assert list(options["--engine"]) == list(MESH_BACKENDS)
    assert list(options["--workload"]) == list(WORKLOADS)
    assert list(options["--arrival"]) == list(ARRIVALS)
    assert list(options["--clock"]) == list(CLOCKS)
    assert list(options["--profile"]) == list(PROFILES)


def test_an_http_protocol_is_its_wire_module_and_one_table_entry() -> None:
    """The metrics' protocol labels are read from ``WIRES`` (the front's routes too:
    tests/gateway/test_http_front.py), and in the gateway only the wire module that declares an
    endpoint names its route."""
    from services.gateway.http.observe import PROTOCOLS
    from services.gateway.http.wires import WIRES

    for endpoint in WIRES:
        assert PROTOCOLS[endpoint.path] == endpoint.protocol
        named = {path.relative_to(ROOT).as_posix()
                 for path in sorted((ROOT / "services" / "gateway").rglob("*.py"))
                 for node in ast.walk(ast.parse(path.read_text()))
                 if isinstance(node, ast.Constant) and node.value == endpoint.path}
        assert len(named) == 1, (endpoint.path, sorted(named))
