"""The csl gRPC service on a real server (port 0): mapping, errors, metrics, health, start-up."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.pb import common_pb2, csl_pb2
from services.common.values.reads import ReadSet, Served
from services.csl.client import CslClient
from services.csl.config import CslSettings
from services.csl.errors import StoreCorrupt
from services.csl.server import build_runtime
from tests.csl.factories import name, reads, shadow

REPO = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def serve(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[Any, CslClient]]:
    """A started csl runtime on port 0 and a client of it."""
    defaults = {"data_dir": str(tmp_path / "csl"), "sync": False, "grace_s": 0.2,
                "metrics_port": -1, "budget_bytes": 1 << 20, "map_size_bytes": 64 << 20}
    runtime = await build_runtime(CslSettings(**{**defaults, **settings}))
    await runtime.start()
    client = CslClient(runtime.address, producer="test")
    try:
        yield runtime, client
    finally:
        await client.close()
        await runtime.shutdown()


@pytest.fixture
async def csl(tmp_path: Path) -> AsyncIterator[tuple[Any, CslClient]]:
    async with serve(tmp_path) as running:
        yield running


async def test_put_then_lookup_over_grpc(csl) -> None:  # type: ignore[no-untyped-def]
    _, client = csl
    assert await client.lookup(name(1)) is None
    assert await client.put(name(1), b"answer", ReadSet.pure(), cost_s=1.25)
    assert await client.lookup(name(1)) == Served(b"answer", 1.25)


async def test_shadow_promotion_and_discard_over_grpc(csl) -> None:  # type: ignore[no-untyped-def]
    _, client = csl
    assert await client.put_shadow(shadow(name(1), candidate="h1", result=b"win"))
    assert await client.put_shadow(shadow(name(2), candidate="h2", result=b"lose"))
    assert await client.lookup(name(1)) is None
    assert await client.discard("b1", keep_candidate="h1") == 1
    assert await client.promote(name(1), "b1") == Served(b"win", 0.5)
    assert await client.promote(name(1), "b1") is None
    assert await client.lookup(name(1)) == Served(b"win", 0.5)


async def test_write_records_invalidates_and_reports_versions(csl) -> None:  # type: ignore[no-untyped-def]
    _, client = csl
    await client.put(name(1), b"a", reads(("doc", 0)))
    await client.put(name(2), b"b", reads(producers=(name(1),)))
    outcome = await client.write_records("acme", ["doc", "other"])
    assert outcome.invalidated == 2
    assert [v.record_id for v in outcome.versions] == ["doc", "other"]
    assert await client.lookup(name(2)) is None
    stats = await client.stats()
    assert (stats.entries, stats.invalidations, stats.misses) == (0, 2, 1)


async def test_write_floors_and_write_sequence_over_grpc(csl) -> None:  # type: ignore[no-untyped-def]
    _, client = csl
    outcome = await client.write_records("", ["corpus/c/doc/x", "corpus/c/term/y"],
                                         floors=[500])
    assert [v.version for v in outcome.versions] == [501, 502]
    assert (await client.stats()).write_seq == 502


async def test_bad_digest_is_invalid_argument_naming_the_field(csl) -> None:  # type: ignore[no-untyped-def]
    _, client = csl
    request = csl_pb2.LookupRequest(name=common_pb2.ReuseName(tenant="acme", digest="nothex"))
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.Lookup(request, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "name.digest" in err.value.details()


@pytest.mark.parametrize("request_, field", [
    (csl_pb2.PutRequest(name=common_pb2.ReuseName(tenant="acme", digest="a" * 64)), "result"),
    (csl_pb2.WriteRecordsRequest(tenant="acme"), "writes"),
    (csl_pb2.PromoteRequest(name=common_pb2.ReuseName(tenant="acme", digest="a" * 64)),
     "branch_id"),
])
async def test_missing_required_fields_are_invalid_arguments(csl, request_, field) -> None:  # type: ignore[no-untyped-def]
    _, client = csl
    method = {csl_pb2.PutRequest: client.stub.Put,
              csl_pb2.WriteRecordsRequest: client.stub.WriteRecords,
              csl_pb2.PromoteRequest: client.stub.Promote}[type(request_)]
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await method(request_, timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in err.value.details()


@pytest.mark.parametrize("record_ids, code, details", [
    (["a", "b", ""], grpc.StatusCode.INVALID_ARGUMENT, "writes[2].record_id: required"),
    (["a", "é" * 600], grpc.StatusCode.INVALID_ARGUMENT,
     "writes[1].record_id: longer than 1024 bytes"),
    ([f"r{i}" for i in range(10_000)], grpc.StatusCode.RESOURCE_EXHAUSTED,
     "writes: at most 4096 records per request"),
])
async def test_a_bad_write_is_refused_by_field_and_never_as_retryable(
        csl, record_ids: list[str], code: grpc.StatusCode, details: str) -> None:  # type: ignore[no-untyped-def]
    _, client = csl
    request = csl_pb2.WriteRecordsRequest(
        writes=[csl_pb2.RecordWrite(record_id=r) for r in record_ids])
    with pytest.raises(grpc.aio.AioRpcError) as err:
        await client.stub.WriteRecords(request, timeout=5)
    assert (err.value.code(), err.value.details()) == (code, details)
    assert (await client.stats()).write_seq == 0  # nothing was written


async def test_a_record_the_store_cannot_key_is_refused_not_an_internal_error(csl) -> None:  # type: ignore[no-untyped-def]
    """An LMDB key is at most 511 bytes: a 600-byte id (valid: at most 1,024) was INTERNAL."""
    _, client = csl
    writes = csl_pb2.WriteRecordsRequest(tenant="t" * 200, writes=[
        csl_pb2.RecordWrite(record_id="fits"), csl_pb2.RecordWrite(record_id="é" * 200)])
    adopts = csl_pb2.AdoptVersionsRequest(versions=[
        csl_pb2.TenantRecordVersion(tenant="", record_id="x" * 600, version=3)])
    for call, request in ((client.stub.WriteRecords, writes),
                          (client.stub.AdoptVersions, adopts)):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await call(request, timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "bytes with its tenant's name; a written record takes at most 509" in \
            err.value.details()
    assert err.value.details().startswith("record_id: 600 bytes")
    outcome = await client.write_records("t" * 200, ["é" * 154])  # 508 bytes: fits
    assert outcome.versions[0].version == 1


async def test_metrics_endpoint_exports_library_counters(tmp_path: Path) -> None:
    async with serve(tmp_path, metrics_port=0) as (runtime, client):
        await client.put(name(1), b"a", ReadSet.pure())
        await client.lookup(name(1))
        await client.lookup(name(2))
        url = f"http://127.0.0.1:{runtime.metrics.port}/metrics"
        body = await asyncio.to_thread(
            lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    for line in ("dynbranch_csl_hits_total 1.0", "dynbranch_csl_misses_total 1.0",
                 "dynbranch_csl_promotions_total 0.0", "dynbranch_csl_invalidations_total 0.0",
                 "dynbranch_csl_evictions_total 0.0", "dynbranch_csl_entries 1.0"):
        assert line in body
    assert "dynbranch_csl_bytes " in body


async def test_health_reports_serving(csl) -> None:  # type: ignore[no-untyped-def]
    _, client = csl
    stub = health_pb2_grpc.HealthStub(client.channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(
        service="dynbranch.v1.SubgraphLibrary"), timeout=5)
    assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_start_up_on_a_corrupt_store_fails_naming_the_path(tmp_path: Path) -> None:
    (tmp_path / "data.mdb").write_bytes(b"\x00garbage" * 1000)
    with pytest.raises(StoreCorrupt, match=str(tmp_path)):
        await build_runtime(CslSettings(data_dir=str(tmp_path)))


def test_entry_point_exits_2_on_a_missing_store(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    out = subprocess.run([sys.executable, "-m", "services.csl", "--data-dir", str(missing),
                          "--set", "create=false", "--metrics-port", "-1"],
                         cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 2
    assert str(missing) in out.stderr and "create=False" in out.stderr
