"""Chat messages, tools, tool choice and response format of an OpenAI chat request (plain dicts).

:func:`parse_chat` validates the chat-shaped fields the way OpenAI does (every bad field refused
by name) and returns the prompt and, when the request uses tool calling or JSON output, a
:class:`~services.common.values.chat.ChatSpec` for the engine. The prompt is a fixed ChatML
rendering,
so the same conversation always renders the same bytes and reuses the same library entry; with
tools it follows Qwen3's (hermes-style) chat template: the tools as JSON lines inside ``<tools>``
in the system turn, an assistant's calls as ``<tool_call>`` blocks, tool results as
``<tool_response>`` blocks in a user turn. An engine with a chat template of its own (vllm,
openai backends) renders the spec itself; the sim engine reads this prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from services.common.values.chat import ChatSpec, ToolChoice, canonical_json, schema_problem
from services.common.values.errors import InvalidArgument, quoted
from services.gateway.templates import chatml

ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})
#: OpenAI's rule for function names.
FUNCTION_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
MAX_TOOLS = 128


@dataclass(frozen=True, slots=True)
class ParsedChat:
    """The prompt of a chat request and its chat spec (None for a plain text chat)."""

    prompt: str
    spec: ChatSpec | None
    #: Content of the latest ``tool`` message (the observation predictors read), or "".
    last_tool_result: str = ""
    #: Functions the latest assistant turn called (what the harness ran), in order.
    last_called: tuple[str, ...] = ()


def parse_chat(body: Mapping[str, Any]) -> ParsedChat:
    """Validate messages, tools, tool_choice, parallel_tool_calls and response_format."""
    messages = _messages(body.get("messages"))
    tools = _tools(body.get("tools"))
    choice, name = tool_choice(body.get("tool_choice"), tools)
    parallel = body.get("parallel_tool_calls")
    if parallel is not None and not isinstance(parallel, bool):
        raise InvalidArgument("parallel_tool_calls", "must be a boolean")
    fmt = response_format(body.get("response_format"))
    return conversation(messages, tools, choice, name, parallel is not False, fmt)


def conversation(messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 choice: ToolChoice = ToolChoice.AUTO, tool_name: str = "",
                 parallel: bool = True, fmt: dict[str, Any] | None = None) -> ParsedChat:
    """The one way a conversation becomes a prompt and a chat spec, whichever protocol it came
    in on: ``messages`` are normalized OpenAI chat messages (as ``_message`` returns them),
    ``tools`` OpenAI function tools (as ``_tools`` returns them), ``fmt`` a normalized response
    format. Equal arguments give equal prompts and specs, hence equal reuse names."""
    prompt = render_chat(messages, tools)
    uses_tools = tools or any(m["role"] == "tool" or m.get("tool_calls") for m in messages)
    spec = None
    if uses_tools or fmt is not None:
        spec = ChatSpec(messages_json=canonical_json(messages),
                        tools_json=canonical_json(tools) if tools else "", tool_choice=choice,
                        tool_name=tool_name, parallel_tool_calls=parallel,
                        response_format_json=canonical_json(fmt) if fmt is not None else "")
    last_tool = next((m for m in reversed(messages) if m["role"] == "tool"), None)
    return ParsedChat(prompt, spec, last_tool["content"] if last_tool else "",
                      _just_called(messages))


def _just_called(messages: list[dict[str, Any]]) -> tuple[str, ...]:
    """The functions whose results end the conversation: the calls of the assistant turn
    right before the trailing tool messages (none when it does not end in tool results)."""
    end = len(messages)
    while end and messages[end - 1]["role"] == "tool":
        end -= 1
    if end == len(messages) or not end or messages[end - 1]["role"] != "assistant":
        return ()
    return tuple(c["function"]["name"] for c in messages[end - 1].get("tool_calls", ()))


# -- messages -------------------------------------------------------------------------------


def _messages(value: Any) -> list[dict[str, Any]]:
    if not isinstance(value, list) or not value:
        raise InvalidArgument("messages", "must be a non-empty array of messages")
    messages = [_message(f"messages[{i}]", m) for i, m in enumerate(value)]
    called: set[str] = set()
    for i, message in enumerate(messages):
        called.update(c["id"] for c in message.get("tool_calls", ()))
        if message["role"] == "tool":
            answered(called, message["tool_call_id"], f"messages[{i}].tool_call_id")
    return messages


def answered(called: set[str], call_id: str, where: str) -> None:
    """Refuse a tool result whose id no earlier call made (OpenAI and Anthropic answer it with
    a 400): it answers nothing the conversation asked, and would settle nothing."""
    if call_id not in called:
        raise InvalidArgument(where, f"{quoted(call_id)} matches no earlier tool call")


def _message(where: str, message: Any) -> dict[str, Any]:
    """One message, normalized: text content as one string, tool calls and ids kept."""
    if not isinstance(message, dict):
        raise InvalidArgument(where, f"must be an object, got {type(message).__name__}")
    role = message.get("role")
    if role == "function":
        raise InvalidArgument(f"{where}.role", "'function' messages (the deprecated functions "
                                               "API) are not supported; use tools")
    if not isinstance(role, str) or role not in ROLES:
        raise InvalidArgument(f"{where}.role", f"must be one of {', '.join(sorted(ROLES))}")
    out: dict[str, Any] = {"role": role, "content": _content(where, message.get("content"))}
    if isinstance(message.get("name"), str):
        out["name"] = message["name"]
    if role == "assistant" and message.get("tool_calls"):
        out["tool_calls"] = _tool_calls(f"{where}.tool_calls", message["tool_calls"])
    elif message.get("tool_calls") is not None and role != "assistant":
        raise InvalidArgument(f"{where}.tool_calls", "only assistant messages carry tool calls")
    if role == "tool":
        call_id = message.get("tool_call_id")
        if not isinstance(call_id, str) or not call_id:
            raise InvalidArgument(f"{where}.tool_call_id", "required for tool messages")
        out["tool_call_id"] = call_id
    return out


def _tool_calls(where: str, calls: Any) -> list[dict[str, Any]]:
    if not isinstance(calls, list):
        raise InvalidArgument(where, "must be an array of tool calls")
    out = []
    for i, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict) or call.get("type", "function") != "function":
            raise InvalidArgument(f"{where}[{i}]", "must be a function tool call")
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise InvalidArgument(f"{where}[{i}].id", "required")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise InvalidArgument(f"{where}[{i}].function.name", "required")
        if not isinstance(fn.get("arguments"), str):
            raise InvalidArgument(f"{where}[{i}].function.arguments", "must be a JSON string")
        out.append({"id": call["id"], "type": "function",
                    "function": {"name": fn["name"], "arguments": fn["arguments"]}})
    return out


def _content(where: str, content: Any) -> str:
    if content is None or isinstance(content, str):
        return content or ""
    if not isinstance(content, list):
        raise InvalidArgument(f"{where}.content", "must be a string or an array of text parts")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text":
            raise InvalidArgument(f"{where}.content[{j}]", "only text parts are supported")
        if not isinstance(part.get("text"), str):
            raise InvalidArgument(f"{where}.content[{j}].text", "must be a string")
        texts.append(part["text"])
    return "\n".join(texts)  # vLLM joins text parts the same way


# -- tools ----------------------------------------------------------------------------------


def _tools(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise InvalidArgument("tools", f"must be an array of at most {MAX_TOOLS} tools")
    tools: list[dict[str, Any]] = []
    names: set[str] = set()
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise InvalidArgument(f"{where}.type", "only 'function' tools are supported")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise InvalidArgument(f"{where}.function", "required")
        tools.append(function_tool(f"{where}.function", fn, "parameters", names))
    return tools


def function_tool(where: str, fn: Mapping[str, Any], schema_field: str, names: set[str]
                  ) -> dict[str, Any]:
    """A normalized OpenAI function tool from a protocol's function object (its JSON schema
    under ``schema_field``: ``parameters`` for OpenAI, ``input_schema`` for Anthropic); adds
    its name to ``names`` (the tools seen so far, no duplicates)."""
    name = fn.get("name")
    if not isinstance(name, str) or not FUNCTION_NAME.match(name):
        raise InvalidArgument(f"{where}.name", "must match ^[A-Za-z0-9_-]{1,64}$")
    if name in names:
        raise InvalidArgument(f"{where}.name", f"duplicate function {name!r}")
    names.add(name)
    params = fn.get(schema_field)
    problem = None if params is None else schema_problem(params)
    if problem is not None:
        raise InvalidArgument(f"{where}.{schema_field}", problem)
    description = fn.get("description")
    if description is not None and not isinstance(description, str):
        raise InvalidArgument(f"{where}.description", "must be a string")
    kept = {"name": fn["name"], "description": description, "parameters": params,
            "strict": fn.get("strict")}
    return {"type": "function", "function": {k: v for k, v in kept.items() if v is not None}}


def tool_choice(value: Any, tools: list[dict[str, Any]]) -> tuple[ToolChoice, str]:
    if value is None:
        return ToolChoice.AUTO, ""
    names = [t["function"]["name"] for t in tools]
    if isinstance(value, str):
        if value not in ("auto", "none", "required"):
            raise InvalidArgument("tool_choice", "must be 'auto', 'none', 'required' or "
                                                 "{'type': 'function', 'function': {'name': ...}}")
        if value == "required" and not tools:
            raise InvalidArgument("tool_choice", "'required' needs tools")
        return ToolChoice(value), ""
    fn = value.get("function") if isinstance(value, dict) else None
    if not isinstance(fn, dict) or value.get("type") != "function":
        raise InvalidArgument("tool_choice", "a named choice is {'type': 'function', "
                                             "'function': {'name': ...}}")
    if fn.get("name") not in names:
        raise InvalidArgument("tool_choice", f"names {fn.get('name')!r}, which is not in tools")
    return ToolChoice.FUNCTION, fn["name"]


def response_format(value: Any) -> dict[str, Any] | None:
    if value is None:
        return None
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind != "json_schema":
        raise InvalidArgument("response_format", "type must be 'text', 'json_object' or "
                                                 "'json_schema'")
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str):
        raise InvalidArgument("response_format.json_schema", "an object with a 'name'")
    schema = spec.get("schema")
    problem = None if schema is None else schema_problem(schema)
    if problem is not None:
        raise InvalidArgument("response_format.json_schema.schema", problem)
    return {"type": "json_schema", "json_schema": {
        k: spec[k] for k in ("name", "schema", "strict", "description") if k in spec}}


# -- rendering ------------------------------------------------------------------------------


def render_chat(messages: Any, tools: list[dict[str, Any]] | None = None) -> str:
    """The prompt of a conversation: ChatML turns, then an open assistant turn
    (``templates.chatml``, the rendering a template stage in chat form shares)."""
    if not isinstance(messages, list) or not messages:
        raise InvalidArgument("messages", "must be a non-empty array of messages")
    return chatml.render([_message(f"messages[{i}]", m) for i, m in enumerate(messages)],
                         tools or ())


__all__ = ["FUNCTION_NAME", "MAX_TOOLS", "ParsedChat", "answered", "conversation", "function_tool",
           "parse_chat", "render_chat", "response_format", "tool_choice"]
