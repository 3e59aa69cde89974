"""The retrieval corpus as the gateway uses it (``CorpusPort``): the corpus service through its
client (``services.corpus.client.CorpusClient``, every gateway of a mesh on the one corpus), or,
in one process, ``services.corpus.CorpusService`` over a local LMDB corpus (tests, the
in-process and virtual meshes). Both answer the same values (``services.corpus``).

Freshness rests on two things every implementation keeps: a search's read-set names exactly the
versions of what it returned (``services/corpus/core.py``), and a write bumps its records in the
csl before the corpus applies it, holding the corpus's write turn in between
(``services/corpus/service.py``). A call that cannot be answered raises (``Unavailable``,
``DeadlineExceeded``): the retrieve stage fails, a fill step ends, a served result whose reads
cannot be checked is a miss; nothing falls back to an older answer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from services.corpus import (
    CorpusInfo,
    Document,
    Hit,
    RecordVersion,
    SearchResult,
    TitlePage,
    WritePlan,
)


class CorpusPort(Protocol):
    """A versioned corpus with BM25 search and exact read-sets, shared by the mesh's gateways."""

    @property
    def name(self) -> str:
        """The corpus name: its record ids are ``corpus/<name>/...``."""
        ...

    @property
    def identity(self) -> str:
        """``name@incarnation``, folded into the fingerprint of the stages that read it."""
        ...

    async def info(self) -> CorpusInfo:
        """Identity, size and write sequence now."""
        ...

    async def search(self, query: str, k: int) -> SearchResult:
        """The ``k`` best documents and the exact read-set of the search."""
        ...

    async def confirm(self, hits: Sequence[Hit]) -> bool:
        """Every hit still stored at its version with exactly its text (False: rewritten)."""
        ...

    async def versions_of(self, record_ids: Sequence[str]) -> list[int]:
        """The current versions of the corpus's ``record_ids``, in order (0: never written)."""
        ...

    async def titles(self, after: str = "", limit: int = 1024) -> TitlePage:
        """Documents after ``after`` in id order as ``(doc id, version, title)``."""
        ...

    async def begin_write(self, upserts: Sequence[Document] = (),
                          removals: Sequence[str] = ()) -> WritePlan:
        """Take the write turn: the ticket, the records the write bumps and their current
        versions (the csl's floors). Commit or abort it."""
        ...

    async def begin_reconcile(self, write_seq: int) -> WritePlan:
        """Take the write turn for the records above a csl's ``write_seq`` (an empty ticket when
        there are none)."""
        ...

    async def commit(self, ticket: str, versions: Mapping[str, int]
                     ) -> tuple[RecordVersion, ...]:
        """Apply the ticket's write at the csl's ``versions``; every bumped record."""
        ...

    async def abort(self, ticket: str) -> bool:
        """Give the write turn back without writing."""
        ...


__all__ = ["CorpusPort"]
