"""Schedules: which workflow instances arrive when, fixed by a seed and shared by every arm.

``poisson`` is an open loop: arrivals at rate ``rate`` per simulated second, whatever the system
does. ``serial`` is a closed loop of one: each workflow starts when the previous one ends (arrival
times are 0 and ignored). A share ``replay`` of the workflows replays an earlier instance exactly
(a new workflow id, the same inputs): cross-request recurrence that exact reuse (C1) can serve.
"""

from __future__ import annotations

import hashlib
import random
from dataclasses import dataclass
from typing import Any

from loadgen.workloads.base import Workload


@dataclass(frozen=True, slots=True)
class ArrivalProcess:
    """How workflows arrive: an open loop at a rate, or a closed loop of one."""

    #: Arrivals at a rate whatever the system does (Poisson times drawn); else each workflow
    #: starts when the previous one ends (times 0 and ignored).
    open_loop: bool


#: Arrival process name → what it is; the one table of them.
ARRIVALS: dict[str, ArrivalProcess] = {
    "poisson": ArrivalProcess(open_loop=True),
    "serial": ArrivalProcess(open_loop=False),
}


def open_loop(arrival: str | None) -> bool:
    """Whether ``arrival`` names an open-loop process (False for a closed loop and for none)."""
    process = ARRIVALS.get(arrival or "")
    return process is not None and process.open_loop


def closed_loop(arrival: str | None) -> bool:
    """Whether ``arrival`` names a closed loop (False for an open loop and for none)."""
    process = ARRIVALS.get(arrival or "")
    return process is not None and not process.open_loop


@dataclass(frozen=True, slots=True)
class ScheduledWorkflow:
    """One workflow of a schedule."""

    workflow_id: str
    #: Arrival time in simulated seconds after the schedule starts (0 in a serial loop).
    at_s: float
    instance: Any
    #: Workflow id this one replays ("" for a fresh instance).
    replay_of: str = ""


@dataclass(frozen=True, slots=True)
class Schedule:
    """A reproducible sequence of arrivals of one workload."""

    workload: str
    seed: int
    arrival: str
    rate: float
    arrivals: tuple[ScheduledWorkflow, ...]

    @property
    def serial(self) -> bool:
        """Whether workflows run one after another (closed loop)."""
        return closed_loop(self.arrival)

    def digest(self) -> str:
        """A fingerprint of ids, times and instances: equal digests, identical schedules."""
        h = hashlib.sha256(f"{self.workload}|{self.arrival}|{self.rate!r}".encode())
        for a in self.arrivals:
            h.update(f"\n{a.workflow_id}|{a.at_s!r}|{a.replay_of}|{a.instance!r}".encode())
        return h.hexdigest()[:16]


def arrival_times(n: int, rng: random.Random, arrival: str, rate: float) -> list[float]:
    """Open-loop Poisson arrival times (first at 0) or zeros for a serial loop."""
    if arrival not in ARRIVALS:
        raise ValueError(f"arrival must be one of {tuple(ARRIVALS)}, got {arrival!r}")
    if closed_loop(arrival):
        return [0.0] * n
    if rate <= 0:
        raise ValueError("rate must be > 0 for poisson arrivals")
    times, t = [], 0.0
    for _ in range(n):
        times.append(round(t, 6))
        t += rng.expovariate(rate)
    return times


def replay_count(n: int, replay: float) -> int:
    """Arrivals of a schedule of ``n`` that repeat an earlier one at exact-replay rate
    ``replay`` (never the first)."""
    return min(n - 1, round(n * replay)) if n > 1 else 0


def replay_share(workload: Workload) -> float:
    """The workload's own exact-replay rate (its profile's, else its default)."""
    return getattr(workload, "replay_rate", workload.default_replay)


def _replay_slots(n: int, replay: float, rng: random.Random) -> set[int]:
    count = replay_count(n, replay)
    return set(rng.sample(range(1, n), count)) if count > 0 else set()


def build_schedule(workload: Workload, n: int, *, seed: int = 0, arrival: str = "poisson",
                   rate: float = 0.5, replay: float | None = None,
                   replay_rate: float | None = None) -> Schedule:
    """``n`` arrivals of ``workload``; ``replay`` (or its alias ``replay_rate``: the exact-replay
    rate dynbranch Fig. 10 sweeps, 0.22 → 0.77) defaults to ``workload.replay_rate``."""
    if n < 1:
        raise ValueError("n must be >= 1")
    if replay is not None and replay_rate is not None and replay != replay_rate:
        raise ValueError("give replay or replay_rate, not both")
    given = replay if replay is not None else replay_rate
    share = replay_share(workload) if given is None else given
    if not 0 <= share < 1:
        raise ValueError("replay must be in [0, 1)")
    rng = random.Random(seed)
    replays = _replay_slots(n, share, rng)
    fresh = iter(workload.instances(n - len(replays), rng))
    times = arrival_times(n, rng, arrival, rate)
    arrivals: list[ScheduledWorkflow] = []
    for i in range(n):
        wid = f"{workload.name}-{seed}-{i:04d}"
        if i in replays:
            original = rng.choice([a for a in arrivals if not a.replay_of])
            arrivals.append(ScheduledWorkflow(wid, times[i], original.instance,
                                              original.workflow_id))
        else:
            arrivals.append(ScheduledWorkflow(wid, times[i], next(fresh)))
    return Schedule(workload.name, seed, arrival, rate, tuple(arrivals))


__all__ = ["ARRIVALS", "ArrivalProcess", "Schedule", "ScheduledWorkflow", "arrival_times",
           "build_schedule", "closed_loop", "open_loop", "replay_count", "replay_share"]
