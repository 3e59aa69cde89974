"""Gateway settings (env prefix ``DYNBRANCH_GATEWAY_``)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from services.common.config import ServiceSettings


class GatewaySettings(ServiceSettings):
    """Settings of the gateway."""

    env_prefix: ClassVar[str] = "DYNBRANCH_GATEWAY_"

    engines: list[str] = Field(default_factory=list,
                               description="engine agent targets host:port (JSON list in env)")
    call_deadline_s: float = Field(120.0, gt=0, le=3600,
                                   description="deadline of a stage call when the caller sets none")
    engine_connect_timeout_s: float = Field(30.0, gt=0, le=600,
                                            description="wait this long for engines at start")
    max_prompt_bytes: int = Field(1024 * 1024, ge=1, description="largest prompt accepted")
    max_request_id: int = Field(128, ge=8, le=1024, description="longest request id accepted")


__all__ = ["GatewaySettings"]
