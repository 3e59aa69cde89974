"""Backend factory: builds the configured ``EngineBackend``; real engines are imported lazily."""

from __future__ import annotations

from services.common.errors import Unimplemented
from services.engine_agent.backend import EngineBackend
from services.engine_agent.config import EngineAgentSettings


def _sim(settings: EngineAgentSettings) -> EngineBackend:
    from services.engine_agent.sim_backend import SimBackend

    return SimBackend.from_settings(settings)


def _unbuilt(name: str):  # noqa: ANN202 - small table entry
    def build(settings: EngineAgentSettings) -> EngineBackend:
        raise Unimplemented(f"backend {name!r} is not built into this release yet")
    return build


#: backend name → builder; entries are replaced as real backends land.
BUILDERS = {"sim": _sim, "vllm": _unbuilt("vllm"), "openai": _unbuilt("openai"),
            "sglang": _unbuilt("sglang")}


def make_backend(settings: EngineAgentSettings) -> EngineBackend:
    """The backend named by ``settings.backend``."""
    return BUILDERS[settings.backend](settings)


__all__ = ["BUILDERS", "make_backend"]
