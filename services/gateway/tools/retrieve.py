"""The builtin ``retrieve`` tool: BM25 top-k passages from a versioned corpus, with a read-set.

Arguments (a stage's rendered canonical JSON): ``{"query": str, "k": int}``; ``k`` defaults to
``default_k`` and may be an integer string (template placeholders render as strings). The output
numbers the passages, ``[1] Title\\ntext``, blank-line separated, or says ``No results.``; it
holds no scores, so it is a pure function of the read-set's versions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from services.common.values.errors import InvalidArgument
from services.gateway.tools.base import ToolResult
from services.gateway.tools.corpus import Corpus, Hit

NO_RESULTS = "No results."


class RetrieveTool:
    """Runs ``retrieve`` stages against one corpus."""

    name = "retrieve"
    read_only = True

    def __init__(self, corpus: Corpus, default_k: int = 5, max_k: int = 50) -> None:
        self.corpus, self.default_k, self.max_k = corpus, default_k, max_k

    @property
    def identity(self) -> str:
        """What to fold into the fingerprint ``model`` of stages run here (corpus incarnation)."""
        return f"tool:{self.name}/{self.corpus.identity}"

    def run(self, args: bytes | str | Mapping[str, Any]) -> ToolResult:
        """Search and format the top passages; the read-set is the search's (exact)."""
        query, k = self.parse_args(args)
        result = self.corpus.search(query, k)
        return ToolResult(format_hits(result.hits), result.reads, evidence=result.hits)

    def current_version(self, record_id: str) -> int | None:
        """The corpus's current version of one of its records; None for another's record."""
        if not record_id.startswith(f"corpus/{self.corpus.name}/"):
            return None
        return self.corpus.version_of(record_id)

    def confirm(self, result: ToolResult) -> bool:
        """True when the output is exactly the passages its read-set names: the output is the
        format of the hits, and every hit is still stored at its version with its text (one
        snapshot). False when a document was rewritten since; raises on a broken store."""
        hits = result.evidence
        if not isinstance(hits, tuple) or format_hits(hits) != result.output:
            return False
        return self.corpus.confirm(hits)

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
