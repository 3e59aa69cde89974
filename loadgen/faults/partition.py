"""The one-sided partition check (DESIGN.md §5.3): no stale answer through either gateway after an
acknowledged write, while one csl shard is cut off from one gateway only.

The mesh runs as processes (``services.launcher``): two gateways, three csl shards under serving
leases (``services/gateway/adapters/shard_repair.py``), the corpus service both gateways share and
one sim engine. Gateway A (``gateway``) reaches shard ``csl-1`` through a
:class:`~loadgen.faults.proxy.FaultProxy`; gateway B (``gateway-1``) reaches it directly. Writers
rewrite their own corpus document through A, each text carrying a version marker; readers
retrieve the documents through B (and one in four through A), so B serves library hits (C1) of
searches that read the rewritten documents. A retrieve that began after a write was acknowledged
must show that version or a later one; anything else is stale. Errors are counted apart.

A retrieve answered from the library is checked twice on its way (the gateway also compares a
hit's corpus reads with the corpus service), so the answers alone would not show a shard serving
an entry it should have dropped. The library is therefore also probed directly, as a gateway
like B reaches it (its own library port over the shards' own addresses): a record writer rewrites
plain records through A (``WriteRecords`` ``record_ids``, which only the csl versions), and the
probe keeps entries that read each record at its latest acknowledged version and looks them up;
a lookup that began after a write was acknowledged must return nothing or an entry that read
that version or a later one (``library_checks``, ``library_stale``).

The run goes through phases, each for a share of the check budget (and three acknowledged
writes of each kind at least; the last phase lasts until the library probes reached the budget
too, which on a starved machine they can lag): healthy; ``csl-1`` killed and restarted on its
own store (its copy is taken then); A's link to ``csl-1`` refused (every connection reset: A's
writes to it fail at once); healed mid-run; the link black-holed (nothing answers: A's writes to
it hang); healed again; ``csl-1`` killed again and restarted on the older copy.
Reported per phase: checks, stale, errors, library hits, writes and their latency (p50, p90,
max): a write that ``csl-1`` does not acknowledge waits out its lease (commit wait); and the
same over every write through A while it was cut off (``fault_write_ms``).

Run alone (the write latencies during the fault at the gateway's default 1 s lease)::

    python -m loadgen.faults.partition --checks 300 --lease-s 1.0
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen.arms.stats import quantile
from loadgen.faults.proxy import FaultProxy
from loadgen.faults.version_marks import text_of, version_in
from services.common.runtime.clients import wait_serving
from services.common.values.reads import ReadSet, RecordRead
from services.common.values.reuse_name import StageFingerprint, reuse_name
from services.gateway import LOCAL_TENANT, DynbranchClient, ShardedLibrary
from services.launcher import MeshSpec, ProcessMesh

#: Phases: (share of the check budget each runs for, name), in order.
PHASES = ((0.1, "healthy"), (0.1, "csl-1 restarted"), (0.2, "A refused by csl-1"),
          (0.1, "healed"), (0.2, "A black-holed from csl-1"), (0.1, "healed again"),
          (0.2, "csl-1 on an older copy"))
QUESTION = {"question": "What is it?", "notes": "none yet"}
#: The phases in which A's link to ``csl-1`` is cut (its writes there wait the lease out).
FAULT_PHASES = ("A refused by csl-1", "A black-holed from csl-1")
CUT_SHARD = "csl-1"
LIBRARY = 2  # gateway_pb2.RESULT_SOURCE_LIBRARY
RECORDS = tuple(f"probe-record-{i}" for i in range(4))
PROBE_FP = StageFingerprint("partition", "probe", 1, "probe-model", max_tokens=8)


@dataclass
class PhaseTally:
    """What one phase saw."""

    checks: int = 0
    stale: int = 0
    errors: int = 0
    hits: int = 0
    writes: int = 0
    write_errors: int = 0
    write_s: list[float] = field(default_factory=list)
    library_checks: int = 0
    library_stale: int = 0
    record_writes: int = 0

    def row(self) -> dict[str, Any]:
        """The phase as a report row."""
        return {"checks": self.checks, "stale": self.stale, "errors": self.errors,
                "library_checks": self.library_checks, "library_stale": self.library_stale,
                "record_writes": self.record_writes,
                "library_hits": self.hits, "writes": self.writes,
                "write_errors": self.write_errors, **write_ms(self.write_s)}


def write_ms(samples: list[float]) -> dict[str, float | None]:
    """p50, p90 (nearest rank) and max of write latencies, in ms (None without samples)."""
    if not samples:
        return {"write_p50_ms": None, "write_p90_ms": None, "write_max_ms": None}
    return {"write_p50_ms": round(1000 * statistics.median(samples), 2),
            "write_p90_ms": round(1000 * quantile(samples, 0.9), 2),
            "write_max_ms": round(1000 * max(samples), 2)}


class PartitionMesh:
    """Two gateways over three leased shards and one corpus, A's link to ``csl-1`` proxied."""

    def __init__(self, run_dir: Path, lease_s: float = 0.5) -> None:
        self.run_dir = run_dir
        self.lease_s = lease_s
        self.mesh = ProcessMesh(run_dir=run_dir, keep_run_dir=True)
        self.proxy = FaultProxy()
        self.copy_dir = run_dir / f"{CUT_SHARD}-older"

    def _route(self, name: str, address: str) -> str:
        if name != CUT_SHARD:
            return address
        self.proxy.target = address
        return self.proxy.address

    async def start(self) -> None:
        """The proxy, then the mesh; returns once every gateway's shards serve."""
        await self.proxy.start()
        await self.mesh.start(MeshSpec(
            engines=1, time_scale=0.0, gateways=2, csl_shards=3, others=("csl",),
            corpus_path=str(self.run_dir / "corpus"), csl_serving_lease_s=self.lease_s,
            gateway_settings=[f"csl_renew_interval_s={self.lease_s / 5}"],
            gateway_routes={"gateway": self._route}, log_level="WARNING"))

    @property
    def gateways(self) -> list[str]:
        """A's and B's addresses."""
        return [self.mesh.address("gateway"), self.mesh.address("gateway-1")]

    async def restart_shard(self, older: bool) -> None:
        """SIGKILL ``csl-1`` and start it again: on its own store (whose copy is kept), or on
        that older copy."""
        data = self.run_dir / CUT_SHARD
        await self.mesh.kill(CUT_SHARD)
        if older:
            shutil.rmtree(data)
            shutil.copytree(self.copy_dir, data)
        else:
            shutil.rmtree(self.copy_dir, ignore_errors=True)
            shutil.copytree(data, self.copy_dir)
        await self.mesh.restart(CUT_SHARD)
        await wait_serving(self.mesh.address(CUT_SHARD))

    async def close(self) -> None:
        await self.mesh.stop()
        await self.proxy.close()


async def _phase_action(pm: PartitionMesh, name: str) -> None:
    if name == "csl-1 restarted":
        await pm.restart_shard(older=False)
    elif name == "A refused by csl-1":
        pm.proxy.reset()  # every connection reset: A's writes fail at once
    elif name == "A black-holed from csl-1":
        pm.proxy.blackhole()  # nothing answers: A's writes wait
    elif name.startswith("healed"):
        pm.proxy.heal()
    elif name == "csl-1 on an older copy":
        await pm.restart_shard(older=True)


async def run_check(pm: PartitionMesh, checks: int, writers: int = 2, readers: int = 3,
                    min_writes: int = 3, pause_s: float = 0.005, timeout_s: float = 300.0,
                    progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Drive writers through A and readers through B (and A) until ``checks`` retrieves that
    began after an acknowledged write were checked, stepping through ``PHASES``; a phase lasts
    its share of the checks, at least ``min_writes`` acknowledged writes of each kind and as
    many library checks."""
    clients = [DynbranchClient(a) for a in pm.gateways]
    for c in clients:
        c.use_builtin("react")
    a, b = clients
    terms = [f"Quux{i}" for i in range(writers)]
    acked = dict.fromkeys(terms, -1)
    tallies = {name: PhaseTally() for _, name in PHASES}
    phase = [PHASES[0][1]]
    failures: list[str] = []

    def total() -> int:
        return sum(t.checks for t in tallies.values())

    def library_total() -> int:
        return sum(t.library_checks for t in tallies.values())

    done = asyncio.Event()
    fillers = [(f"filler-{i}", f"Filler {i}", f"Filler text number {i} about rivers.")
               for i in range(30)]
    await a.write(upserts=fillers)

    async def retrieve(client: DynbranchClient, term: str, workflow_id: str) -> None:
        floor, tally = acked[term], tallies[phase[0]]
        try:
            answer = await client.call_stage("react", "retrieve", workflow_id=workflow_id,
                                             inputs=QUESTION, candidate=term, timeout_s=30.0)
        except Exception as exc:  # noqa: BLE001 - every failure is counted and reported
            tally.errors += 1
            failures.append(f"{phase[0]}: retrieve {term} failed: {exc!r}"[:300])
            return
        tally.hits += answer.source == LIBRARY
        if floor < 0:
            return
        seen = version_in(answer.text, term)
        tally.checks += 1
        if seen is None or seen < floor:
            tally.stale += 1
            failures.append(f"{phase[0]}: {term} acknowledged at {floor}, answered {seen}")

    async def timed_write(what: str, **write: Any) -> tuple[PhaseTally, dict[str, int]] | None:
        """One write through A, timed in the phase it began in; None once a failure is counted
        (the caller writes again)."""
        tally, start = tallies[phase[0]], time.monotonic()
        try:
            written = await a.write(**write)
        except Exception as exc:  # noqa: BLE001 - counted, then written again
            tally.write_errors += 1
            failures.append(f"{phase[0]}: write {what} failed: {exc!r}"[:300])
            await asyncio.sleep(0.05)
            return None
        tally.write_s.append(time.monotonic() - start)
        return tally, written

    async def writer(term: str) -> None:
        version = 0
        while not done.is_set():
            done_write = await timed_write(f"{term}@{version}",
                                           upserts=[(term, term, text_of(term, version))])
            if done_write is not None:
                done_write[0].writes += 1
                acked[term] = version
                version += 1

    view = ShardedLibrary([pm.mesh.address(f"csl-{i}") for i in range(3)],
                          serving_lease_s=pm.lease_s, renew_interval_s=pm.lease_s / 5)
    view.start()
    record_acked = dict.fromkeys(RECORDS, 0)

    async def record_writer() -> None:
        rng = random.Random(len(RECORDS))
        while not done.is_set():
            record = rng.choice(RECORDS)
            done_write = await timed_write(record, record_ids=[record])
            if done_write is not None:
                tally, written = done_write
                tally.record_writes += 1
                record_acked[record] = max(record_acked[record], written[record])

    async def probe(record: str) -> None:  # one per record: a shard that hangs stalls one
        name = reuse_name(LOCAL_TENANT, PROBE_FP, record.encode())
        while not done.is_set():
            floor, tally = record_acked[record], tallies[phase[0]]
            served = await view.lookup(name)
            if served is not None and floor > 0:
                tally.library_checks += 1
                if int(served.result) < floor:
                    tally.library_stale += 1
                    failures.append(f"{phase[0]}: library served {record} read at "
                                    f"{int(served.result)} after {floor} was acknowledged")
            if served is None and floor > 0:  # read it at its version, as B would store it
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(view.put(name, str(floor).encode(), ReadSet(
                        (RecordRead(record, floor),), True), 0.01), 0.5)
            await asyncio.sleep(pause_s)

    async def reader(index: int) -> None:
        rng, n = random.Random(index), 0
        while not done.is_set():
            n += 1
            client = a if n % 4 == 0 else b
            await retrieve(client, rng.choice(terms), f"r{index}-{n}")
            await asyncio.sleep(pause_s)  # leave the two cores to the mesh

    async def conductor() -> None:
        for index, (share, name) in enumerate(PHASES):
            phase[0] = name  # the fault's own onset counts to its phase
            if progress is not None:
                progress(f"  phase: {name} from {total()} checks")
            await _phase_action(pm, name)
            last = index == len(PHASES) - 1
            goal = checks if last else total() + share * checks
            row = tallies[name]
            while (total() < goal or row.writes < min_writes or row.record_writes < min_writes
                   or row.library_checks < min_writes
                   or (last and library_total() < checks)):  # the budget holds for both kinds
                await asyncio.sleep(0.02)
        done.set()

    try:
        await asyncio.wait_for(asyncio.gather(conductor(), *(writer(t) for t in terms),
                                              record_writer(), *(probe(r) for r in RECORDS),
                                              *(reader(i) for i in range(readers))), timeout_s)
    finally:
        done.set()
        pm.proxy.heal()
        await view.close()
        for c in clients:
            with contextlib.suppress(Exception):
                await c.close()
    rows = {name: t.row() for name, t in tallies.items()}
    return {"checks": total(),
            "stale": sum(t.stale for t in tallies.values()),
            "errors": sum(t.errors for t in tallies.values()),
            "write_errors": sum(t.write_errors for t in tallies.values()),
            "library_hits": sum(t.hits for t in tallies.values()),
            "library_checks": sum(t.library_checks for t in tallies.values()),
            "library_stale": sum(t.library_stale for t in tallies.values()),
            "fault_write_ms": write_ms([w for name in FAULT_PHASES
                                        for w in tallies[name].write_s]),
            "phases": rows, "failures": failures[:20]}


async def partition_check(run_dir: Path, checks: int, lease_s: float = 0.5, writers: int = 2,
                          min_writes: int = 3,
                          progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Start the mesh, run the check, stop the mesh; the report."""
    pm = PartitionMesh(run_dir, lease_s)
    try:
        await pm.start()
        report = await run_check(pm, checks, writers=writers, min_writes=min_writes,
                                 progress=progress)
        report["lease_s"] = lease_s
        return report
    finally:
        await pm.close()


def main(argv: list[str] | None = None) -> None:
    """Run the check once in a temporary folder; print each phase and A's writes while cut off
    (``--json``: the whole report as the last line)."""
    import tempfile

    parser = argparse.ArgumentParser(prog="python -m loadgen.faults.partition",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", type=int, default=300)
    parser.add_argument("--lease-s", type=float, default=1.0)
    parser.add_argument("--min-writes", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="partition-check-") as folder:
        report = asyncio.run(partition_check(Path(folder), args.checks, lease_s=args.lease_s,
                                             min_writes=args.min_writes,
                                             progress=lambda line: print(line, flush=True)))
    print(f"{'phase':26} {'checks':>6} {'stale':>5} {'lib stale':>9} {'writes':>6} "
          f"{'p50 ms':>8} {'p90 ms':>8} {'max ms':>8}")
    for name, row in report["phases"].items():
        print(f"{name:26} {row['checks']:>6} {row['stale']:>5} {row['library_stale']:>9} "
              f"{row['writes'] + row['record_writes']:>6} {row['write_p50_ms']!s:>8} "
              f"{row['write_p90_ms']!s:>8} {row['write_max_ms']!s:>8}")
    fault = report["fault_write_ms"]
    print(f"writes through A while cut off (lease {args.lease_s} s): p50 "
          f"{fault['write_p50_ms']} ms, p90 {fault['write_p90_ms']} ms, max "
          f"{fault['write_max_ms']} ms; {report['stale']} stale answers, "
          f"{report['library_stale']} stale library entries, {report['errors']} errors")
    if args.json:
        print(json.dumps(report))


if __name__ == "__main__":
    main()


__all__ = ["FAULT_PHASES", "PHASES", "PartitionMesh", "main", "partition_check", "run_check",
           "write_ms"]
