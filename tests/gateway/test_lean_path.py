"""The hot path does no work it should not (issue 41): with tracing off and debug logging off, a
stage call, a library miss or a hit, starts no span, makes no log record, looks up no
Prometheus label child and waits under no ``asyncio.timeout`` (its waits share one timer per
stream: ``services.common.runtime.deadlines``), in the gateway, the engine agent or the csl (all
three in this process). Counted by patching, not timed: the CPU figures belong to ``dynbranch
bench overhead``."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk import trace as sdk_trace
from prometheus_client.metrics import MetricWrapperBase

from services.common.pb import gateway_pb2
from services.gateway.client import GatewayClient
from tests.factories import call_request, csl_service, engine_agent, gateway, sampling

LIBRARY = gateway_pb2.RESULT_SOURCE_LIBRARY
ENGINE = gateway_pb2.RESULT_SOURCE_ENGINE


@contextmanager
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts spans started (no-op or SDK tracer), log records made, label lookups and
    ``asyncio.timeout`` contexts."""
    counts: Counter[str] = Counter()

    def counted(key: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            counts[key] += 1
            return fn(*args, **kwargs)
        return wrapper

    with monkeypatch.context() as m:
        for cls in (trace.NoOpTracer, sdk_trace.Tracer):
            m.setattr(cls, "start_span", counted("span", cls.start_span))
        m.setattr(logging.Logger, "makeRecord", counted("log record", logging.Logger.makeRecord))
        m.setattr(logging.LogRecord, "getMessage",
                  counted("log message", logging.LogRecord.getMessage))
        m.setattr(MetricWrapperBase, "labels", counted("label lookup", MetricWrapperBase.labels))
        m.setattr(asyncio.timeouts.Timeout, "__init__",
                  counted("asyncio.timeout", asyncio.timeouts.Timeout.__init__))
        yield counts


async def test_a_stage_call_starts_no_span_logs_nothing_and_arms_no_timer_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    logging.getLogger().setLevel(logging.INFO)  # debug off; INFO is a production level
    async with csl_service(tmp_path / "csl") as csl, engine_agent() as eng, \
            gateway([eng.address], csl=csl.address) as gw, GatewayClient(gw.address) as client:
        repeated = call_request(prompt="the same question", sampling=sampling(8))
        assert (await client.call(repeated)).source == ENGINE  # streams open, names learnt
        for _ in range(50):  # the store lands and the name mirror learns it
            if (await client.call(repeated)).source == LIBRARY:
                break
            await asyncio.sleep(0.05)
        with counting(monkeypatch) as counts:
            misses = [await client.call(call_request(prompt=f"question {i}",
                                                     sampling=sampling(8)))
                      for i in range(10)]
            hits = [await client.call(repeated) for _ in range(10)]
            await asyncio.sleep(0.1)  # the misses' background stores finish
    assert {r.source for r in misses} == {ENGINE} and {r.source for r in hits} == {LIBRARY}
    assert counts == Counter(), dict(counts)


async def test_the_span_count_sees_spans_when_tracing_is_on(monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    async with engine_agent() as eng, gateway([eng.address], span_exporter=InMemorySpanExporter()
                                              ) as gw, GatewayClient(gw.address) as client:
        with counting(monkeypatch) as counts:
            await client.call(call_request(prompt="traced"))
    assert counts["span"] >= 1  # the guard above is not vacuous


async def test_the_timeout_count_sees_an_asyncio_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    with counting(monkeypatch) as counts:
        async with asyncio.timeout(1):
            await asyncio.sleep(0)
    assert counts["asyncio.timeout"] == 1
