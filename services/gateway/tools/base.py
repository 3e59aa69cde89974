"""Values shared by the gateway's builtin tool stages: tool specs, results and record reads
(``RecordVersion`` is the corpus service's)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from services.common.values.reads import ReadSet, RecordRead
from services.corpus import RecordVersion


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """What the template layer must know about a builtin tool."""

    name: str
    read_only: bool


#: Builtin tools the gateway can run itself; a template's tool stage may name others, which the
#: harness runs (the gateway can then only store their results).
BUILTIN_TOOLS: Mapping[str, ToolSpec] = {"retrieve": ToolSpec("retrieve", read_only=True)}


@dataclass(frozen=True, slots=True)
class ToolResult:
    """A tool stage's output and its read-set (``complete``: every read is listed)."""

    output: str
    reads: tuple[RecordVersion, ...]
    complete: bool = True
    #: What the tool read, for its own ``confirm`` before the result is stored (opaque here).
    evidence: Any = None

    def read_set(self) -> ReadSet:
        """Its reads as a library read-set."""
        return ReadSet(tuple(RecordRead(r.record_id, r.version) for r in self.reads),
                       self.complete)


@runtime_checkable
class Tool(Protocol):
    """A builtin tool: runs on a stage's rendered arguments, and declares what exact reuse (C1)
    asks of it: its identity, the confirmation of a result before it is stored, and the check
    that a stored result's reads are still current."""

    name: str
    read_only: bool

    @property
    def identity(self) -> str:
        """What to fold into the fingerprint ``model`` of stages run here (its incarnation)."""
        ...

    async def run(self, args: bytes | str | Mapping[str, Any]) -> ToolResult:
        """Execute on rendered arguments (canonical JSON bytes, or their parsed mapping); no
        blocking work on the loop (a tool over LMDB runs it on a thread)."""
        ...

    async def confirm(self, result: ToolResult) -> bool:
        """Whether ``result``'s output is exactly what its read-set names (False: a record was
        rewritten meanwhile; raises on a broken store): only a confirmed result is stored."""
        ...

    async def reads_current(self, reads: Sequence[tuple[str, int]]) -> bool:
        """Whether every read of this tool's records is at its current version (reads of other
        records pass); raises when the tool cannot say."""
        ...


__all__ = ["BUILTIN_TOOLS", "RecordVersion", "Tool", "ToolResult", "ToolSpec"]
