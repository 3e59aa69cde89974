"""AsyncSubgraphLibrary: mutations on one worker thread, lookups inline, atomic promote vs write."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.common.values.errors import Unavailable
from services.common.values.reads import ReadSet
from services.csl.async_library import AsyncSubgraphLibrary
from tests.csl.factories import FakeClock, library, name, reads, shadow


@pytest.fixture
async def alib(tmp_path: Path) -> AsyncIterator[AsyncSubgraphLibrary]:
    facade = AsyncSubgraphLibrary(library(tmp_path / "csl", FakeClock()))
    yield facade
    await facade.close()


async def test_mutations_run_on_the_worker_thread(alib: AsyncSubgraphLibrary,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    seen = []
    real = alib.library.put

    def put(*args):  # type: ignore[no-untyped-def]
        seen.append(threading.current_thread().name)
        return real(*args)

    monkeypatch.setattr(alib.library, "put", put)
    assert await alib.put(name(1), b"x", ReadSet.pure())
    assert seen[0].startswith("csl-writer") and seen[0] != threading.current_thread().name
    assert alib.lookup(name(1)) is not None


async def test_no_hit_after_a_write_returns_while_lookups_race_it(
        alib: AsyncSubgraphLibrary) -> None:
    root = name("root")
    await alib.put(root, b"r", reads(("doc", 0)))
    deps = [name(i) for i in range(3000)]
    for n in deps:
        await alib.put(n, b"d", reads(producers=(root,)))
    write = asyncio.ensure_future(alib.write_records("acme", ["doc"]))
    while not write.done():
        for n in deps[::50]:
            alib.lookup(n)
        await asyncio.sleep(0)
    assert (await write).invalidated == 3001
    assert all(alib.lookup(n) is None for n in deps)


async def test_promote_racing_a_write_never_leaves_a_stale_entry(
        alib: AsyncSubgraphLibrary) -> None:
    for i in range(40):
        n, rid = name(i), f"doc-{i}"
        await alib.put_shadow(shadow(n, branch=f"b{i}", read_set=reads((rid, 0))))
        promoted, outcome = await asyncio.gather(alib.promote(n, f"b{i}"),
                                                 alib.write_records("acme", [rid]))
        assert outcome.invalidated == (1 if promoted is not None else 0)
        assert alib.lookup(n) is None


async def test_closed_facade_refuses_mutations(tmp_path: Path) -> None:
    facade = AsyncSubgraphLibrary(library(tmp_path / "c", FakeClock()))
    await facade.close()
    await facade.close()
    with pytest.raises(Unavailable):
        await facade.put(name(1), b"x", ReadSet.pure())
