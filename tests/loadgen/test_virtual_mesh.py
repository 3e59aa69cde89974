"""The experiment mesh on a virtual clock: repeatable to the digit, blind to the mesh's
own CPU time, in agreement with the live mesh, and with a stall detector that can fire."""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path

import pytest

from loadgen.arms.runner import run_arm
from loadgen.meshes.config import MeshConfig
from loadgen.meshes.virtual import InlineExecutor
from loadgen.workloads import build_schedule, get_workload
from loadgen.workloads.base import STALL_S

ROUTING = get_workload("routing")


def _schedule(n: int = 6, seed: int = 0, arrival: str = "poisson"):  # noqa: ANN202
    return build_schedule(ROUTING, n, seed=seed, arrival=arrival, rate=0.12)


def _mean(result) -> float:  # noqa: ANN001
    values = [r.measured_s for r in result.results]
    return sum(values) / len(values)


async def test_the_same_run_twice_measures_the_same_latencies() -> None:
    config = MeshConfig(engines=2, clock="virtual")
    first = await run_arm("full", ROUTING, _schedule(), config)
    second = await run_arm("full", ROUTING, _schedule(), config)
    assert [r.measured_s for r in first.results] == [r.measured_s for r in second.results]
    assert first.counters == second.counters
    assert not any(r.error for r in first.results)


async def test_two_policies_that_make_the_same_decisions_measure_the_same() -> None:
    # load_threshold with every engine counted free opens every branch and admits the top 2
    # like fixed, so the two arms must measure alike (they did not, by up to 0.6, on the live
    # mesh).
    config = MeshConfig(engines=2, clock="virtual")
    fixed = await run_arm("fixed", ROUTING, _schedule(), config)
    never_refuses = dataclasses.replace(config, admission_settings=(
        ("free_canonical", 1_000_000), ("max_queue", 1_000_000)))
    threshold = await run_arm("load_threshold", ROUTING, _schedule(), never_refuses)
    assert threshold.admission["gate"]["refused"] == 0
    assert abs(_mean(fixed) - _mean(threshold)) <= 0.01 * _mean(fixed)


async def test_the_mesh_cpu_time_is_not_in_any_latency(monkeypatch: pytest.MonkeyPatch) -> None:
    from services.gateway.core import GatewayCore

    config = MeshConfig(engines=1, clock="virtual")
    base = await run_arm("floor", ROUTING, _schedule(3), config)
    call = GatewayCore.call

    async def slow_call(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        time.sleep(0.02)  # 20 ms of blocked CPU per demand: 0.4 simulated s at time scale 0.05
        return await call(self, *args, **kwargs)

    monkeypatch.setattr(GatewayCore, "call", slow_call)
    slowed = await run_arm("floor", ROUTING, _schedule(3), config)
    assert [r.measured_s for r in slowed.results] == [r.measured_s for r in base.results]


async def test_a_call_long_outside_the_engine_is_a_stall_and_fails_its_workflow() -> None:
    # Every hop costs more than the stall bound: every call spends that long outside the engine.
    config = MeshConfig(engines=1, clock="virtual", hop_s=STALL_S * 2)
    result = await run_arm("floor", ROUTING, _schedule(2), config)
    assert all(r.error.startswith("stall:") for r in result.results)
    assert all(r.stalls() == len(r.stages) for r in result.results)
    quiet = await run_arm("floor", ROUTING, _schedule(2), MeshConfig(engines=1, clock="virtual"))
    assert not any(r.error for r in quiet.results) and all(r.stalls() == 0
                                                            for r in quiet.results)


@pytest.mark.parametrize("clock", ["live", "processes"])
async def test_the_virtual_and_a_wall_time_mesh_agree_on_one_serial_workflow(clock: str) -> None:
    schedule = _schedule(1, arrival="serial")
    virtual = await run_arm("full", ROUTING, schedule, MeshConfig(engines=1, clock="virtual"))
    live = await run_arm("full", ROUTING, schedule,
                         MeshConfig(engines=1, clock=clock, time_scale=0.5))
    assert not any(r.error for r in (*virtual.results, *live.results))
    assert [r.outputs() for r in virtual.results] == [r.outputs() for r in live.results]
    assert _mean(live) == pytest.approx(_mean(virtual), rel=0.05)


def test_the_inline_executor_runs_work_at_once_and_carries_errors() -> None:
    pool = InlineExecutor()
    assert pool.submit(lambda x: x + 1, 1).result(timeout=0) == 2
    with pytest.raises(ZeroDivisionError):
        pool.submit(lambda: 1 / 0).result(timeout=0)


async def test_a_warm_arm_starts_from_what_a_previous_run_learned(  # type: ignore[no-untyped-def]
        tmp_path) -> None:
    """What the priced controller learned is saved at the end of one run and restored at the
    start of the next (as ``state_path`` does across a restart): the warm run's class is warm
    at once, with no cold trials."""
    import dataclasses

    from loadgen.arms.specs import ARM_SPECS
    from loadgen.meshes.config import with_admission

    workload = get_workload("routing", split="train")
    schedule = build_schedule(workload, 6, seed=5, arrival="serial")
    state = tmp_path / "learned.json"
    config = MeshConfig(engines=1)
    with pytest.raises(ValueError, match="warm_state"):
        with_admission(config, ARM_SPECS["full_warm"])
    cold = await run_arm(ARM_SPECS["full"], workload, schedule,
                         dataclasses.replace(config, state_out=str(state)))
    assert state.exists() and cold.admission["gate"].get("cold", 0) > 0
    warm = await run_arm(ARM_SPECS["full_warm"], workload, schedule,
                         dataclasses.replace(config, warm_state=str(state)))
    assert "cold" not in warm.admission["gate"] and warm.admission["opened"] > 0


async def test_warm_training_carries_what_it_learned_from_schedule_to_schedule(  # type: ignore[no-untyped-def]
        tmp_path) -> None:
    """``train_warm`` runs its schedules in turn, each on a fresh mesh restored from the one
    before: the state it leaves holds the usability outcomes of every schedule, not the
    last one's alone; and it says what trained it."""
    import json

    from loadgen.arms.runner import train_warm

    workload = get_workload("routing", split="train")
    first, second = (build_schedule(workload, 4, seed=s, arrival="serial") for s in (5, 6))
    with pytest.raises(ValueError, match="at least one schedule"):
        await train_warm(workload, [], MeshConfig(engines=1), tmp_path)

    def used(config: MeshConfig) -> float:
        state = json.loads(Path(config.warm_state).read_text())
        return sum(c["usability"]["success"] + c["usability"]["failure"]
                   for c in state["classes"].values())

    (tmp_path / "one").mkdir()
    (tmp_path / "two").mkdir()
    one, _ = await train_warm(workload, [second], MeshConfig(engines=1), tmp_path / "one")
    two, info = await train_warm(workload, [first, second], MeshConfig(engines=1),
                                 tmp_path / "two")
    assert info["schedules"] == 2 and info["workflows"] == 8 and info["seeds"] == [5, 6]
    assert info["split"] == "train" and info["failed"] == 0
    assert used(two) > used(one) > 0
