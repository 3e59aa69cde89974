"""Admission settings (env prefix ``DYNBRANCH_ADMISSION_``)."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from services.common.config import ServiceSettings


class AdmissionSettings(ServiceSettings):
    """Settings of the admission service."""

    env_prefix: ClassVar[str] = "DYNBRANCH_ADMISSION_"

    policy: Literal["fixed"] = Field("fixed", description="admission policy (C3 lands later)")
    open_branches: bool = Field(True, description="fixed policy: open every branch")
    top_k: int = Field(2, ge=0, le=64, description="fixed policy: candidates admitted per branch")


__all__ = ["AdmissionSettings"]
