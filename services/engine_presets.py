"""Which engine each agent of ``dynbranch up`` runs: the sim, or a real engine by preset.

``--backend`` picks the kind:

* ``sim``: the simulated engine; ``--preset`` names its cost model (``qwen3-32b-h200``...).
* ``vllm``: vLLM's ``AsyncLLM`` embedded in each engine agent (prefix leases available).
* ``openai``: each agent beside a vLLM OpenAI server (``--engine-url`` points at running ones;
  without it a server per agent is launched).
* ``sglang``: each agent beside an SGLang server (``--engine-url``, or one launched per agent
  from the SGLang venv of ``scripts/install_sglang.sh``).

For a real backend ``--preset`` names an engine preset (the only one shipped, ``tiny-cpu``: the
tiny random-weight model built locally and the CPU flags of ../shared/notes). Launched servers
serve the model under the mesh's ``--model`` name, run fills at a lower request priority than
canonical work, and are stopped with the mesh.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from services.engine_agent import BACKENDS, EngineServer, resolve, spec, tiny_model_path


@dataclass(frozen=True, slots=True)
class EnginePreset:
    """A real engine's model and limits."""

    description: str
    max_running: int = 16
    max_model_len: int = 4096


#: backend → preset name → preset.
PRESETS: dict[str, dict[str, EnginePreset]] = {
    name: {"tiny-cpu": EnginePreset("the tiny random-weight Qwen3-shaped model, built locally, "
                                    "on the CPU")}
    for name, b in BACKENDS.items() if b.tiny_model}


@dataclass(slots=True)
class EngineSetup:
    """Per engine agent: extra ``--set`` values; and the servers started for them."""

    settings: list[list[str]]
    servers: list[EngineServer] = field(default_factory=list)

    async def stop(self) -> None:
        """Stop every launched server (idempotent)."""
        await asyncio.gather(*(s.stop() for s in self.servers))


def resolve_preset(backend: str, preset: str, sim_default: str) -> str:
    """The preset a backend runs: the sim's cost model, or a real engine's preset name."""
    spec(backend, "--backend")
    if backend == "sim":
        return preset
    if preset == sim_default:
        return "tiny-cpu"
    if preset not in PRESETS[backend]:
        raise ValueError(f"--preset: {backend} has no preset {preset!r}; known: "
                         f"{', '.join(PRESETS[backend])}")
    return preset


async def engine_setup(backend: str, preset: str, engines: int, model: str, run_dir: Path,
                       engine_urls: tuple[str, ...] = (), model_path: str = "") -> EngineSetup:
    """The agents' backend settings, after launching the servers they need."""
    if backend == "sim":
        return EngineSetup([[] for _ in range(engines)])
    chosen = PRESETS[backend][preset]
    path = model_path or (tiny_model_path(backend) if not engine_urls else "")
    if not BACKENDS[backend].server:
        sets = [f"backend={backend}", f"model_path={path}", f"max_running={chosen.max_running}"]
        return EngineSetup([list(sets) for _ in range(engines)])
    if engine_urls and len(engine_urls) not in (1, engines):
        raise ValueError(f"--engine-url: give one, or one per engine ({engines})")
    setup = EngineSetup([])
    urls = list(engine_urls) * (engines if len(engine_urls) == 1 else 1)
    if not urls:
        launch = resolve(BACKENDS[backend].launcher)
        setup.servers = [launch(path, model, chosen.max_running, chosen.max_model_len, run_dir, i)
                         for i in range(engines)]
        try:
            await asyncio.gather(*(s.start() for s in setup.servers))
        except BaseException:
            await setup.stop()
            raise
        urls = [s.url for s in setup.servers]
    for i, url in enumerate(urls):
        priority = BACKENDS[backend].fill_priority
        extra = [f"fill_priority={priority}"] if setup.servers and priority is not None else []
        own = list(setup.servers[i].agent_settings) if setup.servers else []  # a lease channel
        setup.settings.append([f"backend={backend}", f"engine_url={url}", *extra, *own])
    return setup


__all__ = ["PRESETS", "EnginePreset", "EngineSetup", "engine_setup",
           "resolve_preset"]
