"""The gateway's library over three csl shards on real servers: names live on
their rendezvous shard, writes reach every shard, a lost shard is a miss, never an error or a
stale hit; a shard serves only under a lease renewed from its peers, so one that missed writes
(restarted, or cut off from the writing gateway only) never serves a stale entry; a new mesh
with a shard down serves from the other two."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from services.common.pb import gateway_pb2
from services.common.runtime.clients import wait_serving
from services.common.runtime.server import ServiceRuntime
from services.common.values.errors import Unavailable
from services.common.values.reads import ReadSet, RecordRead, Shadow
from services.common.values.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.csl.client import CslClient
from services.csl.config import CslSettings
from services.csl.server import build_runtime
from services.gateway.adapters.shard_repair import SERVED_MARK
from services.gateway.adapters.sharded_library import ShardedLibrary

FP = StageFingerprint("routing", "handler", 1, "test-model", max_tokens=64)
#: The shards' serving lease in these tests (short: a write a shard misses waits it out).
LEASE_S = 0.4


def _name(i: int) -> ReuseName:
    return reuse_name("acme", FP, f"input {i}".encode())


def _reads(*pairs: tuple[str, int], producers: tuple[ReuseName, ...] = ()) -> ReadSet:
    return ReadSet(tuple(RecordRead(r, v) for r, v in pairs), True, producers)


class Shards:
    """Three csl services on fixed ports, each stoppable and restartable on its own store."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.runtimes: list[ServiceRuntime | None] = [None, None, None]
        self.ports = [0, 0, 0]

    async def start(self, i: int) -> None:
        settings = CslSettings(data_dir=str(self.root / f"csl-{i}"), port=self.ports[i],
                               metrics_port=-1, grace_s=0.1, sync=False,
                               serving_lease_s=LEASE_S)
        runtime = await build_runtime(settings)
        self.ports[i] = await runtime.start()
        self.runtimes[i] = runtime

    async def stop(self, i: int) -> None:
        runtime, self.runtimes[i] = self.runtimes[i], None
        assert runtime is not None
        await runtime.shutdown()

    @property
    def targets(self) -> list[str]:
        return [f"127.0.0.1:{p}" for p in self.ports]


@pytest.fixture
async def shards(tmp_path: Path) -> AsyncIterator[Shards]:
    s = Shards(tmp_path)
    for i in range(3):
        await s.start(i)
    yield s
    for i in range(3):
        if s.runtimes[i] is not None:
            await s.stop(i)


def _library(targets: list[str]) -> ShardedLibrary:
    return ShardedLibrary(targets, lookup_deadline_s=0.5, deadline_s=1.0,
                          serving_lease_s=LEASE_S, renew_interval_s=0.05)


@pytest.fixture
async def lib(shards: Shards) -> AsyncIterator[ShardedLibrary]:
    library = _library(shards.targets)
    library.start()
    await _until(lambda: all(s.serving for s in library.shards))
    yield library
    await library.close()


def _owned_by(lib: ShardedLibrary, shard: int, count: int = 1, start: int = 0) -> list[ReuseName]:
    return [n for n in map(_name, range(start, start + 500))
            if lib.owner(n).index == shard][:count]


async def _until(predicate: Callable[[], bool], timeout_s: float = 5.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.02)


async def test_each_name_lives_on_its_shard_and_writes_reach_every_shard(
        lib: ShardedLibrary) -> None:
    names = [_name(i) for i in range(30)]
    for n in names:
        assert await lib.put(n, b"answer", _reads(), 0.1)
    for shard in lib.shards:
        stats = await shard.remote.client.stats()
        assert stats.entries == sum(lib.owner(n) is shard for n in names) > 0
    v, w = await lib.write_records("", ["doc-1", "doc-2"])
    assert v == w  # one version per write
    for shard in lib.shards:
        page, _, seq = await shard.remote.client.versions_since(0)
        assert seq == v and page == [SERVED_MARK, (("", "doc-1"), v), (("", "doc-2"), v)]
    assert all([await lib.lookup(n) is not None for n in names])


async def test_a_lost_shard_is_a_miss_for_its_names_and_writes_still_succeed(
        shards: Shards, lib: ShardedLibrary) -> None:
    (lost,), (kept,) = _owned_by(lib, 2), _owned_by(lib, 0)
    assert await lib.put(lost, b"a", _reads(), 0.1) and await lib.put(kept, b"b", _reads(), 0.1)
    await shards.stop(2)
    start = time.monotonic()
    assert await lib.lookup(lost) is None  # a miss, not an error
    assert time.monotonic() - start < 1.0  # within the lookup deadline
    assert not await lib.put(lost, b"a", _reads(), 0.1)
    assert await lib.lookup(kept) is not None
    assert len(await lib.write_records("", ["doc-1"])) == 1  # two of three acknowledged


async def test_a_write_without_a_quorum_fails_naming_the_count(
        shards: Shards, lib: ShardedLibrary) -> None:
    await shards.stop(1)
    await shards.stop(2)
    with pytest.raises(Unavailable, match=r"failed on 2 of 3 shards \(2 acknowledgements needed\)"):
        await lib.write_records("", ["doc-1"])


async def test_a_shard_that_missed_a_write_never_serves_the_stale_entry(
        shards: Shards, lib: ShardedLibrary) -> None:
    (stale,) = _owned_by(lib, 1)
    (first,) = await lib.write_records("", ["doc-1"])
    assert await lib.put(stale, b"read doc-1 at first", _reads(("doc-1", first)), 0.1)
    await shards.stop(1)
    (version,) = await lib.write_records("", ["doc-1"])  # shard 1 misses it
    assert lib.counters["commit_waits"] == 1
    await shards.start(1)  # same port, same store: it still holds the stale entry
    await wait_serving(shards.targets[1])
    async with CslClient(shards.targets[1]) as probe:
        assert await probe.lookup(stale) is None  # not serving before a renewal
        await _until(lambda: lib.shards[1].serving and lib.counters["renewal_invalidated"] >= 1
                     and lib.shards[1].remote.available())
        assert await lib.lookup(stale) is None
        assert await probe.lookup(stale) is None  # gone from the shard itself
    assert await lib.put(stale, b"read doc-1 now", _reads(("doc-1", version)), 0.1)
    assert (await lib.lookup(stale)).result == b"read doc-1 now"


async def test_a_shard_cut_off_from_the_writing_gateway_only_never_serves_a_stale_entry(
        shards: Shards, lib: ShardedLibrary) -> None:
    """Gateway A reaches shard 1 through a proxy that drops everything; gateway B (``lib``)
    reaches it directly and reads right after A's write is acknowledged."""
    from loadgen.faults.proxy import FaultProxy

    proxy = FaultProxy(shards.targets[1])
    targets = [shards.targets[0], await proxy.start(), shards.targets[2]]
    writer = _library(targets)
    writer.start()
    try:
        await _until(lambda: all(s.serving for s in writer.shards))
        stale = _owned_by(lib, 1, count=5)
        assert all(lib.owner(n).target == shards.targets[1] for n in stale)
        (v1,) = await writer.write_records("", ["doc-9"])
        for n in stale:
            assert await lib.put(n, f"read doc-9 at {v1}".encode(), _reads(("doc-9", v1)), 0.1)
        assert all([await lib.lookup(n) is not None for n in stale])
        proxy.blackhole()
        for _ in range(3):
            start = time.monotonic()
            (v2,) = await writer.write_records("", ["doc-9"])  # shard 1 never sees it from A
            assert time.monotonic() - start >= LEASE_S  # it waited shard 1's lease out
            for n in stale:  # B, right after the acknowledgement: never the old version
                served = await lib.lookup(n)
                assert served is None or served.result == f"read doc-9 at {v2}".encode()
            for n in stale:
                await lib.put(n, f"read doc-9 at {v2}".encode(), _reads(("doc-9", v2)), 0.1)
        assert writer.counters["commit_waits"] == 3
        assert lib.counters["renewal_invalidated"] >= 1  # B's renewals carried A's writes in
        proxy.heal()
        await _until(lambda: writer.shards[1].serving)
        start = time.monotonic()
        await writer.write_records("", ["doc-9"])
        assert writer.counters["commit_waits"] == 3  # healed: every shard acknowledged
        assert time.monotonic() - start < LEASE_S
    finally:
        await writer.close()
        await proxy.close()


async def test_a_shard_no_gateway_can_renew_stops_serving_within_its_lease(
        shards: Shards) -> None:
    library = _library(shards.targets)
    (name,) = _owned_by(library, 0)
    library.start()
    await _until(lambda: all(s.serving for s in library.shards))
    assert await library.put(name, b"answer", _reads(), 0.1)
    assert await library.lookup(name) is not None
    await library.close()  # nobody renews any more
    await asyncio.sleep(LEASE_S * 1.1)
    async with CslClient(shards.targets[0]) as client:
        assert await client.lookup(name) is None
        stats = await client.stats()
        assert stats.serving_left_s == 0 and stats.serving_lease_s == LEASE_S


async def test_an_unleased_shard_is_not_used(tmp_path: Path) -> None:
    """A shard started without a serving lease could serve a write it missed: its names miss."""
    runtimes = []
    for i in range(2):
        runtime = await build_runtime(CslSettings(data_dir=str(tmp_path / f"u{i}"), port=0,
                                                  metrics_port=-1, grace_s=0.1, sync=False,
                                                  serving_lease_s=LEASE_S if i else 0.0))
        runtimes.append((runtime, await runtime.start()))
    library = _library([f"127.0.0.1:{port}" for _, port in runtimes])
    try:
        library.start()
        await _until(lambda: library.shards[0].unleased and library.shards[1].serving)
        (name,) = _owned_by(library, 0)
        assert not await library.put(name, b"answer", _reads(), 0.1)
        assert await library.lookup(name) is None
        assert library.counters["unleased_misses"] == 2
    finally:
        await library.close()
        for runtime, _ in runtimes:
            await runtime.shutdown()


async def test_a_chained_fill_across_shards_is_invalidated_by_its_producers_reads(
        lib: ShardedLibrary) -> None:
    (producer,), (dependent,) = _owned_by(lib, 0), _owned_by(lib, 1)
    (version,) = await lib.write_records("", ["doc-1"])
    assert await lib.put_shadow(Shadow(producer, "b1", "h1", 0, "p", b"step 1",
                                       _reads(("doc-1", version))), 30)
    assert await lib.put_shadow(Shadow(dependent, "b1", "h1", 0, "p", b"step 2",
                                       _reads(producers=(producer,))), 30)
    assert lib.counters["folded"] == 1
    await lib.write_records("", ["doc-1"])  # what the producer read moved on
    assert await lib.promote(dependent, "b1") is None


async def test_a_dependent_of_an_unknown_producer_on_another_shard_is_refused(
        lib: ShardedLibrary) -> None:
    (producer,), (dependent,) = _owned_by(lib, 0), _owned_by(lib, 1)
    assert not await lib.put(dependent, b"x", _reads(producers=(producer,)), 0.1)


@pytest.mark.parametrize(("settings", "message"), [
    ({"csl": "a:1", "csl_shards": '["b:1", "c:1"]'}, "csl and csl_shards: set one"),
    ({"csl_shards": '["b:1", "b:1"]'}, "csl_shards: each shard target listed once"),
])
def test_shard_settings_fail_start_up_naming_the_key(settings: dict[str, str],
                                                     message: str) -> None:
    from services.common.values.config import ConfigError, load_settings
    from services.gateway.config import GatewaySettings

    environ = {"DYNBRANCH_GATEWAY_ENGINES": '["e:1"]', "DYNBRANCH_GATEWAY_AUTH": "false",
               **{f"DYNBRANCH_GATEWAY_{k.upper()}": v for k, v in settings.items()}}
    with pytest.raises(ConfigError, match=message):
        load_settings(GatewaySettings, environ=environ)


async def test_two_or_more_shard_targets_make_a_sharded_library() -> None:
    from services.gateway.config import GatewaySettings
    from services.gateway.server import open_library

    settings = GatewaySettings(engines=["e:1"], auth=False, csl_shards=["b:1", "c:1"])
    library = open_library(settings)
    assert isinstance(library, ShardedLibrary)
    await library.close()


async def test_claim_and_hold_refuse_a_missing_scope_naming_it(shards: Shards) -> None:
    import grpc

    async with CslClient(shards.targets[0]) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.claim(_name(1), "", 0.0, 2.0)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "scope" in err.value.details()


async def test_a_write_one_shard_missed_reaches_it_through_the_next_renewal(
        shards: Shards) -> None:
    lib = _library(shards.targets)  # not started: renewals only when the test runs them
    try:
        await lib.renew_all()
        (stale,) = _owned_by(lib, 2)
        (version,) = await lib.write_records("", ["doc-1"])
        assert await lib.put(stale, b"read doc-1", _reads(("doc-1", version)), 0.1)
        for shard in lib.shards[:2]:  # a write shard 2 never saw (it was cut off, say)
            await shard.remote.client.write_records("", ["doc-1"])
        await lib.renew_all()
        assert lib.counters["renewal_invalidated"] == 1
        assert await lib.shards[2].remote.client.lookup(stale) is None  # invalidated there
        await lib.renew_all()  # the cursors moved on: nothing is copied twice
        assert lib.counters["renewal_invalidated"] == 1
    finally:
        await lib.close()


async def test_a_gateway_started_with_one_of_three_shards_absent_serves_and_the_third_joins(
        tmp_path: Path) -> None:
    """A new mesh whose third shard is down at start-up: the gateway's library is founded from
    the other two, serves hits from them and acknowledges writes (waiting the absent shard's
    lease out); the third, started later, serves after its first grant."""
    import socket
    from contextlib import AsyncExitStack

    from services.gateway.sdk import DynbranchClient
    from tests.factories import MODEL, csl_service, engine_agent, gateway

    with socket.socket() as probe:  # a port nothing listens on until the third shard starts
        probe.bind(("127.0.0.1", 0))
        absent_port = probe.getsockname()[1]
    lease = {"serving_lease_s": LEASE_S}
    async with AsyncExitStack() as stack:
        shards = [await stack.enter_async_context(csl_service(tmp_path / f"csl-{i}", **lease))
                  for i in range(2)]
        engine = await stack.enter_async_context(engine_agent())
        gw = await stack.enter_async_context(gateway(
            [engine.address], c2=False, csl_serving_lease_s=LEASE_S, csl_renew_interval_s=0.05,
            csl_shards=[s.address for s in shards] + [f"127.0.0.1:{absent_port}"]))
        library = gw.core.library
        await _until(lambda: [s.serving for s in library.shards] == [True, True, False])
        assert library.counters["founding_grants"] >= 2
        client = DynbranchClient(gw.address)
        stack.push_async_callback(client.close)
        repeats = []
        for i in range(10):  # 2 in 3 names live on a shard that is up
            first = await client.call(f"prompt {i}", MODEL, max_tokens=8)
            repeats.append((first, await client.call(f"prompt {i}", MODEL, max_tokens=8)))
        assert all(again.text == first.text for first, again in repeats)
        assert any(again.source == gateway_pb2.RESULT_SOURCE_LIBRARY for _, again in repeats)
        start = time.monotonic()
        assert set(await client.write(record_ids=["notes"])) == {"notes"}
        assert time.monotonic() - start >= LEASE_S  # the absent shard's lease waited out
        await stack.enter_async_context(csl_service(tmp_path / "csl-2", port=absent_port,
                                                    **lease))
        await _until(lambda: all(s.serving for s in library.shards))
