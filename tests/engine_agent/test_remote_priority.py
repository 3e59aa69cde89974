"""Remote backends send request priorities when configured: fills later than canonical work."""

from __future__ import annotations

from services.common.values.generation import GenerationRequest, Priority, Sampling
from services.engine_agent.backends.openai import OpenAIBackend
from services.engine_agent.backends.remote.backend import RemoteSettings
from services.engine_agent.backends.sglang import SglangBackend


def _request(priority: Priority) -> GenerationRequest:
    return GenerationRequest("r1", "m", "hello", Sampling(max_tokens=4), priority)


def test_openai_backend_sends_priority_only_when_configured() -> None:
    off = OpenAIBackend(RemoteSettings(base_url="http://127.0.0.1:1", model="m"))
    assert "priority" not in off._body(_request(Priority.FILL))
    on = OpenAIBackend(RemoteSettings(base_url="http://127.0.0.1:1", model="m", fill_priority=1))
    assert on._body(_request(Priority.FILL))["priority"] == 1
    assert on._body(_request(Priority.CANONICAL))["priority"] == 0


def test_sglang_backend_sends_priority_only_when_configured() -> None:
    off = SglangBackend(RemoteSettings(base_url="http://127.0.0.1:1", model="m"))
    assert "priority" not in off._body(_request(Priority.FILL))
    on = SglangBackend(RemoteSettings(base_url="http://127.0.0.1:1", model="m",
                                      fill_priority=-1))
    assert on._body(_request(Priority.FILL))["priority"] == -1
    assert on._body(_request(Priority.CANONICAL))["priority"] == 0
