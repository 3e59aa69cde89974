"""What every mesh of an arm is built from: ``MeshConfig`` (engines, clock, gateway and admission
knobs), and the engine, admission and gateway settings an arm's mesh runs with, its durations in
simulated seconds scaled into the run's clock (``clocks``). The virtual, live and process meshes
(``virtual``, ``live``, ``processes``) all start from these.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.arms.specs import ArmSpec
from loadgen.meshes.clocks import virtual
from loadgen.meshes.real_engines import RealEngine
from loadgen.meshes.virtual import DEFAULT_HOP_S
from services.admission import AdmissionSettings
from services.common.values.generation import Priority
from services.engine_agent import EngineAgentSettings
from services.gateway import PROMOTION_COUNTERS, GatewaySettings

#: Smallest time scale of the live mesh: below it the mesh's own CPU time, multiplied by
#: ``1 / time_scale``, moves the ratios more than the effects they measure.
LIVE_MIN_TIME_SCALE = 0.5
COUNTERS = ("opened", "fills_issued", "fills_consumed", "stages_promoted", "fills_discarded",
            "fills_aborted", "canonical_engine_ms", "fill_engine_ms", "ambiguous", "joined",
            *PROMOTION_COUNTERS)


@dataclass(frozen=True, slots=True)
class MeshConfig:
    """The mesh every arm gets: simulated engines and gateway knobs."""

    engines: int = 2
    model: str = "qwen3-32b"
    preset: str = "qwen3-32b-h200"
    #: Wall seconds per simulated second of the live mesh's engines (latency is reported in
    #: simulated s); the virtual mesh ignores it (its clock is simulated seconds).
    time_scale: float = 0.05
    #: "virtual" (one process on a virtual clock) or "live" (gRPC servers in wall time).
    clock: str = "virtual"
    #: The virtual mesh's modelled cost of one cross-service call, simulated seconds.
    hop_s: float = DEFAULT_HOP_S
    #: A stalled call fails its workflow (``STALL_S``); off only where timing is not what a run
    #: measures (e.g. value equivalence on a live mesh at a fine time scale).
    fail_stalls: bool = True
    #: Fills per branch under the gateway's fixed admission policy.
    top_k: int = 2
    #: The gateway's ``fill_wait_s`` in simulated seconds, at its default: the longest a demand
    #: waits for its branch to be opened (admission's answer) and for a fill another gateway
    #: replica runs. A fill running on this gateway is adopted, with no such cap (``adoption``).
    fill_wait_sim_s: float = 1.0
    #: Life of a branch record in simulated seconds (its final admission report is sent then).
    branch_ttl_sim_s: float = 120.0
    data_dir: str | None = None
    #: Admission policy of an in-process admission service following the engines' load
    #: ("priced", "fixed", "always", ...); "" keeps the gateway's in-process fixed policy.
    admission: str = ""
    #: Admission service settings besides the policy and the engines (``AdmissionSettings``).
    admission_settings: tuple[tuple[str, Any], ...] = ()
    #: A draft model served by one more engine agent, and the gateway's drafted predictor on it
    #: ("" keeps the lexical predictors).
    draft_model: str = ""
    #: The lexical predictor's word-overlap weight (``bench arms`` passes the train-fitted one).
    overlap_weight: float = 2.0
    draft_preset: str = "qwen3-0.6b-h200"
    #: A real engine under every agent ("vllm" embedded, "sglang" server beside it) on this
    #: model folder; None keeps the simulated engines (``loadgen.meshes.real_engines``).
    real: RealEngine | None = None
    #: The learned admission state a warm arm (``ArmSpec.warm``) starts from (virtual clock).
    warm_state: str = ""
    #: Where the virtual mesh saves its priced controller's learned state at the end ("": not).
    state_out: str = ""
    #: The virtual mesh's engines end outputs in this range of tokens unless a cap comes first
    #: (None: the sim's own). A model that never stops early (the tiny random-weight model runs
    #: every stage to its cap) is modelled by a range above every cap.
    output_len_range: tuple[int, int] | None = None


def core_counters(core: Any) -> dict[str, int]:
    """A gateway core's branch counters, engine milliseconds per priority and joined demands."""
    branches = getattr(core, "branches", None)
    found = dict(branches.counters) if branches is not None else {}
    spent = core.stages.executor.engine_s  # engine seconds per priority
    found["canonical_engine_ms"] = round(1000 * spent.get(Priority.CANONICAL, 0.0))
    found["fill_engine_ms"] = round(1000 * spent.get(Priority.FILL, 0.0))
    found["joined"] = core.stages.single_flight.joined
    return {name: int(found.get(name, 0)) for name in COUNTERS}


def engine_settings(config: MeshConfig, i: int) -> EngineAgentSettings:
    """The settings of the mesh's simulated engine agent ``i``."""
    return EngineAgentSettings(engine_id=f"engine-{i}", model=config.model, preset=config.preset,
                               time_scale=config.time_scale, metrics_port=-1, grace_s=0.2,
                               log_level="WARNING")


def clock_scale(config: MeshConfig) -> float:
    """Clock seconds per simulated second: a wall-time mesh's time scale, 1 on the virtual one."""
    return 1.0 if virtual(config.clock) else config.time_scale


def with_admission(config: MeshConfig, spec: ArmSpec) -> MeshConfig:
    """``config`` with the arm's admission policy and settings (the admission baselines are the
    full arm with another policy or setting); unchanged for an arm without one."""
    if not spec.admission:
        return config
    settings = {**dict(config.admission_settings), **dict(spec.settings)}
    if spec.warm:
        if not config.warm_state or not virtual(config.clock):
            raise ValueError(f"arm {spec.name} starts from learned state: it needs the virtual "
                             "clock and MeshConfig.warm_state (bench arms trains it)")
        settings["state_path"] = config.warm_state
    return dataclasses.replace(config, admission=spec.admission,
                               admission_settings=tuple(settings.items()))


def admission_settings(config: MeshConfig, engines: list[str]) -> AdmissionSettings:
    """The arm's admission service; its durations (H, the record age limit) are simulated
    seconds scaled into the run's clock, unless the config sets them itself."""
    given = dict(config.admission_settings)
    scale = clock_scale(config)
    defaults = AdmissionSettings.model_fields
    given.setdefault("window_s", defaults["window_s"].default * scale)
    # the load streams keep their wall interval; a report is never too old before three of them
    interval = given.setdefault("load_interval_s", defaults["load_interval_s"].default)
    given.setdefault("max_age_s", max(defaults["max_age_s"].default * scale, 3 * interval))
    return AdmissionSettings(policy=config.admission, engines=engines, metrics_port=-1,
                             grace_s=0.2, log_level="WARNING", **given)


def gateway_settings(config: MeshConfig, arm: ArmSpec, engines: list[str], csl: str,
                     corpus_source: str, folder: Path, admission: str = "") -> GatewaySettings:
    """The arm's gateway: its mechanisms, its durations scaled into the run's clock, the corpus
    (under ``folder``) when the workload retrieves, and the draft predictor when configured."""
    c1, c2 = arm.c1, arm.c2
    scale = clock_scale(config)
    corpus = {"corpus_path": str(folder / "corpus"), "corpus_source": corpus_source,
              "data_dir": config.data_dir or ""} if corpus_source else {}
    draft = ({"predictor": "draft", "draft_model": config.draft_model}
             if config.draft_model else {})
    return GatewaySettings(engines=engines, csl=csl, c1=c1, c2=c2, top_k=config.top_k,
                           fill_wait_s=min(60.0, config.fill_wait_sim_s * scale),
                           branch_ttl_s=max(0.5, config.branch_ttl_sim_s * scale),
                           shadow_ttl_s=max(0.5, 60.0 * scale),
                           fill_timeout_s=max(1.0, 120.0 * scale),
                           metrics_port=-1, grace_s=0.2, auth=False, log_level="WARNING",
                           admission=admission, overlap_weight=config.overlap_weight,
                           **corpus, **draft)


__all__ = ["COUNTERS", "LIVE_MIN_TIME_SCALE", "MeshConfig", "admission_settings", "clock_scale",
           "core_counters", "engine_settings", "gateway_settings", "with_admission"]
