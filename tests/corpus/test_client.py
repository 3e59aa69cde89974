"""The corpus service over gRPC, through its client: every call answers the corpus's values, bad
input is refused with the right status naming the field, two clients share one corpus (a write
through one is in the other's next search), a service that is down or silent is
``Unavailable`` within the deadline, and a rebuilt corpus is noticed."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from pathlib import Path

import grpc
import pytest

from services.common.pb import common_pb2, corpus_pb2, corpus_pb2_grpc
from services.common.runtime.clients import open_channel
from services.common.values.errors import FailedPrecondition, InvalidArgument, Unavailable
from services.corpus import Corpus, CorpusClient, Document
from tests.factories import corpus_service

DOCS = [Document("paris", "Paris", "Paris is the capital of France."),
        Document("oslo", "Oslo", "Oslo is the capital of Norway."),
        *(Document(f"f{i}", f"Filler {i}", f"Filler {i} about rivers.") for i in range(20))]


def _corpus(folder: Path, name: str = "wiki") -> Path:
    path = folder / "corpus"
    with Corpus(path, name, sync=False) as corpus:
        corpus.load_documents(DOCS)
    return path


async def test_every_call_answers_the_corpus_s_values(tmp_path: Path) -> None:
    async with corpus_service(_corpus(tmp_path), name="wiki") as svc, \
            CorpusClient(svc.address) as client:
        info = await client.connect(5)
        assert (info.name, info.documents, client.name) == ("wiki", len(DOCS), "wiki")
        assert client.identity.startswith("wiki@") and info.identity == client.identity
        result = await client.search("capital of Norway", 1)
        assert result.hits[0].doc_id == "oslo" and result.hits[0].text == DOCS[1].text
        assert {r.record_id for r in result.reads} >= {"corpus/wiki/doc/oslo",
                                                       "corpus/wiki/stats"}
        assert await client.confirm(result.hits)
        assert await client.get("paris") == (DOCS[0], 0) and await client.get("none") is None
        assert await client.versions_of(["corpus/wiki/doc/oslo"]) == [0]
        page = await client.titles("", 3)
        assert [t[0] for t in page.titles] == ["f0", "f1", "f10"] and page.more
        plan = await client.begin_write([Document("oslo", "Oslo", "Oslo, Norway.")])
        versions = {r: 100 + i for i, r in enumerate(plan.record_ids)}
        assert plan.floors == tuple(await client.versions_of(plan.record_ids))
        written = await client.commit(plan.ticket, versions)
        assert {r.record_id: r.version for r in written} == versions
        assert not await client.confirm(result.hits)  # rewritten: the old hit is stale
        assert (await client.info()).write_seq == max(versions.values())
        reconcile = await client.begin_reconcile(0)
        assert set(reconcile.record_ids) == set(versions) and reconcile.ticket
        assert await client.abort(reconcile.ticket) and not await client.abort(reconcile.ticket)
        nothing = await client.begin_reconcile(10**6)
        assert nothing.ticket == "" and nothing.record_ids == ()


async def test_a_write_through_one_client_is_in_the_other_s_next_search(tmp_path: Path) -> None:
    async with corpus_service(_corpus(tmp_path), name="wiki") as svc, \
            CorpusClient(svc.address, producer="gateway-a") as a, \
            CorpusClient(svc.address, producer="gateway-b") as b:
        await a.connect(5)
        await b.connect(5)
        for n in range(1, 6):
            plan = await a.begin_write([Document("oslo", "Oslo", f"Oslo marker{n}x.")])
            await a.commit(plan.ticket, {r: 10 * n for r in plan.record_ids})
            hit = (await b.search("Oslo", 1)).hits[0]
            assert hit.text == f"Oslo marker{n}x." and hit.version == 10 * n


def _stub(address: str) -> corpus_pb2_grpc.CorpusStub:
    return corpus_pb2_grpc.CorpusStub(open_channel(address))


@pytest.mark.parametrize("method, request_, code, field", [
    ("Search", corpus_pb2.CorpusSearchRequest(query="", k=1), "INVALID_ARGUMENT", "query"),
    ("Search", corpus_pb2.CorpusSearchRequest(query="x", k=0), "INVALID_ARGUMENT", "k"),
    ("Search", corpus_pb2.CorpusSearchRequest(query="x", k=51), "INVALID_ARGUMENT", "k"),
    ("Search", corpus_pb2.CorpusSearchRequest(query="x" * 5000, k=1), "INVALID_ARGUMENT",
     "query"),
    ("Get", corpus_pb2.CorpusGetRequest(doc_id=""), "INVALID_ARGUMENT", "doc_id"),
    ("VersionsOf", corpus_pb2.CorpusVersionsRequest(record_ids=["corpus/other/doc/a"]),
     "INVALID_ARGUMENT", "record_ids[0]"),
    ("VersionsOf", corpus_pb2.CorpusVersionsRequest(record_ids=["corpus/wiki/stats",
                                                                "corpus/wiki/page/a"]),
     "INVALID_ARGUMENT", "record_ids[1]"),
    ("VersionsOf", corpus_pb2.CorpusVersionsRequest(record_ids=["corpus/wiki/stats"] * 4097),
     "RESOURCE_EXHAUSTED", "record_ids"),
    ("Titles", corpus_pb2.CorpusTitlesRequest(limit=5000), "INVALID_ARGUMENT", "limit"),
    ("BeginWrite", corpus_pb2.CorpusBeginWriteRequest(), "INVALID_ARGUMENT", "upserts"),
    ("BeginWrite", corpus_pb2.CorpusBeginWriteRequest(
        upserts=[corpus_pb2.CorpusDocument(doc_id="", title="t")]),
     "INVALID_ARGUMENT", "upserts[0].doc_id"),
    ("BeginWrite", corpus_pb2.CorpusBeginWriteRequest(removals=["x" * 401]),
     "INVALID_ARGUMENT", "removals[0]"),
    ("BeginWrite", corpus_pb2.CorpusBeginWriteRequest(removals=["nowhere"]), "NOT_FOUND", ""),
    ("Commit", corpus_pb2.CorpusCommitRequest(ticket=""), "INVALID_ARGUMENT", "ticket"),
    ("Commit", corpus_pb2.CorpusCommitRequest(ticket="t", versions=[
        common_pb2.RecordVersion(record_id="corpus/wiki/stats", version=0)]),
     "INVALID_ARGUMENT", "versions[0].version"),
    ("Commit", corpus_pb2.CorpusCommitRequest(ticket="nope", versions=[
        common_pb2.RecordVersion(record_id="corpus/wiki/stats", version=3)]),
     "FAILED_PRECONDITION", ""),
    ("Abort", corpus_pb2.CorpusAbortRequest(ticket=""), "INVALID_ARGUMENT", "ticket"),
])
async def test_bad_input_is_refused_naming_the_field(tmp_path: Path, method: str,
                                                     request_: object, code: str,
                                                     field: str) -> None:
    async with corpus_service(_corpus(tmp_path), name="wiki") as svc:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            stub = _stub(svc.address)  # held: a collected channel closes its calls
            await getattr(stub, method)(request_, timeout=5)
        assert err.value.code().name == code, err.value.details()
        if field:
            assert err.value.details().startswith(f"{field}: "), err.value.details()


async def test_the_client_maps_refusals_to_the_mesh_s_errors(tmp_path: Path) -> None:
    async with corpus_service(_corpus(tmp_path), name="wiki") as svc, \
            CorpusClient(svc.address) as client:
        await client.connect(5)
        with pytest.raises(InvalidArgument) as err:
            await client.search("x", 0)
        assert err.value.field == "k"
        with pytest.raises(FailedPrecondition, match="holds no write turn"):
            await client.commit("gone", {"corpus/wiki/stats": 5})


async def test_a_writer_waiting_past_its_deadline_for_the_turn_is_refused(
        tmp_path: Path) -> None:
    async with corpus_service(_corpus(tmp_path), name="wiki") as svc, \
            CorpusClient(svc.address) as a, \
            CorpusClient(svc.address, write_deadline_s=0.5) as b:
        held = await a.begin_write([Document("oslo", "Oslo", "held")])
        started = time.monotonic()
        with pytest.raises(Unavailable):
            await b.begin_write([Document("paris", "Paris", "waits")])
        assert time.monotonic() - started < 2
        await a.abort(held.ticket)
        plan = await b.begin_write([Document("paris", "Paris", "now")])
        assert plan.ticket
        await b.abort(plan.ticket)


async def test_a_service_that_is_down_is_unavailable_within_the_deadline() -> None:
    client = CorpusClient("127.0.0.1:1", read_deadline_s=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(Unavailable):
            await client.search("x", 1)
        with pytest.raises(Unavailable, match="did not answer within"):
            await client.connect(0.3)
        assert time.monotonic() - started < 5
    finally:
        await client.close()


async def test_a_silent_service_is_unavailable_at_the_read_deadline() -> None:
    server = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)  # accepts, never answers
    port = server.sockets[0].getsockname()[1]
    client = CorpusClient(f"127.0.0.1:{port}", read_deadline_s=0.3)
    try:
        started = time.monotonic()
        with pytest.raises(Unavailable):
            await client.versions_of(["corpus/wiki/stats"])
        assert time.monotonic() - started < 3
    finally:
        await client.close()
        server.close()


async def test_a_rebuilt_corpus_is_adopted_as_the_new_identity(tmp_path: Path) -> None:
    async with corpus_service(_corpus(tmp_path / "a"), name="wiki") as first:
        port = int(first.address.rsplit(":", 1)[1])
        client = CorpusClient(first.address)
        old = (await client.connect(5)).identity
    try:
        async with corpus_service(_corpus(tmp_path / "b"), name="wiki", port=port):
            await client.versions_of(["corpus/wiki/stats"])  # the channel reconnects
            assert client.identity != old and client.identity.startswith("wiki@")
    finally:
        await client.close()


def test_start_up_refuses_an_unknown_source_and_a_folder_in_use(tmp_path: Path) -> None:
    run = [sys.executable, "-m", "services.corpus", "--port", "0", "--metrics-port", "-1",
           "--path", str(tmp_path / "c")]
    bad = subprocess.run([*run, "--source", "wikipedia"], capture_output=True, text=True,
                         timeout=60)
    assert bad.returncode == 2 and "no loader 'wikipedia'" in bad.stderr
    with Corpus(tmp_path / "c", "corpus", sync=False):
        held = subprocess.run(run, capture_output=True, text=True, timeout=60)
    assert held.returncode == 2 and "open in another process" in held.stderr
