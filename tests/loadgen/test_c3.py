"""The C3 study's instrument (issue 37): load levels found by a calibrated search and cached,
the phased trace's schedule, seeds' accounts merged, the decision record, and acceptance checks
that fail when their criterion does (no workload runs here but the engine-load sampler's)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.arms.load_levels import (
    LEVELS,
    Calibration,
    level_mesh,
    level_rate,
    most_workflows,
    search,
    workflows_at,
)
from loadgen.report.c3 import acceptance, level_label
from loadgen.report.decision_record import decision_record, merge_accounts
from loadgen.report.phased import PHASES, phased_schedule


def test_the_search_finds_the_rate_where_the_floor_stretches_to_each_level() -> None:
    def stretch(rate: float) -> float:  # the floor's mean over idle, increasing in the rate
        return 1.0 + 0.1 * rate

    for target in (1.2, 1.7, 2.3):
        rate, value, probes = search(stretch, 0.12, target)
        assert value == pytest.approx(target, rel=0.03) and 0.12 < rate < 32
        assert len(probes) <= 9
    assert search(stretch, 0.12, 1.0)[0] == 0.12  # idle: the low-load rate, no probe
    rate, value, _ = search(stretch, 0.12, 9.0)  # out of reach: the top, and how far it got
    assert rate == 32 and value < 9.0


def test_a_level_is_calibrated_once_then_read_from_the_cache(tmp_path: Path) -> None:
    calls: list[float] = []

    def floor_mean(_cal: Calibration, rate: float) -> float:
        calls.append(rate)
        return 12.0 * (1.0 + 0.1 * rate)

    cal = Calibration("routing", "qwen3-32b-h200", 4)
    cache = tmp_path / "levels.json"
    rate, record = level_rate(cal, "busy", path=cache, measure=floor_mean)
    assert record["levels"]["busy"]["floor_ratio"] == pytest.approx(1.7, rel=0.03)
    assert set(record["levels"]) == set(LEVELS) and record["idle_floor_s"] > 0
    searched = len(calls)
    assert level_rate(cal, "saturated", path=cache, measure=floor_mean)[0] > rate
    assert len(calls) == searched  # the cache answered
    assert cal.key() in json.loads(cache.read_text())
    with pytest.raises(ValueError, match="unknown load level 'heavy'"):
        level_rate(cal, "heavy", path=cache, measure=floor_mean)


def _held(cal: Calibration, rate: float) -> float:
    """A floor that stretches with the load per engine until the data set runs out at 12/s
    (every question in flight): 4 engines reach 1.48x, 2 engines 1.96x, 1 engine 2.92x."""
    return 12.0 * (1.0 + 0.16 * min(rate, 12.0) / cal.engines)


def test_a_level_the_data_set_cannot_reach_runs_on_the_most_engines_that_reach_it(
        tmp_path: Path) -> None:
    cache = tmp_path / "levels.json"
    cal = Calibration("react", "qwen3-32b-h200", 4)
    rate, used, record = level_mesh(cal, "moderate", path=cache, measure=_held)
    assert used.engines == 4 and record["levels"]["moderate"]["floor_ratio"] == pytest.approx(
        1.2, rel=0.03)
    rate, used, record = level_mesh(cal, "busy", path=cache, measure=_held)
    assert used.engines == 2 and record["levels"]["busy"]["floor_ratio"] == pytest.approx(
        1.7, rel=0.03)  # 4 engines stop at 1.48x; 3 at 1.64x, short of 1.7 by more than 3%
    rate, used, record = level_mesh(cal, "saturated", path=cache, measure=_held)
    assert used.engines == 1 and record["engines"] == 1 and rate < 12.0
    assert level_mesh(cal, "idle", path=cache, measure=_held)[1].engines == 4
    rate, used, record = level_mesh(Calibration("react", "qwen3-32b-h200", 4, hop_ms=1),
                                    "saturated", path=cache,
                                    measure=lambda c, r: 12.0 * (1.0 + 0.01 * r))
    assert used.engines == 4 and record["levels"]["saturated"]["floor_ratio"] < 2.3


def test_a_run_at_a_level_says_on_how_many_engines_it_ran(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from loadgen.bench.arms import Options, resolve_load

    monkeypatch.setenv("DYNBRANCH_CACHE_DIR", str(tmp_path))
    for level in ("busy", "saturated"):  # calibrated here, so resolve_load reads the cache
        level_mesh(Calibration("react", "qwen3-32b-h200", 4), level, measure=_held)
    opts, load = resolve_load(False, Options(workload="react", load="saturated", engines=4))
    assert opts.engines == 1 and opts.rate == load["rate_per_s"]
    assert load is not None and load["engines"] == 1 and load["engines_asked"] == 4
    assert load["reached"] and load["floor_ratio"] == pytest.approx(2.3, rel=0.03)
    assert level_label("saturated", {"rate_per_s": opts.rate, "load_level": load}) == (
        f"saturated ({opts.rate:.3g}/s, floor {load['floor_ratio']:g}x, 1 engine)")
    opts, load = resolve_load(False, Options(workload="react", load="busy", engines=2))
    assert opts.engines == 2 and load is not None and load["engines_asked"] == 2
    assert level_label("busy", {"rate_per_s": opts.rate, "load_level": load}) == (
        f"busy ({opts.rate:.3g}/s, floor {load['floor_ratio']:g}x)")


def test_idle_needs_no_calibration_and_high_rates_get_more_workflows(tmp_path: Path) -> None:
    def never(_cal: Calibration, _rate: float) -> float:
        raise AssertionError("idle is the low-load rate: nothing to search")

    rate, _ = level_rate(Calibration("hci", "qwen3-32b-h200", 4), "idle",
                         path=tmp_path / "c.json", measure=never)
    assert rate == 0.3
    assert workflows_at(0.8, 48) == 48 and workflows_at(16.0, 48) == 192
    assert workflows_at(16.0, 48, most=133) == 133 and workflows_at(0.8, 200, most=133) == 133


def test_a_schedule_never_asks_for_more_workflows_than_the_data_set_yields() -> None:
    from loadgen.workloads import build_schedule, get_workload

    routing = get_workload("routing")  # 25% exact repeats on top of its distinct requests
    most = most_workflows(routing)
    assert most is not None and most > len(routing.split_pool())
    build_schedule(routing, most, seed=3, arrival="poisson", rate=16.0)
    with pytest.raises(ValueError, match="data set yields only"):
        build_schedule(routing, most + 1, seed=3, arrival="poisson", rate=16.0)


def test_the_phased_trace_bursts_then_repeats_at_the_bursts_rate() -> None:
    schedule, bounds = phased_schedule(PHASES[False], seed=0)
    assert [b[0] for b in bounds] == ["A low", "B burst", "C reuse", "D recovery"]
    assert len(schedule.arrivals) == sum(p.workflows for p in PHASES[False])
    spans = {name: (end - start) for name, start, end in bounds}
    assert spans["B burst"] < spans["A low"] * 4 and spans["C reuse"] < spans["D recovery"] * 4
    by_phase = {name: [a for a in schedule.arrivals if start <= a.at_s < end]
                for name, start, end in bounds}
    repeats = {n: sum(1 for a in arrivals if a.replay_of) / len(arrivals)
               for n, arrivals in by_phase.items()}
    assert repeats["C reuse"] >= 0.6 and repeats["B burst"] == 0.0
    assert phased_schedule(PHASES[False], seed=0)[0].digest() == schedule.digest()


def _account(admitted: int, useful: float) -> dict:
    rank = {"admitted": admitted, "offered": 10, "selected_admitted": admitted,
            "p_tilde": 0.5, "useful": useful, "pi_sel": 0.5, "selected": 0.5,
            "pi_use": 0.9, "used": 1.0}
    return {"branches": 10, "opened": 10, "offered": 20, "admitted": admitted, "consumed": 5,
            "gate": {"priced": 8, "refused": 2}, "not_admitted": {"priced_out": 20 - admitted},
            "cost_ms_median": 100.0, "gain_ms_median": 300.0, "break_even_median": 0.25,
            "p_tilde_by_rank": {"0": rank}, "p_tilde_by_rank_warm_strict": {"0": rank},
            "warm_strict": 48}


def test_seeds_accounts_merge_into_one_weighted_by_their_counts() -> None:
    merged = merge_accounts([_account(10, 0.5), _account(30, 0.1)])
    assert merged["gate"] == {"priced": 16, "refused": 4} and merged["admitted"] == 40
    assert merged["admitted_per_opened"] == 2.0 and merged["seeds"] == 2
    assert merged["p_tilde_by_rank_warm_strict"]["0"]["useful"] == pytest.approx(0.2)
    # p̃ 0.5 against a useful rate of 0.2: not within 1.25x
    assert merged["p_tilde_within_1_25x_warm_strict"] is False
    static = merge_accounts([{"gate": {"opened": 1, "refused": 2}, "refused_by": {"queue": 2}},
                             {"gate": {"opened": 3, "refused": 1}, "refused_by": {"queue": 1}}])
    assert static["gate"] == {"opened": 4, "refused": 3} and static["refused_by"] == {"queue": 3}


def _cell(regrets: dict[str, float], fills: dict[str, float] | None = None,
          vs: dict[str, float] | None = None) -> dict:
    arms = {"floor": {"fills_issued": 0.0}}
    for name, diff in regrets.items():
        arms[name] = {"envelope_regret": {"diff": diff, "low": diff - 0.01, "high": diff + 0.01},
                      "fills_issued": (fills or {}).get(name, 1.0)}
    arms["full"]["vs_baselines"] = {a: {"diff": d, "low": d - 0.01, "high": d + 0.005}
                                    for a, d in (vs or {}).items()}
    return {"arms": arms, "best_fixed_k": {"arm": "fixed1"}}


def test_acceptance_fails_where_priced_trails_the_envelope_and_reports_what_did_not_run() -> None:
    good = {"c1": 0.2, "fixed1": 0.0, "fixed": 0.1, "always": 0.3, "load_threshold": 0.15,
            "full": -0.005}
    vs = {a: -0.05 for a in ("c1", "fixed1", "fixed", "always", "load_threshold")}
    sweep = [(4.0, _cell(good, vs=vs)), (8.0, _cell({**good, "full": 0.004}, vs=vs))]
    levels = {lv: _cell(good, {"full": 1.1, "fixed": 2.0}, vs) for lv in ("busy", "saturated")}
    checks = acceptance({"routing": sweep}, {"routing": levels}, {}, None)
    met = {c["check"]: c["ok"] for c in checks}
    assert met["routing: priced − envelope <= +0.01 at every load"]
    assert met["routing busy: priced beats load_threshold (CI excluding zero) and issues fewer "
               "fills than fixed"]
    assert not met["react: priced − envelope <= +0.01 at every load"]  # not run: not met
    assert not met["phased trace: priced lowest mean, below static and always"]
    behind = [(8.0, _cell({**good, "full": 0.03}, vs=vs))]
    checks = acceptance({"routing": behind}, {}, {}, None)
    assert not next(c for c in checks if c["check"].startswith("routing: priced −"))["ok"]


def test_the_decision_record_merges_seeds_and_carries_the_engines_load() -> None:
    cell = {"rate_per_s": 8.0, "marginal_fill_cost_s": 2.4, "arms": {
        "full": {"fills_issued": 1.2, "fills_consumed": 0.6, "fills_discarded": 0.4,
                 "branches_opened": 20, "engine_load": {"step_ms": 27.0},
                 "admission": {"per_seed": [_account(10, 0.5), _account(10, 0.5)]}}}}
    record = decision_record(cell)
    full = record["arms"]["full"]
    assert full["account"]["seeds"] == 2 and full["engine_load"]["step_ms"] == 27.0
    assert record["marginal_fill_cost_s"] == 2.4


async def test_the_engine_sampler_reads_step_time_and_load_from_the_engines() -> None:
    from loadgen.arms.runner import run_arm
    from loadgen.meshes.config import MeshConfig
    from loadgen.workloads import build_schedule, get_workload

    routing = get_workload("routing")
    schedule = build_schedule(routing, 4, seed=0, arrival="poisson", rate=2.0)
    result = await run_arm("load_threshold", routing, schedule, MeshConfig(engines=2))
    load = result.engine_load
    assert load["samples"] > 0 and 10.0 < load["step_ms"] < 200.0
    assert 0 < load["busy_share"] <= 1 and load["running"] > 0 and 0 < load["kv_used"] < 1
    assert result.decisions and all(at >= 0 for at, _, _ in result.decisions)


def test_a_load_level_is_refused_beside_a_rate_and_where_it_means_nothing() -> None:
    from services.cli import build_parser, main

    with pytest.raises(SystemExit, match="give a load level or --rate, not both"):
        main(["bench", "arms", "--load", "busy", "--rate", "2"])
    with pytest.raises(SystemExit):  # argparse names the choices
        build_parser().parse_args(["bench", "arms", "--load", "heavy"])
    from loadgen.bench.arms import Options, resolve_load

    with pytest.raises(ValueError, match="a load level is a Poisson rate"):
        resolve_load(True, Options(load="busy", arrival="serial"))
    assert resolve_load(True, Options())[1] is None  # no level: the rate as given


def test_acceptance_judges_the_priced_arm_it_is_given_and_names_it() -> None:
    """The warm arm is judged on its own regrets and comparisons, its checks carry its name,
    and a cell without it counts as not run, never as met."""
    base = {"c1": 0.2, "fixed1": 0.0, "fixed": 0.1, "always": 0.3, "load_threshold": 0.15}
    vs = {a: -0.05 for a in base}
    cell = _cell({**base, "full": 0.03, "full_warm": -0.01}, vs=vs)
    cell["arms"]["full_warm"]["vs_baselines"] = cell["arms"]["full"]["vs_baselines"]
    sweeps = {"routing": [(4.0, cell)]}
    cold = {c["check"]: c["ok"] for c in acceptance(sweeps, {}, {}, None)}
    warm = {c["check"]: c["ok"] for c in acceptance(sweeps, {}, {}, None, priced="full_warm")}
    assert not cold["routing: priced − envelope <= +0.01 at every load"]
    assert warm["routing: priced − envelope <= +0.01 at every load [full_warm]"]
    levels = {"routing": {"busy": _cell({**base, "full": 0.0}, vs=vs)}}  # no warm arm there
    busy = [c for c in acceptance(sweeps, levels, {}, None, priced="full_warm")
            if c["check"].startswith("routing busy")]
    assert busy and not busy[0]["ok"] and busy[0]["detail"] == "not run"
