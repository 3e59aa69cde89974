"""``dynbranch up`` supervises: under a steady stream of calls through the gateway, a csl shard
and then an engine agent die by SIGKILL, and the mesh restarts each on its port without a
manual step. Once restarted, the shard holds the library's entries again (a repeated call whose
name it owns is a library hit) and the agent takes engine work again; every call after that
succeeds.

Measured per victim and printed (``-s``): seconds from the SIGKILL to the new process SERVING,
and to the first call that shows the mesh using it again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from loadgen.demo import FUNCTIONS
from services.common.pb import gateway_pb2
from services.common.runtime.clients import wait_serving
from services.gateway import DynbranchClient
from services.gateway.adapters.rendezvous import Rendezvous
from services.launcher import MeshSpec, ProcessMesh, RestartPolicy

pytestmark = pytest.mark.slow
LIBRARY = gateway_pb2.RESULT_SOURCE_LIBRARY
#: Seconds a victim may take from its SIGKILL to being used again.
RECOVERY_S = 30.0
OFFERED = json.dumps([{"name": f} for f in FUNCTIONS])


@dataclass(frozen=True, slots=True)
class Outcome:
    """One call of the load: when it started and what it got."""

    started: float
    ok: bool
    engine_id: str = ""
    #: The repeat of a call (the same demand again) was answered from the library.
    hit: bool = False
    reuse_name: str = ""
    error: str = ""


@dataclass
class Load:
    """Workers that each send a new router demand and then repeat it, until stopped."""

    client: DynbranchClient
    outcomes: list[Outcome] = field(default_factory=list)
    done: asyncio.Event = field(default_factory=asyncio.Event)

    async def run(self, workers: int = 3) -> None:
        """Run ``workers`` loops until ``done`` is set."""
        await asyncio.gather(*(self._worker(w) for w in range(workers)))

    async def _worker(self, w: int) -> None:
        """New demand, its repeat, a short pause: a steady stream on a busy 2-core machine."""
        i = 0
        while not self.done.is_set():
            query = f"Where is parcel {w}-{i}?"
            await self._call(query, repeat=False)
            await self._call(query, repeat=True)
            i += 1
            await asyncio.sleep(0.05)

    async def _call(self, query: str, repeat: bool) -> None:
        started = time.monotonic()
        try:
            reply = await self.client.call_stage(
                "routing", "router", workflow_id=query, offered=FUNCTIONS, timeout_s=10.0,
                inputs={"functions": OFFERED, "query": query})
        except grpc.aio.AioRpcError as err:
            self.outcomes.append(Outcome(started, False, error=err.code().name))
            return
        self.outcomes.append(Outcome(started, True, reply.engine_id,
                                     repeat and reply.source == LIBRARY, reply.reuse_name))

    async def first(self, after: float, sign: Callable[[Outcome], bool]) -> Outcome:
        """The first outcome started after ``after`` that shows ``sign``, waiting for it."""
        deadline = time.monotonic() + RECOVERY_S
        while time.monotonic() < deadline:
            found = [o for o in self.outcomes if o.started >= after and sign(o)]
            if found:
                return min(found, key=lambda o: o.started)
            await asyncio.sleep(0.05)
        raise AssertionError(f"no call after {after:.1f} showed the victim in use")


def owner_of(ring: Rendezvous, reuse_name: str) -> int:
    """Index of the csl shard that holds ``reuse_name`` (``tenant/digest`` as replies give it),
    as the gateway picks it."""
    tenant, digest = reuse_name.split("/")
    return ring.owner(((tenant if tenant != "<shared>" else "") + digest).encode())


async def kill_and_wait(mesh: ProcessMesh, name: str) -> tuple[float, float]:
    """SIGKILL ``name`` behind the mesh's back; when it happened, and when its restarted process
    (a new pid on the same address) reports SERVING."""
    old = mesh.child(name)
    killed = time.monotonic()
    os.kill(old.process.pid, signal.SIGKILL)
    while mesh.child(name).process.pid == old.process.pid:
        assert time.monotonic() - killed < RECOVERY_S, f"{name} was not restarted"
        await asyncio.sleep(0.05)
    new = mesh.child(name)
    assert new.address == old.address
    await wait_serving(new.address, RECOVERY_S)
    return killed, time.monotonic()


async def test_a_killed_csl_shard_and_engine_agent_are_restarted_and_serve_again(
        tmp_path: Path) -> None:
    mesh = ProcessMesh(run_dir=tmp_path, supervise=RestartPolicy())  # as `dynbranch up` does
    await mesh.start(MeshSpec(engines=2, time_scale=0.0, csl_shards=2,
                              others=("csl", "admission"), log_level="WARNING"))
    ring = Rendezvous([mesh.address("csl-0"), mesh.address("csl-1")])  # the gateway's shards
    client = DynbranchClient(mesh.address("gateway"))
    client.use_builtin("routing")
    load = Load(client)
    running = asyncio.create_task(load.run())
    try:
        await load.first(time.monotonic(), lambda o: o.hit and owner_of(ring, o.reuse_name) == 1)
        shard_killed, shard_serving = await kill_and_wait(mesh, "csl-1")
        shard_used = await load.first(  # a name csl-1 holds, stored and hit since it restarted
            shard_serving, lambda o: o.hit and owner_of(ring, o.reuse_name) == 1)
        engine_killed, engine_serving = await kill_and_wait(mesh, "engine-1")
        engine_used = await load.first(engine_killed, lambda o: o.engine_id == "engine-1")
        await asyncio.sleep(1.0)  # more load after both came back
    finally:
        load.done.set()
        await running
        await client.close()
        await mesh.stop()
    print(f"\ncsl-1: SERVING {shard_serving - shard_killed:.2f} s after SIGKILL, a library hit "
          f"on it {shard_used.started - shard_killed:.2f} s after; engine-1: SERVING "
          f"{engine_serving - engine_killed:.2f} s after, engine work on it "
          f"{engine_used.started - engine_killed:.2f} s after; calls {len(load.outcomes)}, "
          f"failed {sum(not o.ok for o in load.outcomes)}")
    assert mesh.restarts == ["csl-1: killed by SIGKILL", "engine-1: killed by SIGKILL"]
    assert mesh.given_up == []
    recovered = engine_used.started  # both victims in use again from here on
    after = [o for o in load.outcomes if o.started >= recovered]
    assert len(after) > 10 and all(o.ok for o in after), [o.error for o in after if not o.ok]
    assert {o.error for o in load.outcomes if not o.ok} <= {"UNAVAILABLE"}
