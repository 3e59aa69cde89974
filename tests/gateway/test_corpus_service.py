"""Gateways on the corpus service (``corpus`` setting), in one process: two gateways over one
csl and one corpus service see the same documents at the same versions; the ReAct title index
follows the service; a corpus service that is down fails retrieves (UNAVAILABLE) and makes
served results that read the corpus misses, never older text; settings that name two corpora
are refused."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from pydantic import ValidationError

from services.common.pb import gateway_pb2
from services.common.values.errors import FailedPrecondition
from services.corpus import Corpus, Document
from services.gateway.config import GatewaySettings
from services.gateway.sdk import DynbranchClient
from services.gateway.speculation.predictors import PredictionContext
from services.gateway.speculation.title_mirror import TitleMirror
from services.gateway.speculation.titles import CorpusTitles
from tests.factories import corpus_service, csl_service, engine_agent, gateway

QUESTION = {"question": "What is it?", "notes": "none yet"}
DOCS = [Document("zorblax", "Zorblax", "Zorblax is a document marker0x."),
        *(Document(f"filler-{i}", f"Filler {i}", f"Filler text number {i} about rivers.")
          for i in range(20))]
LIBRARY = gateway_pb2.RESULT_SOURCE_LIBRARY
#: The gateway runtime behind each client's target (for looking inside).
RUNTIMES: dict[int, Any] = {}


@asynccontextmanager
async def two_gateways(tmp_path: Path, **settings: Any
                       ) -> AsyncIterator[tuple[Any, DynbranchClient, DynbranchClient]]:
    path = tmp_path / "corpus"
    with Corpus(path, "corpus", sync=False) as corpus:
        corpus.load_documents(DOCS)
    async with AsyncExitStack() as stack:
        svc = await stack.enter_async_context(corpus_service(path))
        csl = await stack.enter_async_context(csl_service(tmp_path / "csl", grace_s=0.2))
        agent = await stack.enter_async_context(engine_agent(engine_id="e0"))
        clients = []
        for _ in range(2):
            gw = await stack.enter_async_context(gateway(
                [agent.address], csl=csl.address, corpus=svc.address, **settings))
            client = DynbranchClient(gw.address)
            RUNTIMES[id(client)] = gw
            stack.push_async_callback(client.close)
            client.use_builtin("react")
            clients.append(client)
        yield svc, clients[0], clients[1]


async def _retrieve(client: DynbranchClient, workflow_id: str) -> gateway_pb2.CallResponse:
    return await client.call_stage("react", "retrieve", workflow_id=workflow_id,
                                   inputs=QUESTION, candidate="Zorblax")


async def test_a_write_through_one_gateway_is_what_the_other_retrieves(tmp_path: Path) -> None:
    async with two_gateways(tmp_path) as (_, a, b):
        for version in range(1, 8):
            written = await a.write(upserts=[("zorblax", "Zorblax",
                                              f"Zorblax is a document {'x ' * version}"
                                              f"marker{version}x.")])
            assert written
            for attempt in range(2):  # the second may come from the library (C1)
                text = (await _retrieve(b, f"w{version}-{attempt}")).text
                assert f"marker{version}x" in text, (version, attempt, text)
                text = (await _retrieve(a, f"v{version}-{attempt}")).text
                assert f"marker{version}x" in text


async def test_the_title_index_follows_the_corpus_service(tmp_path: Path) -> None:
    async with two_gateways(tmp_path) as (_, a, b):
        titles = _titles(b)
        assert isinstance(titles.corpus, TitleMirror) and titles.corpus.get("zorblax")
        context = PredictionContext(observation="The notes were written by Ada Lovelace.")
        assert "Ada Lovelace" not in [r.candidate for r in titles.rank("react/think", context)]
        await a.write(upserts=[("ada", "Ada Lovelace", "Ada Lovelace wrote notes.")])
        deadline = asyncio.get_running_loop().time() + 5
        while titles.corpus.get("ada") is None:  # the mirror's next round lists it
            assert asyncio.get_running_loop().time() < deadline, "the write never reached B"
            await asyncio.sleep(0.05)
        ranked = [r.candidate for r in titles.rank("react/think", context)]
        assert ranked[0] == "Ada Lovelace"


def _titles(client: DynbranchClient) -> CorpusTitles:
    """The gateway's title predictor (the member of its composite predictor)."""
    core = RUNTIMES[id(client)].core
    return next(m for m, _ in core.branches.predictor.members if isinstance(m, CorpusTitles))


async def test_a_corpus_service_that_is_down_fails_retrieves_and_serves_no_old_text(
        tmp_path: Path) -> None:
    async with two_gateways(tmp_path, corpus_deadline_s=0.5) as (svc, a, b):
        first = await _retrieve(b, "d1")
        second = await _retrieve(b, "d2")
        assert second.source == LIBRARY and second.text == first.text
        await svc.shutdown()
        with pytest.raises(grpc.aio.AioRpcError) as err:  # a library hit whose reads cannot
            await _retrieve(b, "d3")  # be checked is a miss; the search then fails
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.write(upserts=[("zorblax", "Zorblax", "never written")])
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE


async def test_a_write_of_more_records_than_one_write_takes_is_refused_by_field(
        tmp_path: Path) -> None:
    """One document with 5,000 distinct terms bumps 5,000+ records: more than the csl takes in
    one write (4,096). It is the write's fault, so it is refused as such (it was UNAVAILABLE
    "retry"), and the corpus's write turn is given back at once."""
    async with two_gateways(tmp_path) as (_, a, b):
        words = " ".join(f"w{i}" for i in range(5000))
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await a.write(upserts=[("long", "Long", words)])
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert err.value.details().startswith("upserts: the write changes 500")
        b.timeout_s = 5.0  # the turn was given back: no wait for it to lapse
        assert await b.write(upserts=[("short", "Short", "a few words")])


def test_settings_name_one_corpus() -> None:
    with pytest.raises(ValidationError, match="corpus and corpus_path"):
        GatewaySettings(engines=["e:1"], auth=False, corpus="c:1", corpus_path="/x")
    with pytest.raises(ValidationError, match="corpus and corpus_path"):
        GatewaySettings(engines=["e:1"], auth=False, corpus="c:1", corpus_source="hotpotqa")
    assert GatewaySettings(engines=["e:1"], auth=False, corpus="c:1").corpus == "c:1"


async def test_a_gateway_waits_for_the_corpus_service_then_gives_up(tmp_path: Path) -> None:
    async with engine_agent(engine_id="e0") as agent:
        with pytest.raises(Exception, match="did not answer within"):
            async with gateway([agent.address], corpus="127.0.0.1:1",
                               corpus_connect_timeout_s=0.5):
                pass


async def test_a_second_gateway_on_one_corpus_folder_is_refused_at_start(tmp_path: Path) -> None:
    """What two gateways given one DYNBRANCH_GATEWAY_CORPUS_PATH did before the corpus service
    (the second answered from an index behind the first's writes): refused, naming the way."""
    path = tmp_path / "corpus"
    with Corpus(path, "corpus", sync=False) as corpus:
        corpus.load_documents(DOCS)
    async with engine_agent(engine_id="e0") as agent, \
            gateway([agent.address], corpus_path=str(path)):
        with pytest.raises(FailedPrecondition, match="through the corpus service"):
            async with gateway([agent.address], corpus_path=str(path)):
                pass
