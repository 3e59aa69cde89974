"""The builtin ``retrieve`` tool: BM25 top-k passages from a versioned corpus, with a read-set.

Arguments (a stage's rendered canonical JSON): ``{"query": str, "k": int}``; ``k`` defaults to
``default_k`` and may be an integer string (template placeholders render as strings). The output
numbers the passages, ``[1] Title\\ntext``, blank-line separated, or says ``No results.``; it
holds no scores, so it is a pure function of the read-set's versions. The corpus is a
``CorpusPort``: the mesh's corpus service, or a local one in one process.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from services.common.values.errors import InvalidArgument
from services.corpus import Hit
from services.gateway.tools.base import ToolResult
from services.gateway.tools.corpus_port import CorpusPort

NO_RESULTS = "No results."


class RetrieveTool:
    """Runs ``retrieve`` stages against one corpus."""

    name = "retrieve"
    read_only = True

    def __init__(self, corpus: CorpusPort, default_k: int = 5, max_k: int = 50) -> None:
        self.corpus, self.default_k, self.max_k = corpus, default_k, max_k

    @property
    def identity(self) -> str:
        """What to fold into the fingerprint ``model`` of stages run here (corpus incarnation)."""
        return f"tool:{self.name}/{self.corpus.identity}"

    async def run(self, args: bytes | str | Mapping[str, Any]) -> ToolResult:
        """Search and format the top passages; the read-set is the search's (exact)."""
        query, k = self.parse_args(args)
        result = await self.corpus.search(query, k)
        return ToolResult(format_hits(result.hits), result.reads, evidence=result.hits)

    def owns(self, record_id: str) -> bool:
        """Whether ``record_id`` is one of the corpus's records."""
        return record_id.startswith(f"corpus/{self.corpus.name}/")

    async def reads_current(self, reads: Sequence[tuple[str, int]]) -> bool:
        """Whether every read of the corpus's records is at the corpus's current version (one
        call for all of them; reads of other records pass). Raises when the corpus cannot say,
        and answers False when the corpus was rebuilt under the call (another incarnation)."""
        mine = [(r, v) for r, v in reads if self.owns(r)]
        if not mine:
            return True
        identity = self.corpus.identity
        now = await self.corpus.versions_of([r for r, _ in mine])
        if self.corpus.identity != identity:
            return False
        return all(current == version for (_, version), current in zip(mine, now, strict=True))

    async def confirm(self, result: ToolResult) -> bool:
        """True when the output is exactly the passages its read-set names: the output is the
        format of the hits, and every hit is still stored at its version with its text (one
        snapshot). False when a document was rewritten since; raises on a broken store."""
        hits = result.evidence
        if not isinstance(hits, tuple) or format_hits(hits) != result.output:
            return False
        return await self.corpus.confirm(hits)

    def parse_args(self, args: bytes | str | Mapping[str, Any]) -> tuple[str, int]:
        """``(query, k)`` from rendered arguments; a fault names the argument."""
        if isinstance(args, bytes | str):
            try:
                args = json.loads(args)
            except (ValueError, UnicodeDecodeError):
                raise InvalidArgument("args", "must be a JSON object") from None
        if not isinstance(args, Mapping):
            raise InvalidArgument("args", "must be a JSON object")
        unknown = sorted(set(args) - {"query", "k"})
        if unknown:
            raise InvalidArgument(f"args.{unknown[0]}", "unknown argument of retrieve")
        query = args.get("query")
        if not isinstance(query, str):
            raise InvalidArgument("args.query", "must be a string")
        return query, self._k(args.get("k", self.default_k))

    def _k(self, value: Any) -> int:
        if isinstance(value, str) and value.strip().isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= self.max_k:
            raise InvalidArgument("args.k", f"must be an integer in [1, {self.max_k}]")
        return int(value)


def format_hits(hits: tuple[Hit, ...]) -> str:
    """Numbered passages, best first."""
    if not hits:
        return NO_RESULTS
    return "\n\n".join(f"[{i}] {h.title}\n{h.text}" for i, h in enumerate(hits, start=1))


__all__ = ["NO_RESULTS", "RetrieveTool", "format_hits"]
