"""Tool calling and JSON output as every service sees them: a chat spec and a tool call.

The gateway's HTTP front validates an OpenAI chat request and keeps its chat-shaped part (the
messages, the offered tools, the tool choice, the response format) as a :class:`ChatSpec` of
canonical JSON texts; engine backends with a chat template render it themselves and return
:class:`ToolCall` values parsed from the output. Canonical JSON (sorted keys, no spaces, UTF-8)
makes equal requests byte-equal, so the reuse name that covers a spec stays exact. Plain values;
nothing here imports a service.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 kept: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


class ToolChoice(enum.StrEnum):
    """OpenAI's ``tool_choice``: let the model decide, never call, must call, call one function."""

    AUTO = "auto"
    NONE = "none"
    REQUIRED = "required"
    FUNCTION = "function"


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One function call a model returned; ``arguments`` is a JSON text."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True, slots=True)
class ChatSpec:
    """The chat-shaped part of a generation (``dynbranch.v1.ChatSpec``), as canonical JSON."""

    messages_json: str
    tools_json: str = ""
    tool_choice: ToolChoice = ToolChoice.AUTO
    tool_name: str = ""
    parallel_tool_calls: bool = True
    response_format_json: str = ""

    def messages(self) -> list[dict[str, Any]]:
        """The OpenAI messages."""
        return list(json.loads(self.messages_json))

    def tools(self) -> list[dict[str, Any]]:
        """The offered tools (``{"type": "function", "function": {...}}`` each)."""
        return list(json.loads(self.tools_json)) if self.tools_json else []

    def tool_names(self) -> tuple[str, ...]:
        """Names of the offered functions, in offered order."""
        return tuple(t["function"]["name"] for t in self.tools())

    def function(self, name: str) -> dict[str, Any] | None:
        """The offered function named ``name`` (its ``function`` object), or None."""
        return next((t["function"] for t in self.tools() if t["function"]["name"] == name),
                    None)

    @property
    def may_call(self) -> bool:
        """Whether the answer may carry tool calls (tools offered and the choice allows them)."""
        return bool(self.tools_json) and self.tool_choice is not ToolChoice.NONE

    @property
    def must_call(self) -> bool:
        """Whether the answer must carry a tool call (``required`` or a named function)."""
        return self.may_call and self.tool_choice in (ToolChoice.REQUIRED, ToolChoice.FUNCTION)

    def response_format(self) -> dict[str, Any] | None:
        """The requested JSON output format, or None for text."""
        return json.loads(self.response_format_json) if self.response_format_json else None

    def response_schema(self) -> dict[str, Any] | None:
        """The JSON schema the output must match: the ``json_schema`` format's schema, ``{"type":
        "object"}`` for ``json_object``, None for text."""
        fmt = self.response_format()
        if fmt is None:
            return None
        if fmt["type"] == "json_schema":
            return dict(fmt["json_schema"].get("schema") or {"type": "object"})
        return {"type": "object"}

    def name_bytes(self) -> bytes:
        """Every field as canonical bytes: what the reuse name adds to the rendered prompt."""
        return canonical_json([self.messages_json, self.tools_json, str(self.tool_choice),
                               self.tool_name, self.parallel_tool_calls,
                               self.response_format_json]).encode()


__all__ = ["ChatSpec", "ToolCall", "ToolChoice", "canonical_json"]
