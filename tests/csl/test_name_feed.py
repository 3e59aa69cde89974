"""The confirmed-name feed: a consistent snapshot, then every change in order."""

from __future__ import annotations

import asyncio
from pathlib import Path

from services.common.values.reuse_name import name_key
from services.csl.name_feed import _coalesce, name_feed
from tests.csl.factories import library, name, reads


async def test_feed_sends_snapshot_then_additions_and_invalidations(tmp_path: Path) -> None:
    lib = library(tmp_path / "lib")
    lib.put(name(1), b"one", reads(("doc/a", 0)))
    feed = name_feed(lib)
    first = await anext(feed)
    assert first.added == (name_key(name(1)),) and first.synced
    await asyncio.to_thread(lib.put, name(2), b"two", reads(("doc/b", 0)))
    assert (await asyncio.wait_for(anext(feed), 2)).added == (name_key(name(2)),)
    await asyncio.to_thread(lib.write_records, "acme", ["doc/a"])
    assert (await asyncio.wait_for(anext(feed), 2)).removed == (name_key(name(1)),)
    await feed.aclose()
    assert lib._confirmed.listeners == []  # noqa: SLF001 - unsubscribed on close
    lib.close()


def test_coalescing_keeps_the_last_state_of_each_key() -> None:
    batch = _coalesce([([b"a", b"b"], []), ([], [b"a"]), ([b"c"], [b"b"]), ([b"b"], [])])
    assert set(batch.added) == {b"b", b"c"} and batch.removed == (b"a",)
