"""Tests mirror the package for the cores: every core module of admission, csl, delivery, the
engine agent's ``sim/`` and ``leases/``, and the gateway's demand path has its own test module,
``tests/<service>/<folder>/test_<module>.py``. A module exempt below says why."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Folders whose modules are cores (the edges, adapters and faces of each service excluded).
CORES = ("services/admission", "services/corpus", "services/csl", "services/delivery",
         "services/engine_agent/sim",
         "services/engine_agent/leases", "services/gateway/speculation",
         "services/gateway/reuse")
#: The gateway's demand path outside ``speculation/``.
DEMAND_PATH = ("services/gateway/core.py", "services/gateway/stages.py",
               "services/gateway/execution.py", "services/engine_agent/core.py")
EDGES = {"__init__", "__main__", "server", "servicer", "client", "config", "convert"}
#: Modules without behaviour of their own to test, and why.
EXEMPT = {
    "services/csl/errors.py": "exception classes only (raised and checked in test_durability)",
    "services/csl/options.py": "a settings dataclass (its store options: test_library)",
}


def core_modules() -> list[Path]:
    found = [p for folder in CORES for p in sorted((ROOT / folder).glob("*.py"))
             if p.stem not in EDGES]
    return found + [ROOT / p for p in DEMAND_PATH]


def mirror_of(module: Path) -> Path:
    rel = module.relative_to(ROOT / "services")
    return ROOT / "tests" / rel.parent / f"test_{module.stem}.py"


def missing(modules: list[Path]) -> list[str]:
    return [str(m.relative_to(ROOT)) for m in modules
            if not mirror_of(m).is_file() and str(m.relative_to(ROOT)) not in EXEMPT]


def test_every_core_module_has_its_own_test_module() -> None:
    modules = core_modules()
    assert len(modules) > 50
    assert missing(modules) == []
    assert all((ROOT / m).is_file() for m in EXEMPT)  # an exemption names a real module


def test_a_core_module_without_a_mirror_is_caught() -> None:
    planted = ROOT / "services" / "admission" / "planted_rule.py"
    assert missing([planted]) == ["services/admission/planted_rule.py"]
