"""The load price of a fill (dynbranch §3.4): in the gain's units, from the engines' real capacity,
with the fill's prefill and its real KV footprint, steepening with real occupancy."""

from __future__ import annotations

import pytest

from services.admission.core import ControllerSettings, PricedController, Proposal
from services.admission.fill_gate import FillCandidate
from services.admission.load_view import EngineLoad, LoadSnapshot, LoadTracker
from services.admission.pricing import Footprint, LoadPricing, PriceCurves

MODEL = "m"


def view(running: int, max_running: int, kv_used: int = 1000, kv_total: int = 16000,
         at: float = 100.0) -> LoadSnapshot:
    t = LoadTracker(window_s=8.0)
    t.observe(EngineLoad("e0", MODEL, 1, at, running, 0, max_running, kv_used, kv_total, 0, 0,
                         16), at)
    return t.snapshot(MODEL, at)


def fill(slot_s: float = 6.0, kv_blocks: int = 70, prefill: int = 850) -> FillCandidate:
    return FillCandidate("h", 0.5, 6000.0, Footprint(slot_s, kv_blocks, prefill))


def test_co_residency_counts_the_engines_real_slots_not_a_fixed_48() -> None:
    small, large = view(running=12, max_running=48), view(running=12, max_running=1024)
    assert small.canonical == pytest.approx(12) and large.canonical == pytest.approx(12)
    pricing = LoadPricing(PriceCurves())
    # the same 12 canonical requests cost the same, whatever the slot count they are spread on
    assert pricing.cost_ms(fill(), small) == pytest.approx(pricing.cost_ms(fill(), large),
                                                           rel=1e-9)
    assert pricing.cost_ms(fill(), view(running=24, max_running=1024)) > \
        pricing.cost_ms(fill(), large)


def test_the_price_is_engine_milliseconds_of_canonical_delay() -> None:
    curves = PriceCurves(slot_stretch=0.01, kv_stretch=0.0, prefill_s_per_token=1e-4)
    v = view(running=10, max_running=1024, kv_used=0)
    cost = LoadPricing(curves).cost_ms(fill(slot_s=5.0, prefill=1000), v)
    # 10 co-resident requests, each stretched 1% for 5 s, and each stalled 0.1 s by the prefill
    assert cost == pytest.approx(1000 * (10 * 0.01 * 5.0 + 10 * 1e-4 * 1000))


def test_a_longer_prompt_costs_more_prefill_and_more_kv() -> None:
    pricing, v = LoadPricing(PriceCurves()), view(running=8, max_running=1024)
    assert pricing.cost_ms(fill(prefill=2000), v) > pricing.cost_ms(fill(prefill=100), v)
    assert pricing.cost_ms(fill(kv_blocks=500), v) > pricing.cost_ms(fill(kv_blocks=10), v)


def test_the_curves_steepen_with_real_occupancy_and_admissions_project_it() -> None:
    pricing = LoadPricing(PriceCurves())
    light = view(running=8, max_running=1024, kv_used=1000)
    heavy = view(running=8, max_running=1024, kv_used=14000)
    assert pricing.cost_ms(fill(), heavy) > 2 * pricing.cost_ms(fill(), light)
    after = pricing.project(fill(kv_blocks=800), light)
    assert after.occupancy == pytest.approx(light.occupancy + 800 / 16000)
    assert pricing.cost_ms(fill(), after) > pricing.cost_ms(fill(), light)


def test_the_controller_prices_the_footprint_the_gateway_sends() -> None:
    t = LoadTracker(window_s=8.0)
    t.observe(EngineLoad("e0", MODEL, 1, 100.0, 20, 0, 1024, 2000, 16000, 0, 0, 16), 100.0)
    c = PricedController(t, settings=ControllerSettings(audit_rate=0.0, n0=0))
    c.admit("b", "r/router", [Proposal("h", 0, 0.6, 6.0, 6.0, prompt_tokens=850,
                                       peak_tokens=1106, stages=1)], MODEL, 100.0)
    reserved = t.snapshot(MODEL, 100.0).kv_blocks_free
    t.release(MODEL, "b/h")
    assert t.snapshot(MODEL, 100.0).kv_blocks_free - reserved == 70  # ceil(1106 / 16) blocks
