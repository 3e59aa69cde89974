"""The local mesh as processes: two gateway replicas over three csl shards, one shard killed
(SIGKILL) mid-run and started again. Every workflow answers, and the
restarted shard, which missed a record write while it was down, never serves its stale entry."""

from __future__ import annotations

import asyncio
import time

import pytest

from loadgen.bench.scaleout import Tally, run_workflow
from services.common.values.reads import ReadSet, RecordRead
from services.common.values.reuse_name import StageFingerprint, reuse_name
from services.gateway.adapters.sharded_library import ShardedLibrary
from services.gateway.sdk import DynbranchClient
from services.launcher import MeshSpec, ProcessMesh

pytestmark = pytest.mark.slow
FP = StageFingerprint("routing", "handler", 1, "qwen3-32b", max_tokens=64)


async def _until(predicate, timeout_s: float = 10.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.05)


async def test_two_replicas_over_three_shards_survive_a_killed_shard(tmp_path) -> None:  # noqa: ANN001
    (tmp_path / "run").mkdir()
    mesh = ProcessMesh(run_dir=tmp_path / "run")
    spec = MeshSpec(engines=1, time_scale=0.0, gateways=2, csl_shards=3,
                    others=("csl", "admission"), log_level="WARNING")
    await mesh.start(spec)
    shards = [mesh.address(f"csl-{i}") for i in range(3)]
    lib = ShardedLibrary(shards, renew_interval_s=0.1)  # a third gateway's view, to look inside
    lib.start()
    await _until(lambda: all(s.serving for s in lib.shards))
    clients = [DynbranchClient(mesh.address(n)) for n in ("gateway", "gateway-1")]
    try:
        for client in clients:
            client.use_builtin("routing")
        victim = next(reuse_name("acme", FP, f"probe {i}".encode()) for i in range(500)
                      if lib.owner(reuse_name("acme", FP, f"probe {i}".encode())).index == 1)
        (v1,) = await lib.write_records("", ["doc-1"])
        assert await lib.put(victim, b"read doc-1 at v1",
                             ReadSet((RecordRead("doc-1", v1),), True), 0.1)
        tally = Tally()
        await asyncio.gather(*(run_workflow(clients, i, tally) for i in range(6)))
        await mesh.kill("csl-1")  # mid-run: no drain, no clean close of its LMDB environment
        (v2,) = await lib.write_records("", ["doc-1"])  # csl-1 misses it; a quorum has it
        await asyncio.gather(*(run_workflow(clients, i, tally) for i in range(6, 12)))
        assert await lib.lookup(victim) is None  # its range is a miss while it is down
        await mesh.restart("csl-1")  # same port, same store: the stale entry is still on disk
        assert await lib.lookup(victim) is None
        await _until(lambda: lib.shards[1].serving and lib.shards[1].remote.available())
        # (renewed: caught up from csl-0 and csl-2)
        assert await lib.lookup(victim) is None
        assert await lib.shards[1].remote.client.lookup(victim) is None  # invalidated there
        await asyncio.gather(*(run_workflow(clients, i, tally) for i in range(12, 18)))
        assert tally.errors == [] and len(tally.texts) == 18
        assert await lib.put(victim, b"read doc-1 at v2",
                             ReadSet((RecordRead("doc-1", v2),), True), 0.1)
        assert (await lib.lookup(victim)).result == b"read doc-1 at v2"
    finally:
        for client in clients:
            await client.close()
        await lib.close()
        await mesh.stop()
