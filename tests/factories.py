"""Small factories for requests and in-process services on port 0."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from services.common.pb import common_pb2, engine_pb2, gateway_pb2

MODEL = "test-model"


def sampling(max_tokens: int = 8, **kw: Any) -> common_pb2.SamplingParams:
    """Greedy sampling parameters."""
    return common_pb2.SamplingParams(max_tokens=max_tokens, **kw)


def generate_request(request_id: str = "r1", prompt: str = "hello world, route me please",
                     model: str = MODEL, **kw: Any) -> engine_pb2.GenerateRequest:
    """A valid GenerateRequest unless overridden."""
    params = kw.pop("sampling", None) or sampling()
    return engine_pb2.GenerateRequest(request_id=request_id, model=model, prompt=prompt,
                                      sampling=params, **kw)


def call_request(prompt: str = "hello world, route me please", model: str = MODEL,
                 **kw: Any) -> gateway_pb2.CallRequest:
    """A valid gateway CallRequest unless overridden."""
    params = kw.pop("sampling", None) or sampling()
    return gateway_pb2.CallRequest(demand=common_pb2.StageDemand(
        model=model, prompt=prompt, sampling=params, **kw))


@asynccontextmanager
async def engine_agent(**settings: Any) -> AsyncIterator[Any]:
    """A started engine agent runtime on port 0 with the sim backend."""
    from services.engine_agent.config import EngineAgentSettings
    from services.engine_agent.server import build_runtime

    defaults = {"model": MODEL, "preset": "zero", "time_scale": 0.0, "metrics_port": -1,
                "grace_s": 0.5}
    runtime = await build_runtime(EngineAgentSettings(**{**defaults, **settings}))
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.shutdown()


@asynccontextmanager
async def gateway(engines: list[str], span_exporter: Any = None, **settings: Any
                  ) -> AsyncIterator[Any]:
    """A started gateway runtime on port 0 in front of ``engines``."""
    from services.gateway.config import GatewaySettings
    from services.gateway.server import build_runtime

    defaults = {"metrics_port": -1, "grace_s": 0.5, "auth": False}
    runtime = await build_runtime(GatewaySettings(engines=engines, **{**defaults, **settings}),
                                  span_exporter=span_exporter)
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.shutdown()


@asynccontextmanager
async def csl_service(path: Any, **settings: Any) -> AsyncIterator[Any]:
    """A started csl service on port 0 with its store under ``path`` (no fsync: tests)."""
    from services.csl.config import CslSettings
    from services.csl.server import build_runtime

    defaults = {"metrics_port": -1, "grace_s": 0.5, "sync": False}
    runtime = await build_runtime(CslSettings(data_dir=str(path), **{**defaults, **settings}))
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.shutdown()


@asynccontextmanager
async def corpus_service(path: Any, **settings: Any) -> AsyncIterator[Any]:
    """A started corpus service on port 0 with its LMDB corpus under ``path`` (no fsync)."""
    from services.corpus.config import CorpusSettings
    from services.corpus.server import build_runtime

    defaults = {"metrics_port": -1, "grace_s": 0.5, "sync": False}
    runtime = await build_runtime(CorpusSettings(path=str(path), **{**defaults, **settings}))
    await runtime.start()
    try:
        yield runtime
    finally:
        await runtime.shutdown()
