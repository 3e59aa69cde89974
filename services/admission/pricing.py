"""Load prices of speculative work (dynbranch §3.4): footprints, monotone price curves, and the
``Pricing`` the fill gate uses.

A fill's footprint is R = (R_slot, R_KV, R_prefill): its decode engine-seconds, its KV residency
weighted by its share of one engine's pool (blocks of its rendered prompt + max_tokens over the
pool, x its seconds), and the prompt tokens it prefills. The price curves are milliseconds of
canonical delay per unit of each; they scale with the canonical requests co-resident on an
engine, n_canon = ρ̄_H x the engine's real running slots (``LoadSnapshot.canonical``), and
steepen with the engines' real KV occupancy o (reservations included):

    β_slot(V)    = 1000 * slot_stretch        * n_canon * steep(o)
    β_KV(V)      = 1000 * kv_stretch          * n_canon * steep(o)
    β_prefill(V) = 1000 * prefill_s_per_token * n_canon
    C_s(V)       = β_slot R_slot + β_KV R_KV + β_prefill R_prefill

with steep(o) = 1 / (1 - min(o, o_max)). ``slot_stretch`` is the fractional slowdown one
co-resident fill causes a canonical request's decode, ``kv_stretch`` the slowdown per unit of
pool share the fills hold, ``prefill_s_per_token`` the decode stall a fill's prompt prefill
causes each co-resident canonical request, per prompt token: the interference curve's slopes,
measured by ``dynbranch bench interference`` (the method of the paper's Figure 5b) at the
workloads' prompt lengths. All three terms are engine seconds of canonical delay, the unit of
the gain G a consumed fill saves.

Defaults: fitted by ``dynbranch bench interference`` on the default engine backend (the sim,
preset ``qwen3-32b-h200``; SIMULATED; see that command's docstring for the table). The paper's
Figure 5b on a real Qwen3-32B/H200 is steeper (about 1.1% per fill, 6.4 per unit of share):
rerun the command against the backend you deploy and set the admission service's
``slot_stretch``, ``kv_stretch`` and ``prefill_s_per_token`` to what it prints. Fill-slot count
and the KV reservation budget stay hard constraints (``feasible``), whatever the price.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from services.admission.fill_gate import FillCandidate
from services.admission.load_view import LoadSnapshot
from services.common.values.errors import InvalidArgument, quoted

#: The interference slopes fitted by ``dynbranch bench interference`` on the sim (preset
#: qwen3-32b-h200, SIMULATED), the defaults of ``PriceCurves`` and the admission settings: a
#: canonical request (256 prompt + 128 output tokens) was stretched 0.6% / 6.9% / 27.4% beside
#: 1 / 12 / 48 fills of 64 tokens, 32.5% / 110% beside 24 fills of 850 / 4096 tokens (8.2% /
#: 39% of the pool), and delayed 92 ms / 419 ms while 1 / 4 fills of 850 prompt tokens were
#: prefilled; the fit predicts 16.2% for 12 fills of 850 tokens, where 16.2% was measured.
SLOT_STRETCH = 0.00571
KV_STRETCH = 2.52
PREFILL_S_PER_TOKEN = 1.22e-4


@dataclass(frozen=True, slots=True)
class Footprint:
    """What a fill holds while it runs."""

    #: Decode slot-seconds (engine seconds of the fill's downstream chain).
    slot_s: float
    #: KV blocks it holds at its peak: its rendered prompt + max_tokens (reserved atomically at
    #: admission).
    kv_blocks: int
    #: Prompt tokens its first stage prefills (the stall it causes co-resident decodes).
    prefill_tokens: int = 0

    def __post_init__(self) -> None:
        if not self.slot_s >= 0 or self.kv_blocks < 0 or self.prefill_tokens < 0:
            raise InvalidArgument("footprint", "slot_s, kv_blocks and prefill_tokens must be >= 0")


@dataclass(frozen=True, slots=True)
class PriceCurves:
    """Interference slopes and the shape of the curves (see the module docstring)."""

    slot_stretch: float = SLOT_STRETCH
    kv_stretch: float = KV_STRETCH
    prefill_s_per_token: float = PREFILL_S_PER_TOKEN
    #: Occupancy at which the steepening stops growing (the hard constraints take over).
    occupancy_cap: float = 0.95

    def __post_init__(self) -> None:
        if min(self.slot_stretch, self.kv_stretch, self.prefill_s_per_token) < 0:
            raise InvalidArgument("prices", "slot_stretch, kv_stretch and prefill_s_per_token "
                                            "must be >= 0")
        if not 0 < self.occupancy_cap < 1:
            raise InvalidArgument("prices.occupancy_cap", "must be in (0, 1)")

    def _steep(self, occupancy: float) -> float:
        return 1.0 / (1.0 - min(max(occupancy, 0.0), self.occupancy_cap))

    def slot_price(self, view: LoadSnapshot) -> float:
        """β_slot: ms of canonical delay per slot-second."""
        return 1000.0 * self.slot_stretch * view.canonical * self._steep(view.occupancy)

    def kv_price(self, view: LoadSnapshot) -> float:
        """β_KV: ms of canonical delay per (pool share x second)."""
        return 1000.0 * self.kv_stretch * view.canonical * self._steep(view.occupancy)

    def prefill_price(self, view: LoadSnapshot) -> float:
        """β_prefill: ms of canonical delay per prompt token a fill prefills."""
        return 1000.0 * self.prefill_s_per_token * view.canonical


class LoadPricing:
    """``fill_gate.Pricing`` over load snapshots: candidates carry a ``Footprint``."""

    def __init__(self, curves: PriceCurves) -> None:
        self.curves = curves

    @staticmethod
    def footprint(candidate: FillCandidate) -> Footprint:
        fp = candidate.footprint
        if not isinstance(fp, Footprint):
            raise InvalidArgument("candidate.footprint", f"{quoted(candidate.name)} has none")
        return fp

    def cost_ms(self, candidate: FillCandidate, view: LoadSnapshot) -> float:
        """C_s(V) = β_slot R_slot + β_KV R_KV + β_prefill R_prefill."""
        fp = self.footprint(candidate)
        kv_share = fp.kv_blocks / max(view.kv_pool_blocks, 1)
        return (self.curves.slot_price(view) * fp.slot_s
                + self.curves.kv_price(view) * kv_share * fp.slot_s
                + self.curves.prefill_price(view) * fp.prefill_tokens)

    def feasible(self, candidate: FillCandidate, view: LoadSnapshot) -> bool:
        """A free fill slot and room for its KV blocks in the reservation budget."""
        blocks = self.footprint(candidate).kv_blocks
        return view.fill_slots_free >= 1 and view.kv_blocks_free >= blocks

    def project(self, candidate: FillCandidate, view: LoadSnapshot) -> LoadSnapshot:
        """The view with the candidate admitted: one more fill, its KV blocks reserved."""
        fp = self.footprint(candidate)
        fills = view.fill_slots - view.fill_slots_free + 1
        kv = view.kv_budget_blocks - view.kv_blocks_free + fp.kv_blocks
        pool = view.kv_pool_blocks * max(view.engines, 1)
        return replace(view, occupancy=view.occupancy + fp.kv_blocks / pool if pool else 1.0,
                       fill_slots_free=max(view.fill_slots_free - 1, 0),
                       kv_blocks_free=max(view.kv_blocks_free - fp.kv_blocks, 0),
                       fill_occupancy=fills / view.fill_slots if view.fill_slots else 1.0,
                       kv_occupancy=kv / view.kv_budget_blocks if view.kv_budget_blocks else 1.0)


__all__ = ["KV_STRETCH", "PREFILL_S_PER_TOKEN", "SLOT_STRETCH", "Footprint", "LoadPricing",
           "PriceCurves"]
