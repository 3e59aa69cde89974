"""The lease channel, both ends and no vLLM: ``remote.lease_channel.LeaseChannel`` (the agent's
DEALER) against the plugin's ``ChannelServer`` (its ROUTER) over the plugin's utilities on a
fake engine core, on ``ipc://`` in a temporary folder. Concurrent calls are matched by id (a
pending allocation wait holds up nothing), every call has a deadline, failures name their cause,
and the server serves only its operations."""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from dynbranch_vllm_plugin import engine_core as plugin
from dynbranch_vllm_plugin.channel import OPS, ChannelServer, check_endpoint

from services.common.values.errors import DeadlineExceeded, Unavailable
from services.engine_agent.backends.remote.lease_channel import LeaseChannel
from tests.engine_agent.channel_fakes import (
    FakeEngineCore,
    serving,
    short_folder,
)
from tests.engine_agent.vllm_plugin_fakes import add_req, priority_scheduling, step


@pytest.fixture
def short_dir() -> Iterator[Path]:
    with short_folder() as path:
        yield path



async def open_channel(endpoint: str, deadline_s: float = 2.0) -> LeaseChannel:
    channel = LeaseChannel(endpoint, deadline_s=deadline_s)
    await channel.open()
    return channel


async def test_calls_reach_the_engine_cores_utilities_and_answer(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint) as (server, engine):
        channel = await open_channel(endpoint)
        info = await channel.call("dynbranch_info")
        assert info["block_size"] == 4 and info["num_blocks"] == 16
        assert info["channel_protocol"] == 1 and info["request_id_forms"][1] == "cmpl-{}-0"
        state = await channel.call("dynbranch_pool_state")
        assert state["free_blocks"] == 15 and state["max_running"] == 8
        assert await channel.call("dynbranch_release", "nothing") == 0
        assert engine.calls == ["dynbranch_info", "dynbranch_pool_state", "dynbranch_release"]
        await channel.close()
        await channel.close()  # idempotent


async def test_a_pending_allocation_wait_does_not_hold_up_other_calls(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint) as (_, engine):
        channel = await open_channel(endpoint)
        wait = asyncio.create_task(channel.call("dynbranch_wait_allocated", "wf/1", True,
                                                deadline_s=10.0))
        answers = await asyncio.gather(*(channel.call("dynbranch_lease_refs") for _ in range(20)))
        assert answers == [{}] * 20 and not wait.done()
        new = type("New", (), {"req_id": "cmpl-wf/1-0-0a1b2c3d", "num_computed_tokens": 8})
        plugin._on_scheduled(engine.core, step({new.req_id: 4}, [new]))
        record = await asyncio.wait_for(wait, 2.0)
        assert record["cached_tokens"] == 8 and record["request_id"] == new.req_id
        await channel.close()


async def test_every_call_has_a_deadline_and_a_late_answer_is_dropped(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint):
        channel = await open_channel(endpoint, deadline_s=0.2)
        with pytest.raises(DeadlineExceeded, match="dynbranch_wait_allocated got no answer"):
            await channel.call("dynbranch_wait_allocated", "never", True)
        assert await channel.call("dynbranch_forget", "never") is True  # the server still waited
        assert await channel.call("dynbranch_lease_refs") == {}  # and the channel still works
        await channel.close()


async def test_nobody_listening_is_a_deadline_not_a_hang(short_dir: Path) -> None:
    channel = await open_channel(f"ipc://{short_dir}/nobody.ipc", deadline_s=0.2)
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match="nobody.ipc"):
        await channel.call("dynbranch_info")
    assert time.monotonic() - started < 1.0
    await channel.close()
    with pytest.raises(Unavailable, match="not open"):
        await channel.call("dynbranch_info")


async def test_a_call_that_timed_out_never_reaches_a_server_that_comes_up_later(
        short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    channel = await open_channel(endpoint, deadline_s=0.2)
    with pytest.raises(DeadlineExceeded):
        await channel.call("dynbranch_acquire", "L", [1, 2], "digest", 60.0)
    async with serving(endpoint) as (_, engine):
        await asyncio.sleep(0.3)  # ZMQ reconnects on its own
        assert await channel.call("dynbranch_lease_refs", deadline_s=2.0) == {}
        assert engine.calls == ["dynbranch_lease_refs"]  # the stale acquire was never sent
    await channel.close()


async def test_set_priority_moves_the_servers_request_over_the_channel(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    engine = FakeEngineCore()
    priority_scheduling(engine.core)
    fill = add_req(engine.core, "cmpl-fill-0-0a1b2c3d", 1, 0.0)  # as vllm serve names it
    add_req(engine.core, "chatcmpl-canon-0a1b2c3d", 0, 1.0)
    async with serving(endpoint, engine):
        channel = await open_channel(endpoint)
        assert "dynbranch_set_priority" in OPS
        assert await channel.call("dynbranch_set_priority", "fill", 0) is True
        assert fill.priority == 0
        assert engine.core.scheduler.waiting.order()[0] == "cmpl-fill-0-0a1b2c3d"
        assert await channel.call("dynbranch_set_priority", "gone", 0) is False
        await channel.close()


async def test_refused_and_failed_calls_say_why(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint) as (_, engine):
        channel = await open_channel(endpoint)
        for op in ("shutdown", "dynbranch_release_all", "collective_rpc"):  # not a door into vLLM
            with pytest.raises(Unavailable, match=f"unknown operation '{op}'"):
                await channel.call(op)
        with pytest.raises(Unavailable, match="dynbranch_block_refs failed: IndexError"):
            await channel.call("dynbranch_block_refs", [999])
        assert "shutdown" not in engine.calls and "dynbranch_release_all" not in OPS
        await channel.close()


async def test_a_closed_server_fails_calls_in_flight_at_their_deadline(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint) as (server, _):
        channel = await open_channel(endpoint, deadline_s=0.3)
        assert await channel.call("dynbranch_lease_refs") == {}
        wait = asyncio.create_task(channel.call("dynbranch_wait_allocated", "r", True))
        await asyncio.sleep(0.05)
        server.close()
        with pytest.raises(DeadlineExceeded):
            await wait
        assert not (short_dir / "leases.ipc").exists()  # the socket file went with it
        await channel.close()


def test_the_server_binds_only_local_endpoints() -> None:
    for endpoint in ("ipc:///run/vllm-kv/leases.ipc", "tcp://127.0.0.1:5555", "tcp://[::1]:1"):
        assert check_endpoint(endpoint) == endpoint
    for endpoint in ("tcp://*:5555", "tcp://0.0.0.0:5555", "tcp://10.0.0.1:5555", "ipc://", ""):
        with pytest.raises(ValueError, match="must be ipc://PATH or tcp:// on loopback"):
            check_endpoint(endpoint)
    with pytest.raises(ValueError):
        ChannelServer("tcp://*:1", FakeEngineCore().call_utility_async)


async def test_round_trip_over_ipc(short_dir: Path) -> None:
    endpoint = f"ipc://{short_dir}/leases.ipc"
    async with serving(endpoint):
        channel = await open_channel(endpoint)
        times = []
        for _ in range(200):
            started = time.perf_counter()
            await channel.call("dynbranch_pool_state")
            times.append(time.perf_counter() - started)
        print(f"\nlease channel round trip (fake core, ipc): median "
              f"{statistics.median(times) * 1e3:.3f} ms, p99 "
              f"{sorted(times)[197] * 1e3:.3f} ms")
        assert statistics.median(times) < 0.05
        await channel.close()
