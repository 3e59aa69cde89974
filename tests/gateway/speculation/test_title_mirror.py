"""TitleMirror: the corpus service's titles held for CorpusTitles, listed again only when the
corpus moved, kept when the corpus cannot be reached."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.common.values.errors import Unavailable
from services.corpus import Corpus, CorpusInfo, CorpusService, Document, TitlePage
from services.gateway.speculation.title_mirror import TitleMirror
from services.gateway.speculation.titles import CorpusTitles
from tests.gateway.speculation.test_titles import COORD, ctx, names


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[CorpusService]:
    corpus = Corpus(tmp_path / "c", "wiki", sync=False)
    corpus.load_documents([Document(f"d{i}", f"Person {i} (role)", f"Person {i} text.")
                           for i in range(7)])
    service = CorpusService(corpus)
    yield service
    await service.close()


class Counting:
    """A feed that counts its calls and can go down."""

    def __init__(self, service: CorpusService) -> None:
        self.service, self.pages, self.down = service, 0, False

    async def info(self) -> CorpusInfo:
        if self.down:
            raise Unavailable("corpus down")
        return await self.service.info()

    async def titles(self, after: str = "", limit: int = 1024) -> TitlePage:
        self.pages += 1
        return await self.service.titles(after, limit)


async def test_the_mirror_lists_every_title_page_by_page(service: CorpusService) -> None:
    feed = Counting(service)
    mirror = TitleMirror(feed, page=3)
    assert len(mirror) == 0 and mirror.write_seq == -1
    assert await mirror.sync()
    assert feed.pages == 3 and len(mirror) == 7 and mirror.identity == service.identity
    assert mirror.get("d4")[0].title == "Person 4 (role)" and mirror.get("x") is None
    assert mirror.doc_versions() == {f"d{i}": 0 for i in range(7)}
    assert not await mirror.sync() and feed.pages == 3  # nothing moved: no listing


async def test_a_write_is_listed_again_and_reaches_the_ranking(service: CorpusService) -> None:
    mirror = TitleMirror(Counting(service))
    await mirror.sync()
    titles = CorpusTitles(mirror)
    assert "Ada Lovelace" not in names(titles.rank(COORD, ctx("Ada Lovelace wrote it.")))
    plan = await service.begin_write([Document("ada", "Ada Lovelace", "Ada.")],
                                     removals=["d0"])
    await service.commit(plan.ticket, {r: 10 for r in plan.record_ids})
    assert await mirror.sync() and mirror.write_seq == 10
    assert mirror.get("d0") is None and mirror.get("ada")[1] == 10
    assert names(titles.rank(COORD, ctx("Ada Lovelace wrote it.")))[0] == "Ada Lovelace"


async def test_following_keeps_the_last_table_while_the_corpus_is_down(
        service: CorpusService) -> None:
    feed = Counting(service)
    mirror = TitleMirror(feed)
    await mirror.sync()
    feed.down = True
    follower = asyncio.create_task(mirror.follow(interval_s=0.01))
    await asyncio.sleep(0.1)
    assert mirror.failures >= 2 and len(mirror) == 7
    feed.down = False
    plan = await service.begin_write([Document("new", "New Person", "N.")])
    await service.commit(plan.ticket, {r: 5 for r in plan.record_ids})
    for _ in range(100):
        if mirror.get("new") is not None:
            break
        await asyncio.sleep(0.01)
    follower.cancel()
    with pytest.raises(asyncio.CancelledError):
        await follower
    assert mirror.get("new") is not None and mirror.syncs == 2
