"""Backend factory: builds the configured ``EngineBackend``; real engines are imported lazily."""

from __future__ import annotations

from collections.abc import Callable

from services.engine_agent.backend import EngineBackend
from services.engine_agent.config import EngineAgentSettings


def _sim(settings: EngineAgentSettings) -> EngineBackend:
    from services.engine_agent.sim_backend import SimBackend

    return SimBackend.from_settings(settings)


def _vllm(settings: EngineAgentSettings) -> EngineBackend:
    from services.engine_agent.vllm_backend import VllmBackend  # needs the vllm extra

    return VllmBackend.from_settings(settings)


def _openai(settings: EngineAgentSettings) -> EngineBackend:
    from services.engine_agent.openai_backend import OpenAIBackend

    return OpenAIBackend.from_settings(settings)


def _sglang(settings: EngineAgentSettings) -> EngineBackend:
    from services.engine_agent.sglang_backend import SglangBackend

    return SglangBackend.from_settings(settings)


#: backend name → builder.
BUILDERS: dict[str, Callable[[EngineAgentSettings], EngineBackend]] = {
    "sim": _sim, "vllm": _vllm, "openai": _openai, "sglang": _sglang}


def make_backend(settings: EngineAgentSettings) -> EngineBackend:
    """The backend named by ``settings.backend``."""
    return BUILDERS[settings.backend](settings)


__all__ = ["BUILDERS", "make_backend"]
