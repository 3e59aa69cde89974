"""Values shared by the gateway's builtin tool stages: tool specs, results and record reads
(``RecordVersion`` is the corpus service's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

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


@runtime_checkable
class Tool(Protocol):
    """A builtin tool: runs on a stage's rendered arguments."""

    name: str
    read_only: bool

    async def run(self, args: bytes | str | Mapping[str, Any]) -> ToolResult:
        """Execute on rendered arguments (canonical JSON bytes, or their parsed mapping); no
        blocking work on the loop (a tool over LMDB runs it on a thread)."""
        ...


__all__ = ["BUILTIN_TOOLS", "RecordVersion", "Tool", "ToolResult", "ToolSpec"]
