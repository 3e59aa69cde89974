"""Headers of records that cross services: identity, sequence and publish time (DESIGN.md §3).

The rule a consumer checks them by is ``record_guard.SequenceGuard`` (protocol-free)."""

from __future__ import annotations

import time

from services.common.pb import common_pb2


def make_header(record_id: str, sequence: int, producer: str,
                published_at: float | None = None) -> common_pb2.RecordHeader:
    """A RecordHeader stamped with the producer's wall clock (or ``published_at``)."""
    header = common_pb2.RecordHeader()
    stamp(header, record_id, sequence, producer, published_at)
    return header


def stamp(header: common_pb2.RecordHeader, record_id: str, sequence: int, producer: str,
          published_at: float | None = None) -> None:
    """Fill ``header`` in place (e.g. a request's own header field) as ``make_header`` does."""
    header.id, header.sequence, header.producer = record_id, sequence, producer
    header.published_at.FromNanoseconds(int((time.time() if published_at is None
                                             else published_at) * 1e9))


def published_s(header: common_pb2.RecordHeader) -> float:
    """Publish time of a header in epoch seconds."""
    ns: int = header.published_at.ToNanoseconds()
    return ns / 1e9


__all__ = ["make_header", "published_s", "stamp"]
