"""Record validity: which lease and budget records the sender may act on (LADS App. "Record
validity", §4; DESIGN.md §3 delivery).

The engine publishes timestamped, versioned records; the sender keeps, per engine, the latest
valid budget record and, per pending result, the latest valid lease record. A record is refused
(and the reason counted) when it names another engine, is more than ``max_age_s`` old on arrival,
carries a timestamp from the future, repeats or precedes an accepted version, breaks the lease
state machine, or (a lease) belongs to another budget generation than the accepted budget's.
Evidence for a frame is handed out only while identity, digests, freshness and generation all
still match; anything else makes the policy fall back to Cache-first for that frame.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from services.common.values.leases import (
    LEASE_TRANSITIONS,
    BudgetRecord,
    LeaseRecord,
    LeaseState,
    ResultKey,
)
from services.common.values.record_guard import SequenceGuard
from services.delivery.frames import Frame

#: Oldest lease or budget record the sender acts on, by default (``DeliverySettings``).
MAX_RECORD_AGE_S = 1.0
#: Clock skew tolerated on a record's ``published_at`` before it counts as from the future.
FUTURE_TOLERANCE_S = 0.05

REJECT_REASONS = ("engine", "stale", "future", "duplicate", "order", "generation")


@dataclass(frozen=True, slots=True)
class LeaseEvidence:
    """The fields of a valid, identity-matching lease record a policy may use."""

    state: LeaseState
    exclusive: int
    blocks: int
    deadline: float
    granted_at: float
    sequence: int
    budget_generation: int


class RecordBook:
    """One engine's latest valid budget record and per-result lease records."""

    __slots__ = ("engine_id", "max_age_s", "rejected", "_clock", "_budget", "_budget_guard",
                 "_leases")

    def __init__(self, engine_id: str, *, max_age_s: float = MAX_RECORD_AGE_S,
                 clock: Callable[[], float]) -> None:
        if not max_age_s > 0:
            raise ValueError(f"max_age_s must be > 0, got {max_age_s!r}")
        self.engine_id = engine_id
        self.max_age_s = float(max_age_s)
        self.rejected: Counter[str] = Counter()
        self._clock = clock
        self._budget: BudgetRecord | None = None
        #: Budget records are versioned by generation.
        self._budget_guard = self._guard()
        #: Per result: its latest accepted lease record, and the guard of its stream.
        self._leases: dict[ResultKey, tuple[LeaseRecord, SequenceGuard]] = {}

    def observe_budget(self, rec: BudgetRecord) -> bool:
        """Accept ``rec`` as the current budget unless it is invalid (reason counted)."""
        reason = self._identity_fault(rec.engine_id) or self._budget_guard.fault(
            rec.generation, rec.published_at, self._clock())
        if reason is not None:
            return self._reject(reason)
        self._budget_guard.take(rec.generation, rec.published_at)
        self._budget = rec
        self._drop_stale(rec.published_at)
        return True

    def observe_lease(self, rec: LeaseRecord) -> bool:
        """Accept ``rec`` as the latest record of its lease unless it is invalid."""
        held = self._leases.get(rec.key)
        guard = held[1] if held is not None else self._guard()
        reason = (self._identity_fault(rec.engine_id)
                  or guard.fault(rec.sequence, rec.published_at, self._clock())
                  or self._lease_fault(rec, held[0] if held is not None else None))
        if reason is not None:
            return self._reject(reason)
        guard.take(rec.sequence, rec.published_at)
        self._leases[rec.key] = (rec, guard)
        return True

    def evidence(self, frame: Frame, now: float) -> LeaseEvidence | None:
        """The valid lease for ``frame`` at ``now``, or None when any check fails."""
        rec = self.lease(frame.key)
        budget = self.budget(now)
        if rec is None or budget is None or not _matches(rec, frame):
            return None
        if now - rec.published_at > self.max_age_s or rec.budget_generation != budget.generation:
            return None
        return LeaseEvidence(rec.state, rec.exclusive, rec.blocks, rec.deadline, rec.granted_at,
                             rec.sequence, rec.budget_generation)

    def budget(self, now: float) -> BudgetRecord | None:
        """The current budget record if it is at most ``max_age_s`` old at ``now``."""
        rec = self._budget
        if rec is None or now - rec.published_at > self.max_age_s:
            return None
        return rec

    def budget_expiry(self) -> float | None:
        """When the current budget record stops being fresh (None without one)."""
        return None if self._budget is None else self._budget.published_at + self.max_age_s

    def denied(self, now: float) -> frozenset[ResultKey]:
        """Keys the fresh budget denied protection at its generation (empty without one)."""
        rec = self.budget(now)
        return frozenset(rec.denied) if rec is not None else frozenset()

    def forget(self, key: ResultKey) -> None:
        """Drop the lease record of ``key`` (its frame was committed or withdrawn)."""
        self._leases.pop(key, None)

    def lease(self, key: ResultKey) -> LeaseRecord | None:
        """The latest accepted lease record of ``key`` (no freshness check)."""
        held = self._leases.get(key)
        return held[0] if held is not None else None

    def _guard(self) -> SequenceGuard:
        return SequenceGuard(self.max_age_s, max_skew_s=FUTURE_TOLERANCE_S)

    def _identity_fault(self, engine_id: str) -> str | None:
        return "engine" if engine_id != self.engine_id else None

    def _lease_fault(self, rec: LeaseRecord, prev: LeaseRecord | None) -> str | None:
        """The lease state machine and budget generation (after the record rule passed)."""
        if prev is not None and rec.state not in LEASE_TRANSITIONS[prev.state]:
            return "order"
        if self._budget is None or rec.budget_generation != self._budget.generation:
            return "generation"
        return None

    def _reject(self, reason: str) -> bool:
        self.rejected[reason] += 1
        return False

    def _drop_stale(self, now: float) -> None:
        # A record past max_age_s can never be evidence again, and a replay of it is refused as
        # stale on arrival, so its sequence watermark is no longer needed either.
        cutoff = now - self.max_age_s
        for key in [k for k, (r, _) in self._leases.items() if r.published_at < cutoff]:
            del self._leases[key]


def _matches(rec: LeaseRecord, frame: Frame) -> bool:
    return (rec.engine_id == frame.engine_id and rec.key == frame.key
            and rec.prefix_digest == frame.prefix_digest
            and rec.payload_digest == frame.payload_digest)


__all__ = ["FUTURE_TOLERANCE_S", "MAX_RECORD_AGE_S", "REJECT_REASONS", "LeaseEvidence",
           "RecordBook"]
