"""CorpusService: reads on threads, and the write turn every gateway's writes go through (one
ticket at a time, versions from the csl, lapses, aborts, waiting writers, cancellation)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.common.values.errors import (
    DeadlineExceeded,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Unavailable,
)
from services.corpus import Corpus, CorpusService, Document

DOCS = [Document("paris", "Paris", "Paris is the capital of France."),
        Document("oslo", "Oslo", "Oslo is the capital of Norway."),
        *(Document(f"f{i}", f"Filler {i}", f"Filler {i} about rivers.") for i in range(20))]


class Csl:
    """The csl's part of the handshake: versions from one monotone sequence, above floors."""

    def __init__(self) -> None:
        self.seq = itertools.count(1)

    def versions(self, ids: tuple[str, ...], floors: tuple[int, ...]) -> dict[str, int]:
        out = {}
        for record_id, floor in zip(ids, floors, strict=True):
            version = next(self.seq)
            while version <= floor:
                version = next(self.seq)
            out[record_id] = version
        return out


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[CorpusService]:
    corpus = Corpus(tmp_path / "c", "wiki", sync=False, refresh_fraction=10.0)
    corpus.load_documents(DOCS)
    service = CorpusService(corpus, lease_s=5.0)
    yield service
    await service.close()


async def _write(service: CorpusService, csl: Csl, doc: Document) -> dict[str, int]:
    plan = await service.begin_write([doc])
    written = await service.commit(plan.ticket, csl.versions(plan.record_ids, plan.floors))
    return {r.record_id: r.version for r in written}


async def test_reads_answer_the_corpus(service: CorpusService) -> None:
    info = await service.info()
    assert (info.name, info.identity, info.documents, info.write_seq) == (
        "wiki", service.identity, len(DOCS), 0)
    result = await service.search("capital Norway", 1)
    assert result.hits[0].doc_id == "oslo" and await service.confirm(result.hits)
    assert await service.get("paris") == (DOCS[0], 0) and await service.get("x") is None
    assert await service.versions_of(["corpus/wiki/doc/oslo", "corpus/wiki/stats"]) == [0, 0]
    page = await service.titles("", 2)
    assert page.titles == (("f0", 0, "Filler 0"), ("f1", 0, "Filler 1")) and page.more
    assert service.counters["searches"] == 1


async def test_a_write_commits_the_csl_s_versions_and_frees_the_turn(
        service: CorpusService) -> None:
    csl = Csl()
    plan = await service.begin_write([Document("oslo", "Oslo", "Oslo, Norway's capital.")])
    assert "corpus/wiki/doc/oslo" in plan.record_ids and plan.ticket
    assert plan.floors == tuple(await service.versions_of(plan.record_ids))
    versions = csl.versions(plan.record_ids, plan.floors)
    written = await service.commit(plan.ticket, versions)
    assert {r.record_id: r.version for r in written} == versions
    assert (await service.search("capital Norway", 1)).hits[0].text == "Oslo, Norway's capital."
    assert (await service.info()).write_seq == max(versions.values())
    with pytest.raises(FailedPrecondition, match="holds no write turn"):
        await service.commit(plan.ticket, versions)  # committed once: the ticket is spent
    await _write(service, csl, Document("paris", "Paris", "Paris."))  # the turn is free
    assert service.counters["writes"] == 2


async def test_bad_writes_are_refused_and_give_the_turn_back(service: CorpusService) -> None:
    with pytest.raises(NotFound):
        await service.begin_write(removals=["nowhere"])
    with pytest.raises(InvalidArgument):
        await service.begin_write()
    plan = await service.begin_write([Document("oslo", "Oslo", "Oslo!")])
    with pytest.raises(FailedPrecondition, match="exactly"):
        await service.commit(plan.ticket, {plan.record_ids[0]: 10})
    await _write(service, Csl(), Document("paris", "Paris", "Paris!"))  # not stuck


async def test_writers_queue_for_the_turn_in_order(service: CorpusService) -> None:
    csl, order = Csl(), []
    first = await service.begin_write([Document("oslo", "Oslo", "Oslo 1.")])

    async def second() -> None:
        order.append(await _write(service, csl, Document("oslo", "Oslo", "Oslo 2.")))

    waiting = asyncio.create_task(second())
    await asyncio.sleep(0.05)
    assert not waiting.done() and service.counters["waits"] == 1  # queued behind the ticket
    await service.commit(first.ticket, csl.versions(first.record_ids, first.floors))
    await asyncio.wait_for(waiting, 5)
    assert (await service.get("oslo"))[0].text == "Oslo 2."  # the second planned on the first


async def test_a_writer_that_waits_out_its_deadline_is_refused(service: CorpusService) -> None:
    held = await service.begin_write([Document("oslo", "Oslo", "Oslo.")])
    with pytest.raises(DeadlineExceeded, match="write turn"):
        await service.begin_write([Document("paris", "Paris", "P.")], wait_s=0.05)
    assert service.counters["turn_timeouts"] == 1
    assert await service.abort(held.ticket) and not await service.abort(held.ticket)
    await _write(service, Csl(), Document("paris", "Paris", "P."))


async def test_a_cancelled_waiter_leaves_the_queue(service: CorpusService) -> None:
    held = await service.begin_write([Document("oslo", "Oslo", "Oslo.")])
    waiter = asyncio.create_task(service.begin_write([Document("paris", "Paris", "P.")]))
    await asyncio.sleep(0.02)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    await service.abort(held.ticket)
    plan = await asyncio.wait_for(service.begin_write([Document("paris", "Paris", "P.")]), 1)
    await service.abort(plan.ticket)


async def test_a_ticket_whose_holder_went_away_lapses(tmp_path: Path) -> None:
    corpus = Corpus(tmp_path / "c", "wiki", sync=False)
    corpus.load_documents(DOCS)
    service = CorpusService(corpus, lease_s=0.1)
    try:
        gone = await service.begin_write([Document("oslo", "Oslo", "never committed")])
        plan = await asyncio.wait_for(service.begin_write([Document("paris", "Paris", "P.")]),
                                      2)  # handed over once the first lapsed
        assert service.counters["lapses"] == 1
        with pytest.raises(FailedPrecondition, match="lapsed"):
            await service.commit(gone.ticket, Csl().versions(gone.record_ids, gone.floors))
        assert (await service.get("oslo"))[0].text == DOCS[1].text  # nothing of it written
        await service.abort(plan.ticket)
    finally:
        await service.close()


async def test_reconcile_moves_records_above_the_csl_s_sequence(service: CorpusService) -> None:
    csl = Csl()
    written = await _write(service, csl, Document("oslo", "Oslo", "Oslo, rewritten."))
    nothing = await service.begin_reconcile(max(written.values()))
    assert nothing.ticket == "" and nothing.record_ids == ()  # the csl knows them all
    plan = await service.begin_reconcile(0)  # a csl that lost every write
    assert dict(zip(plan.record_ids, plan.floors, strict=True)) == written
    moved = {r: v + 100 for r, v in written.items()}
    with pytest.raises(FailedPrecondition, match="exactly"):
        await service.commit(plan.ticket, dict(list(moved.items())[:1]))
    plan = await service.begin_reconcile(0)
    await service.commit(plan.ticket, moved)
    assert await service.versions_of(list(moved)) == list(moved.values())
    assert (await service.get("oslo"))[0].text == "Oslo, rewritten."  # versions only
    assert service.counters["reconciles"] == 1


async def test_concurrent_writers_each_see_their_write_and_no_version_goes_back(
        service: CorpusService) -> None:
    csl, doc_versions, last = Csl(), [], {}

    async def writer(i: int) -> None:
        for n in range(5):
            text = f"Oslo version {i}-{n} " + "word " * (n % 3)
            written = await _write(service, csl, Document("oslo", "Oslo", text))
            doc_versions.append(written["corpus/wiki/doc/oslo"])
            last[written["corpus/wiki/doc/oslo"]] = text

    await asyncio.gather(*(writer(i) for i in range(6)))
    assert service.counters["writes"] == 30 and service.counters["waits"] > 0
    assert len(set(doc_versions)) == 30  # every write planned on the one before it
    doc, version = await service.get("oslo")
    assert version == max(doc_versions) and doc.text == last[version]


async def test_a_closed_service_refuses_work(tmp_path: Path) -> None:
    service = CorpusService(Corpus(tmp_path / "c", "wiki", sync=False))
    held = await service.begin_write([Document("a", "A", "a")])
    waiter = asyncio.create_task(service.begin_write([Document("b", "B", "b")]))
    await asyncio.sleep(0.02)
    await service.close()
    with pytest.raises(Unavailable, match="closing"):
        await waiter
    with pytest.raises(Unavailable):
        await service.search("a", 1)
    assert held.ticket
    await service.close()  # twice is fine
    Corpus(tmp_path / "c", "wiki", sync=False).close()  # the folder is free again
