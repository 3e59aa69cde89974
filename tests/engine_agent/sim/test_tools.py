"""What the simulated model writes for tool calling and JSON output (``sim.tools``): a call to
the chosen function with arguments valid for its schema, parsed back the way vLLM's hermes
parser does, with unparsable or unoffered calls left as content."""

from __future__ import annotations

import json
import random

import jsonschema

from services.common.values.chat import ChatSpec, ToolChoice, canonical_json
from services.engine_agent.sim.tools import SchemaSampler, parse_tool_calls, scripted_output

SCHEMA = {"type": "object", "properties": {"q": {"type": "string"},
                                           "n": {"type": "integer", "minimum": 1}},
          "required": ["q", "n"]}
TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}]
SPEC = ChatSpec(canonical_json([{"role": "user", "content": "find x"}]), canonical_json(TOOLS),
                ToolChoice.FUNCTION, "lookup", parallel_tool_calls=False)


def test_the_model_calls_the_chosen_function_with_valid_arguments_and_parses_back() -> None:
    text = scripted_output(SPEC, key=3)
    assert text is not None and text == scripted_output(SPEC, key=3)  # deterministic per key
    content, calls = parse_tool_calls(text, SPEC, salt="r1")
    assert content == "" and [c.name for c in calls] == ["lookup"]
    jsonschema.validate(json.loads(calls[0].arguments), SCHEMA)
    assert parse_tool_calls(text, SPEC, salt="r1")[1][0].id == calls[0].id


def test_unparsable_or_unoffered_calls_stay_content() -> None:
    for text in ("<tool_call>\nnot json\n</tool_call>",
                 '<tool_call>\n{"name": "other", "arguments": {}}\n</tool_call>',
                 "plain answer"):
        assert parse_tool_calls(text, SPEC, salt="r") == (text, ())


def test_sampled_values_satisfy_their_schema() -> None:
    rng = random.Random(5)
    for _ in range(20):
        jsonschema.validate(SchemaSampler(SCHEMA, rng).sample(SCHEMA), SCHEMA)
