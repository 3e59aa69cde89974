"""The trace context on every kind of call: the client interceptors of ``open_channel`` inject it,
the server's ``ContextInterceptor`` attaches it, untraced methods and untraced processes carry
none, a caller's cancellation still reaches the server; and the span helpers of
``values.tracing`` (a server never starts a trace, a task may run in a given trace)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from opentelemetry import context as otel_context
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import NoOpTracer, Tracer, get_current_span

from services.common.runtime import trace_propagation
from services.common.runtime.clients import open_channel
from services.common.runtime.server import ServiceRuntime
from services.common.runtime.trace_propagation import ContextInterceptor, with_trace_context
from services.common.values.config import ServiceSettings
from services.common.values.tracing import (
    TRACEPARENT,
    call_span,
    child_span,
    current_trace,
    run_in,
    untraced,
    within,
    workflow_context,
)

SERVICE = "probe.Probe"


@pytest.fixture
def tracer() -> Iterator[tuple[Tracer, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider.get_tracer("test"), exporter
    provider.shutdown()


@pytest.fixture
def propagating(monkeypatch: pytest.MonkeyPatch) -> None:
    """Channels opened in the test carry the context (as in a process that traces)."""
    monkeypatch.setattr(trace_propagation, "_enabled", True)


def _trace_id() -> str:
    ctx = get_current_span().get_span_context()
    return f"{ctx.trace_id:032x}" if ctx.is_valid else ""


class _Probe:
    """A raw-bytes service with one method of each kind; each answers the trace id it runs in."""

    def __init__(self) -> None:
        self.cancelled = asyncio.Event()

    async def unary(self, request: bytes, context: grpc.aio.ServicerContext) -> bytes:
        if request == b"slow":
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                self.cancelled.set()
                raise
        return _trace_id().encode()

    async def server_stream(self, request: bytes, context: grpc.aio.ServicerContext
                            ) -> AsyncIterator[bytes]:
        for _ in range(2):
            yield _trace_id().encode()

    async def client_stream(self, requests: AsyncIterator[bytes],
                            context: grpc.aio.ServicerContext) -> bytes:
        _ = [r async for r in requests]
        return _trace_id().encode()

    async def bidi(self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
                   ) -> AsyncIterator[bytes]:
        async for _ in requests:
            yield _trace_id().encode()

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(SERVICE, {
            "Unary": grpc.unary_unary_rpc_method_handler(self.unary),
            "ServerStream": grpc.unary_stream_rpc_method_handler(self.server_stream),
            "ClientStream": grpc.stream_unary_rpc_method_handler(self.client_stream),
            "Bidi": grpc.stream_stream_rpc_method_handler(self.bidi)})


async def _server(probe: _Probe) -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server(interceptors=[ContextInterceptor()])
    server.add_generic_rpc_handlers((probe.handler(),))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return server, f"127.0.0.1:{port}"


async def _each_kind(channel: grpc.aio.Channel) -> list[str]:
    """The trace id each kind of call ran in on the server (""  for none)."""
    unary = await channel.unary_unary(f"/{SERVICE}/Unary")(b"x", timeout=5)
    streamed = [r async for r in channel.unary_stream(f"/{SERVICE}/ServerStream")(b"x",
                                                                                   timeout=5)]
    client_stream = await channel.stream_unary(f"/{SERVICE}/ClientStream")(
        iter([b"a", b"b"]), timeout=5)
    call = channel.stream_stream(f"/{SERVICE}/Bidi")(timeout=5)
    await call.write(b"a")  # the call object keeps write/done_writing through the interceptor
    first = await call.read()
    await call.done_writing()
    return [r.decode() for r in (unary, *streamed, client_stream, first)]


async def test_every_kind_of_call_carries_the_callers_trace(propagating: None) -> None:
    server, address = await _server(probe := _Probe())
    want = f"{get_current_span(workflow_context('acme/wf-1')).get_span_context().trace_id:032x}"
    try:
        async with open_channel(address) as channel:
            token = otel_context.attach(workflow_context("acme/wf-1"))
            try:
                assert await _each_kind(channel) == [want] * 5
            finally:
                otel_context.detach(token)
            assert await _each_kind(channel) == [""] * 5  # no current span: nothing sent
    finally:
        await server.stop(0)
    assert not probe.cancelled.is_set()


async def test_a_process_that_does_not_trace_adds_no_interceptor(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace_propagation, "_enabled", False)
    assert trace_propagation.client_interceptors() == []
    server, address = await _server(_Probe())
    try:
        async with open_channel(address) as channel:
            with within(workflow_context("acme/wf-1")):
                assert await _each_kind(channel) == [""] * 5
    finally:
        await server.stop(0)


async def test_a_cancelled_caller_cancels_the_call_on_the_server(propagating: None) -> None:
    server, address = await _server(probe := _Probe())
    try:
        async with open_channel(address) as channel:
            async def call() -> bytes:
                return await channel.unary_unary(f"/{SERVICE}/Unary")(b"slow", timeout=20)

            with within(workflow_context("acme/wf-1")):
                task = asyncio.create_task(call())
            await asyncio.sleep(0.2)
            task.cancel()
            await asyncio.wait_for(probe.cancelled.wait(), 5)  # the server saw it end
    finally:
        await server.stop(0)


def _details(method: str | bytes, metadata: grpc.aio.Metadata | None = None
             ) -> grpc.aio.ClientCallDetails:
    return grpc.aio.ClientCallDetails(method, 1.0, metadata, None, None)


def test_untraced_methods_and_an_explicit_traceparent_are_left_alone() -> None:
    with within(workflow_context("acme/wf-1")):
        added = with_trace_context(_details("/dynbranch.v1.SubgraphLibrary/Lookup"))
        assert TRACEPARENT in added.metadata and added.timeout == 1.0
        for untraced_method in ("/dynbranch.v1.SubgraphLibrary/PutStream",
                                b"/dynbranch.v1.EngineAgent/GenerateMux",
                                "/dynbranch.v1.SubgraphLibrary/WatchNames"):
            details = _details(untraced_method)
            assert with_trace_context(details) is details
        own = _details("/dynbranch.v1.EngineAgent/Generate",
                       grpc.aio.Metadata((TRACEPARENT, "00-" + "1" * 32 + "-" + "2" * 16 + "-01")))
        assert with_trace_context(own) is own  # one traceparent, the caller's
    details = _details("/dynbranch.v1.SubgraphLibrary/Lookup")
    assert with_trace_context(details) is details  # no current span


async def test_a_traced_runtime_serves_calls_in_the_callers_trace() -> None:
    """A ServiceRuntime with an exporter attaches the caller's context (health is untraced, so
    a raw call is used) and makes this process's new channels propagate."""
    runtime = ServiceRuntime("probe", ServiceSettings(metrics_port=-1),
                             span_exporter=InMemorySpanExporter())
    probe = _Probe()
    runtime.server.add_generic_rpc_handlers((probe.handler(),))
    await runtime.start()
    try:
        assert trace_propagation.enabled()
        async with open_channel(runtime.address) as channel:
            with within(workflow_context("acme/wf-2")):
                got = await channel.unary_unary(f"/{SERVICE}/Unary")(b"x", timeout=5)
        want = get_current_span(workflow_context("acme/wf-2")).get_span_context().trace_id
        assert got.decode() == f"{want:032x}"
    finally:
        await runtime.shutdown()


def test_a_server_span_needs_the_callers_context(
        tracer: tuple[Tracer, InMemorySpanExporter]) -> None:
    t, exporter = tracer
    with call_span(t, "orphan") as span:
        assert not span.is_recording()
    assert not child_span(t, "orphan", otel_context.Context(), {}).is_recording()
    with within(workflow_context("acme/wf-1")):
        with call_span(t, "served") as span:
            assert span.is_recording()
        with call_span(NoOpTracer(), "off") as span:
            assert not span.is_recording()
    child_span(t, "generated", workflow_context("acme/wf-1"), {"k": 1}).end()
    names = [(s.name, s.parent is not None and s.parent.is_remote) for s in
             exporter.get_finished_spans()]
    assert names == [("served", True), ("generated", True)]


async def test_tasks_run_in_the_trace_they_are_given() -> None:
    async def trace_of_task() -> str:
        return _trace_id()

    wf1, wf2 = workflow_context("acme/wf-1"), workflow_context("acme/wf-2")
    assert current_trace() is None
    with within(wf1):
        kept = current_trace()
        assert kept is not None
        inherited = await asyncio.create_task(trace_of_task())
        given = await asyncio.create_task(trace_of_task(), context=run_in(wf2))
        none = await asyncio.create_task(trace_of_task(), context=untraced())
        assert _trace_id() == inherited  # the caller's own context is untouched
    assert inherited == f"{get_current_span(wf1).get_span_context().trace_id:032x}"
    assert given == f"{get_current_span(wf2).get_span_context().trace_id:032x}"
    assert none == "" and _trace_id() == ""
    with within(kept):
        assert _trace_id() == inherited
    with within(None):
        assert _trace_id() == ""
