"""Tool calling and JSON output on the embedded vLLM, the way ``vllm serve`` does them.

A chat spec is rendered with the model's own chat template (the tools passed to it), so the model
sees its tools the way it was trained to; a call forced by ``tool_choice`` (a named function, or
``required``) and a JSON ``response_format`` are enforced with vLLM's structured outputs; the
finished text of an ``auto`` choice is parsed with vLLM's tool parser for the model family
(``hermes``: Qwen2.5/Qwen3 and other Hermes-style models). ``vllm`` is imported lazily, as in
``backend.py``.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

from services.common.values.chat import ChatSpec, ToolCall, ToolChoice, canonical_json
from services.common.values.errors import InvalidArgument

#: vLLM's tool parser for the model family (``--tool-call-parser`` of ``vllm serve``).
DEFAULT_TOOL_PARSER = "hermes"


def _template_messages(spec: ChatSpec) -> list[dict[str, Any]]:
    """Messages as chat templates expect them: call arguments as objects (vLLM does the same)."""
    messages = spec.messages()
    for message in messages:
        for call in message.get("tool_calls", ()):
            try:
                call["function"]["arguments"] = json.loads(call["function"]["arguments"])
            except ValueError:
                pass  # a template that needs an object shows the text as it came
    return messages


def _call_id() -> str:
    return f"chatcmpl-tool-{uuid.uuid4().hex}"


class VllmChat:
    """Renders, constrains and parses chat specs for one tokenizer."""

    def __init__(self, tokenizer: Any, model: str, parser: str = DEFAULT_TOOL_PARSER) -> None:
        self.tokenizer = tokenizer
        self.model = model
        self.parser = parser

    def render(self, spec: ChatSpec) -> list[int]:
        """Prompt token ids from the model's chat template (tools included)."""
        try:
            text = self.tokenizer.apply_chat_template(
                _template_messages(spec), tools=spec.tools() or None, tokenize=False,
                add_generation_prompt=True)
        except Exception as exc:  # noqa: BLE001 - a template error is the request's fault
            raise InvalidArgument("messages", f"the model's chat template failed: {exc}") from None
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def structured_outputs(self, spec: ChatSpec) -> Any:
        """vLLM's structured-output constraint for a forced call or JSON output, or None."""
        from vllm.sampling_params import StructuredOutputsParams

        if spec.may_call and spec.tool_choice is ToolChoice.FUNCTION:
            params = (spec.function(spec.tool_name) or {}).get("parameters")
            return StructuredOutputsParams(json=params or {"type": "object", "properties": {}})
        if spec.may_call and spec.tool_choice is ToolChoice.REQUIRED:
            return StructuredOutputsParams(json=self._required_schema(spec))
        fmt = spec.response_format()
        if fmt is not None and fmt["type"] == "json_object":
            return StructuredOutputsParams(json_object=True)
        if fmt is not None:
            return StructuredOutputsParams(json=spec.response_schema())
        return None

    @staticmethod
    def _required_schema(spec: ChatSpec) -> dict[str, Any]:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionToolsParam
        from vllm.tool_parsers.utils import get_json_schema_from_tools

        tools = [ChatCompletionToolsParam.model_validate(t) for t in spec.tools()]
        schema = get_json_schema_from_tools("required", tools, spec.parallel_tool_calls)
        assert isinstance(schema, dict)
        return schema

    def parse(self, spec: ChatSpec, text: str) -> tuple[str, tuple[ToolCall, ...]]:
        """Content and tool calls of a finished output (as ``vllm serve`` answers them)."""
        if not spec.may_call:
            return text, ()
        if spec.tool_choice is ToolChoice.FUNCTION:
            return "", (ToolCall(_call_id(), spec.tool_name, text),)
        if spec.tool_choice is ToolChoice.REQUIRED:
            try:
                calls = json.loads(text)
                return "", tuple(ToolCall(_call_id(), c["name"], canonical_json(c["parameters"]))
                                 for c in calls)
            except (ValueError, KeyError, TypeError):
                return text, ()  # cut short by max_tokens: not a complete call
        return self._parse_auto(spec, text)

    def _parse_auto(self, spec: ChatSpec, text: str) -> tuple[str, tuple[ToolCall, ...]]:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.tool_parsers.abstract_tool_parser import ToolParserManager

        request = ChatCompletionRequest(model=self.model, messages=spec.messages(),
                                        tools=spec.tools(), tool_choice="auto")
        parser = ToolParserManager.get_tool_parser(self.parser)(self.tokenizer, request.tools)
        info = parser.extract_tool_calls(text, request)
        if not info.tools_called:
            return text, ()
        calls = tuple(ToolCall(c.id or _call_id(), c.function.name, c.function.arguments)
                      for c in info.tool_calls)
        return info.content or "", calls


__all__ = ["DEFAULT_TOOL_PARSER", "VllmChat"]
