"""What a stage read and what it handed out, as every service names it: record reads, read-sets
(provenance), fill shadows and served results, record keys and write outcomes (dynbranch
§3.2–§3.3, DESIGN.md §5.3).

The gateway builds read-sets from its executions and stores them through the csl's client; the
csl keeps them in its version table and reverse index. Plain frozen values; nothing here imports
a service.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import NamedTuple

from services.common.values.errors import InvalidArgument
from services.common.values.reuse_name import ReuseName

MAX_RECORD_ID_BYTES = 1024
#: Records one write may name (a csl ``WriteRecords``, a gateway write with its corpus records).
MAX_WRITE_RECORDS = 4096
#: Longest written record a csl store can key: a record id and its tenant's name together, in
#: UTF-8 (an LMDB key is at most 511 bytes, 2 of them the tenant's length).
MAX_RECORD_KEY_BYTES = 509


def check_record_id(record_id: str, field: str = "record_id") -> str:
    """``record_id`` when it is non-empty and at most ``MAX_RECORD_ID_BYTES`` long in UTF-8."""
    if not record_id:
        raise InvalidArgument(field, "required")
    if len(record_id) > MAX_RECORD_ID_BYTES // 4 and len(record_id.encode()) > MAX_RECORD_ID_BYTES:
        raise InvalidArgument(field, f"longer than {MAX_RECORD_ID_BYTES} bytes")
    return record_id


def check_record_key(tenant: str, record_id: str, field: str = "record_id") -> str:
    """``record_id`` when it is valid and fits a store's key with its ``tenant``'s name (a
    valid tenant); a read may name a longer id, but only these can be written."""
    check_record_id(record_id, field)
    size = len(tenant.encode()) + len(record_id.encode())
    if size > MAX_RECORD_KEY_BYTES:
        raise InvalidArgument(field, f"{size} bytes with its tenant's name; a written record "
                              f"takes at most {MAX_RECORD_KEY_BYTES}")
    return record_id


@dataclass(frozen=True, slots=True)
class RecordRead:
    """One external record a stage read, at the (effective) version it observed."""

    record_id: str
    version: int

    def __post_init__(self) -> None:
        check_record_id(self.record_id)
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


@dataclass(frozen=True, slots=True)
class Claimed:
    """A shadow promoted by name alone: a demand on a gateway replica that did not open the
    shadow's branch (the library found the one branch holding a shadow under the name)."""

    result: bytes
    cost_s: float
    branch_id: str
    candidate: str


class HoldEvent(enum.Enum):
    """What the holder of a running fill step's placeholder is told (csl ``HoldFill``)."""

    #: The placeholder is registered.
    HELD = "held"
    #: The step's shadow was promoted, by any gateway replica.
    PROMOTED = "promoted"
    #: The step's branch was settled against its candidate: abort the fill.
    SETTLED = "settled"


@dataclass(frozen=True, slots=True)
class HoldNotice:
    """One event of a held fill step. For SETTLED: the demand's template and stage when a
    replica settled the whole workflow (empty when the branch itself was settled), and the
    branch and candidate kept (empty: none)."""

    kind: HoldEvent
    template_id: str = ""
    stage_id: str = ""
    keep_branch: str = ""
    keep_candidate: str = ""


class Served(NamedTuple):
    """A result handed to a demand: a hit, or a promoted shadow.

    A NamedTuple rather than a frozen dataclass: it is built on every hit, and a frozen
    dataclass's ``__init__`` costs several times more (measured: 350 ns against 100 ns).
    """

    result: bytes
    cost_s: float


def check_cost(cost_s: float, field_name: str) -> None:
    """Raise ``InvalidArgument`` unless ``cost_s`` is a finite, non-negative number of seconds."""
    if not (math.isfinite(cost_s) and cost_s >= 0.0):
        raise InvalidArgument(field_name, "must be a finite, non-negative number of seconds")


#: ``(tenant, record_id)``: the identity of an external record in the version table.
RecordKey = tuple[str, str]

@dataclass(frozen=True, slots=True)
class WriteOutcome:
    """New versions of written records (request order) and how many entries a write removed."""

    versions: tuple[RecordRead, ...]
    invalidated: int
    #: The write sequence before this write (a writer choosing versions retries above it).
    prior_seq: int = 0
    #: The write named a version not above ``prior_seq``: nothing was changed.
    refused: bool = False



__all__ = ["MAX_RECORD_ID_BYTES", "MAX_RECORD_KEY_BYTES", "MAX_WRITE_RECORDS", "ReadSet",
           "RecordKey", "RecordRead", "Served", "Shadow", "WriteOutcome", "check_cost",
           "check_record_id", "check_record_key"]
