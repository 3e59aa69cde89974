"""What the engines felt while a schedule ran: the load an admission decision is priced against,
sampled from the simulated engines themselves (not from any policy's view), so every arm —
with or without an admission service — reports it the same way.

Per engine every ``interval_s`` (the loop's clock: simulated seconds on the virtual mesh) the
sampler reads the engine's load report; at the end it gives the means over samples and engines
of canonical running sequences, running fills, waiting requests and the share of KV blocks in
use (and its peak), the share held by running fills (the KV fills actually use), and the
engines' mean step time (busy simulated seconds over steps taken between start and stop) and
busy share (busy seconds over elapsed seconds per engine). A real engine (the live mesh's vLLM or
SGLang) is sampled the same way from its own load report (its scheduler's counts); it keeps no
busy time, so its step time and busy share are None.
"""

from __future__ import annotations

import asyncio
import contextlib
import statistics
from collections.abc import Sequence
from typing import Any

#: Seconds between samples (the admission service's load reports come every 0.25 s).
INTERVAL_S = 0.25


class EngineLoadSampler:
    """Samples engines (``SimBackend``, or a real backend's load report) on the running loop
    between start and stop."""

    def __init__(self, backends: Sequence[Any], interval_s: float = INTERVAL_S) -> None:
        self.backends = list(backends)
        self.interval_s = interval_s
        self.samples: list[tuple[int, int, int, float, float]] = []
        self._task: asyncio.Task[None] | None = None
        self._start: tuple[float, list[float], list[int]] | None = None

    def _marks(self) -> tuple[float, list[float], list[int]]:
        loop = asyncio.get_running_loop()
        sims = [b.engine for b in self.backends if _simulated(b)]
        return loop.time(), [e.busy_s for e in sims], [e.steps for e in sims]

    def start(self) -> None:
        """Mark the engines' step counts and start sampling."""
        self._start = self._marks()
        self._task = asyncio.create_task(self._sample(), name="engine-load-sampler")

    async def _sample(self) -> None:
        while True:
            for b in self.backends:
                r = b.load()
                total = max(r.kv_blocks_total, 1)
                self.samples.append((max(r.running - r.fill_running, 0), r.fill_running,
                                     r.waiting, r.kv_blocks_used / total,
                                     r.fill_kv_blocks / total))
            await asyncio.sleep(self.interval_s)

    async def stop(self) -> dict[str, Any]:
        """Stop sampling; the figures over the sampled span (module docstring)."""
        if self._task is None or self._start is None:
            raise RuntimeError("the sampler was not started")
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        t1, busy1, steps1 = self._marks()
        t0, busy0, steps0 = self._start
        busy = sum(busy1) - sum(busy0)
        steps = sum(steps1) - sum(steps0)
        elapsed = max(t1 - t0, 1e-9) * max(len(self.backends), 1)

        def mean(i: int) -> float | None:
            if not self.samples:
                return None
            return round(statistics.fmean(s[i] for s in self.samples), 3)

        timed = len(busy1) == len(self.backends)  # every engine keeps busy time (the sim)
        return {"engines": len(self.backends), "samples": len(self.samples),
                "step_ms": round(1000 * busy / steps, 2) if steps and timed else None,
                "busy_share": round(busy / elapsed, 3) if timed else None,
                "running": mean(0), "fills_running": mean(1), "waiting": mean(2),
                "kv_used": mean(3), "fill_kv_used": mean(4),
                "kv_used_peak": round(max(s[3] for s in self.samples), 3)
                if self.samples else None}


def _simulated(backend: Any) -> bool:
    """Whether ``backend`` is the sim (its engine keeps busy seconds and a step count)."""
    return hasattr(getattr(backend, "engine", None), "busy_s")


__all__ = ["INTERVAL_S", "EngineLoadSampler"]
