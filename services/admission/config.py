"""Admission settings (env prefix ``DYNBRANCH_ADMISSION_``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from services.common.config import ServiceSettings


class AdmissionSettings(ServiceSettings):
    """Settings of the admission service."""

    env_prefix: ClassVar[str] = "DYNBRANCH_ADMISSION_"

    policy: Literal["priced", "fixed", "always", "threshold", "load_threshold"] = Field(
        "priced", description="admission policy: priced (C3, dynbranch §3.4) or a baseline")
    engines: list[str] = Field(default_factory=list, description=(
        "engine agents whose load streams price admission (HOST:PORT); none: every view is "
        "empty and priced admission sees no load"))
    # fixed
    open_branches: bool = Field(True, description="fixed policy: open every branch")
    top_k: int = Field(2, ge=0, le=64,
                       description="fixed / load_threshold: candidates admitted per branch")
    # threshold / load_threshold
    p_star: float = Field(0.5, ge=0.0, le=1.0, description="threshold policy: static p*")
    max_pressure: float = Field(0.7, ge=0.0,
                                description="load_threshold policy: speculate below this ρ")
    # priced
    window_s: float = Field(8.0, gt=0, description="H: co-residency window of the envelope (s)")
    max_age_s: float = Field(5.0, gt=0, description=(
        "oldest engine load report still priced (s); older ones, and an engine silent as long, "
        "count as unknown"))
    n0: int = Field(4, ge=0, description="cold trials per branch class before Action 0 prices")
    audit_rate: float = Field(0.05, ge=0.0, le=1.0, description="seeded audit probability")
    seed: int = Field(0, description="seed of audits")
    slot_stretch: float = Field(0.0057, ge=0.0, description=(
        "canonical slowdown per co-resident fill (`dynbranch bench interference`)"))
    kv_stretch: float = Field(2.52, ge=0.0, description=(
        "canonical slowdown per unit of KV pool share held by fills (same command)"))
    default_gain_ms: float = Field(2000.0, ge=0.0, description=(
        "prior of the execution a consumed fill saves, until outcomes are reported (ms)"))
    fill_kv_blocks: int = Field(64, ge=0, description="KV blocks a fill reserves")
    fill_share: float = Field(0.5, gt=0.0, le=1.0, description="share of slots fills may hold")
    kv_budget_share: float = Field(0.25, gt=0.0, le=1.0,
                                   description="share of the KV pool fills may hold")
    load_interval_s: float = Field(0.1, gt=0.0, description="load stream interval (s)")
    max_snapshots: int = Field(0, ge=0, le=1_000_000, description=(
        "priced: Action 1 decisions kept in memory for oracle replay (0: none)"))
    snapshot_path: str = Field("", description=(
        "priced: JSON-lines file the kept decisions are appended to at shutdown (replay with "
        "python -m services.admission.replay FILE); empty: not written"))


__all__ = ["AdmissionSettings"]
