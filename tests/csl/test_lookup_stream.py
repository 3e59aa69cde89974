"""Streamed lookups: the same answers as ``Lookup`` calls, a bad probe does not end the stream,
a lost stream fails its probes as calls would (never hangs) and the next probe reconnects, and a
csl without the stream is asked with calls."""

from __future__ import annotations

import asyncio
from pathlib import Path

import grpc
import pytest

from services.common.pb import csl_pb2
from services.common.values.reads import ReadSet, Served
from services.csl.client import CslClient, LookupPipe
from services.csl.config import CslSettings
from services.csl.server import build_runtime
from tests.csl.factories import name


async def _csl(path: Path, port: int = 0):  # noqa: ANN202
    runtime = await build_runtime(CslSettings(data_dir=str(path), metrics_port=-1, grace_s=0.2,
                                              sync=False, port=port))
    await runtime.start()
    return runtime


async def test_streamed_lookups_answer_as_calls_do(tmp_path: Path) -> None:
    runtime = await _csl(tmp_path / "csl")
    async with CslClient(runtime.address) as client:
        for i in range(3):
            assert await client.put(name(i), f"r{i}".encode(), ReadSet.pure(), cost_s=i)
        pipe = LookupPipe(client)
        found = await asyncio.gather(*(pipe.lookup(name(i)) for i in range(5)))
        assert found == [await client.lookup(name(i)) for i in range(5)]
        assert found[:3] == [Served(f"r{i}".encode(), float(i)) for i in range(3)]
        assert found[3:] == [None, None]
        await pipe.close()
    await runtime.shutdown()


async def test_a_malformed_probe_is_refused_alone(tmp_path: Path) -> None:
    runtime = await _csl(tmp_path / "csl")
    async with CslClient(runtime.address) as client:
        assert await client.put(name(1), b"one", ReadSet.pure())
        pipe = LookupPipe(client)
        bad = name(2)
        object.__setattr__(bad, "digest", "not-hex")  # past ReuseName's own check
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pipe.lookup(bad)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert await pipe.lookup(name(1)) == Served(b"one", 0.0)  # the stream goes on
        await pipe.close()
    await runtime.shutdown()


async def test_lost_stream_fails_its_probes_and_the_next_probe_reconnects(tmp_path: Path
                                                                          ) -> None:
    runtime = await _csl(tmp_path / "csl")
    port = runtime.port
    async with CslClient(runtime.address) as client:
        assert await client.put(name(1), b"one", ReadSet.pure())
        pipe = LookupPipe(client)
        assert await pipe.lookup(name(1)) is not None
        await runtime.shutdown()
        with pytest.raises(grpc.aio.AioRpcError):
            await pipe.lookup(name(1), timeout_s=2)
        runtime = await _csl(tmp_path / "csl", port=port)
        found, deadline = None, asyncio.get_running_loop().time() + 30
        while found is None and asyncio.get_running_loop().time() < deadline:
            try:  # the channel reconnects on its own backoff; each failed probe raises at once
                found = await pipe.lookup(name(1), timeout_s=1)
            except grpc.aio.AioRpcError:
                await asyncio.sleep(0.2)
        assert found == Served(b"one", 0.0)
        await pipe.close()
    await runtime.shutdown()


async def test_a_csl_without_the_stream_is_asked_with_calls(tmp_path: Path) -> None:
    runtime = await _csl(tmp_path / "csl")
    async with CslClient(runtime.address) as client:
        assert await client.put(name(1), b"one", ReadSet.pure())
        pipe = LookupPipe(client)
        # An older csl's stub has the method's serializers; only the path is unknown to it (a
        # call without them is cancelled by gRPC itself once a traced channel sends a probe).
        client.stub.LookupStream = client.channel.stream_stream(  # type: ignore[method-assign]
            "/dynbranch.v1.SubgraphLibrary/NoSuchStream",
            request_serializer=csl_pb2.LookupBatch.SerializeToString,
            response_deserializer=csl_pb2.LookupResults.FromString)
        found = None
        for _ in range(3):  # a write racing the refusal may end a first stream CANCELLED
            try:
                found = await pipe.lookup(name(1))
                break
            except grpc.aio.AioRpcError as err:
                assert err.code() is grpc.StatusCode.CANCELLED
        assert found == Served(b"one", 0.0)
        assert pipe.supported is False
        await pipe.close()
    await runtime.shutdown()
