"""Delivery settings (env prefix ``DYNBRANCH_DELIVERY_``)."""

from __future__ import annotations

import re
from typing import ClassVar

from pydantic import Field, field_validator

from services.common.values.config import ServiceSettings
from services.delivery.link import DEFAULT_FRAMING_BYTES, DEFAULT_WINDOW
from services.delivery.policies import POLICIES
from services.delivery.records import MAX_RECORD_AGE_S

#: One engine agent: ``engine_id=host:port`` (the id must equal the agent's own ``engine_id``:
#: its lease records carry it, and the sender refuses records that name another engine).
ENGINE_SPEC = re.compile(r"^(?P<id>[A-Za-z0-9][A-Za-z0-9._-]{0,127})=(?P<target>\S+:\d{1,5})$")


def parse_engines(specs: list[str]) -> dict[str, str]:
    """``engine_id=host:port`` items as engine id → target (ValueError naming ``engines``)."""
    out: dict[str, str] = {}
    for i, spec in enumerate(specs):
        match = ENGINE_SPEC.match(spec.strip())
        if match is None:
            raise ValueError(f"engines[{i}]: expected ENGINE_ID=HOST:PORT, got {spec!r}")
        engine_id, target = match["id"], match["target"]
        if not 0 < int(target.rsplit(":", 1)[1]) <= 65535:
            raise ValueError(f"engines[{i}]: port out of range in {spec!r}")
        if engine_id in out:
            raise ValueError(f"engines[{i}]: engine id {engine_id!r} is listed twice")
        out[engine_id] = target
    return out


class DeliverySettings(ServiceSettings):
    """Settings of the delivery service."""

    env_prefix: ClassVar[str] = "DYNBRANCH_DELIVERY_"

    engines: list[str] = Field(default_factory=list, description=(
        "engine agents results return to, as ENGINE_ID=HOST:PORT (JSON list in env); none: "
        "every Deliver is refused until the service is restarted with engines"))
    policy: str = Field(
        "lads", description="delivery policy (LADS §3.3; the others are the paper's baselines); "
        "the engines' lease_mode must match: lads for lads*, ttl for ttl_simple, continuum for "
        "ttl_continuum (with the sim's queue_policy program), fixed_ttl for ttl_fixed")
    link_bytes_per_s: float = Field(1.25e8, gt=0, le=1e12, allow_inf_nan=False, description=(
        "R: pace of the return link to each engine in bytes/s (1 Gbit/s; the LADS benchmark "
        "uses 4000)"))
    framing_bytes: int = Field(DEFAULT_FRAMING_BYTES, ge=0, le=1 << 20,
                               description="h: framing bytes per frame (header + length prefix)")
    window: int = Field(DEFAULT_WINDOW, ge=1, le=1024,
                        description="frames committed but not yet received")
    max_record_age_s: float = Field(MAX_RECORD_AGE_S, gt=0, le=60, allow_inf_nan=False,
                                    description=(
        "oldest lease or budget record the sender acts on; older: Cache-first fallback"))
    receive_timeout_s: float = Field(600.0, gt=0, le=86_400, allow_inf_nan=False, description=(
        "deadline of the engine's ReceiveResult (receipt until the continuation's end)"))
    max_observation_bytes: int = Field(4 * 1024 * 1024, ge=1, le=256 * 1024 * 1024,
                                       description="largest observation payload accepted")
    max_pending_results: int = Field(4096, ge=1, le=1_000_000, description=(
        "results held at once, from Deliver to their continuation's end; one more is refused "
        "with RESOURCE_EXHAUSTED"))

    @field_validator("policy")
    @classmethod
    def _known_policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise ValueError(f"unknown policy {value!r}; known: {', '.join(POLICIES)}")
        return value

    @field_validator("engines")
    @classmethod
    def _engines_parse(cls, value: list[str]) -> list[str]:
        parse_engines(value)
        return value

    @property
    def engine_targets(self) -> dict[str, str]:
        """Engine id → ``host:port``."""
        return parse_engines(self.engines)


__all__ = ["DeliverySettings", "parse_engines"]
