"""Load prices of speculative work (dynbranch §3.4): footprints, monotone price curves, and the
``Pricing`` the fill gate uses.

A fill's footprint is R = (R_slot, R_KV): decode slot-seconds, and KV residency weighted by its
share of the fill KV budget (budget share x residency seconds). The price curves
β(V_H) = (β_slot, β_KV) are milliseconds of canonical delay per unit of each and rise with load:

    β_slot(V) = 1000 * slot_stretch * n_canon(ρ̄_H) * steep(o_fill)
    β_KV(V)   = 1000 * kv_stretch   * n_canon(ρ̄_H) * steep(o_KV)
    C_s(V)    = β_slot(V) R_slot + β_KV(V) R_KV

with n_canon the canonical requests co-resident per engine (ρ̄_H x running slots, capped at the
slots) and steep(o) = 1 / (1 - min(o, o_max)) steepening near capacity. ``slot_stretch`` is the
fractional slowdown one co-resident fill causes a canonical request, ``kv_stretch`` the slowdown
per unit of KV pool share the fills hold: the slopes of an interference curve (canonical stretch
against the number and the context of co-resident fills, the method of the paper's Figure 5b).

Defaults: fitted by ``dynbranch bench interference`` on the default engine backend (the sim,
preset ``qwen3-32b-h200``; SIMULATED): a canonical request of 256 prompt + 128 output tokens
beside n fills of 64 tokens was stretched 0.6% (1 fill), 1.7% (3), 6.9% (12), 13.7% (24) and
27.4% (48): ``slot_stretch`` = 0.0057 per fill; beside 24 fills of 64 / 1024 / 2048 / 4096
tokens (0.8% / 9.9% / 19.6% / 39.0% of the KV pool) it was stretched 14% / 37% / 61% / 110%:
``kv_stretch`` = 2.52 per unit of pool share. The paper's Figure 5b on a real Qwen3-32B/H200 is
steeper (about 1.1% per fill, 6.4 per unit of share): rerun the command against the backend you
deploy and set the admission service's ``slot_stretch`` and ``kv_stretch`` to what it prints.
Fill-slot count and the KV reservation budget stay hard constraints (``feasible``), whatever the
price.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from services.admission.fill_gate import FillCandidate
from services.admission.load_view import LoadSnapshot
from services.common.errors import InvalidArgument


@dataclass(frozen=True, slots=True)
class Footprint:
    """What a fill holds while it runs."""

    #: Decode slot-seconds (engine seconds of the fill's downstream chain).
    slot_s: float
    #: KV blocks it holds at its peak (reserved atomically at admission).
    kv_blocks: int

    def __post_init__(self) -> None:
        if not self.slot_s >= 0 or self.kv_blocks < 0:
            raise InvalidArgument("footprint", "slot_s and kv_blocks must be >= 0")


@dataclass(frozen=True, slots=True)
class PriceCurves:
    """Interference slopes and the shape of the curves (see the module docstring)."""

    slot_stretch: float = 0.0057
    kv_stretch: float = 2.52
    #: Running slots per engine (scales ρ̄_H to co-resident canonical requests).
    slots_per_engine: int = 48
    #: Occupancy at which the steepening stops growing (the hard constraints take over).
    occupancy_cap: float = 0.95

    def __post_init__(self) -> None:
        if self.slot_stretch < 0 or self.kv_stretch < 0 or self.slots_per_engine < 1:
            raise InvalidArgument("prices", "stretches must be >= 0 and slots >= 1")
        if not 0 < self.occupancy_cap < 1:
            raise InvalidArgument("prices.occupancy_cap", "must be in (0, 1)")

    def _steep(self, occupancy: float) -> float:
        return 1.0 / (1.0 - min(max(occupancy, 0.0), self.occupancy_cap))

    def canonical(self, envelope: float) -> float:
        """Co-resident canonical requests per engine at pressure ρ̄_H."""
        return min(max(envelope, 0.0), 1.0) * self.slots_per_engine

    def slot_price(self, view: LoadSnapshot) -> float:
        """β_slot: ms of canonical delay per slot-second."""
        return 1000.0 * self.slot_stretch * self.canonical(view.envelope) \
            * self._steep(view.fill_occupancy)

    def kv_price(self, view: LoadSnapshot) -> float:
        """β_KV: ms of canonical delay per (budget share x second)."""
        return 1000.0 * self.kv_stretch * self.canonical(view.envelope) \
            * self._steep(view.kv_occupancy)


class LoadPricing:
    """``fill_gate.Pricing`` over load snapshots: candidates carry a ``Footprint``."""

    def __init__(self, curves: PriceCurves, kv_pool_blocks: int) -> None:
        self.curves = curves
        self.kv_pool_blocks = max(kv_pool_blocks, 1)

    @staticmethod
    def footprint(candidate: FillCandidate) -> Footprint:
        fp = candidate.footprint
        if not isinstance(fp, Footprint):
            raise InvalidArgument("candidate.footprint", f"{candidate.name!r} has none")
        return fp

    def cost_ms(self, candidate: FillCandidate, view: LoadSnapshot) -> float:
        """C_s(V) = β_slot R_slot + β_KV R_KV."""
        fp = self.footprint(candidate)
        kv_share = fp.kv_blocks / self.kv_pool_blocks
        return (self.curves.slot_price(view) * fp.slot_s
                + self.curves.kv_price(view) * kv_share * fp.slot_s)

    def feasible(self, candidate: FillCandidate, view: LoadSnapshot) -> bool:
        """A free fill slot and room for its KV blocks in the reservation budget."""
        blocks = self.footprint(candidate).kv_blocks
        return view.fill_slots_free >= 1 and view.kv_blocks_free >= blocks

    def project(self, candidate: FillCandidate, view: LoadSnapshot) -> LoadSnapshot:
        """The view with the candidate admitted: one more fill, its KV blocks reserved."""
        fp = self.footprint(candidate)
        fills = view.fill_slots - view.fill_slots_free + 1
        kv = view.kv_budget_blocks - view.kv_blocks_free + fp.kv_blocks
        return replace(view, fill_slots_free=max(view.fill_slots_free - 1, 0),
                       kv_blocks_free=max(view.kv_blocks_free - fp.kv_blocks, 0),
                       fill_occupancy=fills / view.fill_slots if view.fill_slots else 1.0,
                       kv_occupancy=kv / view.kv_budget_blocks if view.kv_budget_blocks else 1.0)


__all__ = ["Footprint", "LoadPricing", "PriceCurves"]
