"""``dynbranch bench shards``: what the freshness protocol over csl shards costs
(``services/gateway/adapters/shard_repair.py``), side by side in one run, on loopback.

Two sets of three csl servers in this process: one set *leased* (``serving_lease_s``), used
through the gateway's ``ShardedLibrary`` (serving leases renewed from the peers, writes numbered
by the writer, commit wait); one set *unleased*, used the way the gateway used shards before the
protocol (a lookup to the name's shard; a write fanned out to every shard, each numbering it
itself, answered once all answered). Measured, interleaved in blocks so both see the same noise:

* a library hit: ``Lookup`` of a stored name on its shard (leased: the lease is checked first);
* a record write: one record, through each path;
* a write during a partition: one shard behind a proxy that black-holes everything; the new path
  waits the shard's lease out (commit wait), the old one its deadline (2 s, the gateway's).

Reported: p50 of each and the ratio new / old. The lease here is 0.25 s (the gateway's default
is 1 s: a partitioned write then waits ~1.02 s).
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

from loadgen.faults.proxy import FaultProxy
from services.common.values.reads import ReadSet
from services.common.values.reuse_name import StageFingerprint, reuse_name
from services.csl import CslClient, CslSettings, build_runtime
from services.gateway import ShardedLibrary

LEASE_S = 0.25
OLD_DEADLINE_S = 2.0
FP = StageFingerprint("bench", "stage", 1, "bench-model", max_tokens=64)


async def _servers(stack: AsyncExitStack, root: Path, lease_s: float) -> list[str]:
    targets = []
    for i in range(3):
        runtime = await build_runtime(CslSettings(
            data_dir=str(root / f"csl-{i}"), port=0, metrics_port=-1, grace_s=0.1, sync=False,
            serving_lease_s=lease_s, log_level="WARNING"))
        port = await runtime.start()
        stack.push_async_callback(runtime.shutdown)
        targets.append(f"127.0.0.1:{port}")
    return targets


async def _old_write(clients: list[CslClient], record: str) -> None:
    """The write path before the protocol: every shard numbers it; all answers awaited."""
    await asyncio.gather(*(c.write_records("", [record], OLD_DEADLINE_S) for c in clients),
                         return_exceptions=True)


async def _timed(fn: Callable[[], Awaitable[Any]], n: int) -> list[float]:
    out = []
    for _ in range(n):
        start = time.perf_counter()
        await fn()
        out.append(time.perf_counter() - start)
    return out


def _p50_ms(samples: list[float]) -> float:
    return round(1000 * statistics.median(samples), 3)


async def _run(quick: bool) -> dict[str, Any]:
    lookups, writes, cut_writes, blocks = (100, 40, 4, 4) if quick else (500, 200, 10, 10)
    async with AsyncExitStack() as stack:
        root = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-shards-")))
        leased = await _servers(stack, root / "leased", LEASE_S)
        plain = await _servers(stack, root / "plain", 0.0)
        proxy = FaultProxy(leased[1])
        proxied = [leased[0], await proxy.start(), leased[2]]
        stack.push_async_callback(proxy.close)
        new = ShardedLibrary(leased, serving_lease_s=LEASE_S)
        cut = ShardedLibrary(proxied, serving_lease_s=LEASE_S)
        for lib in (new, cut):
            lib.start()
            stack.push_async_callback(lib.close)
        old = [CslClient(t) for t in plain]
        for c in old:
            stack.push_async_callback(c.close)
        old_proxy = FaultProxy(plain[1])
        old_cut = [old[0], CslClient(await old_proxy.start()), old[2]]
        stack.push_async_callback(old_proxy.close)
        stack.push_async_callback(old_cut[1].close)
        while not all(s.serving for lib in (new, cut) for s in lib.shards):
            await asyncio.sleep(0.02)
        name = reuse_name("bench", FP, b"one stored name")
        home = new.owner(name).index
        assert await new.put(name, b"answer", ReadSet((), True), 0.1)
        assert await old[home].put(name, b"answer", ReadSet((), True), 0.1)
        leased_client = new.shards[home].remote.client
        hit = {"leased": [], "unleased": []}
        write = {"protocol": [], "before": []}
        for _ in range(blocks):
            hit["leased"] += await _timed(lambda: leased_client.lookup(name), lookups // blocks)
            hit["unleased"] += await _timed(lambda: old[home].lookup(name), lookups // blocks)
            write["protocol"] += await _timed(lambda: new.write_records("", ["doc"]),
                                              writes // blocks)
            write["before"] += await _timed(lambda: _old_write(old, "doc"), writes // blocks)
        assert all([await leased_client.lookup(name) is not None])
        proxy.blackhole()
        old_proxy.blackhole()
        part = {"protocol": await _timed(lambda: cut.write_records("", ["cut-doc"]), cut_writes),
                "before": await _timed(lambda: _old_write(old_cut, "cut-doc"), cut_writes)}
        proxy.heal()
        old_proxy.heal()
        row = {
            "hit_p50_ms": {k: _p50_ms(v) for k, v in hit.items()},
            "write_p50_ms": {k: _p50_ms(v) for k, v in write.items()},
            "partitioned_write_p50_ms": {k: _p50_ms(v) for k, v in part.items()},
            "commit_waits": cut.counters["commit_waits"],
            "lease_s": LEASE_S,
        }
        row["hit_ratio"] = round(row["hit_p50_ms"]["leased"] / row["hit_p50_ms"]["unleased"], 3)
        row["write_ratio"] = round(row["write_p50_ms"]["protocol"]
                                   / row["write_p50_ms"]["before"], 3)
        row["partitioned_write_ratio"] = round(row["partitioned_write_p50_ms"]["protocol"]
                                               / row["partitioned_write_p50_ms"]["before"], 3)
        return row


def run(quick: bool = False, **_: Any) -> dict[str, Any]:
    """Measure the protocol's costs; ``ok`` when a partitioned write waited the lease out."""
    row = asyncio.run(_run(quick))
    print(f"hit p50 ms leased {row['hit_p50_ms']['leased']} / unleased "
          f"{row['hit_p50_ms']['unleased']} = {row['hit_ratio']}")
    print(f"write p50 ms protocol {row['write_p50_ms']['protocol']} / before "
          f"{row['write_p50_ms']['before']} = {row['write_ratio']}")
    print(f"write during a partition p50 ms protocol {row['partitioned_write_p50_ms']['protocol']}"
          f" / before {row['partitioned_write_p50_ms']['before']} = "
          f"{row['partitioned_write_ratio']}")
    row["ok"] = (row["commit_waits"] > 0
                 and row["partitioned_write_p50_ms"]["protocol"] >= 1000 * LEASE_S)
    return row


__all__ = ["run"]
