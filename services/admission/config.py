"""Admission settings (env prefix ``DYNBRANCH_ADMISSION_``)."""

from __future__ import annotations

from typing import ClassVar

from services.common.config import ServiceSettings


class AdmissionSettings(ServiceSettings):
    """Settings of the admission service."""

    env_prefix: ClassVar[str] = "DYNBRANCH_ADMISSION_"


__all__ = ["AdmissionSettings"]
