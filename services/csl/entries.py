"""Values that cross the library's interface, and the in-memory metadata of a stored entry.

Records are namespaced: a record key is ``(tenant, record_id)``, with ``""`` the shared
namespace. A stage of tenant T that reads ``record_id`` observes T's record and the shared record
of that id; its *effective version* is the larger of the two (versions come from one global,
strictly increasing sequence, see ``versions.py``), so a write to either makes it stale. Stages in
the shared namespace observe shared records only.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from services.common.values.reads import RecordKey
from services.common.values.reuse_name import DIGEST_HEX_LEN


@dataclass(frozen=True, slots=True)
class LibraryStats:
    """Sizes and cumulative counters of a library."""

    entries: int
    shadows: int
    bytes: int
    budget_bytes: int
    shadow_bytes: int
    hits: int
    misses: int
    promotions: int
    invalidations: int
    evictions: int
    shadows_discarded: int
    shadows_expired: int
    #: The last record version handed out (0 before the first write).
    write_seq: int = 0


@dataclass(slots=True, eq=False)
class EntryMeta:
    """In-memory metadata of one confirmed entry; its presence in the index means 'fresh'.

    ``eid`` is the incarnation id: unique for the life of the store, kept when a shadow is
    promoted, and the LMDB key of the entry, so a name stored again gets a new row and a lookup
    never reads another incarnation's bytes.
    """

    eid: int
    key: bytes
    #: LMDB key of the incarnation (``codec.eid_key(eid)``).
    lkey: bytes
    result_offset: int
    rkeys: tuple[RecordKey, ...]
    producers: tuple[int, ...]
    incomplete: bool
    size: int
    cost_s: float
    #: Execution cost per stored byte (eviction value of one hit).
    value: float = 0.0
    freq: int = 1
    prio: float = 0.0
    heap_prio: float = field(default=-1.0)


def tenant_of_key(key: bytes) -> str:
    """The tenant namespace of a name key."""
    return key[:-DIGEST_HEX_LEN].decode()


def record_keys(tenant: str, record_id: str) -> tuple[RecordKey, ...]:
    """Index keys a read of ``record_id`` by a stage of ``tenant`` depends on."""
    if tenant:
        return ((tenant, record_id), ("", record_id))
    return (("", record_id),)


__all__ = ["EntryMeta", "LibraryStats", "record_keys", "tenant_of_key"]
