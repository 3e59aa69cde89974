"""One copy of every list (STYLE.md; DESIGN.md §3): backend and workload names are defined once,
in their registry, and every ``choices``, settings check, bench table and report list is derived
from it. Checked on the source: no literal list, tuple, set or dict keys elsewhere in
``services/`` or ``loadgen/`` names two or more of them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from loadgen.workloads import WORKLOADS
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.registry import BACKEND_NAMES, BACKENDS, resolve, spec

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
        "loadgen/report_summary.py"}),
}


def literal_lists(tree: ast.AST) -> list[tuple[int, set[str]]]:
    """Every literal collection's string members (dict keys for dicts), with its line."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            items = node.elts
        elif isinstance(node, ast.Dict):
            items = [k for k in node.keys if k is not None]
        else:
            continue
        found.append((node.lineno, {e.value for e in items
                                    if isinstance(e, ast.Constant) and isinstance(e.value, str)}))
    return found


def copies(names: frozenset[str], allowed: set[str]) -> list[str]:
    out = []
    for folder in ("services", "loadgen"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if "/pb/" in rel or rel in allowed:
                continue
            for line, members in literal_lists(ast.parse(path.read_text())):
                if len(members & names) >= 2:
                    out.append(f"{rel}:{line}: {sorted(members & names)}")
    return out


@pytest.mark.parametrize("kind", sorted(REGISTRIES))
def test_names_are_listed_once(kind: str) -> None:
    names, allowed = REGISTRIES[kind]
    assert copies(names, allowed) == []


def test_the_check_finds_a_planted_copy(tmp_path: Path) -> None:
    planted = ast.parse('CHOICES = ["sim", "vllm"]\nRATES = {"routing": 1, "hci": 2}\n')
    lists = literal_lists(planted)
    assert any(len(m & frozenset(BACKENDS)) >= 2 for _, m in lists)
    assert any(len(m & frozenset(WORKLOADS)) >= 2 for _, m in lists)


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
