"""Routing over engine agents' load views (protocol-free core).

Canonical work goes to the least-loaded healthy engine, counting fills as free capacity because
engines preempt fills for canonical work; it prefers the engine that served the same workflow
last (prefix affinity: its KV prefix is likely resident) unless that engine is clearly busier.
Fills go to the engine with the most room, counting everything, so they never take the last
free slot of one engine while another is idle.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from services.common.values.errors import Unavailable, quoted
from services.common.values.generation import LoadReport
from services.gateway.values import unknown_model

#: An affine engine is kept while its score is within this much of the best one.
AFFINITY_MARGIN = 0.25
AFFINITY_ENTRIES = 65_536


@dataclass(slots=True)
class EngineState:
    """What the gateway knows about one engine agent, kept current by its load stream."""

    engine_id: str
    target: str
    model: str
    max_model_len: int
    load: LoadReport
    healthy: bool = True
    #: Calls this gateway has in flight on the engine, counted before the next load view.
    outstanding: int = 0
    outstanding_fills: int = 0

    def score(self) -> float:
        """Load of everything: lower is less loaded (used for fills)."""
        return self.load.pressure + self.outstanding / max(self.load.max_running, 1)

    def canonical_score(self) -> float:
        """Load as canonical work sees it: running fills are preemptible, so they do not count."""
        load, slots = self.load, max(self.load.max_running, 1)
        busy = load.running - load.fill_running + load.waiting
        mine = self.outstanding - self.outstanding_fills
        kv = (load.kv_blocks_used - load.fill_kv_blocks) / max(load.kv_blocks_total, 1)
        return (busy + mine) / slots + kv


    def canonical_room(self, besides: int = 0) -> bool:
        """Whether a canonical generation could start here now: a slot free of canonical work,
        counting running fills as free (engines preempt them for canonical work) and every
        waiting request (but ``besides`` of them) as ahead of it."""
        load = self.load
        busy = load.running - load.fill_running + max(load.waiting - besides, 0)
        return busy + self.outstanding - self.outstanding_fills < load.max_running


def rooms(engines: Iterable[EngineState], running: EngineState) -> tuple[bool, bool]:
    """Where a canonical generation of ``running``'s model could start now: on ``running``
    itself besides the one request waiting there (the fill being adopted), and on another
    healthy engine serving the model (``ports.Room``)."""
    here = running.canonical_room(besides=1)
    elsewhere = any(e is not running and e.model == running.model and e.healthy
                    and e.canonical_room() for e in engines)
    return here, elsewhere


def _serving(engines: Iterable[EngineState], model: str) -> list[EngineState]:
    engines = list(engines)
    serving = [e for e in engines if e.model == model]
    if not serving:
        raise unknown_model(model, (e.model for e in engines))
    healthy = [e for e in serving if e.healthy]
    if not healthy:
        raise Unavailable(f"no healthy engine agent serves model {quoted(model)}")
    return healthy


def pick_engine(engines: Iterable[EngineState], model: str) -> EngineState:
    """The healthy engine serving ``model`` with the lowest load (ties: first listed)."""
    return min(_serving(engines, model), key=EngineState.canonical_score)


class Router:
    """Least-loaded routing with prefix affinity for canonical work and room-first for fills."""

    def __init__(self) -> None:
        self._affinity: OrderedDict[str, str] = OrderedDict()

    def pick(self, engines: Iterable[EngineState], model: str, *, fill: bool = False,
             affinity_key: str = "") -> EngineState:
        """The engine for one generation."""
        healthy = _serving(engines, model)
        if fill:
            return min(healthy, key=EngineState.score)
        best = min(healthy, key=EngineState.canonical_score)
        affine_id = self._affinity.get(affinity_key) if affinity_key else None
        affine = next((e for e in healthy if e.engine_id == affine_id), None)
        margin = best.canonical_score() + AFFINITY_MARGIN
        if affine is not None and affine.canonical_score() <= margin:
            best = affine
        if affinity_key:
            self._remember(affinity_key, best.engine_id)
        return best

    def affine(self, key: str) -> str | None:
        """The engine that served ``key``'s last canonical call here (it holds its history)."""
        return self._affinity.get(key) if key else None

    def _remember(self, key: str, engine_id: str) -> None:
        self._affinity[key] = engine_id
        self._affinity.move_to_end(key)
        while len(self._affinity) > AFFINITY_ENTRIES:
            self._affinity.popitem(last=False)


__all__ = ["AFFINITY_MARGIN", "EngineState", "Router", "pick_engine", "rooms"]
