"""Which records changed, in the order they changed: the feed a shard's renewal copies from.

A record's version number cannot say whether a peer has seen a change: an adopted version keeps
the numbering of the shard that handed it out, so it may sit below versions this shard gave out
long before. The feed instead gives every change (a write or an adoption) the next value of a
local *change stamp* and lists records by their latest stamp, so "everything after stamp s"
is exact whatever the versions. Stamps live in memory only and restart with the process; a
reader keys its cursor by the shard's incarnation, and a new incarnation starts over from 0
(``services/gateway/adapters/shard_repair.py``).

Kept as an append-only list of ``(stamp, key)`` with the current stamp per key; an entry whose
key was stamped again is skipped, and the list is compacted once stale entries make up half.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable

from services.common.values.reads import RecordKey


class ChangeFeed:
    """Change stamps of records; ``since`` pages through them in stamp order."""

    __slots__ = ("_log", "_stamp", "_stamps", "_stamp_of")

    def __init__(self, keys: Iterable[RecordKey] = ()) -> None:
        self._stamp = 0
        self._stamp_of: dict[RecordKey, int] = {}
        self._log: list[RecordKey] = []
        self._stamps: list[int] = []
        self.touch(keys)

    @property
    def last(self) -> int:
        """The latest stamp handed out (0 before the first change)."""
        return self._stamp

    def touch(self, keys: Iterable[RecordKey]) -> None:
        """Stamp each changed record with the next stamp."""
        for key in keys:
            self._stamp += 1
            self._stamp_of[key] = self._stamp
            self._log.append(key)
            self._stamps.append(self._stamp)
        if len(self._log) > 2 * len(self._stamp_of) + 64:
            self._compact()

    def since(self, after: int, limit: int) -> tuple[list[RecordKey], int, bool]:
        """Up to ``limit`` records whose latest change is after stamp ``after``, in stamp
        order; the stamp to ask from next; and whether more remain."""
        if limit < 1:
            raise ValueError("limit must be positive")
        keys: list[RecordKey] = []
        at = bisect_right(self._stamps, after)
        cursor = max(after, 0)
        while at < len(self._log) and len(keys) < limit:
            key, stamp = self._log[at], self._stamps[at]
            if self._stamp_of.get(key) == stamp:
                keys.append(key)
            cursor = stamp
            at += 1
        more = at < len(self._log)  # (the rest may all be stale: then the next page is empty)
        return keys, (cursor if more else max(cursor, self._stamp)), more

    def _compact(self) -> None:
        live = sorted((stamp, key) for key, stamp in self._stamp_of.items())
        self._stamps = [stamp for stamp, _ in live]
        self._log = [key for _, key in live]


__all__ = ["ChangeFeed"]
