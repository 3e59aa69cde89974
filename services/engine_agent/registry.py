"""The one table of engine backends: every list of backend names (the settings' check, the
command lines' ``choices``, the launcher, the experiment mesh) is derived from ``BACKENDS``.

Adding a backend is its own module (a class with ``from_settings``) and one line here;
``factory.make_backend`` builds the one a setting names. The table
holds import paths, not classes, so that reading it imports no engine (the settings, the command
lines and the tests read it without vLLM or SGLang installed).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class BackendSpec:
    """One backend: what it is, where its class is, and how the launcher and the mesh run it."""

    summary: str
    #: ``module:Class`` of the backend; the class has ``from_settings(EngineAgentSettings)``.
    builder: str
    #: Request priority fills are sent with (canonical work sends 0); None: no priority.
    fill_priority: int | None = None
    #: Whether the agent speaks to a server beside it (``engine_url``), launched as ``launcher``.
    server: bool = False
    #: ``module:function(model_path, model, max_running, max_model_len, folder, index)`` that
    #: starts a server for this backend (server backends only).
    launcher: str = ""
    #: ``module:function()`` that builds the tiny random-weight model this engine loads; "": none.
    tiny_model: str = ""
    #: Whether ``bench arms --engine`` runs the in-process experiment mesh on it.
    mesh: bool = False


_TINY = "services.engine_agent.backends.tiny_model:build_tiny_model"
_SERVERS = "services.engine_agent.backends.servers"

#: Backend name → spec. The order is the order of every ``choices`` list.
BACKENDS: dict[str, BackendSpec] = {
    "sim": BackendSpec("the simulated engine (a model of one, not an engine)",
                       "services.engine_agent.backends.sim:SimBackend", mesh=True),
    "vllm": BackendSpec("vLLM's AsyncLLM embedded in the agent (prefix leases)",
                        "services.engine_agent.backends.vllm.backend:VllmBackend",
                        fill_priority=1, tiny_model=_TINY, mesh=True),
    "openai": BackendSpec("a vLLM OpenAI server beside the agent",
                          "services.engine_agent.backends.openai:OpenAIBackend",
                          fill_priority=1, server=True, launcher=f"{_SERVERS}:launch_vllm_server",
                          tiny_model=_TINY),
    "sglang": BackendSpec("an SGLang server beside the agent",
                          "services.engine_agent.backends.sglang:SglangBackend",
                          fill_priority=-1, server=True,
                          launcher=f"{_SERVERS}:launch_sglang_server",
                          tiny_model=f"{_SERVERS}:tiny_model_for_sglang", mesh=True),
}
BACKEND_NAMES: tuple[str, ...] = tuple(BACKENDS)
SERVER_BACKENDS: tuple[str, ...] = tuple(n for n, s in BACKENDS.items() if s.server)
MESH_BACKENDS: tuple[str, ...] = tuple(n for n, s in BACKENDS.items() if s.mesh)


def spec(name: str, flag: str = "backend") -> BackendSpec:
    """The spec of ``name``; ``ValueError`` naming ``flag`` and the known backends otherwise."""
    try:
        return BACKENDS[name]
    except KeyError:
        raise ValueError(f"{flag}: unknown {name!r}; known: "
                         f"{', '.join(BACKEND_NAMES)}") from None


def resolve(path: str) -> Any:
    """The object a ``module:name`` path names (imported now)."""
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


def tiny_model_path(name: str) -> str:
    """The tiny model folder ``name`` loads (built on first use, by whichever venv has torch)."""
    builder = spec(name).tiny_model
    if not builder:
        raise ValueError(f"backend {name!r} loads no model")
    return str(resolve(builder)())


__all__ = ["BACKENDS", "BACKEND_NAMES", "MESH_BACKENDS", "SERVER_BACKENDS", "BackendSpec",
           "resolve", "spec", "tiny_model_path"]
