"""Fault matrix: SIGKILL and restart each service, or delay / drop its traffic, under a running
mixed workload on the local mesh.

The mesh runs as processes on loopback (``services.launcher``): two sim engine agents (a model of
an engine, not a real one), the csl, admission, delivery and two gateway replicas, with a
:class:`~loadgen.faults.proxy.FaultProxy` in the gateways' path to ``engine-0`` and to the csl.
Early fill (C2) and exact reuse (C1) are on. The workload (``loadgen.faults.mixed_load``) is Routing
workflows plus plain canonical calls, driven closed-loop by a harness that spreads them over both
replicas and retries a failed stage call a bounded number of times, each retry on the other
replica, as an agent behind a load balancer would.

One mesh serves every cell, healed between cells (every service SERVING again, proxies passing):
a fresh mesh per cell would cost a start and a stop (~5 s on 2 cores) per cell, which ``--quick``
cannot afford, and every cell draws distinct items, so no cell's results are reused by another.
Each cell: load runs; the fault is injected (an engine kill waits for a fill, or a canonical
generation, to be running on ``engine-0``: its own load stream says so); after ``down_s`` the
service is restarted on the same port or the proxy healed; load runs ``post_s`` more.

The floor (no reuse, no fill, no library: ``c1=false c2=false`` on a mesh of its own, no faults)
then runs every item the cells ran; sim engines at temperature 0 are deterministic, so every
completed output must equal the floor's. Reported per cell: items, lost (failed after every
retry; goal 0), wrong (differs from the floor; goal 0), retries, failed attempts by status,
routing latency of items overlapping the fault window (p50, p99, and their ratio to the floor's
p50), and time to recover: from the heal until the first item started after it completes with no
retry within 1.5x the floor's p50 of its kind (that item's own latency included).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc

from loadgen.faults.mixed_load import Harness, ItemOutcome, RetryPolicy, drive
from loadgen.faults.partition import partition_check
from loadgen.faults.proxy import FaultProxy
from loadgen.faults.report import Cell, CellRun, floor_summary, print_table, summarize
from services.common.runtime.clients import wait_serving
from services.engine_agent import EngineAgentClient
from services.launcher import MeshSpec, ProcessMesh

#: Keys of one cell's items start at ``cell index × KEY_STRIDE``.
KEY_STRIDE = 100_000
PROXIED = ("engine-0", "csl")


@dataclass(frozen=True, slots=True)
class Params:
    """Sizes of a run."""

    time_scale: float
    concurrency: int
    warm_s: float
    down_s: float
    post_s: float
    #: Closed-loop workers of the floor run (its latency barely depends on it: sim decode is
    #: memory-bound, so a batch of 16 steps about as fast as one of 4; measured p50 +5 %).
    floor_concurrency: int = 0
    delay_s: float = 0.05
    trigger_timeout_s: float = 4.0
    settle_s: float = 0.5
    policy: RetryPolicy = RetryPolicy()


QUICK = Params(time_scale=0.05, concurrency=3, warm_s=0.4, down_s=0.8, post_s=1.0,
               floor_concurrency=16, settle_s=0.3, policy=RetryPolicy(call_timeout_s=10.0))
FULL = Params(time_scale=0.1, concurrency=6, warm_s=2.0, down_s=3.0, post_s=5.0)


CELLS = (
    Cell("engine-0 SIGKILL mid-fill", "engine-0", "kill", "fill"),
    Cell("engine-0 SIGKILL mid-canonical", "engine-0", "kill", "canonical"),
    Cell("csl SIGKILL", "csl", "kill"),
    Cell("admission SIGKILL", "admission", "kill"),
    Cell("delivery SIGKILL", "delivery", "kill"),
    Cell("gateway-1 (of 2) SIGKILL", "gateway-1", "kill"),
    Cell("gw<->engine-0 delay /chunk", "engine-0", "delay"),
    Cell("gw<->engine-0 reset (drop)", "engine-0", "reset"),
    Cell("gw<->csl black-hole", "csl", "blackhole"),
)


class FaultMesh:
    """The mesh under test, its proxies and the harness; ``close`` is idempotent."""

    def __init__(self, params: Params, run_dir: Path | None = None) -> None:
        self.params = params
        self.mesh = ProcessMesh(run_dir=run_dir, keep_run_dir=True)  # logs stay until the verdict
        self.proxies = {name: FaultProxy() for name in PROXIED}
        self.harness: Harness | None = None

    def _route(self, name: str, address: str) -> str:
        proxy = self.proxies.get(name)
        if proxy is None:
            return address
        proxy.target = address
        return proxy.address

    async def start(self) -> None:
        """Proxies first (their addresses go into the gateways' flags), then the mesh."""
        for proxy in self.proxies.values():
            await proxy.start()
        await self.mesh.start(MeshSpec(engines=2, gateways=2, time_scale=self.params.time_scale,
                                       log_level="WARNING", gateway_route=self._route))
        self.harness = Harness([self.mesh.address("gateway"), self.mesh.address("gateway-1")],
                               self.params.policy)

    async def inject(self, cell: Cell) -> None:
        """Start the fault."""
        if cell.fault == "kill":
            await self.mesh.kill(cell.target)
        elif cell.fault == "delay":
            self.proxies[cell.target].delay(self.params.delay_s)
        else:
            getattr(self.proxies[cell.target], cell.fault)()

    async def heal(self, cell: Cell) -> None:
        """End the fault: restart the killed service (returns once SERVING) or heal the proxy."""
        if cell.fault == "kill":
            await self.mesh.restart(cell.target)
        else:
            self.proxies[cell.target].heal()

    async def settle(self) -> None:
        """Between cells: every service running (a crashed one restarted) and SERVING, every
        proxy passing, engines' load streams back."""
        for proxy in self.proxies.values():
            proxy.heal()
        for name in self.mesh.exited():
            await self.mesh.restart(name)
        await asyncio.gather(*(wait_serving(c.address) for c in self.mesh.children))
        await asyncio.sleep(self.params.settle_s)  # gateways renew lost load streams in 0.2 s

    async def close(self) -> None:
        if self.harness is not None:
            await self.harness.close()
            self.harness = None
        await self.mesh.stop()
        for proxy in self.proxies.values():
            await proxy.close()


def _busy(view: Any, trigger: str, strict: bool) -> bool:
    fills, canonical = view.fill_running, view.running - view.fill_running
    if trigger == "fill":
        return fills >= 1
    return canonical >= 1 and (fills == 0 or not strict)


async def wait_for_work(address: str, trigger: str, timeout_s: float) -> dict[str, int] | None:
    """Follow the engine's own load stream until ``trigger`` work runs on it; its view then
    (None if it never did in time). A canonical trigger first waits for a moment with no fill
    running, for half the time, so the two engine cells kill different work."""
    client = EngineAgentClient(address)
    start = time.monotonic()
    try:
        async with asyncio.timeout(timeout_s):
            async for view in client.watch_load(interval_s=0.01):
                strict = time.monotonic() - start < timeout_s / 2
                if _busy(view, trigger, strict):
                    return {"running": view.running, "fill_running": view.fill_running,
                            "waiting": view.waiting}
    except (TimeoutError, grpc.aio.AioRpcError):
        return None
    finally:
        await client.close()
    return None


async def run_cell(fm: FaultMesh, cell: Cell, index: int) -> CellRun:
    """Load, fault, heal, load; returns every item's outcome and the fault's times."""
    p, stop = fm.params, asyncio.Event()
    assert fm.harness is not None
    keys = itertools.count(index * KEY_STRIDE)
    proxy = fm.proxies.get(cell.target) if cell.fault != "kill" else None
    before = dataclasses.replace(proxy.counters) if proxy is not None else None
    load = asyncio.create_task(drive(fm.harness, keys, p.concurrency, stop))
    await asyncio.sleep(p.warm_s)
    at_kill = None
    if cell.trigger:
        at_kill = await wait_for_work(fm.mesh.address(cell.target), cell.trigger,
                                      p.trigger_timeout_s)
    t_fault = time.monotonic()
    await fm.inject(cell)
    await asyncio.sleep(p.down_s)
    await fm.heal(cell)
    t_heal = time.monotonic()
    await asyncio.sleep(p.post_s)
    stop.set()
    outcomes = await load
    crashed = fm.mesh.exited()
    counters = {} if proxy is None or before is None else {
        "accepted": proxy.counters.accepted - before.accepted,
        "resets": proxy.counters.resets - before.resets}
    return CellRun(cell, outcomes, t_fault, t_heal, at_kill, counters, crashed)


async def run_floor(params: Params, keys: list[int]) -> tuple[list[ItemOutcome], list[str]]:
    """Every key once on the no-reuse floor: its own mesh, no library, no fill, no faults
    (delivery only: tool rounds return their results through it).
    Also the services found exited at its end (none, unless one crashed or was killed from
    outside)."""
    mesh = ProcessMesh()
    spec = MeshSpec(engines=2, gateways=1, time_scale=params.time_scale, others=("delivery",),
                    gateway_settings=["c1=false", "c2=false"], log_level="WARNING")
    try:
        await mesh.start(spec)
        harness = Harness([mesh.address("gateway")], params.policy)
        try:
            outcomes = await drive(harness, iter(keys),
                                   params.floor_concurrency or params.concurrency)
            return outcomes, mesh.exited()
        finally:
            await harness.close()
    finally:
        await mesh.stop()


async def _run(quick: bool, cells: tuple[Cell, ...] = CELLS) -> dict[str, Any]:
    params = QUICK if quick else FULL
    print(f"dynbranch bench faults: engines are SIMULATED (sim preset qwen3-32b-h200, time scale "
          f"{params.time_scale}); {len(cells)} cells on one mesh healed between them", flush=True)
    fm, runs = FaultMesh(params), []
    try:
        await fm.start()
        for index, cell in enumerate(cells):
            if index:
                await fm.settle()
            start = time.monotonic()
            runs.append(await run_cell(fm, cell, index))
            print(f"  {cell.name}: {len(runs[-1].outcomes)} items, "
                  f"{time.monotonic() - start:.1f} s", flush=True)
    finally:
        await fm.close()
    start = time.monotonic()
    floor, exited = await run_floor(params, sorted(o.key for r in runs for o in r.outcomes))
    print(f"  floor: {len(floor)} items, {time.monotonic() - start:.1f} s", flush=True)
    base = {**floor_summary(floor), "crashed": exited}
    rows = [summarize(r, {o.key: o for o in floor}, base) for r in runs]
    ok = base["lost"] == 0 and not exited and all(
        r["lost"] == 0 and r["wrong"] == 0 and not r["crashed"] for r in rows)
    print_table(rows, base, params.time_scale)
    for line in fm.mesh.failed_starts:  # a restart that needed another start: reported, not hidden
        print(f"  a restart needed another start: {line}")
    if ok:
        shutil.rmtree(fm.mesh.run_dir, ignore_errors=True)
    else:
        print(f"logs of the mesh under test kept in {fm.mesh.run_dir}")
    partition = await partition_cell(quick)
    ok = ok and partition["ok"]
    return {"benchmark": "faults", "partition": partition,
            "engine": "sim (a model of an engine, not a real one)",
            "ok": ok, "quick": quick, "time_scale": params.time_scale,
            "concurrency": params.concurrency, "down_s": params.down_s,
            "floor_concurrency": params.floor_concurrency or params.concurrency,
            "retry_attempts": params.policy.attempts, "floor": base, "cells": rows,
            "failed_starts": fm.mesh.failed_starts, "run_dir": "" if ok else str(fm.mesh.run_dir)}


async def partition_cell(quick: bool) -> dict[str, Any]:
    """The one-sided partition cell, on a mesh of its own (two gateways, three leased csl
    shards, one corpus; ``loadgen/faults/partition.py``): ``ok`` when nothing stale and no
    error was seen after any acknowledged write."""
    checks, lease_s, min_writes = (100, 0.25, 1) if quick else (3000, 1.0, 3)
    print(f"  partition cell: A cut from csl-1 (refused, black-holed), healed, csl-1 restarted "
          f"on an older copy; {checks} checks, serving lease {lease_s} s", flush=True)
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-partition-") as folder:
        report = await partition_check(Path(folder), checks, lease_s=lease_s,
                                       min_writes=min_writes)
    report["wall_s"] = round(time.monotonic() - start, 1)
    report["ok"] = not (report["stale"] or report["library_stale"] or report["errors"]
                        or report["write_errors"])
    print(f"  {'phase':26} {'checks':>7} {'stale':>5} {'lib chk':>7} {'lib stale':>9} "
          f"{'writes':>6} {'write p50 ms':>12}")
    for name, row in report["phases"].items():
        print(f"  {name:26} {row['checks']:>7} {row['stale']:>5} {row['library_checks']:>7} "
              f"{row['library_stale']:>9} {row['writes'] + row['record_writes']:>6} "
              f"{row['write_p50_ms'] if row['write_p50_ms'] is not None else '-':>12}")
    print(f"  partition: {report['checks']} answers checked, {report['stale']} stale; "
          f"{report['library_checks']} library entries checked, {report['library_stale']} "
          f"stale; {report['errors']} errors; {report['wall_s']} s", flush=True)
    return report


def run(quick: bool = False, **_: Any) -> dict[str, Any]:
    """Run every cell and the floor, then the partition cell; ``ok`` when no item was lost or
    answered wrongly and nothing stale was served."""
    return asyncio.run(_run(quick))


__all__ = ["CELLS", "Cell", "CellRun", "FaultMesh", "Params", "partition_cell", "run", "run_cell",
           "run_floor"]
