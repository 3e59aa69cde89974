"""The retrieve tool over a ``CorpusPort`` (here a local ``CorpusService``): rendered arguments,
refusals by name, confirmation against the store, and the check of stored reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.common.values.errors import InvalidArgument, Unavailable
from services.corpus import Corpus, CorpusService, Document
from services.gateway.tools.base import BUILTIN_TOOLS, ToolResult
from services.gateway.tools.retrieve import NO_RESULTS, RetrieveTool

DOCS = [
    Document("paris", "Paris", "Paris is the capital of France."),
    Document("oslo", "Oslo", "Oslo is the capital of Norway."),
    *(Document(f"filler-{i}", f"Filler {i}", f"Filler text {i} about rivers.") for i in range(20)),
]


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[CorpusService]:
    corpus = Corpus(tmp_path / "corpus", "wiki", sync=False)
    corpus.load_documents(DOCS)
    service = CorpusService(corpus)
    yield service
    await service.close()


async def test_tool_runs_on_rendered_arguments(service: CorpusService) -> None:
    tool = RetrieveTool(service)
    result = await tool.run(b'{"k":"1","query":"capital of Norway"}')
    assert result.output == "[1] Oslo\nOslo is the capital of Norway." and result.complete
    assert result.reads == (await service.search("capital of Norway", k=1)).reads
    assert (await tool.run({"query": "zebra"})).output == NO_RESULTS
    assert tool.identity == f"tool:retrieve/{service.identity}"
    assert BUILTIN_TOOLS["retrieve"].read_only is tool.read_only is True


@pytest.mark.parametrize("args, field", [
    (b"[1]", "args"), (b"{", "args"), ({"query": 3}, "args.query"),
    ({"query": "x", "k": 0}, "args.k"), ({"query": "x", "k": True}, "args.k"),
    ({"query": "x", "k": 51}, "args.k"), ({"query": "x", "top": 2}, "args.top"),
])
async def test_tool_refuses_bad_arguments_by_name(service: CorpusService, args: object,
                                                  field: str) -> None:
    with pytest.raises(InvalidArgument) as err:
        await RetrieveTool(service).run(args)  # type: ignore[arg-type]
    assert err.value.field == field


async def test_tool_confirms_its_output_against_the_store(service: CorpusService) -> None:
    tool = RetrieveTool(service)
    result = await tool.run({"query": "capital of France", "k": 1})
    assert await tool.confirm(result)
    plan = await service.begin_write([Document("paris", "Paris", "Paris is the capital!")])
    await service.commit(plan.ticket, {r: 1000 for r in plan.record_ids})
    assert not await tool.confirm(result)  # rewritten since: stale, never stored
    forged = ToolResult("[1] Paris\nsomething else", result.reads, evidence=result.evidence)
    assert not await tool.confirm(forged)  # output that is not the format of what was read


async def test_reads_current_checks_only_the_corpus_s_records(service: CorpusService) -> None:
    tool = RetrieveTool(service)
    result = await tool.run({"query": "capital of France", "k": 1})
    reads = [(r.record_id, r.version) for r in result.reads]
    assert await tool.reads_current(reads + [("orders/42", 9)])  # not the corpus's: passes
    assert await tool.reads_current([("orders/42", 9)])
    plan = await service.begin_write([Document("paris", "Paris", "Paris, France.")])
    await service.commit(plan.ticket, {r: 500 for r in plan.record_ids})
    assert not await tool.reads_current(reads)
    assert tool.owns("corpus/wiki/doc/x") and not tool.owns("corpus/wikis/doc/x")


class _Down:
    """A corpus port whose service is unreachable."""

    name, identity = "wiki", "wiki@gone"

    async def search(self, query: str, k: int) -> None:
        raise Unavailable("corpus down")

    async def versions_of(self, record_ids: object) -> None:
        raise Unavailable("corpus down")


async def test_an_unreachable_corpus_raises_and_never_answers_old_text() -> None:
    tool = RetrieveTool(_Down())  # type: ignore[arg-type]
    with pytest.raises(Unavailable):
        await tool.run({"query": "capital"})
    with pytest.raises(Unavailable):
        await tool.reads_current([("corpus/wiki/doc/paris", 0)])
