"""The ``openai`` backend with the plugin's lease channel, no vLLM: an in-memory vLLM HTTP server
(``FakeVllm``) beside the plugin's real channel server over the plugin's utilities on a fake
engine core. With the channel the backend is a ``LeasePort`` (the provider's digest-checked
acquire, bind by our id, handoff at the renamed request's first allocation, release) and its
``Allocated`` is the engine's exact record; without it (nobody at the endpoint) it starts anyway,
says so in one WARNING naming the endpoint and Cache-first, and serves with the proxy."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from dynbranch_vllm_plugin import engine_core as plugin

from services.common.values.errors import FailedPrecondition, InvalidArgument, Unimplemented
from services.common.values.leases import ResultKey
from services.engine_agent.backend import Allocated, Finished, Queued, TokenDelta
from services.engine_agent.backends.openai import OpenAIBackend, RemoteSettings
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.core import EngineAgent, lease_provider
from services.engine_agent.leases.port import LeasePort
from tests.engine_agent.channel_fakes import (
    FakeEngineCore,
    serving,
    short_folder,
    use_plain_hashes,
)
from tests.engine_agent.test_openai_backend import FakeVllm, collect, req
from tests.engine_agent.vllm_plugin_fakes import cache_prefix, run_request, step

#: AsyncLLM's random suffix, as the fake server's engine core names a request.
SUFFIX = "-0a1b2c3d"


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with short_folder() as path:
        yield path


@pytest.fixture(autouse=True)
def _plain_hashes(monkeypatch: pytest.MonkeyPatch) -> None:
    use_plain_hashes(monkeypatch)



class ServerWithPlugin(FakeVllm):
    """vLLM's server whose engine core (the fake) schedules each completion as it arrives: the
    request holds ``blocks`` and had ``cached`` tokens resident (``cmpl-{id}-0-xxxxxxxx``)."""

    def __init__(self, engine: FakeEngineCore, blocks: list[int], cached: int) -> None:
        super().__init__(pieces=["a", "b", "c"], delay=0.05)
        self.engine, self.blocks, self.cached = engine, blocks, cached

    def post(self, path: str, body: dict, request: httpx.Request) -> httpx.Response:
        if path == "/v1/completions":
            engine_id = f"cmpl-{request.headers['x-request-id']}-0{SUFFIX}"
            run_request(self.engine.core, self.engine.pool, engine_id, self.blocks)
            new = SimpleNamespace(req_id=engine_id, num_computed_tokens=self.cached)
            plugin._on_scheduled(self.engine.core, step({engine_id: 4}, [new]))
        return super().post(path, body, request)


def backend_for(server: FakeVllm, channel: str, handshake_s: float = 2.0) -> OpenAIBackend:
    return OpenAIBackend(RemoteSettings(base_url="http://engine", model="tiny", poll_interval_s=60,
                                        lease_channel=channel, lease_handshake_s=handshake_s),
                         client=server.client("http://engine"))


async def test_with_the_channel_leases_are_on_and_allocation_is_exact(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint) as (_, engine):
        backend = backend_for(ServerWithPlugin(engine, [5, 6], cached=8), endpoint)
        await backend.start()
        info = backend.info
        assert info.leases_supported and isinstance(backend, LeasePort)
        assert info.extra["allocated_signal"] == "exact (lease channel)"
        assert backend.lease_block_size == 4
        events = await collect(backend, req("wf/1"))
        assert isinstance(events[0], Queued) and isinstance(events[1], Allocated)
        assert events[1].cached_prompt_tokens == 8  # the engine's own count, not a prediction
        assert sum(isinstance(e, Allocated) for e in events) == 1
        assert [e.text for e in events if isinstance(e, TokenDelta)] == ["a", "b", "c"]
        assert isinstance(events[-1], Finished)
        assert plugin._state(engine.core).waiters == {}  # nothing left waiting on the server
        await backend.close()


async def test_a_lease_over_the_channel_hands_off_to_the_servers_request(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint) as (_, engine):
        history = list(range(13))
        blocks = cache_prefix(engine.pool, history, 1)  # three resident blocks
        backend = backend_for(ServerWithPlugin(engine, [*blocks, 9], cached=12), endpoint)
        await backend.start()
        prefix = await backend.resident(history)
        assert list(prefix.block_ids) == blocks and prefix.free == frozenset(blocks)
        assert await backend.acquire("L1", prefix.block_ids, prefix.digest)
        assert not await backend.acquire("L2", prefix.block_ids, "0" * 32)  # fails closed
        assert await backend.block_refs(blocks) == [1, 1, 1]
        assert (await backend.pool_state()).free_blocks == 12
        await backend.bind("L1", "wf/2")  # our id; the server renames it cmpl-wf/2-0-…
        assert await backend.lease_refs() == {"L1": 3}
        await collect(backend, req("wf/2"))
        [handoff] = await backend.handoffs()
        assert (handoff.lease_id, handoff.request_id, handoff.owned) == ("L1", "wf/2", True)
        assert await backend.lease_refs() == {}
        assert await backend.block_refs(blocks) == [1, 1, 1]  # only the request's own now
        assert await backend.release("L1") == 0
        await backend.close()


async def test_the_agent_gets_a_lease_provider_that_tokenizes_over_http(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint) as (_, engine):
        cache_prefix(engine.pool, list(range(9)), 1)  # the /tokenize of 9 words: 0..8
        backend = backend_for(ServerWithPlugin(engine, [], cached=0), endpoint)
        settings = EngineAgentSettings(backend="openai", engine_url="http://engine",
                                       lease_channel=endpoint, lease_headroom_blocks=0)
        agent = EngineAgent.from_settings(settings, backend)
        assert agent.provider is None  # not known before the backend started
        await agent.start()
        provider, _ = agent.leases()
        assert lease_provider(settings, backend) is not None
        lookup = await provider.lookup(ResultKey("wf", 1), " ".join(["w"] * 9))
        assert lookup.resident_blocks == 2 and lookup.resident_tokens == 8
        await agent.close()


async def test_without_a_channel_the_backend_serves_cache_first_and_says_so_once(
        short_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    endpoint = f"ipc://{short_dir}/nobody.ipc"
    backend = backend_for(FakeVllm(), endpoint, handshake_s=0.3)
    with caplog.at_level(logging.INFO):
        await backend.start()  # no error
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and warnings[0].levelno == logging.WARNING
    message = warnings[0].getMessage()
    assert endpoint in message and "delivery falls back to Cache-first" in message
    assert not backend.info.leases_supported
    assert backend.info.extra["allocated_signal"] == "first streamed token (proxy)"
    settings = EngineAgentSettings(backend="openai", engine_url="x", lease_channel=endpoint)
    assert lease_provider(settings, backend) is None
    events = await collect(backend, req())
    assert isinstance(events[1], Allocated) and isinstance(events[-1], Finished)
    with pytest.raises(FailedPrecondition, match="lease_channel"):
        await backend.acquire("L", [1], "d")
    with pytest.raises(Unimplemented):
        await backend.lease_prefix("x", "L", 1.0)
    assert await backend.release("L") == 0
    await backend.close()


async def test_without_the_setting_nothing_is_tried(caplog: pytest.LogCaptureFixture) -> None:
    backend = backend_for(FakeVllm(), "")
    with caplog.at_level(logging.WARNING):
        await backend.start()
    assert not caplog.records and not backend.info.leases_supported
    await backend.close()


async def test_ttl_leases_and_stats_over_the_channel(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint) as (_, engine):
        blocks = cache_prefix(engine.pool, list(range(10)), 1)
        backend = backend_for(FakeVllm(), endpoint)
        await backend.start()
        assert await backend.lease_prefix(list(range(10)), "T", 5.0) == 2
        assert await backend.block_refs(blocks) == [1, 1]
        assert (await backend.lease_stats())["blocks"] == 2
        assert await backend.release_lease("T") == 2
        assert await backend.block_refs(blocks) == [0, 0]
        with pytest.raises(InvalidArgument, match="ttl_s"):
            await backend.lease_prefix([1], "T", 0.0)
        await backend.close()
