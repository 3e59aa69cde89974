"""Every per-request table of the gateway is bounded and says what happens when full:
in-flight demands, background stores, branch records, templates."""

from __future__ import annotations

import asyncio
import dataclasses
import tempfile
import uuid
from collections.abc import Iterator

import grpc
import httpx
import pytest

from services.common.values.errors import ResourceExhausted
from services.common.values.generation import Sampling
from services.gateway.client import GatewayClient
from services.gateway.templates import Template, TemplateRegistry, load_builtin
from services.gateway.values import Demand
from tests.factories import MODEL, call_request, csl_service, engine_agent, gateway, sampling
from tests.gateway.local_ports import local_core

SLOW = {"preset": "qwen3-32b-h200", "time_scale": 1.0}  # 3,000 tokens take about a minute


async def _until(predicate, timeout_s: float = 10.0) -> None:  # noqa: ANN001
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition never held"
        await asyncio.sleep(0.01)


async def test_demands_past_max_in_flight_are_refused_at_once_on_grpc_and_http() -> None:
    async with engine_agent(**SLOW) as eng, \
            gateway([eng.address], max_in_flight=2, http_port=0) as gw, \
            GatewayClient(gw.address) as client:
        slow = [asyncio.create_task(client.call(call_request(
            prompt=f"a very long story {i}", sampling=sampling(3000, ignore_eos=True)),
            timeout_s=60)) for i in range(2)]
        await _until(lambda: gw.core.in_flight == 2)
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await client.call(call_request(prompt="one more"), timeout_s=5)
        assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_in_flight" in refused.value.details()
        async with httpx.AsyncClient(base_url=f"http://{gw.http_address}", timeout=5) as http:
            reply = await http.post("/v1/completions", json={
                "model": MODEL, "prompt": "one more over http", "max_tokens": 4})
        assert reply.status_code == 429
        assert "max_in_flight" in reply.json()["error"]["message"]
        assert gw.core.refused_overload == 2
        for task in slow:
            task.cancel()
        await asyncio.gather(*slow, return_exceptions=True)
        await _until(lambda: gw.core.in_flight == 0)  # refusals and cancels leak no slot
        answer = await client.call(call_request(prompt="room again"), timeout_s=10)
        assert answer.text


class _StalledLibrary:
    """A library whose stores never finish until released: the csl is stuck."""

    def __init__(self, inner) -> None:  # noqa: ANN001
        self.inner = inner
        self.release = asyncio.Event()
        self.puts = 0

    def __getattr__(self, name: str):  # noqa: ANN204 - every other call goes through
        return getattr(self.inner, name)

    async def put(self, *args, **kwargs) -> bool:  # noqa: ANN002, ANN003
        self.puts += 1
        await self.release.wait()
        return False


def _untagged(i: int) -> Demand:
    return Demand(tenant="t", request_id=uuid.uuid4().hex, model="qwen3-32b",
                  prompt=f"question number {i}", sampling=Sampling(max_tokens=4))


async def test_stores_past_max_pending_stores_are_dropped_and_answers_still_come() -> None:
    async with local_core(c2=False) as core:
        stalled = _StalledLibrary(core.stages.library.port)
        core.stages.library.port = stalled
        core.stages.library.max_pending_stores = 3
        answers = [await core.stages.run(_untagged(i), 30) for i in range(5)]
        assert all(a.text for a in answers)
        await asyncio.sleep(0)
        assert stalled.puts == 3 and core.stages.library.stores_dropped == 2
        stalled.release.set()
        await core.stages.close()
        assert core.stages.library.stores_dropped == 2


def _versions(n: int) -> Iterator[Template]:
    base = load_builtin("routing")
    for v in range(1, n + 1):
        yield dataclasses.replace(base, id="bounded", version=v)


def test_templates_past_max_templates_are_refused_and_identical_ones_still_accepted() -> None:
    registry = TemplateRegistry(max_templates=3)
    versions = list(_versions(4))
    for template in versions[:3]:
        registry.register(template)
    registry.register(versions[2])  # identical: a no-op, not a new version
    with pytest.raises(ResourceExhausted, match="max_templates"):
        registry.register(versions[3])
    assert registry.get("bounded").version == 3


async def test_gateway_settings_reach_the_bounded_tables() -> None:
    async with engine_agent() as eng, gateway([eng.address], max_branches=7,
                                              max_pending_stores=5, max_templates=64) as gw:
        assert gw.core.limits.max_in_flight == 4096
        assert gw.core.stages.library.max_pending_stores == 5
        assert gw.core.registry.max_templates == 64
        assert gw.core.branches is None  # no csl: no branches; their bound is checked below
    with tempfile.TemporaryDirectory() as tmp:
        async with engine_agent() as eng, csl_service(tmp) as csl, \
                gateway([eng.address], csl=csl.address, max_branches=7) as gw:
            assert gw.core.branches.settings.max_branches == 7
