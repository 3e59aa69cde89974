"""Builtin tool stages the gateway runs itself (DESIGN.md §3 gateway): ``retrieve`` over a
versioned LMDB corpus with exact read-sets, and loaders for the shared data sets.

May import: ``services.common`` only; every other gateway module may import tools."""

from services.gateway.tools.base import BUILTIN_TOOLS, RecordVersion, Tool, ToolResult, ToolSpec
from services.gateway.tools.corpus import Corpus, Document, Hit, SearchResult
from services.gateway.tools.retrieve import RetrieveTool

__all__ = [
    "BUILTIN_TOOLS", "Corpus", "Document", "Hit", "RecordVersion", "RetrieveTool", "SearchResult",
    "Tool", "ToolResult", "ToolSpec",
]
