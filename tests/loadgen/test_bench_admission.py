"""``dynbranch bench admission`` pieces: the load-step schedule, phase attribution, latencies."""

from __future__ import annotations

import asyncio

from loadgen.bench.admission import decision_latency, load_step_schedule


def test_the_load_step_schedule_has_three_phases_with_a_faster_middle() -> None:
    schedule, bounds = load_step_schedule(quick=True)
    assert [name for name, _, _ in bounds] == ["A low", "B high", "C low"]
    assert len(schedule.arrivals) == 36 and len({a.workflow_id for a in schedule.arrivals}) == 36
    spans = [(end - start) / n for (_, start, end), n in zip(bounds, (6, 24, 6), strict=True)]
    assert spans[1] < spans[0] and spans[1] < spans[2]  # arrivals come faster in B


def test_decision_latency_reports_both_actions() -> None:
    figures = decision_latency(50)
    assert set(figures) == {"action0_p50_us", "action0_p99_us", "action1_p50_us",
                            "action1_p99_us"}
    assert all(v > 0 for v in figures.values())


def test_the_quick_benchmark_reports_every_figure_the_issue_names() -> None:
    from loadgen.bench.admission import run

    result = run(quick=True)
    for key in ("action0_p50_us", "action1_p50_us", "grpc_decision_p50_ms"):
        assert isinstance(result[key], float), key
    arms = {"full", "fixed", "fixed1", "load_threshold", "always"}
    assert set(result["phases"]) == arms and result["fastest_in_high_phase"] in arms
    assert result["fastest"] in arms
    for arm in result["phases"].values():
        assert set(arm) == {"A low", "B high", "C low"}
        assert all({"requests", "mean_s"} <= set(p) for p in arm.values())
        assert sum(p["failed"] for p in arm.values()) == 0
    # each arm against the best of C1 alone, top 1, top 2 and every candidate on the step
    best = result["best_fixed_k"]
    assert best["arm"] in {"c1", "fixed1", "fixed", "always"}
    regrets = result["envelope_regret"]
    assert set(regrets) == arms and all(regrets[a]["diff"] >= 0 for a in ("fixed", "fixed1"))
    assert best["arm"] == "c1" or regrets[best["arm"]]["diff"] == 0.0
    assert result["fills_per_request"]["fixed1"] < result["fills_per_request"]["fixed"]
    assert result["accounts"]["full"]["opened"] > 0  # the priced arm's own account
    assert result["react_draft"]["drafts"] > 0 and result["simulated"]


async def test_priced_admission_learns_from_the_gateways_reports_end_to_end() -> None:
    """Routing through a mesh whose admission service runs the priced controller: the gateway's
    reports (provisional and final, with the promoted producers) reach it and credit the
    admitted fills that were consumed — the final ones inside the run, as soon as each
    winner's chain is promoted or abandoned, not when the branch expires."""
    from loadgen.arms.runner import run_schedule
    from loadgen.meshes.config import MeshConfig
    from loadgen.meshes.live import in_process_mesh
    from loadgen.workloads import get_workload
    from loadgen.workloads.base import SimClock
    from loadgen.workloads.schedule import build_schedule

    workload = get_workload("routing")
    schedule = build_schedule(workload, 6, seed=3, arrival="serial", replay=0.0)
    config = MeshConfig(engines=1, time_scale=0.02, admission="priced",
                        admission_settings=(("n0", 6), ("audit_rate", 0.0),
                                            ("max_snapshots", 100)))
    async with in_process_mesh(config, "full") as mesh:
        results = await run_schedule(mesh.address, workload, schedule, SimClock(0.02))
        await asyncio.sleep(0.2)  # the last report's hop
        controller = mesh.admission.policy
        final_in_run = not controller.branches and not controller.settled  # before retirement
        await mesh.gateway.core.branches.close()
        stats = controller.stats["local/routing/router"]  # the class is per tenant
        gains = {c.gain_ms for snap in controller.snapshots for c in snap.candidates}
    assert not any(r.error for r in results)
    assert sum(b.success + b.failure for b in stats.selection.values()) > 0
    assert stats.usability.success >= 1 and sum(m.n for m in stats.gain_ms.values()) >= 1
    assert final_in_run  # every branch's final report arrived inside the run
    # the gateway's projected subgraph times reached the controller (not only its 2 s prior)
    assert gains and gains != {controller.settings.default_gain_ms}
