"""The delivery service: the core over a fake engine port, and the whole path over gRPC to a real
sim engine agent (LADS leases on), both servers on port 0."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from opentelemetry.trace import get_current_span

from services.common.pb import common_pb2, delivery_pb2
from services.common.values.errors import FailedPrecondition, Unavailable
from services.common.values.generation import (
    FinishReason,
    GenerationRequest,
    Sampling,
    Timings,
    Usage,
)
from services.common.values.leases import InventoryView, ResultKey
from services.common.values.tracing import within, workflow_context
from services.delivery.client import DeliveryClient
from services.delivery.config import DeliverySettings
from services.delivery.core import DeliveryCore, Readiness, Received, ToolCompletion
from services.delivery.sender import Sender
from services.delivery.server import build_runtime as build_delivery
from services.engine_agent.backends.sim import SimBackend
from services.engine_agent.client import EngineAgentClient
from services.engine_agent.config import EngineAgentSettings
from services.engine_agent.server import build_runtime as build_engine
from tests.factories import MODEL, generate_request, sampling

ENGINE = "engine-a"
HISTORY_PROMPT = "You are a research agent. Plan the search for the river city. " * 12


# --- the core over a fake engine ----------------------------------------------------------------

class FakePort:
    """An ``EnginePort`` that answers at once; it can hold readiness or fail receipts."""

    engine_id = ENGINE

    def __init__(self) -> None:
        self.receives: list[ResultKey] = []
        #: The trace id each receipt ran in (0: none).
        self.traces: list[int] = []
        self.withdrawn: list[ResultKey] = []
        self.fail_receipts = 0
        self.gate: asyncio.Event | None = None

    def start(self, observe: Any) -> None:
        """No records."""

    def push_inventory(self, view: InventoryView) -> None:
        """Views are not needed here."""

    async def check(self, continuation: GenerationRequest) -> None:
        """Accept everything."""

    async def tool_started(self, key: ResultKey, history: str, tool: str) -> bool:
        return False

    async def result_ready(self, key: ResultKey, history: str, payload_digest: str,
                           prompt: str) -> Readiness:
        if self.gate is not None:
            await self.gate.wait()
        return Readiness(2, 32, "prefix", 40)

    async def receive(self, key: ResultKey, payload_digest: str, prefix_digest: str,
                      continuation: GenerationRequest) -> Received:
        self.receives.append(key)
        self.traces.append(get_current_span().get_span_context().trace_id)
        if self.fail_receipts:
            self.fail_receipts -= 1
            raise Unavailable("engine down")
        return Received(f"after {continuation.prompt}", FinishReason.LENGTH, Usage(40, 32, 4),
                        Timings(0.0, 0.0, 0.0, 0.0), True, 0.01)

    async def withdraw(self, key: ResultKey) -> bool:
        self.withdrawn.append(key)
        return True


def tool_result(turn: int = 1, observation: bytes = b"42 results", prompt: str = "p"
                ) -> ToolCompletion:
    key = ResultKey("wf", turn)
    return ToolCompletion(key, "", "history", observation, "search",
                      GenerationRequest(f"lads/{key}", MODEL, prompt, Sampling(max_tokens=4)))


@pytest.fixture
async def core() -> AsyncIterator[tuple[DeliveryCore, FakePort]]:
    port = FakePort()
    make = functools.partial(Sender, "fifo", link_bytes_per_s=1e6, clock=time.time)
    core = DeliveryCore({ENGINE: port}, make)
    await core.start()
    yield core, port
    await core.close()


async def test_a_failed_receipt_is_forgotten_and_a_resubmission_runs_it(
        core: tuple[DeliveryCore, FakePort]) -> None:
    delivery, port = core
    port.fail_receipts = 1
    with pytest.raises(Unavailable):
        await delivery.deliver(tool_result())
    done = await delivery.deliver(tool_result())
    assert done.received.text == "after p"
    assert port.receives == [ResultKey("wf", 1)] * 2
    assert done.sender_wait_s >= 0 and done.transfer_s > 0
    assert delivery.sender.timeline == {}  # nothing kept per delivered frame


async def test_the_receipt_runs_in_the_trace_of_the_call_that_submitted_the_result(
        core: tuple[DeliveryCore, FakePort]) -> None:
    delivery, port = core
    with within(workflow_context("acme/wf-1")):  # the Deliver call, as the server attached it
        await delivery.deliver(tool_result(1))
    await delivery.deliver(tool_result(2))  # a caller outside any trace
    want = get_current_span(workflow_context("acme/wf-1")).get_span_context().trace_id
    assert port.traces == [want, 0]  # though the sender's own loop made both receipts


async def test_a_finished_result_answers_resubmissions_without_a_second_receipt(
        core: tuple[DeliveryCore, FakePort]) -> None:
    delivery, port = core
    first, second = await asyncio.gather(delivery.deliver(tool_result()),
                                         delivery.deliver(tool_result()))
    third = await delivery.deliver(tool_result())
    assert first == second == third
    assert port.receives == [ResultKey("wf", 1)]
    with pytest.raises(FailedPrecondition, match="another observation"):
        await delivery.deliver(tool_result(observation=b"something else"))


async def test_withdraw_before_the_link_cancels_the_delivery_and_releases_the_engine(
        core: tuple[DeliveryCore, FakePort]) -> None:
    delivery, port = core
    port.gate = asyncio.Event()
    waiting = asyncio.create_task(delivery.deliver(tool_result()))
    await asyncio.sleep(0.01)
    assert await delivery.withdraw(ResultKey("wf", 1))
    with pytest.raises(FailedPrecondition, match="withdrawn"):
        await waiting
    assert port.withdrawn == [ResultKey("wf", 1)] and port.receives == []
    assert not await delivery.withdraw(ResultKey("wf", 1))


async def test_closing_fails_pending_deliveries_as_retryable(
        core: tuple[DeliveryCore, FakePort]) -> None:
    delivery, port = core
    port.gate = asyncio.Event()
    waiting = asyncio.create_task(delivery.deliver(tool_result()))
    await asyncio.sleep(0.01)
    await delivery.close()
    with pytest.raises(Unavailable, match="shutting down"):
        await waiting
    with pytest.raises(Unavailable):
        await delivery.deliver(tool_result(turn=2))


# --- over gRPC to a sim engine agent -------------------------------------------------------------

class CountingSim(SimBackend):
    """The sim backend, recording the request id of every generation it runs."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.request_ids: list[str] = []

    async def generate(self, request: GenerationRequest) -> AsyncIterator[Any]:
        self.request_ids.append(request.request_id)
        async for event in super().generate(request):
            yield event


@dataclass
class Mesh:
    backend: CountingSim
    engine: EngineAgentClient
    delivery: DeliveryClient
    runtime: Any = None  # the delivery service's


@pytest.fixture
async def mesh() -> AsyncIterator[Mesh]:
    settings = EngineAgentSettings(
        engine_id=ENGINE, model=MODEL, preset="zero", time_scale=0.0, metrics_port=-1,
        grace_s=0.5, lease_mode="lads", lease_headroom_blocks=16, lease_lifetime_s=2.0,
        lease_interval_s=0.05)
    backend = CountingSim.from_settings(settings)
    engine = await build_engine(settings, backend=backend)
    await engine.start()
    delivery = await build_delivery(DeliverySettings(
        engines=[f"{ENGINE}={engine.address}"], link_bytes_per_s=1e6, metrics_port=-1,
        grace_s=0.5))
    await delivery.start()
    clients = Mesh(backend, EngineAgentClient(engine.address), DeliveryClient(delivery.address),
                   delivery)
    try:
        yield clients
    finally:
        await clients.engine.close()
        await clients.delivery.close()
        await delivery.shutdown()
        await engine.shutdown()


async def generate(engine: EngineAgentClient, request_id: str, prompt: str) -> str:
    """A direct greedy generation's text."""
    request = generate_request(request_id, prompt, sampling=sampling(16), final_only=True)
    events = [e async for e in engine.generate(request)]
    return events[-1].finished.text


def deliver_request(history: str, observation: bytes = b"Found: the city is Basel.",
                    **kw: Any) -> delivery_pb2.DeliverRequest:
    fields: dict[str, Any] = {
        "key": common_pb2.ResultKey(workflow_id="wf-1", turn=1), "history": history,
        "observation": observation, "tool": "search", "model": MODEL,
        "prompt": f"{history}\nObservation: {observation.decode()}\n",
        "sampling": sampling(16), **kw}
    return delivery_pb2.DeliverRequest(**fields)


async def first_turn(mesh: Mesh) -> str:
    """Run the workflow's first model call so its history is resident; the history."""
    return HISTORY_PROMPT + await generate(mesh.engine, "wf-1/turn-0", HISTORY_PROMPT)


async def test_deliver_runs_the_continuation_once_and_answers_like_a_direct_call(
        mesh: Mesh) -> None:
    history = await first_turn(mesh)
    request = deliver_request(history)
    reply = await mesh.delivery.deliver(request, timeout_s=10)
    direct = await generate(mesh.engine, "direct", request.prompt)
    assert reply.finished.text == direct and reply.finished.reason
    assert reply.engine_id == ENGINE
    assert reply.finished.usage.cached_prompt_tokens > 0  # the history's prefix was reused
    assert reply.transfer_s > 0 and reply.sender_wait_s >= 0
    again = await mesh.delivery.deliver(request, timeout_s=10)
    assert again == reply
    assert mesh.backend.request_ids.count("lads/wf-1#1") == 1
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await mesh.delivery.deliver(deliver_request(history, b"Found: Zurich."), timeout_s=10)
    assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    await wait_for_no_lease_refs(mesh.backend)
    metric = mesh.runtime.registry.get_sample_value  # what its /metrics serves
    assert metric("dynbranch_delivery_delivered_total") == 1
    assert metric("dynbranch_delivery_frames_committed_total", {"engine": ENGINE}) == 1
    assert metric("dynbranch_delivery_pending") == 0
    assert metric("process_cpu_seconds_total") > 0


async def test_concurrent_resubmissions_share_one_continuation(mesh: Mesh) -> None:
    history = await first_turn(mesh)
    replies = await asyncio.gather(*(mesh.delivery.deliver(deliver_request(history),
                                                           timeout_s=10) for _ in range(3)))
    assert replies[0] == replies[1] == replies[2]
    assert mesh.backend.request_ids.count("lads/wf-1#1") == 1
    await wait_for_no_lease_refs(mesh.backend)


@pytest.mark.parametrize(("override", "field", "code"), [
    ({"engine_id": "engine-z"}, "engine_id", grpc.StatusCode.INVALID_ARGUMENT),
    ({"observation": b""}, "observation", grpc.StatusCode.INVALID_ARGUMENT),
    ({"model": ""}, "model", grpc.StatusCode.INVALID_ARGUMENT),
    ({"model": "other-model"}, "model", grpc.StatusCode.INVALID_ARGUMENT),
    ({"history": ""}, "history", grpc.StatusCode.INVALID_ARGUMENT),
    ({"sampling": common_pb2.SamplingParams()}, "sampling.max_tokens",
     grpc.StatusCode.INVALID_ARGUMENT),
    ({"key": common_pb2.ResultKey(workflow_id="wf-1")}, "key.turn",
     grpc.StatusCode.INVALID_ARGUMENT),
])
async def test_bad_deliveries_are_refused_naming_the_field(
        mesh: Mesh, override: dict[str, Any], field: str, code: grpc.StatusCode) -> None:
    request = deliver_request("some history")
    for name, value in override.items():
        if isinstance(value, common_pb2.SamplingParams | common_pb2.ResultKey):
            getattr(request, name).CopyFrom(value)
        else:
            setattr(request, name, value)
    with pytest.raises(grpc.aio.AioRpcError) as refused:
        await mesh.delivery.deliver(request, timeout_s=5)
    assert refused.value.code() == code
    assert (refused.value.details() or "").startswith(field)
    assert not any(r.startswith("lads/") for r in mesh.backend.request_ids)


async def test_start_tool_and_withdraw_of_an_unknown_result(mesh: Mesh) -> None:
    key = common_pb2.ResultKey(workflow_id="wf-9", turn=1)
    assert not await mesh.delivery.start_tool(
        delivery_pb2.StartToolRequest(key=key, history="some history", tool="search"))
    assert not await mesh.delivery.withdraw(key)


async def wait_for_no_lease_refs(backend: SimBackend, timeout_s: float = 3.0) -> None:
    """Every reference a lease added is released (handed off or expired) within ``timeout_s``."""
    end = time.monotonic() + timeout_s
    while await backend.lease_refs() and time.monotonic() < end:
        await asyncio.sleep(0.02)
    assert await backend.lease_refs() == {}


def test_engine_settings_name_the_field() -> None:
    with pytest.raises(ValueError, match="engines"):
        DeliverySettings(engines=["localhost:5000"])
    with pytest.raises(ValueError, match="listed twice"):
        DeliverySettings(engines=["e=h:1", "e=h:2"])
    assert DeliverySettings(engines=["engine-0=127.0.0.1:5000"]).engine_targets == {
        "engine-0": "127.0.0.1:5000"}


async def test_a_restarted_sender_loses_no_result_and_the_engine_runs_it_once(
        mesh: Mesh) -> None:
    """A harness resubmits by (workflow, turn) to a fresh delivery service after the first one
    went away mid-delivery: it gets the continuation's answer, and the engine ran it once."""
    history = await first_turn(mesh)
    request = deliver_request(history)
    slow = await build_delivery(DeliverySettings(  # 40 B/s: the frame is still on the link
        engines=[f"{ENGINE}={mesh.engine.target}"], link_bytes_per_s=40.0, metrics_port=-1,
        grace_s=0.1))
    await slow.start()
    lost = DeliveryClient(slow.address)
    in_flight = asyncio.create_task(lost.deliver(request, timeout_s=30))
    await asyncio.sleep(0.3)
    await slow.shutdown()  # the sender restarts: the frame never reached the engine
    with pytest.raises(grpc.aio.AioRpcError):
        await in_flight
    await lost.close()
    reply = await mesh.delivery.deliver(request, timeout_s=10)  # resubmitted to a fresh one
    assert reply.finished.text == await generate(mesh.engine, "direct", request.prompt)
    assert mesh.backend.request_ids.count("lads/wf-1#1") == 1
    again = await mesh.delivery.deliver(request, timeout_s=10)
    assert again.finished.text == reply.finished.text
    assert mesh.backend.request_ids.count("lads/wf-1#1") == 1
    await wait_for_no_lease_refs(mesh.backend)
