"""The confirmed-name feed behind ``WatchNames``: a consistent snapshot, then ordered changes,
moved from the library's mutating thread onto the event loop (protocol-free)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass

from services.csl.core import SubgraphLibrary

SNAPSHOT_CHUNK = 4096
#: Changes a slow subscriber may fall behind by before its feed ends (it then resyncs).
MAX_BACKLOG = 100_000
#: Changes are gathered this long before a batch goes out: under load one message carries many
#: changes instead of one message per store (the mirror is advisory, so a few ms of lag is fine).
BATCH_WINDOW_S = 0.02


class FeedOverflow(Exception):
    """A subscriber fell too far behind; it must resubscribe and take a new snapshot."""


@dataclass(frozen=True, slots=True)
class NameBatch:
    """Name keys added and removed, and whether the snapshot is complete."""

    added: tuple[bytes, ...]
    removed: tuple[bytes, ...]
    synced: bool


async def name_feed(library: SubgraphLibrary, batch_window_s: float = BATCH_WINDOW_S
                    ) -> AsyncIterator[NameBatch]:
    """Yield the current confirmed names in chunks, then every change, coalesced per batch."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[list[bytes], list[bytes]]] = asyncio.Queue()

    def listener(added: list[bytes], removed: list[bytes]) -> None:
        loop.call_soon_threadsafe(queue.put_nowait, (added, removed))

    snapshot = await asyncio.to_thread(library.watch_names, listener)
    try:
        chunks = [snapshot[i:i + SNAPSHOT_CHUNK] for i in range(0, len(snapshot), SNAPSHOT_CHUNK)]
        for i, chunk in enumerate(chunks or [[]]):
            yield NameBatch(tuple(chunk), (), i == max(len(chunks), 1) - 1)
        while True:
            first = await queue.get()
            if batch_window_s:
                await asyncio.sleep(batch_window_s)
            yield _coalesce([first, *_drain(queue)])
    finally:
        library.unwatch_names(listener)


def _drain(queue: asyncio.Queue[tuple[list[bytes], list[bytes]]]
           ) -> list[tuple[list[bytes], list[bytes]]]:
    if queue.qsize() > MAX_BACKLOG:
        raise FeedOverflow(f"subscriber is {queue.qsize()} changes behind")
    return [queue.get_nowait() for _ in range(queue.qsize())]


def _coalesce(changes: list[tuple[list[bytes], list[bytes]]]) -> NameBatch:
    state: dict[bytes, bool] = {}
    for added, removed in changes:
        state.update(dict.fromkeys(added, True))
        state.update(dict.fromkeys(removed, False))
    return NameBatch(tuple(k for k, v in state.items() if v),
                     tuple(k for k, v in state.items() if not v), True)


__all__ = ["FeedOverflow", "NameBatch", "name_feed"]
