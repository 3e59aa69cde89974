"""One Messages and one Responses request with a tool through ``dynbranch up --backend vllm``
(the embedded vLLM on the tiny random-weight model): both protocols are rendered with the
model's own chat template, answered in their own shapes, and, being the same conversation,
share one reuse name, so the second is served from the library. ``count_tokens`` is the prompt
the engine read.

The weights are random, so what the model writes is junk: the test asserts the pipeline, not
what it says."""

from __future__ import annotations

from pathlib import Path

import anthropic
import openai
import pytest

from tests.test_cli import up_url

pytestmark = [pytest.mark.real_engine, pytest.mark.slow]

MODEL = "qwen3-32b"
PARAMS = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
SYSTEM = "You help."
ASK = "Weather in Oslo?"


async def test_messages_and_responses_with_a_tool_on_the_embedded_vllm(
        tiny_model_path: Path, tmp_path: Path) -> None:
    args = ["--engines", "1", "--backend", "vllm", "--model-path", str(tiny_model_path),
            "--log-level", "WARNING"]
    with up_url(args, tmp_path, r"anthropic messages API: (http://\S+)", timeout_s=600,
                stop_s=60, group=True) as root:
        async with anthropic.AsyncAnthropic(base_url=root, api_key="unused",
                                            max_retries=0, timeout=300) as ant, \
                openai.AsyncOpenAI(base_url=f"{root}/v1", api_key="unused", max_retries=0,
                                   timeout=300) as oai:
            message = await ant.messages.with_raw_response.create(
                model=MODEL, max_tokens=16, system=SYSTEM,
                messages=[{"role": "user", "content": ASK}], extra_body={"temperature": 0},
                tools=[{"name": "get_weather", "input_schema": PARAMS}])
            response = await oai.responses.with_raw_response.create(
                model=MODEL, max_output_tokens=16, instructions=SYSTEM, input=ASK,
                temperature=0, tools=[{"type": "function", "name": "get_weather",
                                       "parameters": PARAMS}])
            count = await ant.messages.count_tokens(
                model=MODEL, system=SYSTEM, messages=[{"role": "user", "content": ASK}],
                tools=[{"name": "get_weather", "input_schema": PARAMS}])
            parsed = await message.parse()
        assert message.headers["x-dynbranch-source"] == "engine"
        assert parsed.stop_reason in ("end_turn", "max_tokens", "tool_use")
        assert all(b.type in ("text", "tool_use") for b in parsed.content)
        assert (parsed.stop_reason == "tool_use") == any(b.type == "tool_use"
                                                         for b in parsed.content)
        assert parsed.usage.output_tokens >= 1
        # The same conversation on the other protocol: one reuse name, a library hit.
        assert response.headers["x-dynbranch-reuse-name"] == \
            message.headers["x-dynbranch-reuse-name"]
        assert response.headers["x-dynbranch-source"] == "library"
        reply = response.parse()
        assert reply.status in ("completed", "incomplete")
        assert [o.type for o in reply.output] == [
            {"text": "message", "tool_use": "function_call"}[b.type] for b in parsed.content]
        read = parsed.usage.input_tokens + parsed.usage.cache_read_input_tokens
        assert count.input_tokens == read
