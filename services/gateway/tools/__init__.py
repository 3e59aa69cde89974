"""Builtin tool stages the gateway runs itself (DESIGN.md §3 gateway): ``retrieve`` over the
mesh's versioned corpus (``services.corpus``, behind ``CorpusPort``) with exact read-sets.

May import: ``services.common`` and the corpus service's face only; every other gateway module
may import tools."""

from services.gateway.tools.base import BUILTIN_TOOLS, RecordVersion, Tool, ToolResult, ToolSpec
from services.gateway.tools.corpus_port import CorpusPort
from services.gateway.tools.retrieve import RetrieveTool

__all__ = [
    "BUILTIN_TOOLS", "CorpusPort", "RecordVersion", "RetrieveTool", "Tool", "ToolResult",
    "ToolSpec",
]
