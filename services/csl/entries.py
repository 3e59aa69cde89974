"""Values that cross the library's interface, and the in-memory metadata of a stored entry.

Records are namespaced: a record key is ``(tenant, record_id)``, with ``""`` the shared
namespace. A stage of tenant T that reads ``record_id`` observes T's record and the shared record
of that id; its *effective version* is the larger of the two (versions come from one global,
strictly increasing sequence, see ``versions.py``), so a write to either makes it stale. Stages in
the shared namespace observe shared records only.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

from services.common.errors import InvalidArgument
from services.common.reuse_name import DIGEST_HEX_LEN, ReuseName

#: ``(tenant, record_id)``: the identity of an external record in the version table.
RecordKey = tuple[str, str]

MAX_RECORD_ID_BYTES = 1024


@dataclass(frozen=True, slots=True)
class RecordRead:
    """One external record a stage read, at the (effective) version it observed."""

    record_id: str
    version: int

    def __post_init__(self) -> None:
        if not self.record_id:
            raise InvalidArgument("record_id", "required")
        if len(self.record_id) > MAX_RECORD_ID_BYTES // 4 and \
                len(self.record_id.encode()) > MAX_RECORD_ID_BYTES:
            raise InvalidArgument("record_id", f"longer than {MAX_RECORD_ID_BYTES} bytes")
        if not 0 <= self.version < 2**64:
            raise InvalidArgument("version", "must be in [0, 2^64)")


@dataclass(frozen=True, slots=True)
class ReadSet:
    """Provenance of one execution: external reads and upstream library entries it consumed.

    ``complete=False`` means the recorder could not vouch for every read; such entries are
    invalidated by any write at all (dynbranch §3.2, "incomplete provenance conservatively
    extends the cascade").
    """

    reads: tuple[RecordRead, ...]
    complete: bool
    producers: tuple[ReuseName, ...] = ()

    @classmethod
    def pure(cls) -> ReadSet:
        """Provenance of a stage that read no external record and consumed no entry."""
        return cls((), True, ())


@dataclass(frozen=True, slots=True)
class Shadow:
    """A fill's result, invisible to serving paths until promoted (dynbranch §3.3)."""

    name: ReuseName
    branch_id: str
    candidate: str
    rank: int
    producer: str
    result: bytes
    read_set: ReadSet
    cost_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.branch_id:
            raise InvalidArgument("shadow.branch_id", "required")
        check_cost(self.cost_s, "shadow.cost_s")


class Served(NamedTuple):
    """A result handed to a demand: a hit, or a promoted shadow.

    A NamedTuple rather than a frozen dataclass: it is built on every hit, and a frozen
    dataclass's ``__init__`` costs several times more (measured: 350 ns against 100 ns).
    """

    result: bytes
    cost_s: float


@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """New versions of written records (request order) and how many entries a write removed."""

    versions: tuple[RecordRead, ...]
    invalidated: int


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


def check_cost(cost_s: float, field_name: str) -> None:
    """Raise ``InvalidArgument`` unless ``cost_s`` is a finite, non-negative number of seconds."""
    if not (math.isfinite(cost_s) and cost_s >= 0.0):
        raise InvalidArgument(field_name, "must be a finite, non-negative number of seconds")


def name_key(name: ReuseName) -> bytes:
    """LMDB key of a name: UTF-8 tenant followed by the 64 hex digits of the digest.

    Unambiguous because the digest has a fixed length; one concatenation keeps it cheap on
    the lookup path.
    """
    return (name.tenant + name.digest).encode()


def tenant_of_key(key: bytes) -> str:
    """The tenant namespace of a name key."""
    return key[:-DIGEST_HEX_LEN].decode()


def record_keys(tenant: str, record_id: str) -> tuple[RecordKey, ...]:
    """Index keys a read of ``record_id`` by a stage of ``tenant`` depends on."""
    if tenant:
        return ((tenant, record_id), ("", record_id))
    return (("", record_id),)


__all__ = [
    "EntryMeta", "LibraryStats", "ReadSet", "RecordKey", "RecordRead", "Served", "Shadow",
    "WriteOutcome", "check_cost", "name_key", "record_keys", "tenant_of_key",
]
