"""Reverse index: record -> reader entries, producer entry -> dependent entries (Prop. A.5).

Entries are identified by their incarnation id (``int``). The index holds one reference per read
key and per producer edge of every live entry, plus the entries with incomplete provenance by
namespace, so its size is O(N + R) for N entries with R dependency references.

A write's cascade is a graph traversal that visits each affected entry and each traversed
producer edge once and pops the adjacency it walks; :meth:`retire` then drops the remaining
references of each removed entry once. Together that is O(|W| + |A| + |E_A| + |R_A|)
(dynbranch Appendix A, Proposition A.5).
"""

from __future__ import annotations

from collections.abc import Iterable

from services.common.values.reads import RecordKey
from services.csl.entries import EntryMeta, tenant_of_key


class ReverseIndex:
    """Who depends on what, for invalidation and for eviction of producers."""

    __slots__ = ("_dependents", "_incomplete", "_readers")

    def __init__(self) -> None:
        self._readers: dict[RecordKey, set[int]] = {}
        self._dependents: dict[int, set[int]] = {}
        self._incomplete: dict[str, set[int]] = {}  # namespace -> entries

    def add(self, eid: int, rkeys: Iterable[RecordKey], producers: Iterable[int],
            incomplete_in: str | None = None) -> None:
        """Register an entry's reads and producer edges, and, when its provenance is
        incomplete, its namespace (``incomplete_in``)."""
        for rkey in rkeys:
            self._readers.setdefault(rkey, set()).add(eid)
        for producer in producers:
            self._dependents.setdefault(producer, set()).add(eid)
        if incomplete_in is not None:
            self._incomplete.setdefault(incomplete_in, set()).add(eid)

    def retire(self, metas: Iterable[EntryMeta]) -> None:
        """Drop the references removed entries hold (sets they empty are removed too).

        Only for entries returned by :meth:`cascade` or :meth:`closure`, which already popped
        each entry's own dependents; every removal goes through them, so no dependent is
        orphaned. One call per batch: this loop runs once per invalidated entry."""
        readers, deps, incomplete = self._readers, self._dependents, self._incomplete
        for meta in metas:
            eid = meta.eid
            for rkey in meta.rkeys:
                s = readers.get(rkey)
                if s is not None:
                    s.discard(eid)
                    if not s:
                        del readers[rkey]
            for producer in meta.producers:  # usually in the batch too, its edges popped
                s = deps.get(producer)
                if s is not None:
                    s.discard(eid)
                    if not s:
                        del deps[producer]
            if meta.incomplete:
                tenant = tenant_of_key(meta.key)
                s = incomplete.get(tenant)
                if s is not None:
                    s.discard(eid)
                    if not s:
                        del incomplete[tenant]

    def cascade(self, written: Iterable[RecordKey], writer: str | None) -> list[int]:
        """Entries a write invalidates: direct readers, every entry that loses a valid producer,
        and the entries with incomplete provenance that could have observed the write (those of
        the ``writer``'s namespace; all of them for a shared write; none when ``writer`` is
        None). Pops what it walks."""
        roots: list[int] = []
        for rkey in written:
            s = self._readers.pop(rkey, None)
            if s:
                roots.extend(s)
        if writer == "":
            for s in self._incomplete.values():
                roots.extend(s)
        elif writer is not None:
            roots.extend(self._incomplete.get(writer, ()))
        return self.closure(roots)

    def closure(self, roots: Iterable[int]) -> list[int]:
        """``roots`` and every transitive dependent, each once; pops the producer edges walked.

        Breadth-first by whole frontiers so the per-edge work happens inside C set operations
        (measured about twice as fast as a per-node stack walk at 100,000 dependents)."""
        pop = self._dependents.pop
        seen = set(roots)
        frontier = seen.copy()
        while frontier:
            nxt: set[int] = set()
            grow = nxt.update
            for eid in frontier:
                children = pop(eid, None)
                if children:
                    grow(children)
            nxt -= seen
            seen |= nxt
            frontier = nxt
        return list(seen)

    def references(self) -> int:
        """Dependency references held (read keys plus producer edges plus incomplete flags)."""
        return (sum(map(len, self._readers.values())) + sum(map(len, self._dependents.values()))
                + sum(map(len, self._incomplete.values())))

    def readers_of(self, rkey: RecordKey) -> frozenset[int]:
        """Entries registered as readers of one record key."""
        return frozenset(self._readers.get(rkey, ()))

    def dependents_of(self, eid: int) -> frozenset[int]:
        """Entries that consumed ``eid``'s result."""
        return frozenset(self._dependents.get(eid, ()))


__all__ = ["ReverseIndex"]
