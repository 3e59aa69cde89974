"""Admission settings (env prefix ``DYNBRANCH_ADMISSION_``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from services.admission.baselines import FREE_CANONICAL, FREE_WORKERS, MAX_QUEUE, P_STAR
from services.admission.core import ControllerSettings
from services.admission.fixed_rule import TOP_K
from services.admission.load_view import FILL_SHARE, KV_BUDGET_SHARE, MAX_AGE_S
from services.admission.policies import POLICY_NAMES
from services.admission.pricing import KV_STRETCH, PREFILL_S_PER_TOKEN, SLOT_STRETCH
from services.common.values.config import ServiceSettings

#: Every default below comes from the core module that uses it (one copy of each).
_C = ControllerSettings()


class AdmissionSettings(ServiceSettings):
    """Settings of the admission service."""

    env_prefix: ClassVar[str] = "DYNBRANCH_ADMISSION_"

    policy: str = Field("priced", description=(
        "admission policy: priced (C3, dynbranch §3.4) or a baseline (policies.POLICIES)"))
    engines: list[str] = Field(default_factory=list, description=(
        "engine agents whose load streams price admission (HOST:PORT); none: every view is "
        "empty and priced admission sees no load"))
    # fixed
    open_branches: bool = Field(True, description="fixed policy: open every branch")
    top_k: int = Field(TOP_K, ge=0, le=64,
                       description="fixed / load_threshold: candidates admitted per branch")
    # threshold / load_threshold
    p_star: float = Field(P_STAR, ge=0.0, le=1.0, description="threshold policy: static p*")
    # load_threshold: the paper's static control (§5.5, ``baselines.StaticRule``): open a
    # branch only with at least 3 of 4 free workers and queue depth at most 2
    free_workers: float = Field(FREE_WORKERS, gt=0.0, le=1.0, description=(
        "load_threshold: share of the model's engines (the paper's workers) that must be free "
        "for a branch to open; the count needed is floor(share x engines), at least 1: 0.75 is "
        "the paper's 3 of 4 (1 of 2, 6 of 8)"))
    free_canonical: int = Field(FREE_CANONICAL, ge=0, description=(
        "load_threshold: canonical requests (running sequences that are not fills, plus "
        "waiting ones) an engine may hold and still count as a free worker; 4: a 32B/H200 "
        "decode step within 10% of a lone sequence's (0: free means no canonical request)"))
    max_queue: int = Field(MAX_QUEUE, ge=0, description=(
        "load_threshold: most requests waiting over all of the model's engines (the paper's "
        "queue depth, 2)"))
    # priced
    window_s: float = Field(_C.window_s, gt=0,
                            description="H: co-residency window of the envelope (s)")
    max_age_s: float = Field(MAX_AGE_S, gt=0, description=(
        "oldest engine load report still priced (s); older ones, and an engine silent as long, "
        "count as unknown"))
    n0: int = Field(_C.n0, ge=0, description=(
        "settled trials per branch class before Action 0 prices (until then every branch opens)"))
    cold_fanout: int = Field(_C.cold_fanout, ge=0, description=(
        "fills a cold branch beyond the n0 trials in flight may admit"))
    class_prior_ms: float = Field(_C.class_prior_ms, description=(
        "w_0,c: Action 0's class prior (ms of branch return; > 0 is optimistic)"))
    state_path: str = Field("", description=(
        "priced: JSON file the learned state (gate models, posteriors, gains, costs) is loaded "
        "from at start and saved to every state_interval_s and at shutdown; empty: not kept"))
    state_interval_s: float = Field(30.0, gt=0, description="priced: seconds between state saves")
    audit_rate: float = Field(_C.audit_rate, ge=0.0, le=1.0, description="seeded audit probability")
    seed: int = Field(_C.seed, description="seed of audits")
    slot_stretch: float = Field(SLOT_STRETCH, ge=0.0, description=(
        "canonical slowdown per co-resident fill (`dynbranch bench interference`)"))
    kv_stretch: float = Field(KV_STRETCH, ge=0.0, description=(
        "canonical slowdown per unit of KV pool share held by fills (same command)"))
    prefill_s_per_token: float = Field(PREFILL_S_PER_TOKEN, ge=0.0, description=(
        "decode stall a fill's prompt prefill causes each co-resident canonical request, per "
        "prompt token (same command)"))
    default_gain_ms: float = Field(_C.default_gain_ms, ge=0.0, description=(
        "prior of the execution a consumed fill saves, until outcomes are reported (ms)"))
    gain_prior_weight: float = Field(_C.gain_prior_weight, ge=0.0, description=(
        "pseudo-observations of a realised/projected gain ratio of 1 the learned ratio starts "
        "from (0: the first consumed fills alone set it)"))
    restored_selection: float = Field(_C.restored_selection, ge=0.0, description=(
        "observations a restored selection posterior keeps (scaled down, rate kept: a restored "
        "state is a prior the new branches soon outweigh; 0: all)"))
    restored_calibration: float = Field(_C.restored_calibration, ge=0.0, description=(
        "predicted probability a restored rank calibration keeps (same; 0: all)"))
    fill_kv_blocks: int = Field(_C.fill_kv_blocks, ge=0, description=(
        "KV blocks a fill is priced and reserved at when the gateway sends no token estimate"))
    fill_share: float = Field(FILL_SHARE, gt=0.0, le=1.0,
                              description="share of slots fills may hold")
    kv_budget_share: float = Field(KV_BUDGET_SHARE, gt=0.0, le=1.0,
                                   description="share of the KV pool fills may hold")
    load_interval_s: float = Field(0.1, gt=0.0, description="load stream interval (s)")
    max_snapshots: int = Field(_C.max_snapshots, ge=0, le=1_000_000, description=(
        "priced: Action 1 decisions kept in memory for oracle replay (0: none)"))
    snapshot_path: str = Field("", description=(
        "priced: JSON-lines file the kept decisions are appended to at shutdown (replay with "
        "python -m services.admission.replay FILE); empty: not written"))

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICY_NAMES:
            raise ValueError(f"unknown policy {value!r}; known: {', '.join(POLICY_NAMES)}")
        return value


__all__ = ["AdmissionSettings"]
