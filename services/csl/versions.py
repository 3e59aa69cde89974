"""The table of external record versions (dynbranch §3.2, freshness guard).

Every write takes the next value of one global, strictly increasing sequence. Per record that is
an ordinary monotone version; across records it lets a reader in tenant T compare one number,
``max(version(T, id), version("", id))``, against what it observed, and lets an entry with
incomplete provenance check that nothing it could have observed (a record of its own namespace
or a shared one) was written after the sequence value at its store time. A record never written
has version 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from services.common.values.reads import RecordKey, RecordRead
from services.csl.change_feed import ChangeFeed


class VersionTable:
    """In-memory versions of external records; the store persists every bump."""

    __slots__ = ("_last", "_seq", "_versions", "changes")

    def __init__(self, versions: Mapping[RecordKey, int] | None = None, seq: int = 0) -> None:
        self._versions: dict[RecordKey, int] = dict(versions or {})
        self._seq = max([seq, *self._versions.values()])
        self._last: dict[str, int] = {}  # namespace -> its latest write
        for (tenant, _), version in self._versions.items():
            self._last[tenant] = max(self._last.get(tenant, 0), version)
        #: Every record in the order it last changed (loaded ones first): what a peer copies.
        self.changes = ChangeFeed(sorted(self._versions, key=self._versions.__getitem__))

    @property
    def seq(self) -> int:
        """The last version handed out (0 before the first write)."""
        return self._seq

    def __len__(self) -> int:
        return len(self._versions)

    def version(self, key: RecordKey) -> int:
        """Version of one namespaced record."""
        return self._versions.get(key, 0)

    def effective(self, tenant: str, record_id: str) -> int:
        """Version a stage of ``tenant`` observes for ``record_id`` (its own or the shared one)."""
        shared = self._versions.get(("", record_id), 0)
        if not tenant:
            return shared
        return max(shared, self._versions.get((tenant, record_id), 0))

    def is_fresh(self, tenant: str, reads: Iterable[RecordRead]) -> bool:
        """True when every read is at the version the tenant observes now."""
        return all(self.effective(tenant, r.record_id) == r.version for r in reads)

    def quiet_since(self, tenant: str, seq: int) -> bool:
        """True when no record ``tenant``'s stages observe was written after ``seq``."""
        return self._last.get("", 0) <= seq and (not tenant or self._last.get(tenant, 0) <= seq)

    def is_valid(self, tenant: str, reads: Iterable[RecordRead], complete: bool,
                 stored_seq: int) -> bool:
        """The freshness guard: every read current, and, for incomplete provenance, no write
        the stage could have observed since it was stored."""
        return self.is_fresh(tenant, reads) and (complete or self.quiet_since(tenant, stored_seq))

    def bump(self, tenant: str, record_ids: Iterable[str],
             floors: Iterable[int] = ()) -> list[tuple[RecordKey, int]]:
        """Give each written record the next version; return ``(key, version)`` in order.

        ``floors`` (in record order, missing ones 0) are the writer's own current versions: the
        sequence first moves past each, so a writer never gets back a version it already holds.
        """
        out = []
        floor_of = iter(floors)
        for record_id in record_ids:
            self._seq = max(self._seq, next(floor_of, 0)) + 1
            key = (tenant, record_id)
            self._versions[key] = self._last[tenant] = self._seq
            out.append((key, self._seq))
        self.changes.touch(key for key, _ in out)
        return out

    def adopt(self, key: RecordKey, version: int) -> bool:
        """Raise one record to ``version`` (another shard's version of the same write, a
        catch-up); False when it already holds that version or a later one."""
        if version <= self._versions.get(key, 0):
            return False
        self._versions[key] = version
        self._last[key[0]] = max(self._last.get(key[0], 0), version)
        self._seq = max(self._seq, version)
        self.changes.touch((key,))
        return True

    def since(self, seq: int, limit: int) -> list[tuple[RecordKey, int]]:
        """About ``limit`` records whose version is above ``seq``, in version order. A page
        never splits one version (adopted versions may repeat one of this table's own), so the
        next page starts above the last version returned."""
        newer = sorted((v, k) for k, v in self._versions.items() if v > seq)
        end = min(limit, len(newer))
        while 0 < end < len(newer) and newer[end][0] == newer[end - 1][0]:
            end += 1
        return [(k, v) for v, k in newer[:end]]

    def changed_since(self, after: int, limit: int
                      ) -> tuple[list[tuple[RecordKey, int]], int, bool]:
        """Records whose latest change (a write or an adoption) came after change stamp
        ``after``, with their versions; the stamp to ask from next; whether more remain."""
        keys, cursor, more = self.changes.since(after, limit)
        return [(k, self._versions[k]) for k in keys], cursor, more


__all__ = ["VersionTable"]
