"""The admission service's view of engine load (dynbranch §3.4, "Causal load price", Eq. 3).

Every engine agent streams versioned, timestamped load reports (``LoadView``: header id =
engine, sequence increasing, published_at = sampling time). ``LoadTracker`` keeps the latest
report per engine, refuses stale or out-of-order ones, and keeps per model:

- ``fill_occupancy``: running fills over the fill slots (``fill_share`` of the running slots);
- ``kv_occupancy``: KV blocks held by fills, plus blocks reserved by admissions not yet visible
  in a report, over the fill KV budget (``kv_budget_share`` of the pool);
- ``pressure`` ρ_t: canonical demand over the running slots ((running - fills + waiting) / max);
- the causal envelope ρ̄_H(t) = max{ρ_t, (1/H) ∫_{t-H}^t ρ dτ}: rising load counts at once,
  falling load relaxes over a full window H (the co-residency window of a fill).

The history is a step function of ρ sampled on every report and on ``probe`` (called
periodically, so the mean stays current while gates are closed and nothing else asks).
Protocol-free; times are seconds on a monotonic clock passed in by the caller.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from services.common.values.errors import InvalidArgument
from services.common.values.record_guard import SequenceGuard


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """One engine's load report, as the tracker needs it."""

    engine_id: str
    model: str
    sequence: int
    published_at: float
    running: int
    waiting: int
    max_running: int
    kv_blocks_used: int
    kv_blocks_total: int
    fill_running: int
    fill_kv_blocks: int
    #: Tokens per KV block (what turns a fill's tokens into its footprint).
    block_size: int = 16


@dataclass(frozen=True, slots=True)
class LoadSnapshot:
    """The load view V_H a decision is priced at (occupancies may exceed 1 under overload)."""

    fill_occupancy: float
    kv_occupancy: float
    pressure: float
    envelope: float
    #: Fill slots and KV budget blocks still free (hard constraints of the fill gate).
    fill_slots_free: int
    kv_blocks_free: int
    #: Fill slots and KV budget blocks in total across the model's engines.
    fill_slots: int
    kv_budget_blocks: int
    #: Engines whose reports are current.
    engines: int
    #: Mean running slots per engine (``max_running``): turns ρ̄_H into co-resident canonical
    #: requests, from the engines' real capacity.
    slots_per_engine: float = 0.0
    #: KV blocks in use over the pool, across the engines, reservations included: the real
    #: occupancy the price curves steepen with.
    occupancy: float = 0.0
    #: KV blocks in one engine's pool (mean) and tokens per block.
    kv_pool_blocks: int = 0
    block_size: int = 16

    @property
    def canonical(self) -> float:
        """Canonical requests co-resident per engine at ρ̄_H (envelope x running slots)."""
        return max(self.envelope, 0.0) * self.slots_per_engine


#: Defaults of the tracker (and of ``AdmissionSettings``): H, the co-residency window of the
#: envelope (s); the oldest report still used (s); the shares of slots and of the KV pool fills
#: may hold.
WINDOW_S = 8.0
MAX_AGE_S = 5.0
FILL_SHARE = 0.5
KV_BUDGET_SHARE = 0.25


class LoadTracker:
    """Latest reports per engine, the pressure history, reservations, and the envelope."""

    def __init__(self, window_s: float = WINDOW_S, max_age_s: float = MAX_AGE_S,
                 fill_share: float = FILL_SHARE, kv_budget_share: float = KV_BUDGET_SHARE,
                 max_samples: int = 4096) -> None:
        if not window_s > 0:
            raise InvalidArgument("window_s", "must be > 0")
        if not 0 < fill_share <= 1 or not 0 < kv_budget_share <= 1:
            raise InvalidArgument("fill_share", "fill_share and kv_budget_share must be in (0, 1]")
        self.window_s, self.max_age_s = window_s, max_age_s
        self.fill_share, self.kv_budget_share = fill_share, kv_budget_share
        self._latest: dict[str, EngineLoad] = {}
        self._guards: dict[str, SequenceGuard] = {}
        self._history: dict[str, deque[tuple[float, float]]] = {}
        self._reserved: dict[str, dict[str, tuple[int, int]]] = {}  # model -> token -> (1, blocks)
        self._max_samples = max_samples
        self.rejected = 0

    # -- reports --------------------------------------------------------------------------------

    def observe(self, report: EngineLoad, now: float) -> bool:
        """Take a report; False (and counted) when it is stale, from the future, a duplicate or
        out of order (``SequenceGuard``, per engine)."""
        guard = self._guards.setdefault(report.engine_id, SequenceGuard(self.max_age_s))
        if not guard.accept(report.sequence, report.published_at, now):
            self.rejected += 1
            return False
        self._latest[report.engine_id] = report
        self._sample(report.model, now)
        return True

    def forget(self, engine_id: str) -> None:
        """Drop an engine's latest report (its stream ended; a new one restarts its sequence)."""
        self._latest.pop(engine_id, None)
        self._guards.pop(engine_id, None)

    def probe(self, now: float) -> None:
        """Record the current pressure of every model (keeps the window mean current)."""
        for model in {r.model for r in self._latest.values()}:
            self._sample(model, now)

    def _current(self, model: str, now: float) -> list[EngineLoad]:
        return [r for r in self._latest.values()
                if r.model == model and now - r.published_at <= self.max_age_s]

    def reports(self, model: str, now: float) -> list[EngineLoad]:
        """The current (not too old) report of every engine serving ``model``."""
        return self._current(model, now)

    def _pressure(self, reports: list[EngineLoad]) -> float:
        slots = sum(r.max_running for r in reports)
        demand = sum(max(r.running - r.fill_running, 0) + r.waiting for r in reports)
        return demand / slots if slots else 0.0

    def _sample(self, model: str, now: float) -> None:
        history = self._history.setdefault(model, deque(maxlen=self._max_samples))
        history.append((now, self._pressure(self._current(model, now))))
        while len(history) > 1 and history[1][0] <= now - self.window_s:
            history.popleft()

    # -- reservations (admitted fills not yet visible in a report) ---------------------------

    def reserve(self, model: str, token: str, kv_blocks: int) -> None:
        """Hold one fill slot and ``kv_blocks`` for an admitted fill until it is released."""
        self._reserved.setdefault(model, {})[token] = (1, kv_blocks)

    def release(self, model: str, token: str) -> None:
        """Drop a reservation (the fill finished, was aborted or now shows in reports)."""
        held = self._reserved.get(model)
        if held is not None:
            held.pop(token, None)
            if not held:  # a model named only in requests must not leave a key behind
                del self._reserved[model]

    # -- the view ---------------------------------------------------------------------------------

    def envelope(self, model: str, now: float) -> float:
        """ρ̄_H(t): the larger of the current pressure and its time-weighted mean over H."""
        current = self._pressure(self._current(model, now))
        history = self._history.get(model)
        if not history:
            return current
        start = now - self.window_s
        total, covered = 0.0, 0.0
        points = list(history)
        for (t0, rho), nxt in zip(points, [*points[1:], (now, current)], strict=True):
            lo, hi = max(t0, start), min(nxt[0], now)
            if hi > lo:
                total += rho * (hi - lo)
                covered += hi - lo
        mean = total / self.window_s if covered else current
        return max(current, mean)

    def snapshot(self, model: str, now: float) -> LoadSnapshot:
        """V_H for ``model``: occupancies with reservations, ρ_t and ρ̄_H."""
        reports = self._current(model, now)
        reserved = self._reserved.get(model, {}).values()
        fill_slots = sum(max(1, math.floor(r.max_running * self.fill_share)) for r in reports)
        budget = sum(math.floor(r.kv_blocks_total * self.kv_budget_share) for r in reports)
        fills = sum(r.fill_running for r in reports) + sum(n for n, _ in reserved)
        held = sum(b for _, b in reserved)
        kv = sum(r.fill_kv_blocks for r in reports) + held
        pool = sum(r.kv_blocks_total for r in reports)
        n = len(reports)
        return LoadSnapshot(
            fill_occupancy=fills / fill_slots if fill_slots else math.inf,
            kv_occupancy=kv / budget if budget else math.inf,
            pressure=self._pressure(reports), envelope=self.envelope(model, now),
            fill_slots_free=max(fill_slots - fills, 0), kv_blocks_free=max(budget - kv, 0),
            fill_slots=fill_slots, kv_budget_blocks=budget, engines=n,
            slots_per_engine=sum(r.max_running for r in reports) / n if n else 0.0,
            occupancy=(sum(r.kv_blocks_used for r in reports) + held) / pool if pool else 1.0,
            kv_pool_blocks=pool // n if n else 0,
            block_size=max(min(r.block_size for r in reports), 1) if n else 16)


__all__ = ["EngineLoad", "LoadSnapshot", "LoadTracker"]
