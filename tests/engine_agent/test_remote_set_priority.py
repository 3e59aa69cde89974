"""The ``openai`` backend as a ``PriorityPort``: in front of a ``vllm serve`` with the plugin's
lease channel it moves its own live request between priorities in the engine core (an adopted
fill raised, then lowered), and without the channel or a fill priority it answers False. No
vLLM: an in-memory vLLM HTTP server beside the plugin's real channel server over the plugin's
utilities on a fake engine core whose scheduler has vLLM's priority queues."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from dynbranch_vllm_plugin import engine_core as plugin

from services.common.values.generation import GenerationRequest, Priority, Sampling
from services.engine_agent.backend import PriorityPort
from services.engine_agent.backends.openai import OpenAIBackend, RemoteSettings
from tests.engine_agent.channel_fakes import FakeEngineCore, serving, short_folder
from tests.engine_agent.test_openai_backend import FakeVllm
from tests.engine_agent.vllm_plugin_fakes import add_req, priority_scheduling, step

#: AsyncLLM's random suffix, as the fake server's engine core names a request.
SUFFIX = "-0a1b2c3d"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with short_folder() as path:
        yield path


class QueueingServer(FakeVllm):
    """vLLM's server whose engine core queues each completion at the body's priority as
    ``cmpl-{id}-0-xxxxxxxx`` and signals its allocation (the reply then streams slowly)."""

    def __init__(self, engine: FakeEngineCore) -> None:
        super().__init__(pieces=list("abcd"), delay=0.05)
        self.engine = engine

    def post(self, path: str, body: dict, request: httpx.Request) -> httpx.Response:
        if path == "/v1/completions":
            engine_id = f"cmpl-{request.headers['x-request-id']}-0{SUFFIX}"
            add_req(self.engine.core, engine_id, body.get("priority", 0), time.time())
            new = SimpleNamespace(req_id=engine_id, num_computed_tokens=0)
            plugin._on_scheduled(self.engine.core, step({engine_id: 4}, [new]))
        return super().post(path, body, request)


def backend_for(server: FakeVllm, channel: str = "", fill_priority: int | None = 1
                ) -> OpenAIBackend:
    return OpenAIBackend(RemoteSettings(base_url="http://engine", model="tiny", poll_interval_s=60,
                                        lease_channel=channel, fill_priority=fill_priority),
                         client=server.client("http://engine"))


def fill(rid: str) -> GenerationRequest:
    return GenerationRequest(rid, "tiny", "a b c", Sampling(max_tokens=4), Priority.FILL)


async def test_a_live_fill_is_raised_and_lowered_over_the_lease_channel(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    engine = FakeEngineCore()
    priority_scheduling(engine.core)
    async with serving(endpoint, engine):
        backend = backend_for(QueueingServer(engine), endpoint)
        await backend.start()
        assert isinstance(backend, PriorityPort) and backend.leases_on
        stream = backend.generate(fill("fill-1"))
        await anext(stream), await anext(stream)  # Queued, then the server has it
        request = engine.core.scheduler.requests[f"cmpl-fill-1-0{SUFFIX}"]
        assert request.priority == 1  # sent as a fill
        await anext(stream)  # its first token: it runs, as fill occupancy
        assert backend.load().fill_running == 1
        assert await backend.set_priority("fill-1", Priority.CANONICAL) is True
        assert request.priority == 0
        assert backend.load().fill_running == 0  # raised: canonical work now
        assert await backend.set_priority("fill-1", Priority.FILL) is True
        assert request.priority == 1 and backend.load().fill_running == 1
        assert await backend.set_priority("other", Priority.CANONICAL) is False  # not ours
        _ = [event async for event in stream]
        assert await backend.set_priority("fill-1", Priority.CANONICAL) is False  # it ended
        assert request.priority == 1
        await backend.close()


async def test_without_the_channel_or_a_fill_priority_nothing_moves(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    engine = FakeEngineCore()
    priority_scheduling(engine.core)
    async with serving(endpoint, engine):
        no_channel = backend_for(QueueingServer(engine))
        no_priority = backend_for(QueueingServer(engine), endpoint, fill_priority=None)
        for i, (backend, sent) in enumerate(((no_channel, 1), (no_priority, 0))):
            await backend.start()
            stream = backend.generate(fill(f"fill-{i}"))
            await anext(stream), await anext(stream)
            assert await backend.set_priority(f"fill-{i}", Priority.CANONICAL) is False
            assert engine.core.scheduler.requests[f"cmpl-fill-{i}-0{SUFFIX}"].priority == sent
            await stream.aclose()
            await backend.close()
        assert "dynbranch_set_priority" not in engine.calls
