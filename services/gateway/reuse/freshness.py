"""Freshness of a stored result: whether every record it read is still at the version it read.

The library's version table guards records it is told about; the builtin tools answer for their
own records (the retrieval corpus: ``Tool.reads_current``), so a hit that read a corpus record
rewritten since is refused even when the library missed the write (a csl restored from an older
store). A tool that cannot say (its corpus unreachable) makes the result not current, but not
known stale either.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from services.common.values.errors import DynbranchError
from services.gateway.tools.base import Tool

log = logging.getLogger(__name__)


class Freshness:
    """Checks a stored result's reads against the tools that own the records."""

    def __init__(self, tools: Mapping[str, Tool]) -> None:
        self.tools = dict(tools)

    async def reads_current(self, reads: Sequence[tuple[str, int]]) -> bool | None:
        """Whether every read of a stored result is still at its version in the tool that owns
        the record (a record no builtin tool owns cannot be checked here and passes: the
        library's version table guards it); None when a tool could not say (its corpus
        unreachable): not current, but not known stale either."""
        for tool in self.tools.values():
            try:
                if not await tool.reads_current(reads):
                    return False
            except DynbranchError as exc:
                log.warning("tool %s: could not check a result's reads: %s", tool.name, exc)
                return None
        return True


__all__ = ["Freshness"]
