"""What the simulated model answers to tool-calling and JSON-output requests (``sim`` backend).

A model of an engine has no model to ask, so it answers by a fixed, documented rule, and says so
(``BackendInfo.simulated``). With tools offered it calls one of them, unless the choice is
``auto`` and the conversation's last message is a tool result (then it answers in text, so an
agent loop ends); a named choice calls that function; the call's arguments are valid against the
function's JSON schema. With a JSON response format it answers a schema-valid JSON value. Every
choice is drawn from the generation's key (the prompt's hash for greedy and seeded requests), so
equal requests get equal answers and exact reuse stays exact. The call is spelled the way Qwen3
(hermes-style) models spell it, ``<tool_call>{"name": ..., "arguments": ...}</tool_call>``, and
parsed back from the finished text like vLLM's hermes parser does.

Schema coverage: ``type`` (also lists), ``properties``/``required``, ``items``/``minItems``/
``maxItems``, ``enum``, ``const``, ``anyOf``/``oneOf``/``allOf`` (first branch), local ``$ref``,
numeric bounds, ``minLength``/``maxLength`` and the ``date``, ``date-time``, ``email`` and
``uri`` formats. A ``pattern`` is not honoured (the value may not match it).
"""

from __future__ import annotations

import hashlib
import json
import random
import re
from typing import Any

from services.common.values.chat import ChatSpec, ToolCall, ToolChoice, canonical_json

#: Words string values are made of.
_WORDS = ("north", "river", "city", "blue", "report", "alpha", "market", "paris", "green",
          "summer", "tower", "seven", "orbit", "delta", "cedar", "harbor")
_FORMATS = {"date": "2024-05-17", "date-time": "2024-05-17T09:30:00Z",
            "email": "user@example.com", "uri": "https://example.com/item", "uuid":
            "123e4567-e89b-12d3-a456-426614174000"}
_MAX_DEPTH = 8
#: A schema may ask for more than a model would write: arrays and strings stop here.
_MAX_ITEMS = 64
_MAX_CHARS = 4096
_CALL_RE = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


class SchemaSampler:
    """Draws JSON values valid against a JSON schema from a seeded generator."""

    def __init__(self, root: dict[str, Any], rng: random.Random) -> None:
        self.root = root
        self.rng = rng

    def sample(self, schema: Any, depth: int = 0) -> Any:
        """A value valid against ``schema`` (``True``/``{}`` accept anything: a string)."""
        if not isinstance(schema, dict) or depth > _MAX_DEPTH:
            return self._string({})
        if "$ref" in schema:
            return self.sample(self._resolve(schema["$ref"]), depth + 1)
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return self.rng.choice(schema["enum"])
        for key in ("anyOf", "oneOf", "allOf"):
            options = [o for o in schema.get(key, ()) if o.get("type") != "null"]
            if options:
                return self.sample({**_without(schema, key), **options[0]}, depth + 1)
        kind = schema.get("type", "object" if "properties" in schema else "string")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        return getattr(self, f"_{kind}", self._string)(schema, depth)

    def _resolve(self, ref: str) -> Any:
        node: Any = self.root
        for part in ref.removeprefix("#/").split("/"):
            if not isinstance(node, dict) or part not in node:
                return {}
            node = node[part]
        return node

    def _object(self, schema: dict[str, Any], depth: int = 0) -> dict[str, Any]:
        props = schema.get("properties") or {}
        required = schema.get("required") or list(props)[:1]
        return {name: self.sample(props.get(name, {}), depth + 1) for name in required}

    def _array(self, schema: dict[str, Any], depth: int = 0) -> list[Any]:
        low = min(int(schema.get("minItems", 1)), _MAX_ITEMS)
        count = max(min(int(schema.get("maxItems", low)), low), 0)
        return [self.sample(schema.get("items", {}), depth + 1) for _ in range(count)]

    def _string(self, schema: dict[str, Any], depth: int = 0) -> str:
        if schema.get("format") in _FORMATS:
            return _FORMATS[schema["format"]]
        text = " ".join(self.rng.choice(_WORDS) for _ in range(self.rng.randint(1, 3)))
        while len(text) < min(int(schema.get("minLength", 0)), _MAX_CHARS):
            text += " " + self.rng.choice(_WORDS)
        return text[:int(schema.get("maxLength", len(text)))]

    def _integer(self, schema: dict[str, Any], depth: int = 0) -> int:
        low = int(schema.get("minimum", schema.get("exclusiveMinimum", -1) + 1))
        high = int(schema.get("maximum", schema.get("exclusiveMaximum", low + 101) - 1))
        return self.rng.randint(low, max(low, high))

    def _number(self, schema: dict[str, Any], depth: int = 0) -> float:
        low = float(schema.get("minimum", schema.get("exclusiveMinimum", -0.01) + 0.01))
        high = float(schema.get("maximum", schema.get("exclusiveMaximum", low + 100.01) - 0.01))
        return round(self.rng.uniform(low, max(low, high)), 2)

    def _boolean(self, schema: dict[str, Any], depth: int = 0) -> bool:
        return self.rng.random() < 0.5

    def _null(self, schema: dict[str, Any], depth: int = 0) -> None:
        return None


def _without(schema: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in schema.items() if k != key}


def scripted_output(spec: ChatSpec, key: int) -> str | None:
    """What the simulated model writes for ``spec`` (None: ordinary pseudo-text)."""
    rng = random.Random(key)
    messages = spec.messages()
    answering = messages and messages[-1].get("role") == "tool"
    if spec.may_call and (spec.must_call or not answering):
        return _call_text(spec, rng)
    schema = spec.response_schema()
    if schema is not None:
        return json.dumps(SchemaSampler(schema, rng).sample(schema), ensure_ascii=False)
    return None


def _call_text(spec: ChatSpec, rng: random.Random) -> str:
    names = spec.tool_names()
    name = spec.tool_name if spec.tool_choice is ToolChoice.FUNCTION else rng.choice(names)
    function = spec.function(name) or {}
    params = function.get("parameters") or {"type": "object", "properties": {}}
    arguments = SchemaSampler(params, rng).sample(params)
    call = {"name": name, "arguments": arguments}
    return f"<tool_call>\n{json.dumps(call, ensure_ascii=False)}\n</tool_call>"


def parse_tool_calls(text: str, spec: ChatSpec, salt: str) -> tuple[str, tuple[ToolCall, ...]]:
    """Content and the calls spelled in ``text``; unparsable or unoffered calls leave the text
    as content with no calls (as vLLM's hermes parser does). Ids derive from ``salt``."""
    start = text.find("<tool_call>")
    if start < 0 or not spec.may_call:
        return text, ()
    calls = []
    for index, body in enumerate(_CALL_RE.findall(text)):
        try:
            call = json.loads(body)
            name, arguments = call["name"], call["arguments"]
        except (ValueError, KeyError, TypeError):
            return text, ()
        if name not in spec.tool_names():
            return text, ()
        digest = hashlib.blake2b(f"{salt}\x1f{index}".encode(), digest_size=12).hexdigest()
        calls.append(ToolCall(f"call_{digest}", name, canonical_json(arguments)))
    return (text[:start], tuple(calls)) if calls else (text, ())


__all__ = ["SchemaSampler", "parse_tool_calls", "scripted_output"]
