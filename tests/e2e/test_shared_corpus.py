"""One retrieval corpus for every gateway, as processes (``dynbranch up --gateways 2 --corpus``):
writers rewrite documents through gateway A while retrieves run through gateway B. Every
retrieve that starts after a write was acknowledged returns that text or a later one (0 stale),
and no retrieve fails (0 errors). The corpus service, killed, turns B's retrieves into
UNAVAILABLE (never an older text); restarted on its folder, it serves the last write again.

Before the corpus service each gateway opened the LMDB folder itself, and the same check
answered 28 of 356 retrieves INTERNAL (B's in-memory index behind the store A wrote)."""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import pytest

from loadgen.faults.version_marks import text_of, version_in
from services.corpus import Corpus, Document
from services.gateway.sdk import DynbranchClient
from services.launcher import MeshSpec, ProcessMesh

QUESTION = {"question": "What is it?", "notes": "none yet"}
# 30 filler documents: the statistics snapshot refreshes every few single-document writes, so
# the run crosses many refreshes (each one changes every search's read-set).
FILLER = [Document(f"filler-{i}", f"Filler {i}", f"Filler text number {i} about rivers.")
          for i in range(30)]


@dataclass
class Tally:
    """What the retrieves through B saw."""

    checks: int = 0
    writes: int = 0
    stale: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


async def _retrieve(client: DynbranchClient, term: str, workflow_id: str) -> str:
    reply = await client.call_stage("react", "retrieve", workflow_id=workflow_id,
                                    inputs=QUESTION, candidate=term)
    return reply.text


async def _a_writes_b_retrieves(a: DynbranchClient, b: DynbranchClient, checks: int,
                                writers: int = 8, readers: int = 4) -> Tally:
    """Writers rewrite their own document through ``a`` and retrieve it through ``b`` after
    each acknowledgement; readers retrieve any of them through ``b``. Each retrieve started
    after an acknowledged write must show that version or a later one."""
    terms = [f"Quux{i}" for i in range(writers)]
    acked = dict.fromkeys(terms, -1)
    done, tally = asyncio.Event(), Tally()

    async def check(term: str, workflow_id: str) -> None:
        floor = acked[term]  # acknowledged before this retrieve started
        try:
            text = await _retrieve(b, term, workflow_id)
        except grpc.aio.AioRpcError as err:
            tally.errors.append(f"{term}: {err.code().name}: {err.details()}")
            return
        if floor < 0:
            return
        tally.checks += 1
        seen = version_in(text, term)
        if seen is None or seen < floor:
            tally.stale.append(f"{term}: acknowledged {floor}, got {seen}")

    async def writer(term: str) -> None:
        version = 0
        while not done.is_set():
            await a.write(upserts=[(term, term, text_of(term, version))])
            acked[term] = version
            tally.writes += 1
            await check(term, f"{term}-w{version}")
            version += 1

    async def reader(index: int) -> None:
        rng, n = random.Random(index), 0
        while tally.checks < checks and len(tally.errors) < 20:
            n += 1
            await check(rng.choice(terms), f"r{index}-{n}")
        done.set()

    await asyncio.wait_for(asyncio.gather(*(writer(t) for t in terms),
                                          *(reader(i) for i in range(readers))), 300)
    return tally


async def _run(tmp_path: Path, checks: int) -> None:
    corpus = tmp_path / "corpus"
    with Corpus(corpus, "corpus", sync=False) as c:
        c.load_documents(FILLER)
    (tmp_path / "run").mkdir()
    mesh = ProcessMesh(run_dir=tmp_path / "run")
    spec = MeshSpec(engines=1, time_scale=0.0, gateways=2, others=("csl",),
                    log_level="WARNING", corpus_path=str(corpus))
    await mesh.start(spec)
    a, b = (DynbranchClient(mesh.address(n)) for n in ("gateway", "gateway-1"))
    try:
        for client in (a, b):
            client.use_builtin("react")
        tally = await _a_writes_b_retrieves(a, b, checks)
        print(f"shared corpus: {tally.writes} writes through A, {tally.checks} retrieves "
              f"checked through B after them, {len(tally.stale)} stale, "
              f"{len(tally.errors)} errors")
        assert tally.errors == [] and tally.stale == [], (tally.errors[:5], tally.stale[:5])
        assert tally.checks >= checks and tally.writes >= 8

        # the corpus service down: B's retrieve is an error, never older text
        await a.write(upserts=[("Quux0", "Quux0", text_of("Quux0", 1000))])
        await mesh.kill("corpus")
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await _retrieve(b, "Quux0", "down-1")
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError):  # and no write is acknowledged meanwhile
            await a.write(upserts=[("Quux0", "Quux0", text_of("Quux0", 1001))])
        await mesh.restart("corpus")  # same folder, same port: the gateways reconnect
        for attempt in range(50):
            try:
                text = await _retrieve(b, "Quux0", f"back-{attempt}")
                break
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.1)
        else:
            raise AssertionError("B did not retrieve again after the corpus came back")
        assert version_in(text, "Quux0") == 1000
    finally:
        for client in (a, b):
            await client.close()
        await mesh.stop()


async def test_writes_through_one_gateway_are_fresh_through_the_other(tmp_path: Path) -> None:
    await _run(tmp_path, int(os.environ.get("DYNBRANCH_SHARED_CORPUS_CHECKS", "300")))


@pytest.mark.slow
async def test_three_thousand_checks_of_writes_through_a_and_retrieves_through_b(
        tmp_path: Path) -> None:
    await _run(tmp_path, 3000)
