"""A tool or response-format schema that is not a JSON Schema is refused where it enters, on
every path: ``schema_problem`` names what is wrong, ``chat_from_proto`` (the gateway's gRPC
``Call`` and every engine agent) refuses it as INVALID_ARGUMENT naming the field, instead of an
engine failing on it and the caller being told to retry."""

from __future__ import annotations

import pytest

from services.common.pb import common_pb2
from services.common.runtime.convert import chat_from_proto
from services.common.values.chat import canonical_json, schema_problem
from services.common.values.errors import InvalidArgument

MESSAGES = canonical_json([{"role": "user", "content": "x"}])


@pytest.mark.parametrize("schema", [
    {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    {"type": "object", "properties": {"a": {"$ref": "#/$defs/a"}},
     "$defs": {"a": {"type": "array", "items": {"type": "integer", "minimum": 0}}}},
    {}, {"anyOf": [{"type": "string"}, {"type": "null"}]},
])
def test_valid_schemas_pass(schema: dict) -> None:
    assert schema_problem(schema) is None


@pytest.mark.parametrize(("schema", "where"), [
    ({"type": "object", "properties": [1, 2]}, "at .properties"),
    ({"type": "object", "required": "q"}, "at .required"),
    ({"type": "object", "properties": {"q": {"type": 5}}}, "at .properties.q.type"),
    ({"type": "array", "minItems": -1}, "at .minItems"),
    ([1], "must be a JSON schema object"),
])
def test_invalid_schemas_are_named(schema: object, where: str) -> None:
    problem = schema_problem(schema)
    assert problem is not None and where in problem and len(problem) < 400


def test_chat_from_proto_refuses_a_bad_tool_schema_naming_the_field() -> None:
    tools = canonical_json([{"type": "function", "function": {
        "name": "f", "parameters": {"type": "object", "properties": {"q": {"type": 5}}}}}])
    with pytest.raises(InvalidArgument) as err:
        chat_from_proto(common_pb2.ChatSpec(messages_json=MESSAGES, tools_json=tools), "chat")
    assert err.value.field == "chat.tools_json"
    assert "tools[0].function.parameters" in str(err.value)
    fmt = canonical_json({"type": "json_schema", "json_schema": {"name": "o", "schema": {
        "type": "object", "required": 3}}})
    with pytest.raises(InvalidArgument) as err:
        chat_from_proto(common_pb2.ChatSpec(messages_json=MESSAGES, response_format_json=fmt),
                        "chat")
    assert err.value.field == "chat.response_format_json"
    with pytest.raises(InvalidArgument):
        chat_from_proto(common_pb2.ChatSpec(messages_json=MESSAGES, tools_json="[1]"), "chat")
