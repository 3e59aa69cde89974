"""``dynbranch bench load``: many concurrent workflows through one gateway.

The mesh runs one process per service on loopback (``services.launcher``): two sim engine agents
at zero step time (preset ``zero``, time scale 0: every figure is the mesh's own cost, the engine
is a SIMULATED model), the csl, admission and one gateway. This process is the client: Routing
workflows (router → handler → executor, BFCL requests, early fill on) over the SDK, each with a
unique query so that every stage misses the library (the worst case for the gateway: every call
executes, stores, and every router opens a branch with fills).

Two phases, in one run on one mesh:

- *sweep*: a closed loop at each concurrency (workers that start a new workflow as soon as
  theirs ends) for a fixed time; stage calls/s against concurrency, and the *knee*: the smallest
  concurrency that reaches 90% of the best calls/s, past which more concurrency only adds
  latency.
- *burst*: ``workflows`` workflows started at once (2,000; 300 with ``--quick``), several times;
  every workflow must succeed; p50/p99 of stage calls and workflows; the gateway's RSS and open
  file descriptors sampled every 0.25 s (from ``/proc``) across the bursts and after them, to
  show that they come back rather than grow burst after burst.

The client shares the machine (and its cores) with the mesh; the figures are what one client
process gets, not the gateway's ceiling alone.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import os
import random
import time
from collections.abc import Callable
from typing import Any

from loadgen.arms.stats import quantile
from loadgen.workloads import get_workload
from loadgen.workloads.base import SimClock, Trace
from services.gateway import DynbranchClient
from services.launcher import MeshSpec, ProcessMesh

MODEL = "qwen3-32b"  # the routing template's model
SAMPLE_S = 0.25
KNEE_SHARE = 0.9


@dataclasses.dataclass(frozen=True, slots=True)
class Plan:
    """How much load each phase puts on the gateway."""

    sweep: tuple[int, ...]
    sweep_s: float
    workflows: int
    bursts: int


QUICK = Plan(sweep=(1, 4, 16, 64, 256), sweep_s=1.5, workflows=300, bursts=2)
FULL = Plan(sweep=(1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2000), sweep_s=5.0,
            workflows=2000, bursts=2)


def proc_figures(pid: int) -> tuple[float, int]:
    """RSS in MiB and open file descriptors of process ``pid`` (Linux ``/proc``)."""
    with open(f"/proc/{pid}/status") as status:
        rss_kb = next(int(line.split()[1]) for line in status if line.startswith("VmRSS:"))
    return rss_kb / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process ``pid`` used so far (Linux ``/proc``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Sampler:
    """Samples processes' RSS and descriptors every ``SAMPLE_S`` in an owned task."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.samples: list[dict[str, Any]] = []
        self._start = time.perf_counter()
        self._task: asyncio.Task[None] | None = None

    def mark(self, phase: str) -> None:
        """Take one sample now, labelled ``phase``."""
        row: dict[str, Any] = {"t_s": round(time.perf_counter() - self._start, 2),
                               "phase": phase}
        for name, pid in self.pids.items():
            rss, fds = proc_figures(pid)
            row[f"{name}_rss_mib"], row[f"{name}_fds"] = round(rss, 1), fds
        self.samples.append(row)

    async def _loop(self, phase: Callable[[], str]) -> None:
        while True:
            self.mark(phase())
            await asyncio.sleep(SAMPLE_S)

    def start(self, phase: Callable[[], str]) -> None:
        """Sample until ``stop``."""
        self._task = asyncio.create_task(self._loop(phase), name="load-sampler")

    async def stop(self) -> None:
        """Stop sampling (idempotent)."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None


class Workflows:
    """Routing workflows with unique queries, run through one SDK client."""

    def __init__(self, client: DynbranchClient, seed: int = 0) -> None:
        self.workload = get_workload("routing")
        self.pool = self.workload.pool()
        random.Random(seed).shuffle(self.pool)
        self.client = client
        self.clock = SimClock(1.0)  # zero step time: simulated seconds are wall seconds here
        self._ids = itertools.count()
        self.call_s: list[float] = []
        self.errors: list[str] = []

    async def one(self) -> float:
        """Run one workflow; its wall seconds (errors recorded, not raised)."""
        k = next(self._ids)
        base = self.pool[k % len(self.pool)]
        instance = dataclasses.replace(base, query=f"{base.query} (request {k})")
        trace = Trace(self.client, self.workload.template, f"load-{k}", self.clock)
        start = time.perf_counter()
        try:
            await self.workload.run(trace, instance)
        except Exception as exc:  # noqa: BLE001 - counted; the bench fails on any
            self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
        self.call_s += [s.latency_s for s in trace.stages]
        return time.perf_counter() - start


async def _closed_loop(flows: Workflows, concurrency: int, seconds: float) -> dict[str, Any]:
    before_calls, before_errors = len(flows.call_s), len(flows.errors)
    stop_at = time.perf_counter() + seconds

    async def worker() -> None:
        while time.perf_counter() < stop_at:
            await flows.one()

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - start
    calls = flows.call_s[before_calls:]
    return {"concurrency": concurrency, "calls": len(calls),
            "calls_per_s": round(len(calls) / elapsed, 1),
            "p50_ms": round(1000 * quantile(calls, 0.5), 2) if calls else None,
            "p99_ms": round(1000 * quantile(calls, 0.99), 2) if calls else None,
            "errors": len(flows.errors) - before_errors}


def knee(curve: list[dict[str, Any]]) -> dict[str, Any]:
    """The smallest concurrency within ``KNEE_SHARE`` of the best calls/s, and the gain of
    each doubling past it (where the curve flattens)."""
    best = max(p["calls_per_s"] for p in curve)
    at = next(p for p in curve if p["calls_per_s"] >= KNEE_SHARE * best)
    return {"concurrency": at["concurrency"], "calls_per_s": at["calls_per_s"],
            "best_calls_per_s": best, "rule": f">= {KNEE_SHARE:.0%} of the best calls/s"}


async def _burst(flows: Workflows, n: int) -> dict[str, Any]:
    before_calls, before_errors = len(flows.call_s), len(flows.errors)
    start = time.perf_counter()
    walls = await asyncio.gather(*(flows.one() for _ in range(n)))
    elapsed = time.perf_counter() - start
    calls = flows.call_s[before_calls:]
    return {"workflows": n, "calls": len(calls), "errors": len(flows.errors) - before_errors,
            "seconds": round(elapsed, 2), "calls_per_s": round(len(calls) / elapsed, 1),
            "call_p50_ms": round(1000 * quantile(calls, 0.5), 2),
            "call_p99_ms": round(1000 * quantile(calls, 0.99), 2),
            "workflow_p50_ms": round(1000 * quantile(walls, 0.5), 2),
            "workflow_p99_ms": round(1000 * quantile(walls, 0.99), 2)}


def _summary(samples: list[dict[str, Any]], name: str) -> dict[str, Any]:
    rss = [s[f"{name}_rss_mib"] for s in samples]
    fds = [s[f"{name}_fds"] for s in samples]
    bursts = [s for s in samples if s["phase"].startswith("burst")]
    per_burst = {}
    for s in bursts:
        peak = per_burst.setdefault(s["phase"], {"rss_mib": 0.0, "fds": 0})
        peak["rss_mib"] = max(peak["rss_mib"], s[f"{name}_rss_mib"])
        peak["fds"] = max(peak["fds"], s[f"{name}_fds"])
    return {"rss_mib_start": rss[0], "rss_mib_peak": max(rss), "rss_mib_end": rss[-1],
            "fds_start": fds[0], "fds_peak": max(fds), "fds_end": fds[-1],
            "peak_per_burst": per_burst}


async def load_run(plan: Plan) -> dict[str, Any]:
    """Run ``plan`` on a fresh mesh and return its figures."""
    mesh = ProcessMesh()
    spec = MeshSpec(engines=2, model=MODEL, preset="zero", time_scale=0.0,
                    others=("csl", "admission"), log_level="WARNING")
    phase = ["start"]
    try:
        await mesh.start(spec)
        pids = {c.name: c.process.pid for c in mesh.children
                if c.name in ("gateway", "engine-0", "csl", "admission")}
        sampler = Sampler(pids)
        sampler.start(lambda: phase[0])
        async with DynbranchClient(mesh.address("gateway"), timeout_s=120) as client:
            client.use_builtin("routing")
            flows = Workflows(client)
            await flows.one()  # warm the channel and the template
            curve = []
            for c in plan.sweep:
                phase[0] = f"sweep-{c}"
                curve.append(await _closed_loop(flows, c, plan.sweep_s))
            bursts = []
            for b in range(plan.bursts):
                phase[0] = f"burst-{b + 1}"
                bursts.append(await _burst(flows, plan.workflows))
                phase[0] = f"idle-{b + 1}"
                await asyncio.sleep(1.0)
        phase[0] = "end"
        await asyncio.sleep(2 * SAMPLE_S)
        await sampler.stop()
        sampler.mark("end")
    finally:
        await mesh.stop()
    return {"simulated": True, "preset": "zero", "engines": 2, "workload": "routing",
            "unique_queries": True, "sweep_s": plan.sweep_s, "curve": curve, "knee": knee(curve),
            "bursts": bursts, "errors": sum(b["errors"] for b in bursts) + sum(
                p["errors"] for p in curve), "error_samples": flows.errors[:5],
            "gateway": _summary(sampler.samples, "gateway"),
            "engine_0": _summary(sampler.samples, "engine-0"),
            "csl": _summary(sampler.samples, "csl"),
            "admission": _summary(sampler.samples, "admission"),
            "samples": sampler.samples}


def _print(result: dict[str, Any]) -> None:
    print("load (routing workflows, unique queries, one gateway, 2 SIMULATED engines at zero "
          "step time, csl + admission; client in this process)")
    print("  sweep (closed loop)   concurrency  calls/s   p50 ms   p99 ms  errors")
    for p in result["curve"]:
        print(f"  {'':20s} {p['concurrency']:11d} {p['calls_per_s']:8.1f} "
              f"{p['p50_ms']:8.2f} {p['p99_ms']:8.2f} {p['errors']:7d}")
    k = result["knee"]
    print(f"  knee: concurrency {k['concurrency']} ({k['calls_per_s']:.0f} calls/s; best "
          f"{k['best_calls_per_s']:.0f}; rule {k['rule']})")
    for i, b in enumerate(result["bursts"], 1):
        print(f"  burst {i}: {b['workflows']} workflows at once, {b['calls']} calls in "
              f"{b['seconds']:.1f} s, errors {b['errors']}; call p50 {b['call_p50_ms']:.1f} ms "
              f"p99 {b['call_p99_ms']:.1f} ms; workflow p50 {b['workflow_p50_ms']:.0f} ms "
              f"p99 {b['workflow_p99_ms']:.0f} ms")
    for name in ("gateway", "engine_0", "csl", "admission"):
        g = result[name]
        peaks = ", ".join(f"{k} {v['rss_mib']:.0f} MiB/{v['fds']} fds"
                          for k, v in g["peak_per_burst"].items())
        print(f"  {name:9s} RSS {g['rss_mib_start']:.0f} → peak {g['rss_mib_peak']:.0f} → end "
              f"{g['rss_mib_end']:.0f} MiB; fds {g['fds_start']} → peak {g['fds_peak']} → "
              f"end {g['fds_end']}; per burst: {peaks}")
    print(f"  errors: {result['errors']}")


def run(quick: bool) -> dict[str, Any]:
    """Run the benchmark, print a readable summary, return the JSON figures."""
    result = asyncio.run(load_run(QUICK if quick else FULL))
    result["ok"] = result["errors"] == 0  # any failed workflow fails the run (exit 1)
    _print(result)
    return result


__all__ = ["FULL", "QUICK", "Plan", "cpu_seconds", "knee", "load_run", "proc_figures", "run"]
