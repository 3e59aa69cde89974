"""The one place that builds a backend: by its name in ``registry.BACKENDS``, importing its module
only then (so that importing the engine agent pulls in neither vLLM nor SGLang)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from services.engine_agent.registry import resolve, spec

if TYPE_CHECKING:
    from services.engine_agent.backend import EngineBackend
    from services.engine_agent.config import EngineAgentSettings


def make_backend(settings: EngineAgentSettings) -> EngineBackend:
    """The backend named by ``settings.backend``."""
    backend: EngineBackend = resolve(spec(settings.backend).builder).from_settings(settings)
    return backend


__all__ = ["make_backend"]
