"""Tool calling at the engine agent: the ``openai`` backend passes a chat spec through to the
server's chat completions and joins the streamed call deltas; the servicer refuses a chat spec
for a backend without tool calling, naming the field; the sim engine spells its call out, so a
call's decode time is its length."""

from __future__ import annotations

import json

import httpx
import pytest
from opentelemetry import trace
from prometheus_client import CollectorRegistry

from services.common.pb import engine_pb2
from services.common.runtime.convert import chat_to_proto
from services.common.values.chat import ChatSpec, ToolChoice, canonical_json
from services.common.values.errors import InvalidArgument
from services.common.values.generation import FinishReason, GenerationRequest, Sampling
from services.engine_agent.backend import Finished
from services.engine_agent.backends.sglang import SglangBackend
from services.engine_agent.backends.sim import SimBackend
from services.engine_agent.core import EngineAgent
from services.engine_agent.servicer import EngineAgentServicer, EngineMetrics
from services.engine_agent.sim.tokenizer import pieces
from tests.engine_agent.fake_engines import DONE, event_stream, sse
from tests.engine_agent.test_openai_backend import FakeVllm, make_backend

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {
    "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
MESSAGES = [{"role": "user", "content": "find x"}]
SPEC = ChatSpec(canonical_json(MESSAGES), canonical_json(TOOLS), ToolChoice.FUNCTION, "lookup",
                parallel_tool_calls=False)


class FakeChatVllm(FakeVllm):
    """A server that answers chat completions with one call, streamed in fragments."""

    def post(self, path: str, body: dict, request: httpx.Request) -> httpx.Response:
        if path != "/v1/chat/completions":
            return super().post(path, body, request)
        self.bodies.append(body)
        return event_stream(self.chat_stream())

    async def chat_stream(self):
        first = {"index": 0, "id": "chatcmpl-tool-1", "type": "function",
                 "function": {"name": "lookup", "arguments": ""}}
        for delta in ({"role": "assistant", "content": ""}, {"tool_calls": [first]},
                      {"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]},
                      {"tool_calls": [{"index": 0, "function": {"arguments": '"x"}'}}]}):
            yield sse({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        yield sse({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
        yield sse({"choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 7}})
        yield DONE


async def test_openai_backend_passes_tools_through_and_joins_the_call() -> None:
    server = FakeChatVllm()
    backend = make_backend(server)
    await backend.start()
    try:
        request = GenerationRequest("r1", "tiny", "rendered prompt", Sampling(max_tokens=16),
                                    chat=SPEC)
        events = [ev async for ev in backend.generate(request)]
    finally:
        await backend.close()
    done = events[-1]
    assert isinstance(done, Finished) and done.reason is FinishReason.STOP
    assert [(c.id, c.name, c.arguments) for c in done.tool_calls] == [
        ("chatcmpl-tool-1", "lookup", '{"q": "x"}')]
    body = server.bodies[-1]
    assert "prompt" not in body and body["messages"] == MESSAGES and body["tools"] == TOOLS
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert body["parallel_tool_calls"] is False and body["max_tokens"] == 16


def test_servicer_refuses_a_chat_spec_for_a_backend_without_tools() -> None:
    backend = SglangBackend.from_settings(type("S", (), {
        "engine_url": "http://engine", "model": "tiny", "max_running": 0, "block_size": 0,
        "kv_blocks": 0, "kv_events_endpoint": "", "fill_priority": False})())
    servicer = EngineAgentServicer(EngineAgent("e0", backend), EngineMetrics(CollectorRegistry()),
                                   trace.get_tracer(__name__), max_prompt_bytes=1024,
                                   load_interval_s=1.0)
    request = engine_pb2.GenerateRequest(request_id="r", model="tiny", prompt="x",
                                         chat=chat_to_proto(SPEC))
    request.sampling.max_tokens = 4
    with pytest.raises(InvalidArgument) as err:
        servicer._to_request(request)  # noqa: SLF001 - the proto-to-value edge
    assert err.value.field == "tools" and "sglang" in str(err.value)


async def test_sim_spells_the_call_so_its_length_is_the_decode() -> None:
    backend = SimBackend("zero", engine_id="sim-0", model="tiny")
    await backend.start()
    try:
        request = GenerationRequest("r1", "tiny", "find x", Sampling(max_tokens=200), chat=SPEC)
        done = [ev async for ev in backend.generate(request)][-1]
        short = GenerationRequest("r2", "tiny", "find x", Sampling(max_tokens=3), chat=SPEC)
        cut = [ev async for ev in backend.generate(short)][-1]
    finally:
        await backend.close()
    (call,) = done.tool_calls
    assert call.name == "lookup" and isinstance(json.loads(call.arguments)["q"], str)
    spelled = f'<tool_call>\n{{"name": "lookup", "arguments": {call.arguments}}}\n</tool_call>'
    spelled = spelled.replace('":"', '": "')  # the canonical arguments, as the sim spelled them
    assert done.usage.completion_tokens == len(pieces(spelled)) + 1  # and its EOS
    assert cut.reason is FinishReason.LENGTH and cut.tool_calls == ()  # cut short: text only
