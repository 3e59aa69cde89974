"""The engine backends behind ``EngineBackend``, and the one place that picks one.

Layout:

* ``sim``: ``SimBackend``, the simulated engine (over ``sim_engine``) that tests and the demo use;
* ``vllm/``: vLLM's ``AsyncLLM`` embedded in this process (``backend``), the engine-core plugin
  it calls (``plugin``), its prefix leases (``leases``), load view (``load``) and settings
  (``settings``);
* ``remote``: what the HTTP backends share (client, ``/metrics`` poller, KV-event residency,
  the stream-consuming loop); ``openai`` and ``sglang`` speak one request format each over it.
* ``http``: the HTTP helpers they use (error mapping, server-sent events, token estimate).

What a backend may import: ``services.common.*`` and the engine agent's core modules
(``backend``, ``block_pool``, ``kv_cache``, ``scheduler``, ``sim_engine``, ``cost_model``,
``engine_metrics``, ``kv_events``, ``tokenizer``, ``tiny_model``), and modules of its own
backend; the remote backends also use ``vllm.settings`` (sampling checks, finish reasons), which
imports no vLLM. No core module, servicer or server imports a backend module: only
``make_backend`` below does, lazily, so that importing the engine agent pulls in neither vLLM
nor SGLang (``tests/test_layering.py``). Tools and tests that measure one backend on purpose
(``calibrate``) import it inside the function that needs it.

This module itself imports nothing at run time: the vLLM plugin (``vllm/plugin.py``) is loaded
in vLLM's own processes through this package and must stay cheap to import.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.engine_agent.backend import EngineBackend
    from services.engine_agent.config import EngineAgentSettings


def _sim(settings: EngineAgentSettings) -> EngineBackend:
    from services.engine_agent.backends.sim import SimBackend

    return SimBackend.from_settings(settings)


def _vllm(settings: EngineAgentSettings) -> EngineBackend:
    from services.engine_agent.backends.vllm.backend import VllmBackend  # needs the vllm extra

    return VllmBackend.from_settings(settings)


def _openai(settings: EngineAgentSettings) -> EngineBackend:
    from services.engine_agent.backends.openai import OpenAIBackend

    return OpenAIBackend.from_settings(settings)


def _sglang(settings: EngineAgentSettings) -> EngineBackend:
    from services.engine_agent.backends.sglang import SglangBackend

    return SglangBackend.from_settings(settings)


#: backend name → builder.
BUILDERS: dict[str, Callable[[EngineAgentSettings], EngineBackend]] = {
    "sim": _sim, "vllm": _vllm, "openai": _openai, "sglang": _sglang}


def make_backend(settings: EngineAgentSettings) -> EngineBackend:
    """The backend named by ``settings.backend``."""
    return BUILDERS[settings.backend](settings)


__all__ = ["BUILDERS", "make_backend"]
