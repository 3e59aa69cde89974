"""The fidelity benchmark's fit/validation split, rendering, comparison and the sim side (the
real-engine side is exercised by ``dynbranch bench fidelity`` itself)."""

from __future__ import annotations

import dataclasses

import pytest

from loadgen.bench.fidelity import (
    CONCURRENCY,
    FIT_GRID,
    QUICK_FIT_GRID,
    Result,
    Spec,
    committed_preset,
    compare,
    drift,
    fit_and_validation_disjoint,
    fitted_parameters,
    run_sim,
    sim_text,
    step_errors,
    workload,
)
from services.engine_agent.calibrate import StepSample, tiny_model_spec
from services.engine_agent.sim.tokenizer import encode


def test_workload_is_deterministic_and_mixed() -> None:
    specs = workload(quick=True)
    assert specs == workload(quick=True)
    assert {s.concurrency for s in specs} == set(CONCURRENCY)
    shared = [s for s in specs if s.prefix_group is not None]
    assert 0.3 < len(shared) / len(specs) < 0.9
    assert len({s.prefix_group for s in shared}) > 1
    assert min(s.suffix_tokens for s in specs) < 256 < max(s.suffix_tokens for s in specs)


@pytest.mark.parametrize("quick", [True, False])
def test_fit_grid_and_validation_mix_are_disjoint(quick: bool) -> None:
    specs, grid = workload(quick), QUICK_FIT_GRID if quick else FIT_GRID
    assert fit_and_validation_disjoint(grid, specs)
    lengths = {s.prefix_tokens + s.suffix_tokens for s in specs}
    assert not lengths & set(grid.prefill_contexts)
    clash = dataclasses.replace(grid, prefill_contexts=(*grid.prefill_contexts,
                                                        min(lengths)))
    assert not fit_and_validation_disjoint(clash, specs)
    unshared = [dataclasses.replace(s, prefix_group=None) for s in specs]
    assert not fit_and_validation_disjoint(grid, unshared)  # the mix must test prefix hits


def test_sim_text_has_exact_token_counts() -> None:
    for n in (0, 1, 37, 600):
        assert len(encode(sim_text("k", n))) == n
    assert encode(sim_text("p", 300) + sim_text("s1", 20))[:300] == encode(sim_text("p", 300))


def test_compare_reports_relative_errors() -> None:
    specs = [Spec(f"r{i}", c, None, 0, 10, 4) for i, c in enumerate(CONCURRENCY)]
    real = [Result(s, 10, 0, 1.0) for s in specs]
    sim = [Result(s, 10, 0, 1.1) for s in specs]
    out = compare(real, sim)
    assert out["requests"] == 4
    assert abs(out["mean_rel_err"] - 0.1) < 1e-9 and abs(out["p90_rel_err"] - 0.1) < 1e-9


def test_fit_error_and_drift_are_relative_per_step() -> None:
    preset = committed_preset()
    on_model = StepSample("decode", 4, 500, 4, 4 * 501, 4 * 500, 4, 0.0)
    exact = dataclasses.replace(on_model, step_s=preset.step_time(_work(on_model)))
    slow = dataclasses.replace(exact, step_s=exact.step_s * 1.25)
    errs = step_errors(preset, [exact, slow])
    assert errs["steps"] == 2 and errs["max_rel_err"] == pytest.approx(0.2)
    assert errs["mean_rel_err"] == pytest.approx(0.1)
    assert drift([exact, exact], [slow, exact]) == {"median_rel": pytest.approx(0.125),
                                                    "max_rel": pytest.approx(0.25)}


def test_committed_preset_reports_named_physical_parameters() -> None:
    preset = committed_preset()
    assert preset.model == tiny_model_spec(2048)
    params = fitted_parameters(preset)
    assert set(params) == {"step_overhead_s", "per_seq_overhead_s", "s_per_token",
                           "s_per_attention_pair", "s_per_kv_read_token"}
    assert all(v >= 0 for v in params.values())


def _work(s: StepSample):
    from services.engine_agent.sim.step_cost import StepWork

    return StepWork(tokens=s.tokens, attn_pairs=s.attn_pairs, kv_read_tokens=s.kv_read_tokens,
                    sampled=s.sampled, seqs=s.batch)


async def test_sim_side_runs_the_mix_with_shared_prefixes() -> None:
    specs = [s for s in workload(quick=True) if s.concurrency <= 2]
    rendered = {s.rid: ("", s.prefix_tokens, s.suffix_tokens) for s in specs}
    results = await run_sim(specs, rendered)
    assert len(results) == len(specs)
    assert all(r.latency_s > 0 for r in results)
    assert sum(r.cached_tokens for r in results) > 0  # repeated prefixes hit the sim's cache


async def test_a_slower_preset_gives_longer_sim_latencies() -> None:
    specs = [s for s in workload(quick=True) if s.concurrency == 1][:2]
    rendered = {s.rid: ("", s.prefix_tokens, s.suffix_tokens) for s in specs}
    base = committed_preset()
    slow = base.with_overrides(step_overhead_s=base.step_overhead_s * 3)
    fast_lat = [r.latency_s for r in await run_sim(specs, rendered, base)]
    slow_lat = [r.latency_s for r in await run_sim(specs, rendered, slow)]
    assert all(s > f for s, f in zip(slow_lat, fast_lat, strict=True))
