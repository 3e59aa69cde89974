"""Bringing a library shard that may have missed record writes back in line.

A shard misses a write when it is down, cut off or too slow while the write fans out. Its entries
that read a written record would then look fresh to it, so until it has caught up it serves
nothing. Catching up is a full copy of the record versions its peers hold, adopted into it
(``AdoptVersions``: a version only moves up, and a raised record invalidates its readers exactly
as the write would have). A full copy rather than the tail above the shard's own write sequence:
a shard that missed writes may have numbered later ones differently from its peers, so its
sequence does not say which of theirs it lacks. The copy is paged and runs only for a shard
under suspicion, off the demand path.

Why that suffices: a write succeeds only once a quorum (a majority) of shards acknowledged it,
and a shard is vouched for only after copying from at least ``N - quorum + 1`` peers, so one of
them acknowledged every successful write (the two sets intersect).
"""

from __future__ import annotations

from collections.abc import Sequence

from services.csl.client import CslClient

#: Records per Versions page (AdoptVersions takes at most 4,096; a page may run a little over).
PAGE = 2048


def quorum(shards: int) -> int:
    """Acknowledgements a write needs: a majority of the shards."""
    return shards // 2 + 1


def vouchers(shards: int) -> int:
    """Reachable peers a shard must copy from before it serves again (meets every quorum)."""
    return shards - quorum(shards) + 1


async def catch_up(shard: CslClient, peers: Sequence[CslClient], deadline_s: float) -> int:
    """Adopt into ``shard`` every record version ``peers`` hold; returns entries invalidated.
    Raises the first RPC error (the shard then stays under suspicion)."""
    invalidated = 0
    for peer in peers:
        since, more = 0, True
        while more:
            page, more, _ = await peer.versions_since(since, deadline_s, limit=PAGE)
            if not page:
                break
            invalidated += await shard.adopt_versions(page, deadline_s)
            since = max(version for _, version in page)
    return invalidated


__all__ = ["PAGE", "catch_up", "quorum", "vouchers"]
