"""``VllmBackend``'s load view and the vLLM stat logger that feeds it each engine step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class LoadState:
    """Latest scheduler counts and lifetime prefix-cache totals, as the engine reported them."""

    running: int = 0
    waiting: int = 0
    kv_blocks_used: int = 0
    leased_blocks: int = 0
    prefix_queries: int = 0
    prefix_hits: int = 0


def load_tap(load: LoadState) -> Any:
    """A vLLM ``StatLoggerBase`` class that writes each step's scheduler stats into ``load``."""
    from vllm.v1.metrics.loggers import StatLoggerBase

    class _LoadTap(StatLoggerBase):  # type: ignore[misc]  # vLLM is not followed: Any
        """Folds each step's scheduler stats into the backend's load view."""

        def __init__(self, vllm_config: Any, engine_index: int = 0) -> None:
            self.engine_index = engine_index

        def record(self, scheduler_stats: Any, iteration_stats: Any,
                   mm_cache_stats: Any = None, engine_idx: int = 0) -> None:
            if scheduler_stats is None:
                return
            load.running = scheduler_stats.num_running_reqs
            load.waiting = scheduler_stats.num_waiting_reqs
            pcs = scheduler_stats.prefix_cache_stats
            if pcs is not None:
                load.prefix_queries += int(pcs.queries)
                load.prefix_hits += int(pcs.hits)

        def log_engine_initialized(self) -> None:
            pass

    return _LoadTap


__all__ = ["LoadState", "load_tap"]
