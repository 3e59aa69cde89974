"""``dynbranch bench soak --minutes N``: a long mixed run that must leak nothing.

One in-process mesh (every service a real ``grpc.aio`` server on loopback, in this process so
that its asyncio tasks, descriptors and memory are this process's): the csl with a small byte
budget (so entries are evicted all the time), two SIMULATED engine agents at zero step time with
LADS leases (short lifetime ℓ), the delivery service (``lads``) and a gateway with C1 and C2 on,
a retrieval corpus (HotpotQA + MuSiQue paragraphs) and the delivery link. Four kinds of load
run together until the time is up:

- *workflows*: the four loadgen workloads (routing, react, subagent, hci) in turn, instances
  drawn with repetition so that the library hits, evicts and refills;
- *writes*: corpus documents rewritten with a version marker, each write followed by two
  retrievals of the document (the second may be a library hit); a retrieval that shows an older
  version than the acknowledged write is a *stale hit* (DESIGN.md §5.3); plus version-only
  record writes;
- *lease churn*: a history call, then its tool result delivered through the gateway to the
  delivery service, which leases and returns it to the engine holding the history.

Every ``sample_s`` it records this process's RSS, open descriptors and asyncio tasks, the csl's
bytes against its budget and its LMDB file, the engines' live lease references, delivery's
pending results and the gateway's in-flight demands and branches. At the end the load stops,
leases run out their lifetime, and the last sample is compared with the first (taken after a
warm-up): descriptors and tasks back to where they were, lease references at zero, the RSS slope
over the second half small, library bytes never above the budget, no stale hit, no error.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.bench.load import proc_figures
from loadgen.faults.version_marks import text_of, version_in
from loadgen.workloads import WORKLOADS as WORKLOAD_CLASSES
from loadgen.workloads import get_workload
from loadgen.workloads.base import SimClock, Trace, Workload
from services.common.pb import common_pb2, delivery_pb2, gateway_pb2
from services.corpus import Corpus, hotpotqa_documents, musique_documents
from services.csl import CslSettings
from services.csl import build_runtime as build_csl
from services.delivery import DeliverySettings
from services.delivery import build_runtime as build_delivery
from services.engine_agent import EngineAgentSettings, make_backend
from services.engine_agent import build_runtime as build_engine
from services.gateway import DynbranchClient, GatewayClient, GatewaySettings
from services.gateway import build_runtime as build_gateway

MODEL = "qwen3-32b"
WORKLOADS = tuple(WORKLOAD_CLASSES)
#: The csl's byte budget: small, so that the run evicts all the time.
BUDGET_BYTES = 256 * 1024
LEASE_LIFETIME_S = 2.0
#: Allowed growth, last sample over the first: descriptors and tasks (a channel reconnecting,
#: a timer in flight) and the RSS slope over the run's second half.
FD_SLACK, TASK_SLACK, RSS_SLOPE_MIB_PER_MIN = 8, 8, 4.0
#: Shorter runs report the RSS slope without judging it: bounded caches are still filling then
#: (measured at 1 min: the tokenizer's 65,536-piece cache at 24,050, delivery's 4,096
#: remembered answers at 1,069), so the slope measures warm-up, not a leak.
RSS_JUDGED_FROM_MIN = 10.0
QUESTION = {"question": "What is it?", "notes": "none yet"}
HISTORY = "You are a shopping agent. Inspect the product and its reviews carefully. " * 6


@dataclass(slots=True)
class Counts:
    """What the load did."""

    workflows: dict[str, int] = field(default_factory=lambda: dict.fromkeys(WORKLOADS, 0))
    errors: list[str] = field(default_factory=list)
    writes: int = 0
    record_writes: int = 0
    checks: int = 0
    stale: int = 0
    missing: int = 0
    delivered: int = 0

    def error(self, what: str, exc: BaseException) -> None:
        """Record a failure (the run then fails)."""
        self.errors.append(f"{what}: {type(exc).__name__}: {exc}"[:240])


@dataclass(slots=True)
class SoakMesh:
    """The running pieces the sampler reads."""

    csl: Any
    backends: list[Any]
    delivery: Any
    gateway: Any


# -- the mesh -----------------------------------------------------------------------------------

def _corpus(folder: Path) -> str:
    path = folder / "corpus"
    with Corpus(path, "corpus") as corpus:
        corpus.load_documents(itertools.chain(hotpotqa_documents(None), musique_documents(None)))
    return str(path)


def _engine_settings(i: int) -> EngineAgentSettings:
    return EngineAgentSettings(engine_id=f"engine-{i}", model=MODEL, preset="zero",
                               time_scale=0.0, lease_mode="lads", lease_headroom_blocks=8,
                               lease_lifetime_s=LEASE_LIFETIME_S, lease_interval_s=0.05,
                               metrics_port=-1, grace_s=0.2, log_level="WARNING")


@contextlib.asynccontextmanager
async def soak_mesh(folder: Path) -> AsyncIterator[SoakMesh]:
    """csl (small budget), two lease-enabled sim engines, delivery and a gateway."""
    async with contextlib.AsyncExitStack() as stack:
        async def started(runtime: Any) -> Any:
            await runtime.start()
            stack.push_async_callback(runtime.shutdown)
            return runtime

        csl = await started(await build_csl(CslSettings(
            data_dir=str(folder / "csl"), budget_bytes=BUDGET_BYTES, shadow_ttl_s=5.0,
            metrics_port=-1, grace_s=0.2, sync=False, log_level="WARNING")))
        settings = [_engine_settings(i) for i in range(2)]
        backends = [make_backend(s) for s in settings]
        engines = [await started(await build_engine(s, backend=b))
                   for s, b in zip(settings, backends, strict=True)]
        delivery = await started(await build_delivery(DeliverySettings(
            engines=[f"{s.engine_id}={e.address}" for s, e in zip(settings, engines,
                                                                   strict=True)],
            policy="lads", link_bytes_per_s=1e7, metrics_port=-1, grace_s=0.2,
            log_level="WARNING")))
        gateway = await started(await build_gateway(GatewaySettings(
            engines=[e.address for e in engines], csl=csl.address, delivery=delivery.address,
            corpus_path=_corpus(folder), fill_wait_s=1.0, branch_ttl_s=5.0, shadow_ttl_s=5.0,
            metrics_port=-1, grace_s=0.2, auth=False, log_level="WARNING")))
        yield SoakMesh(csl, backends, delivery, gateway)


# -- the load -----------------------------------------------------------------------------------

class Load:
    """The three kinds of load, each an owned loop that stops when ``stop`` is set."""

    def __init__(self, sdk: DynbranchClient, client: GatewayClient, seed: int = 0) -> None:
        self.sdk, self.client = sdk, client
        self.counts = Counts()
        self.stop = asyncio.Event()
        self.rng = random.Random(seed)
        self.clock = SimClock(0.01)  # a user's simulated think time passes 100x faster
        self.workloads: dict[str, Workload] = {n: get_workload(n) for n in WORKLOADS}
        self.pools = {n: w.pool() for n, w in self.workloads.items()}
        self._ids = itertools.count()

    async def workflows(self, offset: int) -> None:
        """Run the workloads in turn; instances repeat, so the library hits and evicts."""
        for name in itertools.islice(itertools.cycle(WORKLOADS), offset, None):
            if self.stop.is_set():
                return
            workload = self.workloads[name]
            instance = self.rng.choice(self.pools[name][:200])  # repeats within reach
            trace = Trace(self.sdk, workload.template, f"soak-{next(self._ids)}", self.clock)
            try:
                await workload.run(trace, instance)
                self.counts.workflows[name] += 1
            except Exception as exc:  # noqa: BLE001 - counted; the run fails on any
                self.counts.error(f"workflow {name}", exc)

    async def writes(self, documents: int = 8) -> None:
        """Rewrite documents and check that no retrieval shows an older version."""
        for version in itertools.count():
            if self.stop.is_set():
                return
            term = f"Soakterm{version % documents}"
            try:
                await self.sdk.write(upserts=[(term.lower(), term, text_of(term, version))])
                self.counts.writes += 1
                await self.sdk.write(record_ids=[f"soak-record-{version % 64}"])
                self.counts.record_writes += 1
                for attempt in range(2):  # the second may be served by the library (C1)
                    answer = await self.sdk.call_stage(
                        "react", "retrieve", workflow_id=f"soak-check-{version}-{attempt}",
                        inputs=QUESTION, candidate=term)
                    self._check(version_in(answer.text, term), version)
            except Exception as exc:  # noqa: BLE001
                self.counts.error("write/check", exc)
            await asyncio.sleep(0.05)

    def _check(self, seen: int | None, written: int) -> None:
        self.counts.checks += 1
        if seen is None:
            self.counts.missing += 1
        elif seen < written:
            self.counts.stale += 1

    async def leases(self) -> None:
        """A history call, then its tool result delivered back to the engine holding it."""
        for k in itertools.count():
            if self.stop.is_set():
                return
            try:
                await self._lease_round(k)
                self.counts.delivered += 1
            except Exception as exc:  # noqa: BLE001
                self.counts.error("delivery", exc)

    async def _lease_round(self, k: int) -> None:
        workflow = f"soak-lease-{k}"
        history = f"{HISTORY} Session {k}."
        sampling = common_pb2.SamplingParams(max_tokens=16, ignore_eos=True)
        first = await self.client.call(gateway_pb2.CallRequest(demand=common_pb2.StageDemand(
            model=MODEL, prompt=history, sampling=sampling, workflow_id=workflow)),
            timeout_s=20)
        observation = f"Product {k}: Fusion Backpack, $59. Reviews: 4.6/5.".encode()
        history += first.text
        await self.client.deliver_result(delivery_pb2.DeliverRequest(
            key=common_pb2.ResultKey(workflow_id=workflow, turn=1), history=history,
            observation=observation, tool="open", model=MODEL,
            prompt=f"{history}\nObservation: {observation.decode()}\n", sampling=sampling),
            timeout_s=20)


# -- sampling and verdicts ------------------------------------------------------------------------

async def sample(mesh: SoakMesh, started: float) -> dict[str, Any]:
    """One row of figures."""
    rss, fds = proc_figures(os.getpid())
    data = Path(mesh.csl.settings.data_dir) / "data.mdb"
    refs = [sum((await b.lease_refs()).values()) for b in mesh.backends]
    core = mesh.gateway.core
    row = {"t_s": round(time.perf_counter() - started, 1), "rss_mib": round(rss, 1),
           "fds": fds, "tasks": len(asyncio.all_tasks()),
           "lmdb_file_mib": round(data.stat().st_blocks * 512 / 2**20, 2),
           "lease_refs": sum(refs), "delivery_pending": mesh.delivery.core.pending,
           "gateway_in_flight": core.in_flight,
           "gateway_branches": len(core.branches.branches) if core.branches else 0}
    for key in ("bytes", "entries", "evictions", "invalidations", "hits"):  # as scraped
        value = _csl_metric(mesh.csl, key)
        row["library_bytes" if key == "bytes" else
            "library_entries" if key == "entries" else key] = value
    return row


def _csl_metric(csl: Any, key: str) -> int:
    """The csl's exported figure ``dynbranch_csl_<key>`` (a counter or a gauge)."""
    for name in (f"dynbranch_csl_{key}_total", f"dynbranch_csl_{key}"):
        value = csl.registry.get_sample_value(name)
        if value is not None:
            return int(value)
    raise KeyError(f"csl metric dynbranch_csl_{key} is not exported")


def rss_slope(rows: list[dict[str, Any]]) -> float:
    """Least-squares RSS slope over the second half of the rows, MiB per minute."""
    half = rows[len(rows) // 2:]
    if len(half) < 2:
        return 0.0
    ts = [r["t_s"] / 60 for r in half]
    ys = [r["rss_mib"] for r in half]
    mt, my = sum(ts) / len(ts), sum(ys) / len(ys)
    var = sum((t - mt) ** 2 for t in ts)
    return sum((t - mt) * (y - my) for t, y in zip(ts, ys, strict=True)) / var if var else 0.0


def verdicts(rows: list[dict[str, Any]], counts: Counts, minutes: float
             ) -> dict[str, bool | None]:
    """Each leak check, True when it holds (None: not judged on a run this short)."""
    first, last = rows[0], rows[-1]
    slope_ok = rss_slope(rows) <= RSS_SLOPE_MIB_PER_MIN
    return {
        "no_errors": not counts.errors,
        "no_stale_hit": counts.stale == 0 and counts.checks > 0,
        "fds_back": last["fds"] <= first["fds"] + FD_SLACK,
        "tasks_back": last["tasks"] <= first["tasks"] + TASK_SLACK,
        "lease_refs_zero": last["lease_refs"] == 0,
        "delivery_drained": last["delivery_pending"] == 0,
        "rss_slope_bounded": slope_ok if minutes >= RSS_JUDGED_FROM_MIN else None,
        "library_within_budget": all(r.get("library_bytes", 0) <= BUDGET_BYTES for r in rows),
        "evicted": last.get("evictions", 0) > first.get("evictions", 0),
    }


# -- the run --------------------------------------------------------------------------------------

async def _quiesce(mesh: SoakMesh, timeout_s: float) -> None:
    """Wait for leases to run out and in-flight work to end (bounded)."""
    deadline = time.perf_counter() + timeout_s
    while time.perf_counter() < deadline:
        refs = [sum((await b.lease_refs()).values()) for b in mesh.backends]
        if (not any(refs) and mesh.delivery.core.pending == 0
                and mesh.gateway.core.in_flight == 0):
            break
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)


async def soak(minutes: float, runners: int = 4, sample_s: float = 2.0) -> dict[str, Any]:
    """Run the soak for ``minutes`` and return its figures and checks (``ok``)."""
    with tempfile.TemporaryDirectory(prefix="dynbranch-soak-") as tmp:
        async with (soak_mesh(Path(tmp)) as mesh,
                    DynbranchClient(mesh.gateway.address, timeout_s=60) as sdk,
                    GatewayClient(mesh.gateway.address) as client):
            for name in WORKLOADS:
                sdk.use_builtin(name)
            load = Load(sdk, client)
            started = time.perf_counter()
            tasks = [asyncio.create_task(load.workflows(i), name=f"soak-workflows-{i}")
                     for i in range(runners)]
            tasks += [asyncio.create_task(load.writes(), name="soak-writes"),
                      asyncio.create_task(load.leases(), name="soak-leases")]
            rows: list[dict[str, Any]] = []
            warmup = min(20.0, 60 * minutes * 0.15)
            await asyncio.sleep(warmup)
            end = started + 60 * minutes
            while time.perf_counter() < end:
                rows.append(await sample(mesh, started))
                await asyncio.sleep(min(sample_s, max(0.0, end - time.perf_counter())))
            load.stop.set()
            await asyncio.gather(*tasks)
            await _quiesce(mesh, LEASE_LIFETIME_S + 10)
            rows.append(await sample(mesh, started))
            rows[-1]["phase"] = "after load"
    checks = verdicts(rows, load.counts, minutes)
    c = load.counts
    return {"simulated": True, "minutes": minutes, "runners": runners,
            "budget_bytes": BUDGET_BYTES, "workflows": c.workflows, "writes": c.writes,
            "record_writes": c.record_writes, "freshness_checks": c.checks,
            "stale_hits": c.stale, "missing_passages": c.missing, "delivered": c.delivered,
            "errors": len(c.errors), "error_samples": c.errors[:5],
            "rss_slope_mib_per_min": round(rss_slope(rows), 2),
            "start": rows[0], "end": rows[-1], "peak": _peaks(rows), "checks": checks,
            "ok": all(v is not False for v in checks.values()), "samples": rows}


def _peaks(rows: list[dict[str, Any]]) -> dict[str, float]:
    keys = ("rss_mib", "fds", "tasks", "lmdb_file_mib", "lease_refs", "delivery_pending",
            "gateway_in_flight", "gateway_branches", "library_bytes")
    return {k: max(r.get(k, 0) for r in rows) for k in keys}


def _print(r: dict[str, Any]) -> None:
    s, e, p = r["start"], r["end"], r["peak"]
    print(f"soak ({r['minutes']} min; in-process mesh, 2 SIMULATED engines at zero step time "
          f"with LADS leases, csl budget {r['budget_bytes'] // 1024} KiB)")
    print(f"  workflows {r['workflows']}; corpus writes {r['writes']}, record writes "
          f"{r['record_writes']}; freshness checks {r['freshness_checks']} (stale "
          f"{r['stale_hits']}, passage missing {r['missing_passages']}); tool results "
          f"delivered {r['delivered']}; errors {r['errors']}")
    for label, key in (("RSS MiB", "rss_mib"), ("open fds", "fds"), ("asyncio tasks", "tasks"),
                       ("LMDB file MiB", "lmdb_file_mib"), ("lease refs", "lease_refs"),
                       ("delivery pending", "delivery_pending"),
                       ("gateway branches", "gateway_branches"),
                       ("library bytes", "library_bytes")):
        print(f"  {label:17s} start {s.get(key)}  end {e.get(key)}  peak {p.get(key)}")
    print(f"  library: evictions {s.get('evictions')} → {e.get('evictions')}, invalidations "
          f"{s.get('invalidations')} → {e.get('invalidations')}, hits {s.get('hits')} → "
          f"{e.get('hits')}")
    print(f"  RSS slope over the second half: {r['rss_slope_mib_per_min']} MiB/min "
          f"(bound {RSS_SLOPE_MIB_PER_MIN})")
    words = {True: "ok", False: "FAILED", None: f"not judged under {RSS_JUDGED_FROM_MIN:.0f} min"}
    print("  checks: " + ", ".join(f"{k} {words[v]}" for k, v in r["checks"].items()))


def run(quick: bool, minutes: float | None = None) -> dict[str, Any]:
    """Run the soak for ``minutes`` (default 2; 0.5 with ``--quick``); print and return."""
    minutes = minutes if minutes is not None else (0.5 if quick else 2.0)
    result = asyncio.run(soak(minutes, runners=4, sample_s=2.0 if minutes < 5 else 10.0))
    _print(result)
    return result


__all__ = ["BUDGET_BYTES", "Load", "rss_slope", "run", "soak", "soak_mesh", "verdicts"]
