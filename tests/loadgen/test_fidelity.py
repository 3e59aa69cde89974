"""The fidelity benchmark's workload, rendering and comparison (the sim side runs here; the
real-engine side is exercised by ``dynbranch bench fidelity`` itself)."""

from __future__ import annotations

from loadgen.bench.fidelity import CONCURRENCY, Result, Spec, compare, run_sim, sim_text, workload
from services.engine_agent.tokenizer import encode


def test_workload_is_deterministic_and_mixed() -> None:
    specs = workload(quick=True)
    assert specs == workload(quick=True)
    assert {s.concurrency for s in specs} == set(CONCURRENCY)
    shared = [s for s in specs if s.prefix_group is not None]
    assert 0.3 < len(shared) / len(specs) < 0.9
    assert len({s.prefix_group for s in shared}) > 1
    assert min(s.suffix_tokens for s in specs) < 256 < max(s.suffix_tokens for s in specs)


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


async def test_sim_side_runs_the_mix_with_shared_prefixes() -> None:
    specs = [s for s in workload(quick=True) if s.concurrency <= 2]
    rendered = {s.rid: ("", s.prefix_tokens, s.suffix_tokens) for s in specs}
    results = await run_sim(specs, rendered)
    assert len(results) == len(specs)
    assert all(r.latency_s > 0 for r in results)
    assert sum(r.cached_tokens for r in results) > 0  # repeated prefixes hit the sim's cache
