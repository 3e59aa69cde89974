"""The gateway's library over three csl shards on real servers: names live on
their rendezvous shard, writes reach every shard, a lost shard is a miss, never an error or a
stale hit, and a shard that missed writes catches up before it serves again."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from services.common.runtime.server import ServiceRuntime
from services.common.values.errors import Unavailable
from services.common.values.reads import ReadSet, RecordRead, Shadow
from services.common.values.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.csl.config import CslSettings
from services.csl.server import build_runtime
from services.gateway.adapters.sharded_library import ShardedLibrary

FP = StageFingerprint("routing", "handler", 1, "test-model", max_tokens=64)


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
                               metrics_port=-1, grace_s=0.1, sync=False)
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


@pytest.fixture
async def lib(shards: Shards) -> AsyncIterator[ShardedLibrary]:
    library = ShardedLibrary(shards.targets, lookup_deadline_s=0.5, deadline_s=1.0,
                             audit_interval_s=0.05)
    library.start()
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
    assert await lib.write_records("", ["doc-1", "doc-2"]) == (1, 2)
    for shard in lib.shards:
        page, _, seq = await shard.remote.client.versions_since(0)
        assert seq == 2 and page == [(("", "doc-1"), 1), (("", "doc-2"), 2)]
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
    assert await lib.write_records("", ["doc-1"]) == (1,)  # two of three acknowledged


async def test_a_write_without_a_quorum_fails_naming_the_count(
        shards: Shards, lib: ShardedLibrary) -> None:
    await shards.stop(1)
    await shards.stop(2)
    with pytest.raises(Unavailable, match="1 of 3 shards, 2 needed"):
        await lib.write_records("", ["doc-1"])


async def test_a_shard_that_missed_a_write_never_serves_the_stale_entry(
        shards: Shards, lib: ShardedLibrary) -> None:
    (stale,) = _owned_by(lib, 1)
    await lib.write_records("", ["doc-1"])
    assert await lib.put(stale, b"read doc-1 at 1", _reads(("doc-1", 1)), 0.1)
    await shards.stop(1)
    (version,) = await lib.write_records("", ["doc-1"])  # shard 1 misses it
    await shards.start(1)  # same port, same store: it still holds the stale entry
    await _until(lambda: not lib.shards[1].trusted)
    assert await lib.lookup(stale) is None
    await _until(lambda: lib.shards[1].trusted)  # caught up from its peers
    assert lib.counters["repair_invalidated"] >= 1
    assert await lib.lookup(stale) is None
    assert await lib.shards[1].remote.client.lookup(stale) is None  # gone from the shard itself
    assert await lib.put(stale, b"read doc-1 now", _reads(("doc-1", version)), 0.1)
    assert (await lib.lookup(stale)).result == b"read doc-1 now"


async def test_a_chained_fill_across_shards_is_invalidated_by_its_producers_reads(
        lib: ShardedLibrary) -> None:
    (producer,), (dependent,) = _owned_by(lib, 0), _owned_by(lib, 1)
    await lib.write_records("", ["doc-1"])
    assert await lib.put_shadow(Shadow(producer, "b1", "h1", 0, "p", b"step 1",
                                       _reads(("doc-1", 1))), 30)
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

    from services.csl.client import CslClient

    async with CslClient(shards.targets[0]) as client:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await client.claim(_name(1), "", 0.0, 2.0)
        assert err.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "scope" in err.value.details()


async def test_a_shard_behind_its_peers_on_a_write_catches_up_before_serving(
        shards: Shards) -> None:
    lib = ShardedLibrary(shards.targets, audit_interval_s=600)  # only the write path tells
    lib.start()
    try:
        await _behind_on_a_write(lib)
    finally:
        await lib.close()


async def _behind_on_a_write(lib: ShardedLibrary) -> None:
    (stale,) = _owned_by(lib, 2)
    await lib.write_records("", ["doc-1"])
    assert await lib.put(stale, b"read doc-1 at 1", _reads(("doc-1", 1)), 0.1)
    for shard in lib.shards[:2]:  # a write shard 2 never saw (it was cut off, say)
        await shard.remote.client.write_records("", ["doc-1"])
    assert await lib.lookup(stale) is not None  # nothing has told this gateway yet
    await lib.write_records("", ["doc-2"])  # shard 2 answers a lower prior write sequence
    assert await lib.lookup(stale) is None
    await _until(lambda: lib.shards[2].trusted)
    assert await lib.shards[2].remote.client.lookup(stale) is None  # caught up: invalidated
