"""Freshness end to end (DESIGN.md §5.3): no hit and no promotion is served after a write to a
record it read; corpus writes invalidate through the library."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.common.pb import gateway_pb2
from services.corpus import Corpus, Document
from tests.gateway.mesh import Mesh, mesh

ENGINE, LIBRARY = gateway_pb2.RESULT_SOURCE_ENGINE, gateway_pb2.RESULT_SOURCE_LIBRARY
PROMOTED = gateway_pb2.RESULT_SOURCE_PROMOTED_FILL
DOCS = [Document("oslo", "Oslo", "Oslo is the capital of Norway. Its old name was Christiania."),
        Document("rome", "Rome", "Rome is the capital of Italy, on the Tiber."),
        Document("bergen", "Bergen", "Bergen is a city on the west coast of Norway."),
        # Filler keeps one write under the corpus's statistics-refresh fraction (10% of N), so a
        # write to an unrelated document leaves other searches fresh.
        *(Document(f"filler-{i}", f"Filler {i}", f"Filler text number {i} about rivers.")
          for i in range(20))]
OBSERVATION = "The capital of Norway is Oslo. The city of Oslo was renamed."
QUESTION = {"question": "What was the old name of the capital of Norway?", "notes": "none yet"}


def _corpus(tmp_path: Path) -> str:
    path = tmp_path / "corpus"
    corpus = Corpus(path, "corpus")
    corpus.load_documents(DOCS)
    corpus.close()
    return str(path)


async def _retrieve(m: Mesh, entity: str, workflow_id: str) -> gateway_pb2.CallResponse:
    return await m.client.call_stage("react", "retrieve", workflow_id=workflow_id,
                                     inputs=QUESTION, candidate=entity)


async def test_write_invalidates_a_library_hit(tmp_path: Path) -> None:
    async with mesh(corpus_path=_corpus(tmp_path), c2=False) as m:
        m.client.use_builtin("react")
        first = await _retrieve(m, "Oslo", "w1")
        second = await _retrieve(m, "Oslo", "w2")
        assert (first.source, second.source) == (ENGINE, LIBRARY)
        assert second.text == first.text and "Christiania" in first.text
        versions = await m.client.write(upserts=[("oslo", "Oslo", "Oslo is the capital of "
                                                  "Norway. Its old name was Kristiania.")])
        assert versions
        third = await _retrieve(m, "Oslo", "w3")
        assert third.source == ENGINE and "Kristiania" in third.text
        assert "Christiania" not in third.text


async def test_write_between_fill_and_demand_refuses_the_promotion(tmp_path: Path) -> None:
    async with mesh(corpus_path=_corpus(tmp_path), time_scale=0.05) as m:
        m.client.use_builtin("react")
        await m.client.call_stage("react", "think", workflow_id="w1", inputs=QUESTION,
                                  observation=OBSERVATION)
        (branch,) = m.branches.branches.values()
        await asyncio.wait_for(branch.ready.wait(), 5)
        fill = branch.fills["Oslo"]
        await asyncio.wait_for(fill.steps[0].done.wait(), 5)
        assert fill.steps[0].ok
        await m.client.write(upserts=[("oslo", "Oslo", "Oslo is the capital of Norway. "
                                       "Its old name was Kristiania.")])
        answer = await _retrieve(m, "Oslo", "w1")
        assert answer.source == ENGINE and "Kristiania" in answer.text


async def test_unwritten_records_keep_their_fill_promotable(tmp_path: Path) -> None:
    async with mesh(corpus_path=_corpus(tmp_path), time_scale=0.05) as m:
        m.client.use_builtin("react")
        await m.client.call_stage("react", "think", workflow_id="w1", inputs=QUESTION,
                                  observation=OBSERVATION)
        (branch,) = m.branches.branches.values()
        await asyncio.wait_for(branch.ready.wait(), 5)
        await asyncio.wait_for(branch.fills["Oslo"].steps[0].done.wait(), 5)
        await m.client.write(upserts=[("rome", "Rome", "Rome is the capital of Italy.")])
        answer = await _retrieve(m, "Oslo", "w1")
        assert answer.source == PROMOTED and "Christiania" in answer.text
