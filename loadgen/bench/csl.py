"""``dynbranch bench csl``: the Completed-Subgraph Library's hit path and write cascade.

Measured side by side in one run, on this machine:

* in-process ``SubgraphLibrary.lookup`` (hits) against a raw LMDB ``get`` of the same keys in
  the same environment, each in its own read transaction, interleaved in blocks so both see the
  same noise; per-call p50/p99 and calls/s, and their ratio (target: within 3x);
* ``Lookup`` over gRPC on loopback against a csl server process started on port 0 over the same
  store (p50/p99 of sequential calls);
* stores per second with fsync on: one transaction per store (``put``) against the batches a
  busy ``PutStream`` commits together (``put_many`` of 64), alternating on one store;
* invalidation time of one ``write_records`` whose record is read by a root entry with 1,000
  and 100,000 dependents (a producer tree of fan-out 10 beside unaffected entries), on a store
  opened with the service's default fsync-on-commit (target: 100,000 under 200 ms).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from services.common.values.reads import ReadSet, RecordRead
from services.common.values.reuse_name import ReuseName, StageFingerprint, name_key, reuse_name
from services.csl import CslClient, LibraryOptions, SubgraphLibrary

FP = StageFingerprint("bench", "stage", 1, "bench-model", max_tokens=256)
RESULT = b"r" * 512
GiB = 1 << 30


def _names(prefix: str, n: int, tenant: str = "bench") -> list[ReuseName]:
    return [reuse_name(tenant, FP, f"{prefix}-{i}".encode()) for i in range(n)]


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _open(path: Path, sync: bool) -> SubgraphLibrary:
    return SubgraphLibrary(path, LibraryOptions(budget_bytes=GiB, map_size=4 * GiB, sync=sync))


# -- in-process hit path ---------------------------------------------------------------------

def _timed(fn: Any, args: list[Any]) -> list[float]:
    clock = time.perf_counter_ns
    out = []
    for a in args:
        start = clock()
        fn(a)
        out.append((clock() - start) / 1000)
    return out


def _rate(fn: Any, args: list[Any]) -> float:
    start = time.perf_counter()
    for a in args:
        fn(a)
    return len(args) / (time.perf_counter() - start)


def _lookup_figures(lib: SubgraphLibrary, names: list[ReuseName], rounds: int) -> dict[str, Any]:
    env, db = lib._store.env, lib._store.entries_db
    lkeys = {n: lib._confirmed.names[name_key(n)].lkey for n in names}

    def raw_get(key: bytes) -> bytes | None:
        txn = env.begin(db=db)
        value = txn.get(key)
        txn.abort()
        return value

    sample = random.Random(7)
    lib_us: list[float] = []
    raw_us: list[float] = []
    lib_rate: list[float] = []
    raw_rate: list[float] = []
    for _ in range(rounds):  # interleaved blocks: both sides share the machine's noise
        block = sample.sample(names, min(len(names), 5000))
        keys = [lkeys[n] for n in block]
        assert lib.lookup(block[0]) is not None
        lib_us += _timed(lib.lookup, block)
        raw_us += _timed(raw_get, keys)
        lib_rate.append(_rate(lib.lookup, block))
        raw_rate.append(_rate(raw_get, keys))
    p50, raw_p50 = statistics.median(lib_us), statistics.median(raw_us)
    return {
        "lookup_p50_us": round(p50, 3), "lookup_p99_us": round(_quantile(lib_us, .99), 3),
        "lmdb_get_p50_us": round(raw_p50, 3), "lmdb_get_p99_us": round(_quantile(raw_us, .99), 3),
        "lookups_per_s": round(statistics.median(lib_rate)),
        "lmdb_gets_per_s": round(statistics.median(raw_rate)),
        "lookup_ratio_vs_lmdb": round(p50 / raw_p50, 3),
        "lookup_throughput_ratio_vs_lmdb": round(statistics.median(raw_rate)
                                                 / statistics.median(lib_rate), 3),
    }


# -- gRPC on loopback ------------------------------------------------------------------------

async def _grpc_lookups(address: str, names: list[ReuseName], n: int, warmup: int) -> list[float]:
    sample = random.Random(11)
    async with CslClient(address) as client:
        for name in sample.sample(names, warmup):
            assert await client.lookup(name, timeout_s=5) is not None
        out = []
        for name in (sample.choice(names) for _ in range(n)):
            start = time.perf_counter()
            await client.lookup(name, timeout_s=5)
            out.append((time.perf_counter() - start) * 1e6)
    return out


def _grpc_figures(path: Path, names: list[ReuseName], n: int) -> dict[str, Any]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "services.csl", "--data-dir", str(path), "--metrics-port", "-1",
         "--log-level", "WARNING", "--set", f"budget_bytes={GiB}", "--set",
         f"map_size_bytes={4 * GiB}"],
        stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        address = json.loads(proc.stdout.readline())["address"]
        from services.common.runtime.server import install_uvloop

        install_uvloop()
        us = asyncio.run(_grpc_lookups(address, names, n, warmup=min(500, n // 4)))
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    return {"grpc_lookup_p50_us": round(statistics.median(us), 1),
            "grpc_lookup_p99_us": round(_quantile(us, .99), 1)}


# -- write cascade ---------------------------------------------------------------------------

def _build_tree(lib: SubgraphLibrary, tag: str, dependents: int, fanout: int = 10) -> None:
    root = reuse_name("bench", FP, f"{tag}-root".encode())
    assert lib.put(root, RESULT, ReadSet((RecordRead(f"doc-{tag}", 0),), True), 1.0)
    level, made = [root], 0
    while made < dependents:
        nxt = []
        for parent in level:
            for _ in range(min(fanout, dependents - made)):
                child = reuse_name("bench", FP, f"{tag}-{made}".encode())
                assert lib.put(child, b"d" * 64, ReadSet((), True, (parent,)), 0.01)
                nxt.append(child)
                made += 1
        level = nxt


def _cascade_ms(base: Path, sizes: dict[str, int], reps: int) -> dict[str, float]:
    path = base / "cascade"
    shutil.rmtree(path, ignore_errors=True)
    with _open(path, sync=False) as lib:  # building is not what is measured
        for label, size in sizes.items():
            for r in range(reps):
                _build_tree(lib, f"{label}-{r}", size)
        for i, name in enumerate(_names("bystander", 10_000)):
            lib.put(name, RESULT, ReadSet((RecordRead(f"other-{i % 100}", 0),), True), 0.1)
    out = {}
    with _open(path, sync=True) as lib:  # the service's default: fsync on every commit
        for label, size in sizes.items():
            times = []
            for r in range(reps):
                start = time.perf_counter()
                outcome = lib.write_records("bench", [f"doc-{label}-{r}"])
                times.append((time.perf_counter() - start) * 1e3)
                assert outcome.invalidated == size + 1, outcome
            out[label] = round(statistics.median(times), 2)
    return out


# -- driver ----------------------------------------------------------------------------------

def _store_rates(path: Path, n: int, batch: int = 64, rounds: int = 3) -> dict[str, Any]:
    """Stores/s, fsync on: ``put`` one by one against ``put_many`` in batches, alternating."""
    singles, batches = [], []
    with _open(path, sync=True) as lib:
        for r in range(rounds):
            one = _names(f"single-{r}", n)
            start = time.perf_counter()
            for name in one:
                lib.put(name, RESULT, ReadSet.pure(), 1.0)
            singles.append(n / (time.perf_counter() - start))
            many = [(name, RESULT, ReadSet.pure(), 1.0) for name in _names(f"batch-{r}", n)]
            start = time.perf_counter()
            for i in range(0, n, batch):
                lib.put_many(many[i:i + batch])
            batches.append(n / (time.perf_counter() - start))
    single, batched = statistics.median(singles), statistics.median(batches)
    return {"stores_per_s_single": round(single), "stores_per_s_batched": round(batched),
            "store_batch": batch, "store_batch_speedup": round(batched / single, 2)}


def run(quick: bool) -> dict[str, Any]:
    """Run the benchmark, print readable lines as it goes, return the JSON figures."""
    entries, rounds, grpc_calls, reps = (20_000, 6, 3000, 2) if quick else (200_000, 20, 20_000, 5)
    base = Path(tempfile.mkdtemp(prefix="dynbranch-bench-csl-"))
    result: dict[str, Any] = {"entries": entries, "result_bytes": len(RESULT)}
    try:
        store = base / "lookup"
        names = _names("entry", entries)
        print(f"csl bench: {entries} entries of {len(RESULT)} B in {base}", flush=True)
        with _open(store, sync=False) as lib:
            for name in names:
                lib.put(name, RESULT, ReadSet.pure(), 1.0)
            result.update(_lookup_figures(lib, names, rounds))
        print(f"  in-process lookup  p50 {result['lookup_p50_us']:.2f} us  "
              f"p99 {result['lookup_p99_us']:.2f} us  {result['lookups_per_s']:,} /s", flush=True)
        print(f"  raw LMDB get       p50 {result['lmdb_get_p50_us']:.2f} us  "
              f"p99 {result['lmdb_get_p99_us']:.2f} us  {result['lmdb_gets_per_s']:,} /s",
              flush=True)
        print(f"  lookup / raw get   {result['lookup_ratio_vs_lmdb']:.2f}x at p50, "
              f"{result['lookup_throughput_ratio_vs_lmdb']:.2f}x in throughput (target <= 3x)",
              flush=True)
        result.update(_grpc_figures(store, names, grpc_calls))
        print(f"  gRPC Lookup        p50 {result['grpc_lookup_p50_us']:.0f} us  "
              f"p99 {result['grpc_lookup_p99_us']:.0f} us  ({grpc_calls} sequential calls, "
              "loopback, server in its own process)", flush=True)
        result.update(_store_rates(base / "stores", 640 if quick else 6400))
        print(f"  stores, fsync on   {result['stores_per_s_single']:,} /s one transaction each, "
              f"{result['stores_per_s_batched']:,} /s in batches of {result['store_batch']} "
              f"(PutStream under load): {result['store_batch_speedup']:.1f}x", flush=True)
        cascade = _cascade_ms(base, {"1k": 1000, "100k": 100_000}, reps)
        result["cascade_1k_ms"], result["cascade_100k_ms"] = cascade["1k"], cascade["100k"]
        print(f"  write cascade      1,000 dependents {cascade['1k']:.2f} ms, 100,000 dependents "
              f"{cascade['100k']:.1f} ms (median of {reps}, fsync on; target < 200 ms)",
              flush=True)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    result["lookup_within_3x"] = result["lookup_ratio_vs_lmdb"] <= 3.0
    result["cascade_100k_under_200ms"] = result["cascade_100k_ms"] < 200.0
    return result


__all__ = ["run"]
