"""Byte-budget eviction by recency, frequency and execution cost per byte (dynbranch §3.2).

Greedy-Dual-Size-Frequency: an entry's priority is ``clock + freq * cost / size``, where the clock
rises to the priority of each evicted entry, so an entry touched recently carries a higher base
(recency), each hit adds its cost-per-byte again (frequency), and cheap-to-recompute or large
entries go first (cost per byte). A hit only updates two numbers on the entry; the heap is fixed
up lazily when a stale item reaches the top, so the hit path never pays O(log N). Each live entry
has exactly one heap item; items of removed entries are skipped and compacted away, so the heap
stays within 2N + 64 items.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from services.csl.entries import EntryMeta

#: Entries reporting no cost still differ by size, frequency and recency.
COST_FLOOR_S = 1e-6


class EvictionPolicy:
    """Chooses which confirmed entry to evict next."""

    __slots__ = ("_heap", "clock")

    def __init__(self) -> None:
        self._heap: list[tuple[float, int]] = []
        self.clock = 0.0

    def admit(self, meta: EntryMeta) -> None:
        """Start tracking a new entry."""
        meta.value = max(meta.cost_s, COST_FLOOR_S) / meta.size
        meta.prio = self.clock + meta.freq * meta.value
        meta.heap_prio = meta.prio
        heapq.heappush(self._heap, (meta.prio, meta.eid))

    def touch(self, meta: EntryMeta) -> None:
        """Record a hit (no heap operation)."""
        meta.freq += 1
        meta.prio = self.clock + meta.freq * meta.value

    def pop_victim(self, entries: Mapping[int, EntryMeta]) -> EntryMeta | None:
        """Remove and return the live entry of lowest priority, or None when there is none."""
        heap = self._heap
        while heap:
            prio, eid = heapq.heappop(heap)
            meta = entries.get(eid)
            if meta is None:
                continue
            if meta.prio > prio:  # touched since it was pushed: requeue at its current priority
                meta.heap_prio = meta.prio
                heapq.heappush(heap, (meta.prio, eid))
                continue
            self.clock = max(self.clock, prio)
            return meta
        return None

    def compact(self, entries: Mapping[int, EntryMeta]) -> None:
        """Drop items of removed entries once they outnumber the live ones."""
        if len(self._heap) > 2 * len(entries) + 64:
            self._heap = [(m.heap_prio, m.eid) for m in entries.values()]
            heapq.heapify(self._heap)

    def __len__(self) -> int:
        return len(self._heap)


__all__ = ["COST_FLOOR_S", "EvictionPolicy"]
