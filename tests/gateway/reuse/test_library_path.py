"""The canonical path's side of the library (``reuse.library_path.LibraryPath``): a probe awaits
a store of its name still in flight, a hit whose reads moved on is refused and counted, and
stores past ``max_pending_stores`` are dropped and counted."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from opentelemetry.trace import NoOpTracer

from services.common.values.generation import FinishReason, Timings, Usage
from services.common.values.reads import ReadSet, Served
from services.common.values.reuse_name import ReuseName, StageFingerprint, reuse_name
from services.gateway.execution import StageRun
from services.gateway.reuse.freshness import Freshness
from services.gateway.reuse.library_path import LibraryPath
from services.gateway.values import StoredResult


def _name(i: int = 0) -> ReuseName:
    return reuse_name("acme", StageFingerprint("t", "s", 1, "m"), f"input {i}".encode())


def _stored(reads: tuple[tuple[str, int], ...] = ()) -> StoredResult:
    return StoredResult("answer", FinishReason.STOP, Usage(1, 0, 1), reads)


class _Library:
    """A library whose puts land when released."""

    def __init__(self) -> None:
        self.entries: dict[ReuseName, bytes] = {}
        self.release = asyncio.Event()

    async def lookup(self, name: ReuseName) -> Served | None:
        found = self.entries.get(name)
        return Served(found, 1.0) if found is not None else None

    async def put(self, name: ReuseName, result: bytes, read_set: ReadSet, cost_s: float) -> bool:
        await self.release.wait()
        self.entries[name] = result
        return True


class _Moved:
    name = "retrieve"

    async def reads_current(self, reads: Sequence[tuple[str, int]]) -> bool:
        return False


def _path(library: _Library, tools: dict[str, object] | None = None,
          max_pending_stores: int = 8) -> LibraryPath:
    return LibraryPath(library, Freshness(tools or {}), NoOpTracer(),  # type: ignore[arg-type]
                       max_pending_stores)


def _run() -> StageRun:
    return StageRun(_stored(), ReadSet.pure(), 1.0, Timings(0.0, 0.0, 0.0, 1.0), "e0")


async def test_a_probe_finds_a_store_of_its_name_still_in_flight_and_stored_is_told() -> None:
    library, told = _Library(), []
    path = _path(library)
    path.store(_name(), _run(), told.append)
    probe = asyncio.create_task(path.probe(_name()))
    await asyncio.sleep(0)
    assert not probe.done()  # it waits for the store
    library.release.set()
    assert await probe is not None and told == [_name()]


async def test_a_hit_whose_reads_moved_on_is_refused_and_counted() -> None:
    path = _path(_Library(), {"retrieve": _Moved()})
    stale = Served(_stored((("corpus/wiki/doc/oslo", 1),)).encode(), 1.0)
    assert await path.current(stale, _name()) is None and path.refused_stale == 1
    assert await path.current(Served(_stored().encode(), 1.0), _name()) is not None  # no reads


async def test_stores_past_the_bound_are_dropped_and_counted() -> None:
    library = _Library()
    path = _path(library, max_pending_stores=2)
    for i in range(3):
        path.store(_name(i), _run())
    assert path.stores_dropped == 1
    library.release.set()
    await path.close()
    assert len(library.entries) == 2


async def test_without_a_library_every_probe_misses_and_nothing_is_stored() -> None:
    path = LibraryPath(None, Freshness({}), NoOpTracer())  # no csl configured
    told: list[ReuseName] = []
    path.store(_name(), _run(), told.append)
    assert await path.probe(_name()) is None
    await path.close()
    assert not told and path.stores_dropped == 0
