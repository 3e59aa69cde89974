"""Streamed stores: acks by sequence, a bad store does not end the stream, a lost stream fails
its stores (never hangs) and the next store opens a new one."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.common.values.reads import ReadSet
from services.csl.client import CslClient, PutPipe
from services.csl.config import CslSettings
from services.csl.server import build_runtime
from tests.csl.factories import name


async def _csl(path: Path):  # noqa: ANN202
    runtime = await build_runtime(CslSettings(data_dir=str(path), metrics_port=-1, grace_s=0.2,
                                              sync=False))
    await runtime.start()
    return runtime


async def test_streamed_stores_are_acked_and_readable(tmp_path: Path) -> None:
    runtime = await _csl(tmp_path / "csl")
    async with CslClient(runtime.address) as client:
        pipe = PutPipe(client)
        for i in range(5):
            assert await pipe.put(client.put_request(name(i), f"r{i}".encode(), ReadSet.pure()))
        bad = client.put_request(name(9), b"x", ReadSet.pure())
        bad.name.digest = "not-hex"
        assert await pipe.put(bad) is False  # refused, and the stream goes on
        assert await pipe.put(client.put_request(name(6), b"r6", ReadSet.pure()))
        assert (await client.lookup(name(6))).result == b"r6"
        await pipe.close()
    await runtime.shutdown()


async def test_lost_stream_fails_its_stores_and_the_next_store_reconnects(tmp_path: Path) -> None:
    runtime = await _csl(tmp_path / "csl")
    port = runtime.port
    async with CslClient(runtime.address) as client:
        pipe = PutPipe(client)
        assert await pipe.put(client.put_request(name(1), b"a", ReadSet.pure()))
        await runtime.shutdown()
        assert await pipe.put(client.put_request(name(2), b"b", ReadSet.pure()),
                              timeout_s=2) is False
        runtime = await build_runtime(CslSettings(data_dir=str(tmp_path / "csl"),
                                                  metrics_port=-1, port=port, sync=False))
        await runtime.start()
        stored, deadline = False, asyncio.get_running_loop().time() + 30
        while not stored and asyncio.get_running_loop().time() < deadline:
            # the channel reconnects on its own backoff; each failed store returns at once
            stored = await pipe.put(client.put_request(name(3), b"c", ReadSet.pure()),
                                    timeout_s=1)
            if not stored:
                await asyncio.sleep(0.2)
        assert stored
        await pipe.close()
    await runtime.shutdown()


async def test_a_batch_over_the_limit_is_refused_naming_the_field(tmp_path: Path) -> None:
    import grpc
    import pytest

    from services.common.pb import csl_pb2
    from services.csl.convert import PUT_BATCH_MAX

    runtime = await _csl(tmp_path / "csl")
    async with CslClient(runtime.address) as client:
        puts = [client.put_request(name(i), b"r", ReadSet.pure())
                for i in range(PUT_BATCH_MAX + 1)]

        async def batches():  # noqa: ANN202
            yield csl_pb2.PutBatch(puts=puts[:2])
            yield csl_pb2.PutBatch(puts=puts)

        call = client.stub.PutBatches(batches(), timeout=10)
        first = await call.read()
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await call.read()
    await runtime.shutdown()
    assert [a.stored for a in first.acks] == [True, True]
    assert info.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "puts" in (info.value.details() or "")


async def test_a_csl_without_put_batches_gets_a_store_per_message(tmp_path: Path,
                                                                  monkeypatch) -> None:  # noqa: ANN001
    import grpc

    from services.csl.servicer import SubgraphLibraryServicer

    async def unimplemented(self, requests, context):  # noqa: ANN001, ANN202
        await context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
        yield  # an async generator, as the handler it stands in for

    monkeypatch.setattr(SubgraphLibraryServicer, "PutBatches", unimplemented)
    runtime = await _csl(tmp_path / "csl")
    async with CslClient(runtime.address) as client:
        pipe = PutPipe(client)
        # The first store rides the refused stream: a missed reuse, never a wrong answer.
        assert await pipe.put(client.put_request(name(1), b"a", ReadSet.pure()),
                              timeout_s=5) is False
        assert not pipe.batched
        assert await pipe.put(client.put_request(name(2), b"b", ReadSet.pure()), timeout_s=5)
        assert (await client.lookup(name(2))).result == b"b"
        await pipe.close()
    await runtime.shutdown()


async def test_large_stores_and_hits_at_once_fit_their_messages(tmp_path: Path) -> None:
    from services.csl.client import LookupPipe

    runtime = await _csl(tmp_path / "csl")
    results = [bytes([i]) * 900_000 for i in range(8)]  # 7.2 MB together: more than a message
    async with CslClient(runtime.address) as client:
        pipe, lookups = PutPipe(client), LookupPipe(client)
        stored = await asyncio.gather(*(pipe.put(client.put_request(name(i), r, ReadSet.pure()))
                                        for i, r in enumerate(results)))
        served = await asyncio.gather(*(lookups.lookup(name(i), 5) for i in range(8)))
        await pipe.close()
        await lookups.close()
    await runtime.shutdown()
    assert stored == [True] * 8
    assert [s.result if s else None for s in served] == results
