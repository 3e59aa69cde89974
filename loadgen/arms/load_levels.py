"""Load levels the engines feel: ``idle``, ``moderate``, ``busy`` and ``saturated`` (issue 37).

A rate in workflows per second means different things per workload and engine preset: Routing at
4/s stretches a 32B/H200 engine's decode steps, ReAct's at the same rate not as much. A level is
instead the open-loop Poisson rate at which the **floor's** mean latency (no reuse, no fill) is
``LEVELS[level]`` times its idle value: 1.0 (idle: the workload's low-load rate, dynbranch Fig. 8),
1.2, 1.7 and 2.3. The rate is found by a geometric bisection over [low rate, ``MAX_RATE``] on the
virtual mesh (deterministic: one floor arm per probe on a fixed calibration seed, distinct from
every measured seed), and cached on disk per workload, preset, engines, profile and hop cost, so
a report calibrates once. Every run that takes ``--load`` reports the rate it ran at and the
calibration's measured ratio.

How many workflows a run needs grows with the rate: at λ = 16/s, 48 arrivals last 3 s and the
engines never reach the load of the rate. ``workflows_at`` keeps the arrivals spread over at
least ``SPAN_S`` simulated seconds (one idle Routing workflow), never fewer than the run asks,
and never more than the data set yields for one schedule (``most_workflows``: ReAct's test split
has 133 HotpotQA questions, so its schedules stop at 166 workflows, with its exact repeats; at
16/s they span about 10 s, and the run reports the count). ``VERSION`` 2: that cap.

Where the data set cannot load the engines asked for to a level, the level runs on the most
engines it can (``level_mesh``; ReAct: busy on 2 engines, saturated on 1), and the run says so.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from loadgen.workloads.profiles import DEFAULT_PROFILE

#: Level → the floor's mean latency as a multiple of its idle value.
LEVELS: dict[str, float] = {"idle": 1.0, "moderate": 1.2, "busy": 1.7, "saturated": 2.3}
#: Highest rate the search tries (workflows per simulated second).
MAX_RATE = 32.0
#: Arrivals spread over at least this many simulated seconds (``workflows_at``).
SPAN_S = 12.0
#: Seed of the calibration schedules (no measured seed or warm-up uses it).
CALIBRATION_SEED = 3_000_017
#: Bisection steps per level, and the relative miss of the target ratio that ends one early.
STEPS = 8
TOLERANCE = 0.03
#: Bump when what a cached rate means changes (the rule, the mesh, the search).
VERSION = 2


def workflows_at(rate: float, at_least: int, most: int | None = None) -> int:
    """Workflows that keep Poisson arrivals at ``rate`` spread over ``SPAN_S`` seconds, at most
    ``most`` (what the data set yields: ``most_workflows``), never fewer than ``at_least``."""
    wanted = max(at_least, math.ceil(rate * SPAN_S))
    return wanted if most is None else max(min(wanted, most), min(at_least, most))


def most_workflows(workload: Any) -> int | None:
    """The most workflows one schedule of ``workload`` can hold: its split's distinct instances,
    plus the exact repeats its replay share adds (``schedule.build_schedule``); None when the
    workload does not say."""
    pool = getattr(workload, "split_pool", None)
    if pool is None:
        return None
    from loadgen.workloads.schedule import replay_count, replay_share

    fresh = len(pool())
    share = replay_share(workload)
    n = fresh  # grow while one more arrival still draws no more fresh instances than there are
    while n + 1 - replay_count(n + 1, share) <= fresh and n < 100 * fresh:
        n += 1
    return n


def cache_path() -> Path:
    """Where calibrations are kept: ``$DYNBRANCH_CACHE_DIR`` or ``.dynbranch/cache``."""
    return Path(os.environ.get("DYNBRANCH_CACHE_DIR", ".dynbranch/cache")) / "load-levels.json"


@dataclasses.dataclass(frozen=True, slots=True)
class Calibration:
    """What a level search keys on."""

    workload: str
    preset: str
    engines: int
    profile: str = DEFAULT_PROFILE
    hop_ms: float = 0.5
    workflows: int = 48

    def key(self) -> str:
        return (f"v{VERSION}|{self.workload}|{self.preset}|{self.engines}|{self.profile}|"
                f"{self.hop_ms:g}|{self.workflows}")


def search(measure: Callable[[float], float], low: float, target: float,
           high: float = MAX_RATE, steps: int = STEPS,
           tolerance: float = TOLERANCE) -> tuple[float, float, list[tuple[float, float]]]:
    """The rate in [low, high] at which ``measure`` (the floor's mean over its idle value,
    increasing in the rate) is closest to ``target``: geometric bisection. Returns (rate, the
    ratio measured there, every probe). ``target`` <= 1 is ``low`` itself; a target ``high``
    cannot reach is ``high`` (its ratio says how far short)."""
    probes: list[tuple[float, float]] = []

    def probe(rate: float) -> float:
        value = measure(rate)
        probes.append((rate, value))
        return value

    if target <= 1.0:
        return low, 1.0, probes
    top = probe(high)
    if top <= target:
        return high, top, probes
    lo, hi = low, high
    for _ in range(steps):
        mid = math.sqrt(lo * hi)
        value = probe(mid)
        if abs(value - target) <= tolerance * target:
            break
        lo, hi = (mid, hi) if value < target else (lo, mid)
    rate, value = min(probes, key=lambda p: abs(p[1] - target))
    return rate, value, probes


def _floor_mean(cal: Calibration, rate: float) -> float:
    """The floor arm's mean latency at ``rate`` on the calibration seed (virtual mesh)."""
    from loadgen.arms.runner import run_arm
    from loadgen.arms.specs import ARM_SPECS
    from loadgen.meshes.config import MeshConfig
    from loadgen.workloads import build_schedule, get_workload
    from loadgen.workloads.profiles import profile_options

    workload = get_workload(cal.workload, **profile_options(cal.profile, cal.workload))
    schedule = build_schedule(workload, workflows_at(rate, cal.workflows,
                                                     most_workflows(workload)),
                              seed=CALIBRATION_SEED, arrival="poisson", rate=rate)
    config = MeshConfig(engines=cal.engines, preset=cal.preset, hop_s=cal.hop_ms / 1000)
    result = asyncio.run(run_arm(ARM_SPECS["floor"], workload, schedule, config))
    failed = [r for r in result.results if r.error]
    if failed:
        raise RuntimeError(f"calibration of {cal.workload} at {rate:g}/s: {len(failed)} "
                           f"floor workflow(s) failed ({failed[0].error})")
    return statistics.fmean(r.measured_s for r in result.results)


def calibrate(cal: Calibration, measure: Callable[[Calibration, float], float] = _floor_mean
              ) -> dict[str, Any]:
    """Every level's rate for ``cal`` (``search`` per level over the floor's mean latency,
    relative to its value at the workload's low-load rate), with the probes."""
    from loadgen.workloads import WORKLOADS

    low = WORKLOADS[cal.workload].low_rate
    idle = measure(cal, low)
    seen: dict[float, float] = {low: 1.0}

    def ratio(rate: float) -> float:
        if rate not in seen:
            seen[rate] = measure(cal, rate) / idle
        return seen[rate]

    levels = {}
    for level, target in LEVELS.items():
        rate, value, _ = search(ratio, low, target)
        levels[level] = {"rate": round(rate, 4), "floor_ratio": round(value, 3),
                         "target": target}
    return {"idle_floor_s": round(idle, 3), "levels": levels,
            "probes": sorted((round(r, 4), round(v, 3)) for r, v in seen.items()),
            "seed": CALIBRATION_SEED, **dataclasses.asdict(cal)}


def level_rate(cal: Calibration, level: str, *, path: Path | None = None,
               measure: Callable[[Calibration, float], float] = _floor_mean
               ) -> tuple[float, dict[str, Any]]:
    """``level``'s rate for ``cal`` and its calibration record, from the cache or a search
    (stored back). An unknown level is a ``ValueError`` naming the known ones."""
    if level not in LEVELS:
        raise ValueError(f"unknown load level {level!r}; known: {', '.join(LEVELS)}")
    path = path or cache_path()
    cached = _read(path)
    record = cached.get(cal.key())
    if record is None and LEVELS[level] <= 1.0:  # idle is the low-load rate: no search
        from loadgen.workloads import WORKLOADS

        low = WORKLOADS[cal.workload].low_rate
        return low, {"idle_floor_s": None, "seed": None, "levels": {
            level: {"rate": low, "floor_ratio": 1.0, "target": LEVELS[level]}}}
    if record is None:
        record = calibrate(cal, measure)
        cached[cal.key()] = record
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(cached, indent=1))
        tmp.replace(path)
    return record["levels"][level]["rate"], record


def reached(found: dict[str, Any]) -> bool:
    """Whether a level's calibration (``record["levels"][level]``) reached its target ratio,
    within ``TOLERANCE`` below it (above it is reached: the search keeps the nearest probe)."""
    return bool(found["floor_ratio"] >= found["target"] * (1 - TOLERANCE))


def level_mesh(cal: Calibration, level: str, *, path: Path | None = None,
               measure: Callable[[Calibration, float], float] = _floor_mean
               ) -> tuple[float, Calibration, dict[str, Any]]:
    """``level``'s rate on the most engines, at most ``cal.engines``, that the data set can load
    to it, with that calibration and its record. A schedule holds what one split yields
    (``most_workflows``): ReAct's 133 test questions, all in flight at ``MAX_RATE``, stretch 4
    engines' floor to 1.39x its idle value, 2 engines' to 1.78x and one engine's to 2.61x, so
    its busy level runs on 2 engines and its saturated on 1, each against its own idle value.
    Fewer engines are tried one at a time from ``cal.engines`` down (each calibrated once and
    cached); when none reaches the level, ``cal.engines``' nearest rate, as ``level_rate``."""
    first: tuple[float, Calibration, dict[str, Any]] | None = None
    for engines in range(cal.engines, 0, -1):
        here = dataclasses.replace(cal, engines=engines)
        rate, record = level_rate(here, level, path=path, measure=measure)
        if reached(record["levels"][level]):
            return rate, here, record
        first = first or (rate, here, record)
    assert first is not None, "a calibration has at least one engine"
    return first


def _read(path: Path) -> dict[str, Any]:
    """The cache, or {} when it is missing or unreadable (a broken cache is recalibrated)."""
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return found if isinstance(found, dict) else {}


__all__ = ["LEVELS", "MAX_RATE", "SPAN_S", "Calibration", "cache_path", "calibrate",
           "level_mesh", "level_rate", "reached", "search", "workflows_at"]
