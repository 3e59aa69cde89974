"""Least-loaded routing over engine agents' load views (protocol-free core)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from services.common.errors import InvalidArgument, Unavailable
from services.engine_agent.backend import LoadReport


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

    def score(self) -> float:
        """Lower is less loaded: the engine's reported pressure plus our own in-flight share."""
        return self.load.pressure + self.outstanding / max(self.load.max_running, 1)


def pick_engine(engines: Iterable[EngineState], model: str) -> EngineState:
    """The healthy engine serving ``model`` with the lowest score (ties: first listed)."""
    engines = list(engines)
    serving = [e for e in engines if e.model == model]
    if not serving:
        known = ", ".join(sorted({e.model for e in engines})) or "none"
        raise InvalidArgument("demand.model", f"unknown model {model!r} (served: {known})")
    healthy = [e for e in serving if e.healthy]
    if not healthy:
        raise Unavailable(f"no healthy engine agent serves model {model!r}")
    return min(healthy, key=EngineState.score)


__all__ = ["EngineState", "pick_engine"]
