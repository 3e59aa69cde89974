"""The clocks an arm runs on: the one table of them (``bench arms --clock``).

Each clock is a mesh: ``virtual``, every service in one process on a virtual clock (latency =
simulated engine time + waits + a modelled cost per hop); ``live``, gRPC servers in one process
in wall time at the run's time scale (the only one for a real engine or a draft model);
``processes``, every service its own process, as ``dynbranch up``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class MeshClock:
    """What one clock is: every switch over the clocks reads one of these."""

    #: Simulated seconds on a virtual clock (time scale 1, a modelled cost per hop; a warm arm's
    #: state is trained on it); else wall time at the run's time scale.
    virtual: bool = False
    #: Runs a real engine or a draft model (wall time, every service in this process).
    real_engines: bool = False
    #: Every service its own process.
    processes: bool = False
    #: Where a simulated run's mesh ran, as the bench's summary line says it.
    where: str = ""


#: Clock name → what it is; the order is the order of ``--clock``'s choices.
CLOCKS: dict[str, MeshClock] = {
    "virtual": MeshClock(virtual=True, where="on the VIRTUAL clock"),
    "live": MeshClock(real_engines=True, where="LIVE in one process"),
    "processes": MeshClock(processes=True, where="as PROCESSES"),
}


def default_clock(real: bool) -> str:
    """The clock a run gets unless it names one: the virtual one for the sim, the one that runs
    real engines for a real engine."""
    return next(name for name, c in CLOCKS.items() if (c.real_engines if real else c.virtual))


def virtual(clock: str | None) -> bool:
    """Whether ``clock`` names the virtual clock (False for another and for none)."""
    found = CLOCKS.get(clock or "")
    return found is not None and found.virtual


def clock_of(clock: str) -> MeshClock:
    """The clock ``clock`` names; ValueError naming the known ones otherwise."""
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {', '.join(CLOCKS)}, got {clock!r}")
    return CLOCKS[clock]


__all__ = ["CLOCKS", "MeshClock", "clock_of", "default_clock", "virtual"]
