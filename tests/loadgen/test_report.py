"""The report's files from bench-arms results (no workload runs here)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.report.runner import cells, write_report


def result(workload: str, seed: int, full: float) -> dict:
    arm = {"mean_s": 10.0, "ratio_to_floor": 1.0, "outputs_equal_floor": None,
           "fills_issued": 0.0, "engine_s_vs_floor": 1.0}
    return {"workload": workload, "seed": seed, "preset": "qwen3-32b-h200", "simulated": True,
            "engines": 2, "arrival": "poisson", "rate_per_s": 0.12, "load": "low",
            "arms": {"floor": arm, "full": {**arm, "mean_s": 10.0 * full, "ratio_to_floor": full,
                                            "outputs_equal_floor": True,
                                            "ratio_ci95": [full - 0.05, full + 0.05],
                                            "fills_issued": 1.5, "engine_s_vs_floor": 1.3}}}


def test_the_report_writes_json_plots_and_a_summary_naming_the_engine(tmp_path: Path) -> None:
    results = [result("routing", 0, 0.6), result("hci", 0, 0.4)]
    failures = [{"workload": "react", "load": "low", "seed": 0, "error": "boom"}]
    report = write_report("quick", results, failures, tmp_path, 1.0)
    assert (tmp_path / "report.json").exists()
    assert all((tmp_path / p).stat().st_size > 1000 for p in report["plots"])
    summary = (tmp_path / "summary.md").read_text()
    assert "SIMULATED engine" in summary and "qwen3-32b-h200" in summary
    assert ("| routing | Poisson 0.12/s | data | 1 (id 0) |  | full | 6.00 |  | 0.600 "
            "| [0.550, 0.650] |  |  | 1.30 | 0 | yes |") in summary
    assert ("| routing | Poisson 0.12/s | data | 1 (id 0) |  | floor | 10.00 |  | 1.000 |  |  "
            "|  | 1.00 | 0 | (reference) |") in summary
    assert "react low (data): boom" in summary  # failed cells are listed, not averaged in
    assert "What is reachable" in summary


def test_the_summary_says_which_clock_hop_cost_stalls_and_profile(tmp_path: Path) -> None:
    cell = {**result("routing", 0, 0.6), "clock": "virtual", "hop_s": 0.0005,
            "profile": "paper", "stalls": {"floor": 0, "full": 2},
            "recurrence": {"replay_rate": 0.45},
            "oracle": {"full_over_floor": 0.41}}
    write_report("quick", [cell], [], tmp_path, 1.0)
    summary = (tmp_path / "summary.md").read_text()
    assert "virtual clock" in summary and "0.5 ms per cross-service call" in summary
    assert "Stalls (calls over 0.25 simulated s outside the engine" in summary
    assert "in all: 2" not in summary and ": 2 in all" in summary
    assert "| routing | Poisson 0.12/s | paper | replay_rate 0.45 | 0.410 | 0.600 |" in summary


def test_the_matrices_cover_every_workload_on_both_profiles() -> None:
    quick = cells("quick")
    assert {w for w, _, _ in quick} == {"routing", "react", "subagent", "hci"}
    assert {(w, p) for w, _, p in quick if p == "paper"} == {("routing", "paper"),
                                                              ("react", "paper")}
    full = cells("full")
    assert len(full) == 6 * 4  # (4 data + 2 paper) x (idle, busy, saturated, serial)
    assert {load for _, load, _ in quick} == {"idle"}
    assert {w for w, load, _ in full if load == "serial"} == {"routing", "react", "subagent",
                                                              "hci"}


def test_the_sweep_and_decomposition_plots_draw(tmp_path: Path) -> None:
    from loadgen.report.plots import figure10, figure14

    def with_c1(r: dict) -> dict:
        r["arms"]["c1"] = {**r["arms"]["floor"], "mean_s": 8.0, "ratio_to_floor": 0.8}
        return r

    sweep = [(0.22, result("react", 0, 0.7)), (0.77, result("react", 0, 0.3))]
    assert figure10(sweep, tmp_path / "f10.png", "t").stat().st_size > 1000
    by_rate = [(0.12, with_c1(result("routing", 0, 0.6))),
               (0.8, with_c1(result("routing", 0, 0.7)))]
    assert figure14(by_rate, tmp_path / "f14.png", "t").stat().st_size > 1000


def test_the_timeline_reads_calls_and_fills_from_gateway_spans() -> None:
    from types import SimpleNamespace as NS

    from loadgen.report.timeline import bars

    def span(name: str, start: float, end: float, **attrs: str) -> NS:
        return NS(name=name, start_time=int(start * 1e9), end_time=int(end * 1e9),
                  attributes={f"dynbranch.{k}": v for k, v in attrs.items()})

    got = bars([span("gateway.call", 10.0, 10.3, stage_id="router", source="engine"),
                span("fill.run", 10.01, 10.2, candidate="refund"),
                span("gateway.call", 10.3, 10.31, stage_id="handler", source="promoted_fill")],
               time_scale=0.05)
    assert [(b.row, b.kind) for b in got] == [("router", "call"), ("fill: refund", "fill"),
                                              ("handler", "call")]
    assert got[0].end_s == pytest.approx(6.0) and got[2].label == "promoted_fill"


def test_the_summary_puts_predictor_coverage_beside_the_papers(tmp_path: Path) -> None:
    r = result("react", 0, 0.8)
    r["leak_guard"] = {"n": 266, "given_top123": [0.58, 0.80, 0.81],
                       "shuffled_top123": [0.575, 0.80, 0.81], "within_noise": True}
    write_report("quick", [r], [], tmp_path, 1.0)
    summary = (tmp_path / "summary.md").read_text()
    assert "| react | 266 | 0.58/0.80/0.81 | 0.57/0.80/0.81 | yes | top-3 0.61 |" in summary


def test_the_paper_section_sets_each_workload_beside_the_paper_and_says_why(
        tmp_path: Path) -> None:
    low = result("hci", 0, 0.6)
    low["arms"]["fixed"] = {**low["arms"]["full"], "ratio_to_floor": 0.5}
    low["arms"]["whole_request"] = {**low["arms"]["floor"], "mean_s": 8.0}
    low["arms"]["full"].update(stages_promoted=0.5, oracle_share=0.4,
                               sources={"engine": 3, "library": 1})
    serial = result("hci", 0, 0.7)
    serial.update(arrival="serial", rate_per_s=None, load="serial")
    serial["arms"]["c2"] = {**serial["arms"]["full"], "ratio_to_floor": 0.55,
                            "ratio_ci95": [0.5, 0.6]}
    write_report("full", [low, serial], [], tmp_path, 1.0)
    summary = (tmp_path / "summary.md").read_text()
    # full −40% at low load; 6.0 s vs the cache's 8.0 s is −25%; C2 alone −45% serial
    assert "| hci | -40.0% [-45, -35] | −46% to −66% | -25.0% | — | -45.0% [-50, -40] " \
        "(serial loop) | -47.7% |" in summary.replace("+", "")
    assert "priced admission 0.600 of the floor against the fixed top-2 policy's 0.500" \
        in summary
    assert "25% of calls served by the library" in summary and "40% of the oracle" in summary
    assert (tmp_path / "fig9_fanout_cost.png").stat().st_size > 1000


def test_the_lads_figure_and_table_show_every_arm_against_fifo_and_the_bound(
        tmp_path: Path) -> None:
    from loadgen.report.plots import figure_lads
    from loadgen.report.runner import lads_section

    def arm(mean: float, share: float, **extra: float) -> dict:
        return {"mean_s": mean, "mean_ci95": [mean - 2, mean + 2], "ratio_to_fifo": mean / 200,
                "bound_share": share, "protection_block_s": 1000.0 * share, **extra}

    block = {"workload": "cohort", "preset": "qwen2.5-7b-rtxpro5000", "seeds": [1, 2],
             "policies": {"fifo": arm(200.0, 0.0), "lads": arm(110.0, 0.75),
                          "ttl_best": arm(130.0, 0.6, ttl_s=15.0),
                          "no_eviction_bound": arm(80.0, 1.0)}}
    assert figure_lads([block, {**block, "workload": "web_burst"}],
                       tmp_path / "lads.png", "t").stat().st_size > 1000
    table = lads_section({"results": [block]})
    assert "| cohort / qwen2.5-7b-rtxpro5000 (2 seeds) | 200.0 s |" in table
    assert "0.550 / 75%" in table and "0.400 / 100%" in table and "| — |" in table
    report = write_report("full", [result("routing", 0, 0.6)], [], tmp_path, 1.0,
                          sweeps={"lads": {"results": [block]}})
    assert "## LADS delivery" in (tmp_path / "summary.md").read_text()
    assert report["lads"]["results"][0]["workload"] == "cohort"


def test_a_sweep_reports_each_arms_envelope_regret_and_its_worst_case(tmp_path: Path) -> None:
    def point(full: float, fixed1: float) -> dict:
        r = result("routing", 0, 0.6)
        r["best_fixed_k"] = {"arm": "fixed1", "k": 1, "ratio_to_floor": 0.6}
        r["arms"]["full"]["envelope_regret"] = {"diff": full, "low": full - 0.01,
                                                "high": full + 0.01}
        r["arms"]["fixed1"] = {**r["arms"]["full"], "envelope_regret": {
            "diff": fixed1, "low": fixed1, "high": fixed1}}
        return r

    by_rate = [(0.8, point(-0.002, 0.0)), (8.0, point(0.026, 0.0))]
    report = write_report("full", [result("routing", 0, 0.6)], [], tmp_path, 1.0,
                          sweeps={"routing_by_lambda": by_rate})
    assert report["worst_envelope_regret"]["routing_by_lambda"]["full"] == {
        "x": 8.0, "against": "fixed1", "diff": 0.026, "low": 0.016, "high": 0.036}
    summary = (tmp_path / "summary.md").read_text()
    assert "## Envelope regret: Routing across λ" in summary
    assert ("| full | -0.002 [-0.012, +0.008] | +0.026 [+0.016, +0.036] "
            "| +0.026 [+0.016, +0.036] at 8 |") in summary


def test_the_c3_study_writes_its_sweep_records_phased_trace_and_acceptance(tmp_path: Path
                                                                         ) -> None:
    def cell(rate: float, full: float) -> dict:
        r = result("routing", 0, full)
        r["rate_per_s"], r["seeds"], r["workflows"] = rate, [0, 1], 48
        for name, ratio in (("c1", 0.9), ("fixed1", 0.7), ("fixed", 0.75), ("always", 0.8),
                            ("load_threshold", 0.85)):
            r["arms"][name] = {**r["arms"]["floor"], "ratio_to_floor": ratio,
                               "fills_issued": 1.0, "fills_discarded": 0.2,
                               "envelope_regret": {"diff": ratio - 0.7, "low": 0, "high": 0}}
        r["arms"]["full"].update(fills_discarded=0.3, envelope_regret={
            "diff": full - 0.7, "low": full - 0.71, "high": full - 0.69})
        r["arms"]["floor"].update(fills_discarded=0.0)
        r["best_fixed_k"] = {"arm": "fixed1", "k": 1, "ratio_to_floor": 0.7}
        r["decision_record"] = decision_record(r)  # as bench arms gives it
        return r

    from loadgen.report.decision_record import decision_record
    from loadgen.report.runner import c3_figures

    found = {"sweeps": {"routing": [(0.8, cell(0.8, 0.69)), (8.0, cell(8.0, 0.74))]},
             "levels": {}, "idle": {}, "phased": None}
    plots = c3_figures(found, tmp_path, "t")
    report = write_report("c3", [], [], tmp_path, 1.0, plots, {}, found)
    summary = (tmp_path / "summary.md").read_text()
    assert "## Routing across λ (workflows/s): full/floor" in summary
    assert "| envelope (best fixed K) | fixed1 0.700 | fixed1 0.700 |" in summary
    assert "| full | 1.50 / 0.30 | 1.50 / 0.30 |" in summary  # fills issued / discarded
    assert "| routing: priced − envelope <= +0.01 at every load | NO |" in summary  # 8/s: +0.04
    assert report["c3"]["acceptance"] and "routing 8/s" in report["c3"]["decision_records"]
    assert all((tmp_path / p.name).stat().st_size > 1000 for p in plots)


def test_summary_and_json_record_commit_date_clock_profile_seeds_and_workflows(
        tmp_path: Path) -> None:
    from loadgen.report.provenance import commit

    cell = {**result("routing", 0, 0.6), "clock": "virtual", "hop_s": 0.0005,
            "profile": "paper", "seeds": [0, 1, 2], "workflows": 24}
    report = write_report("quick", [cell], [], tmp_path, 12.3, date="2025-01-31T12:00:00+00:00")
    run = json.loads((tmp_path / "report.json").read_text())["run"]
    assert run == report["run"]
    assert run["commit"] == commit() and run["date"] == "2025-01-31T12:00:00+00:00"
    assert run["cells"] == [{
        "cell": "low", "workload": "routing", "profile": "paper", "load": "Poisson 0.12/s",
        "engine": "2 × qwen3-32b-h200, SIMULATED engine", "clock": "virtual clock, 0.5 ms per hop",
        "seeds": {"count": 3, "ids": [0, 1, 2]}, "workflows_per_seed": 24, "workflows": 72}]
    summary = (tmp_path / "summary.md").read_text()
    assert f"Commit `{commit()}`; started 2025-01-31T12:00:00+00:00 (UTC)" in summary
    assert ("| low | routing | paper | Poisson 0.12/s | 2 × qwen3-32b-h200, SIMULATED engine "
            "| virtual clock, 0.5 ms per hop | 3 (ids 0-2) | 24 × 3 = 72 |") in summary
    assert "| routing | Poisson 0.12/s | paper | 3 (ids 0-2) |" in summary  # the main table


def test_the_console_says_seed_count_and_ids_as_the_summary_does(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from loadgen.report.runner import print_summary

    report = write_report("quick", [{**result("hci", 0, 0.4), "seeds": [0]}], [], tmp_path, 1.0)
    print_summary(report, tmp_path)
    out = capsys.readouterr().out
    assert "seeds (count, ids)" in out and "1 (id 0)" in out
    assert "| hci | Poisson 0.12/s | data | 1 (id 0) |" in (tmp_path / "summary.md").read_text()


@pytest.mark.parametrize("cell", [
    {"workload": "routing", "arrival": "poisson", "rate_per_s": 0.12,
     "arms": result("routing", 0, 0.6)["arms"]},  # no engine, preset or clock recorded
    {**result("routing", 0, 0.6), "clock": "live", "time_scale": None},
])
def test_the_summary_writes_no_placeholder(tmp_path: Path, cell: dict) -> None:
    write_report("quick", [cell], [], tmp_path, 1.0)
    summary = (tmp_path / "summary.md").read_text()
    assert "?" not in summary and "None" not in summary


def test_the_summary_of_a_run_with_no_cell_says_so_without_placeholders(tmp_path: Path) -> None:
    failures = [{"workload": w, "load": "idle", "profile": "data", "error": "DataUnavailable"}
                for w in ("routing", "react")]
    write_report("quick", [], failures, tmp_path, 2.0)
    summary = (tmp_path / "summary.md").read_text()
    assert "0 cells ran, 2 failures listed at the end" in summary
    assert "No cell completed" in summary
    assert "?" not in summary and "None" not in summary and "Engine:" not in summary


def test_a_value_that_rounds_to_zero_prints_as_zero(tmp_path: Path) -> None:
    from loadgen.arms.envelope import regret_text
    from loadgen.report.numbers import fixed, percent, signed

    assert (fixed(-0.001, 2), signed(-0.0001), percent(-0.004)) == ("0.00", "+0.000", "0%")
    assert regret_text({"diff": -0.0002, "low": -0.0004, "high": 0.0}) == \
        "+0.000 [+0.000, +0.000]"
    cell = result("hci", 0, 1.0)
    cell["arms"]["full"]["oracle_share"] = -0.001
    write_report("quick", [cell], [], tmp_path, 1.0)
    summary = (tmp_path / "summary.md").read_text()
    assert "-0.00" not in summary and "-0%" not in summary and "| 0.00 |" in summary


def test_c2_alone_says_where_it_was_measured(tmp_path: Path) -> None:
    low = result("routing", 0, 0.6)
    low["arms"]["c2"] = {**low["arms"]["full"], "ratio_to_floor": 0.7, "ratio_ci95": [0.6, 0.8]}
    write_report("quick", [low], [], tmp_path, 1.0)
    summary = (tmp_path / "summary.md").read_text()
    assert "C2-only Δ (where measured)" in summary and "(serial)" not in summary
    assert "| -30.0% [-40, -20] (low-load Poisson) | -21.9% |" in summary
    assert "no serial run" not in summary


def test_the_summary_ends_with_the_real_engine_section_from_the_results_files(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DYNBRANCH_RESULTS_DIR", str(tmp_path / "results"))
    write_report("quick", [result("routing", 0, 0.6)], [], tmp_path, 1.0)
    summary = (tmp_path / "summary.md").read_text()
    assert "## On a real engine" in summary
    assert "No workflow-level fidelity results yet" in summary  # nothing ran a real engine
