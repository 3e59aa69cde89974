"""Headers of records that cross services: identity, sequence and publish time (DESIGN.md §3)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from services.common.pb import common_pb2


def make_header(record_id: str, sequence: int, producer: str,
                published_at: float | None = None) -> common_pb2.RecordHeader:
    """A RecordHeader stamped with the producer's wall clock (or ``published_at``)."""
    header = common_pb2.RecordHeader(id=record_id, sequence=sequence, producer=producer)
    header.published_at.FromNanoseconds(int((time.time() if published_at is None
                                             else published_at) * 1e9))
    return header


def published_s(header: common_pb2.RecordHeader) -> float:
    """Publish time of a header in epoch seconds."""
    return header.published_at.ToNanoseconds() / 1e9


@dataclass(slots=True)
class SequenceGuard:
    """Accepts a stream of records of one identity only in order, fresh and not from the future.

    ``accept`` returns False for duplicates, out-of-order or stale records and for records
    published more than ``max_skew_s`` in the future; the consumer then keeps its safe default.
    """

    max_age_s: float
    max_skew_s: float = 1.0
    last_sequence: int = -1

    def accept(self, sequence: int, published_at: float, now: float | None = None) -> bool:
        """Whether a record with this sequence and publish time may be used."""
        now = time.time() if now is None else now
        if sequence <= self.last_sequence:
            return False
        if published_at > now + self.max_skew_s or now - published_at > self.max_age_s:
            return False
        self.last_sequence = sequence
        return True


__all__ = ["SequenceGuard", "make_header", "published_s"]
