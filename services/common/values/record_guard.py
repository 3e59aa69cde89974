"""DESIGN.md §3's record rule, in one place: a consumer of versioned records (identity,
sequence, publish time) refuses stale, future-dated, duplicate and out-of-order ones.
Protocol-free; the headers themselves are built in ``records``."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

#: Why a versioned record is refused (DESIGN.md §3): from the future beyond the tolerated skew,
#: older than the consumer's freshness bound, a sequence at or below the last accepted one
#: (a duplicate or a replay), or published before the last accepted one.
GUARD_FAULTS = ("future", "stale", "duplicate", "order")


@dataclass(slots=True)
class SequenceGuard:
    """DESIGN.md §3's record rule for one stream of versioned records of one identity: accept
    a record only fresh, not from the future, and in order. Every consumer of versioned records
    (the gateway's and admission's engine-load views, delivery's lease and budget records)
    checks through one of these; a refused record leaves the consumer on its safe default.

    ``fault`` says why a record may not be used (one of ``GUARD_FAULTS``) or None; ``accept``
    checks and, when the record passes, takes it as the last accepted; ``take`` does only the
    latter (a consumer with checks of its own after this one); ``reset`` forgets the stream (a
    producer restarts its sequence on a new stream).
    """

    max_age_s: float
    max_skew_s: float = 1.0
    last_sequence: int = -1
    last_published: float = -math.inf

    def fault(self, sequence: int, published_at: float, now: float) -> str | None:
        """Why a record with this sequence and publish time may not be used at ``now``."""
        if published_at > now + self.max_skew_s:
            return "future"
        if now - published_at > self.max_age_s:
            return "stale"
        if sequence <= self.last_sequence:
            return "duplicate"
        if published_at < self.last_published:
            return "order"
        return None

    def take(self, sequence: int, published_at: float) -> None:
        """Take a record as the last accepted one."""
        self.last_sequence, self.last_published = sequence, published_at

    def accept(self, sequence: int, published_at: float, now: float | None = None) -> bool:
        """Whether a record with this sequence and publish time may be used (taken if so)."""
        if self.fault(sequence, published_at, time.time() if now is None else now) is not None:
            return False
        self.take(sequence, published_at)
        return True

    def reset(self) -> None:
        """Forget the stream: the next record may start a new sequence."""
        self.last_sequence, self.last_published = -1, -math.inf


__all__ = ["GUARD_FAULTS", "SequenceGuard"]
