"""The corpus's titles held in the gateway for ``CorpusTitles`` when the corpus is a service.

``CorpusTitles`` ranks titles on every decision point and reads its ``TitleSource`` in
process (a dict comparison per demand, a ``get`` per changed document). Over the corpus
service those reads would be calls on the hot path, so ``TitleMirror`` keeps what it needs
here, ``(version, title)`` by document id, and brings it up to date in the background: every
``interval_s`` it asks the corpus for its identity, size and write sequence, and when any of
them moved it lists the titles again, page by page, and swaps the new table in whole. The pages
are not one snapshot: a write during the listing moves the write sequence, and the next round
lists again. Titles only rank fill candidates, so a mirror a round behind costs predictions,
never correctness (every retrieve still searches the corpus itself). A corpus that cannot be
reached leaves the last table in place, logged.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Protocol

from services.corpus import CorpusInfo, TitlePage

log = logging.getLogger(__name__)
#: How often the mirror asks whether the corpus moved, and titles per page.
INTERVAL_S = 1.0
PAGE = 1024


class TitleFeed(Protocol):
    """What the mirror reads of a corpus (``CorpusPort``'s info and titles)."""

    async def info(self) -> CorpusInfo:
        """Identity, size and write sequence."""
        ...

    async def titles(self, after: str = "", limit: int = PAGE) -> TitlePage:
        """One page of ``(doc id, version, title)`` after ``after``."""
        ...


@dataclass(frozen=True, slots=True)
class MirroredTitle:
    """A document as far as titles go (``titles.Titled``)."""

    title: str


class TitleMirror:
    """A ``TitleSource`` kept from a corpus service (module docstring)."""

    def __init__(self, feed: TitleFeed, *, page: int = PAGE) -> None:
        self.feed = feed
        self.page = page
        self.identity = ""
        self._write_seq = -1
        self._docs: dict[str, tuple[int, str]] = {}
        self._key: tuple[str, int, int] | None = None
        #: Rounds that listed the titles again, and rounds that failed.
        self.syncs = 0
        self.failures = 0

    # -- TitleSource ----------------------------------------------------------------------------

    @property
    def write_seq(self) -> int:
        """The corpus's write sequence when the titles were listed (-1: never)."""
        return self._write_seq

    def __len__(self) -> int:
        return len(self._docs)

    def doc_versions(self) -> dict[str, int]:
        """Doc id → version of every listed document (a copy)."""
        return {doc_id: version for doc_id, (version, _) in self._docs.items()}

    def get(self, doc_id: str) -> tuple[MirroredTitle, int] | None:
        """The listed title and version of ``doc_id``, or None."""
        found = self._docs.get(doc_id)
        return None if found is None else (MirroredTitle(found[1]), found[0])

    # -- following the corpus ---------------------------------------------------------------------

    async def sync(self) -> bool:
        """List the titles again when the corpus moved since the last listing; True when it
        did. Raises what the corpus raises (the table stays as it was)."""
        info = await self.feed.info()
        key = (info.identity, info.write_seq, info.documents)
        if key == self._key:
            return False
        docs: dict[str, tuple[int, str]] = {}
        after = ""
        while True:
            page = await self.feed.titles(after, self.page)
            for doc_id, version, title in page.titles:
                docs[doc_id] = (version, title)
            if not page.more or not page.titles:
                break
            after = page.titles[-1][0]
        self._docs, self.identity, self._write_seq = docs, info.identity, info.write_seq
        self._key = key
        self.syncs += 1
        return True

    async def follow(self, interval_s: float = INTERVAL_S) -> None:
        """``sync`` every ``interval_s`` until cancelled; failures are logged and retried."""
        while True:
            try:
                await self.sync()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - keep the last table, try again
                self.failures += 1
                log.warning("corpus titles not refreshed (%s); keeping %d titles", exc,
                            len(self._docs))
            await asyncio.sleep(interval_s)


__all__ = ["INTERVAL_S", "PAGE", "MirroredTitle", "TitleFeed", "TitleMirror"]
