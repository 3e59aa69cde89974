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
import functools
import json
from dataclasses import dataclass
from typing import Any

from jsonschema import exceptions as schema_errors
from jsonschema import validators

#: The most characters of a schema problem an error message carries.
_MAX_PROBLEM = 200


def canonical_json(value: Any) -> str:
    """Sorted keys, no spaces, UTF-8 kept: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def schema_problem(schema: Any) -> str | None:
    """Why ``schema`` is not a valid JSON Schema (checked against its draft's meta-schema,
    2020-12 unless it names another), or None. A tool whose ``parameters`` say
    ``"required": "q"`` or ``"properties": [...]`` is a request no engine can serve: OpenAI and
    vLLM refuse it with a 400, and so does every service here, instead of failing inside an
    engine and inviting a retry."""
    if not isinstance(schema, dict):
        return "must be a JSON schema object"
    return _problem(canonical_json(schema))


@functools.lru_cache(maxsize=1024)
def _problem(text: str) -> str | None:
    schema = json.loads(text)
    try:
        cls = validators.validator_for(schema, default=validators.Draft202012Validator)
        cls.check_schema(schema)
    except schema_errors.SchemaError as exc:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.path)
        message = exc.message if len(exc.message) <= _MAX_PROBLEM else (
            exc.message[:_MAX_PROBLEM] + "...")
        return f"is not a valid JSON schema: at {where or '(root)'}: {message}"
    except RecursionError:
        return "is not a valid JSON schema: nested too deeply"
    return None


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

    def schemas(self) -> list[tuple[str, Any]]:
        """Every JSON schema the spec carries with its place (``tools[i].function.parameters``,
        ``response_format.json_schema.schema``)."""
        out: list[tuple[str, Any]] = []
        for i, tool in enumerate(self.tools()):
            function = tool.get("function") if isinstance(tool, dict) else None
            if isinstance(function, dict) and function.get("parameters") is not None:
                out.append((f"tools[{i}].function.parameters", function["parameters"]))
        fmt = self.response_format()
        spec = fmt.get("json_schema") if isinstance(fmt, dict) else None
        if isinstance(spec, dict) and spec.get("schema") is not None:
            out.append(("response_format.json_schema.schema", spec["schema"]))
        return out

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


__all__ = ["ChatSpec", "ToolCall", "ToolChoice", "canonical_json", "schema_problem"]
