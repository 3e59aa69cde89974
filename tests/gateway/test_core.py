"""The gateway's composition root (``core.GatewayCore``): malformed demands are refused naming
the field, a demand's stage is resolved once on the way in, overload is refused at once, and the
core acts on what the parts below count (a library restart, a stale refusal) by scheduling the
reconcile itself; writes through one gateway overlap."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Sequence
from pathlib import Path

import pytest

from services.common.values.errors import InvalidArgument, NotFound, ResourceExhausted
from services.common.values.generation import Sampling
from services.corpus import Corpus, CorpusService, Document
from services.gateway.core import GatewayCore, Limits
from services.gateway.ports import AppliedWrite
from services.gateway.values import Demand
from tests.gateway.local_ports import MODEL, Core, local_core, routing_demand

INPUTS = {"functions": json.dumps([{"name": "get_weather"}]), "query": "Weather in Oslo?"}


def gateway(core: Core, **limits: int) -> GatewayCore:
    return GatewayCore(registry=core.stages.naming.registry, naming=core.stages.naming,
                       stages=core.stages, branches=core.branches, library=core.library,
                       engines=core.engines, corpus=None, limits=Limits(**limits))


def plain(**changes: object) -> Demand:
    d = Demand(tenant="acme", request_id=uuid.uuid4().hex, model=MODEL, prompt="hi",
               sampling=Sampling(max_tokens=4))
    return dataclasses.replace(d, **changes)


async def test_malformed_demands_are_refused_naming_the_field() -> None:
    async with local_core(c2=False, engines=1) as core:
        g = gateway(core)
        for demand, field in ((plain(prompt=""), "demand.prompt"),
                              (plain(template_id="routing"), "demand.stage_id"),
                              (plain(model="gpt-17"), "demand.model"),
                              (plain(sampling=None), "demand.sampling")):
            with pytest.raises(InvalidArgument) as info:
                g.check(g.naming.resolved(demand))
            assert info.value.field == field
        with pytest.raises(NotFound):
            await g.call(plain(template_id="routing", stage_id="nope"), 5.0)


async def test_a_demands_stage_is_resolved_once_on_the_way_in() -> None:
    async with local_core(c2=False, engines=1) as core:
        g = gateway(core)
        seen: list[Demand] = []
        run = core.stages.run

        async def spy(d, timeout_s, on_delta=None):  # type: ignore[no-untyped-def]  # noqa: ANN001, ANN202
            seen.append(d)
            return await run(d, timeout_s, on_delta)

        core.stages.run = spy  # type: ignore[method-assign]
        await g.call(routing_demand("acme", "wf", "router", INPUTS), 30.0)
        assert seen[0].stage is g.stage("routing", "router")
        resolved = seen[0]
        assert g.naming.resolved(resolved) is resolved  # a no-op once resolved
        assert g.reuse_name(resolved) and g.models() == {MODEL}
        assert [p.stage for p in g.decisions("routing")] == ["router"]


async def test_overload_is_refused_at_once() -> None:
    async with local_core(c2=False, engines=1) as core:
        g = gateway(core, max_in_flight=0)
        with pytest.raises(ResourceExhausted, match="max_in_flight"):
            await g.call(plain(), 5.0)
        assert g.refused_overload == 1


async def test_the_core_reconciles_when_the_library_restarted_or_a_result_was_stale() -> None:
    async with local_core(c2=True, engines=1) as core:
        g = gateway(core)
        scheduled: list[int] = []
        g.schedule_reconcile = lambda: scheduled.append(1)  # type: ignore[method-assign]
        await g.call(plain(), 5.0)
        assert scheduled == []
        g.library.resyncs += 1  # type: ignore[union-attr]
        await g.call(plain(), 5.0)
        assert scheduled == [1]
        core.stages.library.refused_stale += 1
        await g.call(plain(), 5.0)
        await g.call(plain(), 5.0)
        assert scheduled == [1, 1]  # once per change, not per demand
        assert "opened" in g.stats().branches


class SettlingLibrary:
    """The part of ``LibraryPort`` a write uses, whose writes settle only when the test says
    (a sharded library's commit wait while a shard is cut off)."""

    def __init__(self) -> None:
        self.seq = 0
        self.resyncs = 0
        self.settlements: list[asyncio.Future[None]] = []

    async def apply_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> AppliedWrite:
        self.seq = max([self.seq, *floors]) + 1
        self.settlements.append(asyncio.get_running_loop().create_future())
        return AppliedWrite((self.seq,) * len(record_ids), self.settlements[-1])

    async def write_records(self, tenant: str, record_ids: Sequence[str],
                            floors: Sequence[int] = ()) -> tuple[int, ...]:
        applied = await self.apply_records(tenant, record_ids, floors)
        await applied.settled()
        return applied.versions

    async def write_seq(self) -> int:
        return self.seq


async def test_writes_overlap_and_each_returns_once_its_own_write_settled(
        tmp_path: Path) -> None:
    """Two document writes and a record write through one gateway: each is applied and the
    corpus committed while the others still wait to settle (no write queues behind another's
    commit wait), and each returns only once its own library write settled."""
    library = SettlingLibrary()
    with Corpus(tmp_path / "corpus", "corpus", sync=False) as corpus:
        async with local_core(c2=False, engines=1) as core:
            g = GatewayCore(registry=core.stages.naming.registry, naming=core.stages.naming,
                            stages=core.stages,
                            branches=None, library=library,  # type: ignore[arg-type]
                            engines=core.engines, corpus=CorpusService(corpus),
                            limits=Limits())
            writes = [asyncio.ensure_future(g.write("", [Document(d, d, f"{d} text")], (), ()))
                      for d in ("doc-a", "doc-b")]
            writes.append(asyncio.ensure_future(g.write("acme", (), (), ["notes"])))
            for _ in range(200):  # both corpus commits land while no write has settled
                if corpus.get("doc-a") and corpus.get("doc-b") and len(library.settlements) == 3:
                    break
                await asyncio.sleep(0.01)
            assert corpus.get("doc-a") and corpus.get("doc-b") and len(library.settlements) == 3
            assert not any(w.done() for w in writes)
            library.settlements[1].set_result(None)
            await asyncio.sleep(0.05)
            assert [w.done() for w in writes].count(True) == 1
            for settlement in library.settlements:
                if not settlement.done():
                    settlement.set_result(None)
            written = await asyncio.gather(*writes)
            (notes,) = written[2]
            assert notes.record_id == "notes"
            assert len({w[0].version for w in written}) == 3  # each write its own version
